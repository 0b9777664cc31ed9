package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
)

// TypeProblems lists, one line each, the columns of target table tt whose
// user-defined type would take source table st's values changed without
// an error, which Incompatible (comparing the types' names) does not see:
//   - a type of the same name on both sides that differs inside: a
//     composite's attributes in another order (values travel as text by
//     position: they fill the wrong fields) or of other types, a domain
//     over another base type (numeric(10,4) on the source, numeric(10,2)
//     on the target), a range of another subtype, an enum lacking the
//     source's labels — looked at through every type the column's type
//     holds (UserType.Incompatible);
//   - a domain on one side, another type on the other: the domains' base
//     types compared as SilentConversion compares types.
//
// A type repstream cannot describe (a base type of the user's own) is
// left to Incompatible's rule.
func TypeProblems(ctx context.Context, src, tgt Querier, st, tt *Table) ([]string, error) {
	var out []string
	for _, c := range st.Columns {
		i := tt.Column(c.Name)
		if c.Generated || i < 0 || c.TypeOID < change.FirstNormalOID && tt.Columns[i].TypeOID < change.FirstNormalOID {
			continue
		}
		tc := &tt.Columns[i]
		if c.Type == tc.Type {
			types, _, err := TypesFor(ctx, src, []*Table{{Schema: st.Schema, Name: st.Name, Columns: []Column{c}}})
			if err != nil {
				continue
			}
			for _, u := range types {
				have, err := LoadType(ctx, tgt, u.Schema, u.Name)
				if err != nil {
					return nil, fmt.Errorf("look up type %s on the target: %w", u, err)
				}
				if have == nil {
					continue
				}
				if why := u.Incompatible(have); why != "" {
					out = append(out, fmt.Sprintf("column %q is of type %s, which differs on the target: %s (values of it would be stored changed: make the target's type the source's)", c.Name, u, why))
				}
			}
			continue
		}
		from, err := domainBase(ctx, src, c.TypeOID, c.Type)
		if err != nil {
			return nil, fmt.Errorf("look up the base type of column %q on the source: %w", c.Name, err)
		}
		to, err := domainBase(ctx, tgt, tc.TypeOID, tc.Type)
		if err != nil {
			return nil, fmt.Errorf("look up the base type of column %q on the target: %w", c.Name, err)
		}
		if from == c.Type && to == tc.Type {
			continue // no domain: Incompatible's
		}
		if why := SilentConversion(from, to); why != "" {
			out = append(out, fmt.Sprintf("column %q is %s on the source but %s on the target: %s", c.Name, overBase(c.Type, from), overBase(tc.Type, to), why))
		}
	}
	return out, nil
}

// domainBase is the type under a domain (through domains over domains),
// as format_type writes it with its modifier; typ itself for a type that
// is not a domain.
func domainBase(ctx context.Context, q Querier, oid uint32, typ string) (string, error) {
	var base *string
	err := q.QueryRow(ctx, `WITH RECURSIVE d AS (
	SELECT t.oid, t.typtype, t.typbasetype, t.typtypmod FROM pg_catalog.pg_type t WHERE t.oid = $1
	UNION ALL
	SELECT t.oid, t.typtype, t.typbasetype, t.typtypmod FROM d JOIN pg_catalog.pg_type t ON t.oid = d.typbasetype WHERE d.typtype = 'd'
)
SELECT pg_catalog.format_type(d.typbasetype, d.typtypmod) FROM d
WHERE d.typtype = 'd' AND NOT EXISTS (SELECT FROM pg_catalog.pg_type b WHERE b.oid = d.typbasetype AND b.typtype = 'd')`, oid).Scan(&base)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && base == nil {
		return typ, nil
	}
	if err != nil {
		return "", err
	}
	return *base, nil
}

// overBase names a type and, for a domain, the type under it.
func overBase(typ, base string) string {
	if typ == base {
		return typ
	}
	return typ + " (a domain over " + base + ")"
}
