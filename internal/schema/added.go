package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
)

// AddedValue is what the source's catalog says about a column that the
// Relation-message fallback (--ddl=relation) sees added: pgoutput's Relation
// message names the column and its type, not what the rows that existed
// before got. It is read from the source's current catalog, which may have
// moved on since the ADD COLUMN; RelationAddSQL refuses what it cannot match.
type AddedValue struct {
	// Type is format_type(atttypid, atttypmod) on the source now.
	Type string
	// HasMissing and Missing: pg_attribute.atthasmissing and the value (as
	// text, nil for NULL) of attmissingval — what the rows existing at ADD
	// COLUMN got, the default evaluated once (PostgreSQL 11+ "fast
	// default"). A table rewrite on the source (VACUUM FULL, ALTER COLUMN
	// TYPE) stores the values in the rows and clears it.
	HasMissing bool
	Missing    *string
	// Default is the column's default expression now (pg_get_expr), nil for
	// none; Generated its generation expression, nil unless generated.
	Default   *string
	Generated *string
	// Identity is pg_attribute.attidentity: "a", "d" or "".
	Identity string
	// DomainDefault is the default of the column's type, a domain's (or
	// its base domain's), nil for none: the existing rows got it at ADD
	// COLUMN when the column has no default of its own.
	DomainDefault *string
	// Sequence is the sequence the column owns (a serial's), named with
	// its schema; nil for none.
	Sequence *string
}

// ErrAddedColumnGone: the source's catalog no longer has a column the
// Relation message added (dropped or renamed since), or has it with another
// type: what its existing rows got cannot be known.
var ErrAddedColumnGone = errors.New("the source's catalog no longer has the column as added")

// addedValueQuery reads an AddedValue of the column $3 of the table $1.$2.
// attmissingval is an anyarray of one element of the column's type; through
// text[] its element comes back as the type's text form (quotes, commas and
// braces unescaped; an array value as one element), NULL as NULL.
const addedValueQuery = `
SELECT format_type(a.atttypid, a.atttypmod), a.atthasmissing OR COALESCE(lm.has, false),
       CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] ELSE lm.val END,
       CASE WHEN a.attgenerated = '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END,
       CASE WHEN a.attgenerated <> '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END,
       a.attidentity::text,
       -- A domain's default (its own, or its base domain's) when the
       -- column has none: ADD COLUMN evaluates it for the existing rows.
       (WITH RECURSIVE dd(base, def, kind) AS (
            SELECT t.typbasetype, t.typdefault, t.typtype FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid
            UNION ALL
            SELECT t.typbasetype, t.typdefault, t.typtype FROM dd JOIN pg_catalog.pg_type t ON t.oid = dd.base WHERE dd.kind = 'd' AND dd.def IS NULL)
        SELECT dd.def FROM dd WHERE dd.def IS NOT NULL AND dd.kind = 'd' LIMIT 1),
       (SELECT s.oid::regclass::text FROM pg_catalog.pg_depend dep JOIN pg_catalog.pg_class s ON s.oid = dep.objid
         WHERE dep.classid = 'pg_catalog.pg_class'::regclass AND dep.refclassid = 'pg_catalog.pg_class'::regclass
           AND dep.refobjid = c.oid AND dep.refobjsubid = a.attnum AND dep.deptype = 'a' AND s.relkind = 'S' LIMIT 1)
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
-- A partitioned table has no rows: what its leaves' rows got is theirs.
LEFT JOIN LATERAL (SELECT true AS has, (la.attmissingval::text::text[])[1] AS val
                     FROM pg_catalog.pg_partition_tree(c.oid) t
                     JOIN pg_catalog.pg_attribute la ON la.attrelid = t.relid AND la.attname = a.attname AND NOT la.attisdropped
                    WHERE c.relkind = 'p' AND t.isleaf AND la.atthasmissing LIMIT 1) lm ON true
WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped`

