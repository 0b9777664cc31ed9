package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrTableNotFound is wrapped by LoadTable when the table does not exist (or
// is not an ordinary or partitioned table).
var ErrTableNotFound = errors.New("table not found")

// Querier runs queries; *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Table describes one table as the catalog of one database sees it.
//
// Invariants: Columns are in attribute-number order and exclude dropped
// columns; every name in PrimaryKey and IdentityKey is the Name of an entry
// of Columns; ReplicaIdentity is one of change.IdentityDefault, Nothing, Full
// or Index ('d', 'n', 'f', 'i').
type Table struct {
	Schema, Name    string
	Columns         []Column
	PrimaryKey      []string // primary-key columns in key order; nil if none
	ReplicaIdentity byte     // pg_class.relreplident

	// IdentityKey is the replica-identity key: the primary key for
	// REPLICA IDENTITY DEFAULT, the index columns for USING INDEX, nil for
	// FULL and NOTHING (and for DEFAULT without a primary key).
	IdentityKey []string
	Partitioned bool   // relkind 'p'
	OID         uint32 // valid only in the database it was read from
}

// Column is one column of a Table.
type Column struct {
	Name      string
	Type      string // format_type(atttypid, atttypmod), e.g. "character varying(20)"
	NotNull   bool
	Generated bool // GENERATED ALWAYS AS (...) STORED: never written by repstream

	// GenerationExpr is the generation expression (pg_get_expr) of a
	// generated column, "" otherwise.
	GenerationExpr string
	TypeOID        uint32
}

// TableName returns the table's schema-qualified name.
func (t *Table) TableName() TableName { return TableName{Schema: t.Schema, Name: t.Name} }

// Column returns the index of the column with the given name, or -1.
func (t *Table) Column(name string) int {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

const tableQuery = `
SELECT c.oid, c.relkind::text, c.relreplident::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`

const columnsQuery = `
SELECT a.attname::text,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       a.attnotnull,
       a.attgenerated <> '',
       COALESCE(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''),
       a.atttypid
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d
       ON d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.attgenerated <> ''
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

// keysQuery returns the primary key ('p') and the replica identity index
// ('i') columns in key order.
const keysQuery = `
SELECT CASE WHEN i.indisprimary THEN 'p' ELSE 'i' END, a.attname::text
FROM pg_catalog.pg_index i
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)
ORDER BY i.indisprimary DESC, k.ord`

// LoadTable reads the description of schema.name. If there is no such
// ordinary or partitioned table, the error wraps ErrTableNotFound and reads
// `table "s"."t" not found`: callers add which side they looked at.
func LoadTable(ctx context.Context, q Querier, schema, name string) (*Table, error) {
	tn := TableName{Schema: schema, Name: name}
	t := &Table{Schema: schema, Name: name}
	var relkind, ident string
	err := q.QueryRow(ctx, tableQuery, schema, name).Scan(&t.OID, &relkind, &ident)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &NotFoundError{Table: tn}
	}
	if err != nil {
		return nil, fmt.Errorf("load table %s: %w", tn.Quoted(), err)
	}
	t.Partitioned = relkind == "p"
	if len(ident) == 1 {
		t.ReplicaIdentity = ident[0]
	}

	rows, err := q.Query(ctx, columnsQuery, t.OID)
	if err != nil {
		return nil, fmt.Errorf("load columns of %s: %w", tn.Quoted(), err)
	}
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Generated, &c.GenerationExpr, &c.TypeOID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load columns of %s: %w", tn.Quoted(), err)
		}
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load columns of %s: %w", tn.Quoted(), err)
	}

	rows, err = q.Query(ctx, keysQuery, t.OID)
	if err != nil {
		return nil, fmt.Errorf("load keys of %s: %w", tn.Quoted(), err)
	}
	var identIndex []string
	for rows.Next() {
		var kind, col string
		if err := rows.Scan(&kind, &col); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load keys of %s: %w", tn.Quoted(), err)
		}
		if kind == "p" {
			t.PrimaryKey = append(t.PrimaryKey, col)
		} else {
			identIndex = append(identIndex, col)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load keys of %s: %w", tn.Quoted(), err)
	}
	switch t.ReplicaIdentity {
	case 'd':
		t.IdentityKey = t.PrimaryKey
	case 'i':
		t.IdentityKey = identIndex
		if len(identIndex) == 0 { // the index is the primary key itself
			t.IdentityKey = t.PrimaryKey
		}
	}
	return t, nil
}

// NotFoundError is the error LoadTable returns for a missing table; it
// matches ErrTableNotFound with errors.Is.
type NotFoundError struct{ Table TableName }

func (e *NotFoundError) Error() string { return "table " + e.Table.Quoted() + " not found" }

// Is reports whether target is ErrTableNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrTableNotFound }
