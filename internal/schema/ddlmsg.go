package schema

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/repstream/repstream/internal/change"
)

// Schema-change messages: what repstream's event trigger on the source
// (engine/ddl.go) emits, inside the transaction that changed a table, as
// pg_logical_emit_message(true, 'repstream.ddl', json). Capture turns it
// into a change.OpDDL change; apply turns it into the statements that make
// the target table match (AlterSQL, CreateSQL).

// DDLColumn is one column of a table in a schema-change message, as the
// source's catalog describes it after the change. Num is the attribute
// number: a column keeps it when renamed, so a rename (same Num, new Name)
// is told apart from a drop and an add.
type DDLColumn struct {
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

// DDLTable is a table's definition in a schema-change message.
type DDLTable struct {
	OID        uint32      `json:"oid"` // the source's OID
	Schema     string      `json:"schema"`
	Name       string      `json:"name"`
	Kind       string      `json:"kind"`  // relkind: "r" or "p"
	Ident      string      `json:"ident"` // relreplident
	Pubs       []string    `json:"pubs"`  // the publications that publish it
	PrimaryKey []string    `json:"pkey"`  // key columns only
	Columns    []DDLColumn `json:"columns"`
	// PrimaryKeyInclude are the primary key's INCLUDE columns, and
	// PrimaryKeyDeferrable when it is checked (schema.Table's fields).
	PrimaryKeyInclude    []string `json:"pkeyinclude"`
	PrimaryKeyDeferrable string   `json:"pkeydeferrable"`
}

// TableName returns the table's schema-qualified name.
func (t *DDLTable) TableName() TableName { return TableName{Schema: t.Schema, Name: t.Name} }

// DDLMessage is one schema-change message: the command tag, the table's
// definition after the command (for a drop, only its names and OID), and
// Old, the definition the event trigger last recorded for the table (nil if
// it has none: the table was created while no trigger ran, or the trigger's
// unlogged state was lost in a crash).
type DDLMessage struct {
	Tag     string `json:"tag"`
	Dropped bool   `json:"dropped"`
	// Error: the event trigger could not describe the table (the user's
	// DDL went through): the change cannot be replicated.
	Error string `json:"error"`
	// Unlogged: the table was set UNLOGGED on the source: its changes are
	// no longer written to the WAL, so no replication can carry them.
	// DDLTable is its definition before.
	Unlogged bool `json:"unlogged"`
	DDLTable
	Old *DDLTable `json:"old"`
}

// ParseDDLMessage decodes the content of a repstream.ddl message.
func ParseDDLMessage(b []byte) (*DDLMessage, error) {
	var m DDLMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode schema-change message: %w", err)
	}
	if m.Schema == "" || m.Name == "" {
		return nil, errors.New("decode schema-change message: no table name")
	}
	return &m, nil
}

// Publishes reports whether the message concerns a table publication pub
// publishes.
func (m *DDLMessage) Publishes(pub string) bool {
	for _, p := range m.Pubs {
		if p == pub {
			return true
		}
	}
	return false
}

// Creates reports whether the command made the table (CREATE TABLE, CREATE
// TABLE AS, SELECT INTO).
func (m *DDLMessage) Creates() bool {
	switch m.Tag {
	case "CREATE TABLE", "CREATE TABLE AS", "SELECT INTO":
		return true
	}
	return false
}

// Table returns the definition as a Table, for CreateTableSQL and
// ReplicaIdentitySQL.
func (t *DDLTable) Table() *Table {
	tab := &Table{Schema: t.Schema, Name: t.Name, PrimaryKey: t.PrimaryKey, Partitioned: t.Kind == "p",
		PrimaryKeyInclude: t.PrimaryKeyInclude, PrimaryKeyDeferrable: t.PrimaryKeyDeferrable}
	if t.Ident != "" {
		tab.ReplicaIdentity = t.Ident[0]
	}
	if tab.ReplicaIdentity == change.IdentityDefault || tab.ReplicaIdentity == change.IdentityIndex {
		tab.IdentityKey = t.PrimaryKey
	}
	for _, c := range t.Columns {
		col := Column{Name: c.Name, Type: c.Type, NotNull: c.NotNull, TypeOID: c.TypeOID}
		if c.Generated != nil {
			col.Generated, col.GenerationExpr = true, *c.Generated
		}
		if c.Default != nil {
			col.HasDefault, col.Default = true, *c.Default
		}
		if c.Identity != "" {
			col.Identity = c.Identity[0]
		}
		tab.Columns = append(tab.Columns, col)
	}
	return tab
}

// CreateSQL returns the statements that create the table described by a
// CREATE TABLE message on the target: its schema, the sequences its
// columns own (serial: their defaults draw from them), the table
// (CreateTableSQL) and its replica identity. The column types must exist on
// the target. Secondary indexes are not part of it.
func (t *DDLTable) CreateSQL() []string {
	stmts := []string{CreateSchemaSQL(t.Schema)}
	for _, c := range t.Columns {
		if c.Sequence != nil && c.Identity == "" {
			stmts = append(stmts, "CREATE SEQUENCE IF NOT EXISTS "+*c.Sequence)
		}
	}
	tab := t.Table()
	stmts = append(stmts, CreateTableSQL(tab))
	stmts = append(stmts, ReplicaIdentitySQL(tab)...)
	for _, c := range t.Columns {
		if c.Sequence != nil && c.Identity == "" {
			stmts = append(stmts, "ALTER SEQUENCE "+*c.Sequence+" OWNED BY "+tab.TableName().Quoted()+"."+change.QuoteIdent(c.Name))
		}
	}
	return stmts
}