// AddedValueSettings are the session settings LoadAddedValue needs for
// text forms any server reads back the same (dates, intervals, floats,
// bytea; types and functions named with their schema, as the target's
// WriterOptions.SourceTypeNames names them); set them on the connection
// first.
const AddedValueSettings = "SET DateStyle = ISO; SET IntervalStyle = postgres; SET extra_float_digits = 3; SET bytea_output = hex; SET search_path = pg_catalog, pg_temp"

// LoadAddedValue reads what the catalog says about column of table now (the
// source's, with AddedValueSettings set); a column that is not there is
// ErrAddedColumnGone.
func LoadAddedValue(ctx context.Context, q Querier, table TableName, column string) (AddedValue, error) {
	var v AddedValue
	err := q.QueryRow(ctx, addedValueQuery, table.Schema, table.Name, column).
		Scan(&v.Type, &v.HasMissing, &v.Missing, &v.Default, &v.Generated, &v.Identity, &v.DomainDefault, &v.Sequence)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("column %q of %s: %w (dropped or renamed since it was added?)", column, table, ErrAddedColumnGone)
	}
	if err != nil {
		return v, fmt.Errorf("look up column %q of %s in the source's catalog: %w", column, table, err)
	}
	return v, nil
}

// RelationAddSQL returns the ALTER TABLE actions (without "ALTER TABLE t")
// that add column (of type typ, as the target names the Relation message's
// type) so that the target's existing rows get what the source's got:
//
//   - a missing value (the default evaluated once at ADD COLUMN): added
//     with it as a constant default, then the default set to the source's
//     current one (or dropped);
//   - no missing value and no default: existing rows are NULL, a plain ADD;
//   - no missing value but a default (or an identity): the source either
//     had no rows, or evaluated the default per row (random(),
//     clock_timestamp()) and rewrote the table with values that are not
//     replicated — exact only if the target has no rows (targetEmpty),
//     ErrVolatileDefault otherwise.
//
// A source type other than typ is ErrAddedColumnGone (the catalog has moved
// on). NOT NULL and constraints are not carried over (the fallback follows
// columns and types only). It is pure.
func RelationAddSQL(column, typ string, v AddedValue, targetEmpty bool) ([]string, error) {
	if v.Type != typ {
		return nil, fmt.Errorf("%w: it has type %s on the source now, the Relation message said %s", ErrAddedColumnGone, v.Type, typ)
	}
	qc := change.QuoteIdent(column)
	add := "ADD COLUMN " + qc + " " + typ
	setDefault := func() string {
		if v.Default == nil {
			return "ALTER COLUMN " + qc + " DROP DEFAULT"
		}
		return "ALTER COLUMN " + qc + " SET DEFAULT " + *v.Default
	}
	switch {
	case v.Generated != nil:
		return []string{add + " GENERATED ALWAYS AS (" + *v.Generated + ") STORED"}, nil
	case v.HasMissing && v.Missing != nil:
		return []string{add + " DEFAULT " + QuoteLiteral(*v.Missing) + "::" + typ, setDefault()}, nil
	case v.Identity != "":
		if !targetEmpty {
			return nil, fmt.Errorf("%w: the source numbered its existing rows with an identity", ErrVolatileDefault)
		}
		// BY DEFAULT also for ALWAYS: apply's UPDATEs write the column
		// (CreateTableSQL).
		return []string{add + " GENERATED BY DEFAULT AS IDENTITY"}, nil
	}
	def := v.Default // what the existing rows got: the column's default, else its domain's
	if def == nil {
		def = v.DomainDefault
	}
	switch {
	case v.HasMissing, def == nil, strings.HasPrefix(*def, "NULL::"):
		// Existing rows are NULL.
		if v.Default == nil {
			return []string{add}, nil
		}
		return []string{add, setDefault()}, nil
	case !targetEmpty:
		return nil, fmt.Errorf("%w: the source has no value stored for its existing rows, so it computed the default %s for each (or the table was empty then)", ErrVolatileDefault, *def)
	}
	return []string{add, setDefault()}, nil
}
