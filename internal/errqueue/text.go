package errqueue

import (
	"encoding/hex"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/repstream/repstream/internal/change"
)

// Texts renders values for people: text values as they are, binary values of
// built-in types decoded and printed in PostgreSQL's text form (pgx's type
// map), other binary values as \x hex. Not safe for concurrent use.
type Texts struct{ m *pgtype.Map }

// NewTexts returns a renderer with pgx's built-in types.
func NewTexts() *Texts { return &Texts{m: pgtype.NewMap()} }

// Value renders one column value of kind (change.Kind*) and type oid.
func (x *Texts) Value(oid uint32, kind byte, val []byte) string {
	switch kind {
	case change.KindNull:
		return "NULL"
	case change.KindUnchanged:
		return "(unchanged TOAST value)"
	case change.KindText:
		return string(val)
	}
	if t, ok := x.m.TypeForOID(oid); ok {
		if v, err := t.Codec.DecodeValue(x.m, oid, pgtype.BinaryFormatCode, val); err == nil {
			if b, err := x.m.Encode(oid, pgtype.TextFormatCode, v, nil); err == nil && b != nil {
				return string(b)
			}
		}
	}
	return `\x` + hex.EncodeToString(val)
}

// Key renders c's replica-identity key as PostgreSQL's errors do,
// "(id, region)=(5, eu)": the key columns of the old tuple (update, delete)
// or of the new one (insert, or an update that kept its key); every column
// of the old tuple when the table has no key (REPLICA IDENTITY FULL).
func (x *Texts) Key(c *change.Change) string {
	if c.Rel == nil {
		return ""
	}
	t := c.New
	if c.OldKind != 0 && c.Old != nil {
		t = c.Old
	}
	if t == nil {
		return ""
	}
	hasKey := false
	for _, col := range c.Rel.Columns {
		hasKey = hasKey || col.Key
	}
	var names, vals []string
	it := t.Iter()
	for it.Next() {
		i := it.Index()
		if i >= len(c.Rel.Columns) {
			break
		}
		col := c.Rel.Columns[i]
		if hasKey && !col.Key || it.Kind() == change.KindUnchanged {
			continue
		}
		names = append(names, col.Name)
		vals = append(vals, x.Value(col.TypeOID, it.Kind(), it.Value()))
	}
	if len(names) == 0 {
		return ""
	}
	return "(" + strings.Join(names, ", ") + ")=(" + strings.Join(vals, ", ") + ")"
}

// Row renders a tuple as name=value pairs.
func (x *Texts) Row(rel *change.Relation, t change.Tuple) string {
	if rel == nil || t == nil {
		return ""
	}
	var b strings.Builder
	it := t.Iter()
	for it.Next() {
		if it.Index() >= len(rel.Columns) {
			break
		}
		col := rel.Columns[it.Index()]
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(col.Name)
		b.WriteString("=")
		b.WriteString(x.Value(col.TypeOID, it.Kind(), it.Value()))
	}
	return b.String()
}
