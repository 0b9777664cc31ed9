package ddlmsg

import (
	"encoding/json"
	"errors"
	"slices"
)

// Column is one column of a table in a schema-change message, as the
// source's catalog describes it after the change. Num is the attribute
// number: a column keeps it when renamed, so a rename (same Num, new Name)
// is told apart from a drop and an add.
type Column struct {
	Num     int    `json:"num"`
	Name    string `json:"name"`
	Type    string `json:"type"` // format_type(atttypid, atttypmod), schema-qualified where needed
	TypeOID uint32 `json:"typeoid"`
	TypeMod int32  `json:"typmod"`
	NotNull bool   `json:"notnull"`
	// Default is the default expression (pg_get_expr), nil for none.
	Default *string `json:"default"`
	// Generated is the generation expression of a GENERATED ALWAYS AS
	// (...) STORED column, nil otherwise.
	Generated *string `json:"generated"`
	Identity  string  `json:"identity"` // pg_attribute.attidentity: "a", "d" or ""
	// HasMissing and Missing: pg_attribute.atthasmissing and the value
	// (as text) that the rows existing when the column was added have
	// without storing it — the default evaluated once, at ADD COLUMN.
	HasMissing bool    `json:"hasmissing"`
	Missing    *string `json:"missing"`
	// Sequence is the sequence the column owns (serial), schema-qualified;
	// nil for none.
	Sequence *string `json:"seq"`
}

// Table is a table's definition in a schema-change message.
type Table struct {
	OID        uint32   `json:"oid"` // the source's OID: pgoutput's relation ID
	Schema     string   `json:"schema"`
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`  // relkind: "r" or "p"
	Ident      string   `json:"ident"` // relreplident
	Pubs       []string `json:"pubs"`  // the publications that publish it
	PrimaryKey []string `json:"pkey"`  // key columns only
	Columns    []Column `json:"columns"`
	// PrimaryKeyInclude are the primary key's INCLUDE columns, and
	// PrimaryKeyDeferrable when it is checked (schema.Table's fields).
	PrimaryKeyInclude    []string `json:"pkeyinclude"`
	PrimaryKeyDeferrable string   `json:"pkeydeferrable"`
	// PubRels: for each publication that lists the table itself, the oid
	// of that entry (pg_publication_rel), which holds its row filter and
	// column list: another oid for a publication that published the
	// table before and still does means the entry was made again (SET
	// TABLE with another filter or column list). Nil from a trigger of
	// an earlier version.
	PubRels map[string]uint32 `json:"pubrels"`
	// ColLists: for each publication whose entry for the table has a
	// column list, the columns it sends (PostgreSQL 15+; nil from a
	// trigger of an earlier version).
	ColLists map[string][]string `json:"collists,omitempty"`
	// Filenodes digests the relfilenodes of the table's storage (its
	// leaves' for a partitioned table): another value after a command
	// means the command rewrote the rows. "" from a trigger of an earlier
	// version.
	Filenodes string `json:"filenodes"`
}

// EnumChange is an enum type's labels as the source has them after an
// ALTER TYPE, in their sort order.
type EnumChange struct {
	Schema string   `json:"schema"`
	Name   string   `json:"name"`
	Labels []string `json:"labels"`
}

// CompositeChange is a composite type's attributes after an ALTER TYPE
// (ADD, DROP, RENAME or retype an attribute), in order: values of the
// type travel as text by position, so the target's type must have them
// before the rows that follow.
type CompositeChange struct {
	Schema string          `json:"schema"`
	Name   string          `json:"name"`
	Attrs  []CompositeAttr `json:"attrs"`
}

// CompositeAttr is one attribute of a composite type: its name and type
// (format_type, with its modifier).
type CompositeAttr struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Message is one schema-change message: the command tag, the table's
// definition after the command (for a drop, only its names and OID), and
// Old, the definition the event trigger last recorded for the table (nil if
// it has none: the table was created while no trigger ran, or the trigger's
// unlogged state was lost in a crash).
type Message struct {
	Tag     string `json:"tag"`
	Dropped bool   `json:"dropped"`
	// Error: the event trigger could not describe the table (the user's
	// DDL went through): the change cannot be replicated.
	Error string `json:"error"`
	// Unlogged: the table was set UNLOGGED on the source: its changes are
	// no longer written to the WAL, so no replication can carry them.
	// Table is its definition before.
	Unlogged bool `json:"unlogged"`
	// Xid is the (sub)transaction that emitted the message (0: not said).
	Xid uint32 `json:"xid"`
	// Partial names the publications of the table that an ALTER
	// PUBLICATION left leaving out a kind of change (insert, update,
	// delete or truncate): from the message on, the stream lacks those.
	Partial []string `json:"partial"`
	// Enum (ALTER TYPE of an enum a column of the table has): the type's
	// labels after the command, in their order.
	Enum *EnumChange `json:"enum"`
	// Composite: a composite type that a column of the table holds was
	// altered (ALTER TYPE): its attributes now. Nil otherwise.
	Composite *CompositeChange `json:"composite"`
	// CastOnly: the text of the command's query has ALTER and no USING,
	// so a column whose type it changed was converted by the plain cast,
	// as the target converts it (false: not known).
	CastOnly bool `json:"castonly"`
	// Session holds the settings of the source session that ran the
	// command which decide what a cast between types makes of a value
	// (SessionSettings: TimeZone for timestamp to timestamptz, DateStyle
	// for date to text, ...): the target converts a retyped column's rows
	// under them too. Nil from earlier versions' triggers.
	Session map[string]string `json:"session"`
	Table
	Old *Table `json:"old"`
	// Partition is the partition a partition message is about (nil for
	// any other message).
	Partition *PartitionChange `json:"partition"`
}

// SessionSettings are the settings Message.Session carries, the ones a
// cast between built-in types reads: the time zone, the date, interval,
// float and bytea text forms, and money's locale.
var SessionSettings = []string{"TimeZone", "DateStyle", "IntervalStyle", "extra_float_digits", "bytea_output", "lc_monetary"}

// Retyped reports whether the command changed a column's type or type
// modifier.
func (m *Message) Retyped() bool {
	if m.Old == nil {
		return false
	}
	for _, c := range m.Columns {
		for _, o := range m.Old.Columns {
			if o.Num == c.Num && (o.TypeOID != c.TypeOID || o.TypeMod != c.TypeMod) {
				return true
			}
		}
	}
	return false
}

// Parse decodes the content of a repstream.ddl message; it fails only on
// content that is not a message's JSON (Check tells whether it names its
// table). Its callers: change.ParseDDL, and the Kafka capture following partition changes (capture.go).
func Parse(b []byte) (*Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Check returns an error if the message does not name its table.
func (m *Message) Check() error {
	if m.Schema == "" || m.Name == "" {
		return errors.New("decode schema-change message: no table name")
	}
	return nil
}

// Publishes reports whether the message concerns a table publication pub
// publishes.
func (m *Message) Publishes(pub string) bool { return slices.Contains(m.Pubs, pub) }

// PubRelRemade reports whether pub's entry for the table was made again
// since old was recorded: both name one, and not the same (Table.PubRels).
func (m *Message) PubRelRemade(pub string) bool {
	if m.Old == nil {
		return false
	}
	was, now := m.Old.PubRels[pub], m.PubRels[pub]
	return was != 0 && now != 0 && was != now
}

// Rewrote reports whether the command rewrote the table's rows (its
// Filenodes, or its leaves', changed): a column added with a default
// evaluated per row (random(), an identity) among others.
func (m *Message) Rewrote() bool {
	return m.Old != nil && m.Old.Filenodes != "" && m.Filenodes != "" && m.Old.Filenodes != m.Filenodes
}

// RewroteByExpression reports whether an ALTER TABLE rewrote the
// table's rows (Filenodes) and may have run an expression on them: its
// query's text is not a plain ALTER without USING (CastOnly), so a
// column's values may be what a USING expression made of them — also a
// column "retyped" to its own type, which changes no column of the
// message. Such rows are in no message. A type change that rewrote
// nothing (varchar(10) to text) kept the values as they were; a plain
// cast's the target makes as well (under the source session's
// settings: Session).
func (m *Message) RewroteByExpression() bool {
	return m.Tag == "ALTER TABLE" && m.Rewrote() && !m.CastOnly
}

// Creates reports whether the command made the table (CREATE TABLE, CREATE
// TABLE AS, SELECT INTO).
func (m *Message) Creates() bool {
	switch m.Tag {
	case "CREATE TABLE", "CREATE TABLE AS", "SELECT INTO":
		return true
	}
	return false
}
