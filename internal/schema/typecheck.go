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
//   - types of other names, each a composite, enum or range (or an array
//     of one) of the user's, compared the same way (pt (x, y) on the
//     source, pt2 (y, x) on the target);
//   - a domain on one side, another type on the other (as an array's
//     element too: numeric[] on the source, dnum[] over numeric(10,2) on
//     the target): the domains' base types compared as SilentConversion
//     compares types.
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
			whys, err := sameNamedTypesDiffer(ctx, src, tgt, c, 0)
			if err != nil {
				return nil, err
			}
			for _, why := range whys {
				out = append(out, fmt.Sprintf("column %q is of type %s (values of it would be stored changed: make the target's type the source's)", c.Name, why))
			}
			continue
		}
		from, err := shapeOf(ctx, src, c.TypeOID, c.Type)
		if err != nil {
			return nil, fmt.Errorf("look up the type of column %q on the source: %w", c.Name, err)
		}
		to, err := shapeOf(ctx, tgt, tc.TypeOID, tc.Type)
		if err != nil {
			return nil, fmt.Errorf("look up the type of column %q on the target: %w", c.Name, err)
		}
		if from.user() && to.user() && from.dims == to.dims {
			// Values travel as the type's text: a composite's by
			// position, an enum's by label, a range's as its bounds.
			fu, err := LoadType(ctx, src, from.schema, from.name)
			if err != nil {
				return nil, fmt.Errorf("look up type %s.%s on the source: %w", from.schema, from.name, err)
			}
			tu, err := LoadType(ctx, tgt, to.schema, to.name)
			if err != nil {
				return nil, fmt.Errorf("look up type %s.%s on the target: %w", to.schema, to.name, err)
			}
			if fu != nil && tu != nil {
				if why := fu.Incompatible(tu); why != "" {
					out = append(out, fmt.Sprintf("column %q is of type %s on the source but %s on the target, which differ: %s (values of it would be stored changed: make the target's type the source's)",
						c.Name, c.Type, tc.Type, why))
					continue
				}
				whys, err := sameNamedTypesDiffer(ctx, src, tgt, c, fu.OID)
				if err != nil {
					return nil, err
				}
				for _, why := range whys {
					out = append(out, fmt.Sprintf("column %q holds type %s (values of it would be stored changed: make the target's type the source's)", c.Name, why))
				}
			}
			continue
		}
		if from.base == c.Type && to.base == tc.Type {
			continue // no domain: Incompatible's
		}
		if why := SilentConversion(from.base, to.base); why != "" {
			out = append(out, fmt.Sprintf("column %q is %s on the source but %s on the target: %s", c.Name, overBase(c.Type, from.base), overBase(tc.Type, to.base), why))
		}
	}
	return out, nil
}

// sameNamedTypesDiffer lists the user-defined types column c's type holds
// (on the source; but the type of OID skip) that the target has under the
// same name, differing inside: "public.pt, which differs on the target:
// ...".
func sameNamedTypesDiffer(ctx context.Context, src, tgt Querier, c Column, skip uint32) ([]string, error) {
	types, _, err := TypesFor(ctx, src, []*Table{{Schema: "-", Name: "-", Columns: []Column{c}}})
	if err != nil {
		return nil, nil // a type repstream cannot describe: Incompatible's
	}
	var out []string
	for _, u := range types {
		if u.OID == skip {
			continue
		}
		have, err := LoadType(ctx, tgt, u.Schema, u.Name)
		if err != nil {
			return nil, fmt.Errorf("look up type %s on the target: %w", u, err)
		}
		if have == nil {
			continue
		}
		if why := u.Incompatible(have); why != "" {
			out = append(out, fmt.Sprintf("%s, which differs on the target: %s", u, why))
		}
	}
	return out, nil
}

// typeShape is a column's type seen through its domains and arrays: base
// is format_type's text of the type under them, with the modifier of the
// lowest domain and an "[]" per array level ("numeric(10,2)[]" for an
// array of a domain over numeric(10,2); the column's own type where there
// is no domain on the way), and the schema, name and typtype of that type.
type typeShape struct {
	base         string
	dims         int
	schema, name string
	kind         byte
	oid          uint32
}

// user: the type under the domains and arrays is a composite, enum or
// range of the user's.
func (s typeShape) user() bool {
	return s.oid >= change.FirstNormalOID && (s.kind == 'c' || s.kind == 'e' || s.kind == 'r')
}

// BaseType is type oid (format_type's text typ) seen through its domains,
// as an array's element too: "numeric(10,2)[]" for an array of a domain
// over numeric(10,2); typ itself where no domain is on the way.
func BaseType(ctx context.Context, q Querier, oid uint32, typ string) (string, error) {
	s, err := shapeOf(ctx, q, oid, typ)
	return s.base, err
}

// shapeOf reads the typeShape of type oid (format_type's text typ).
func shapeOf(ctx context.Context, q Querier, oid uint32, typ string) (typeShape, error) {
	s := typeShape{base: typ}
	var viaDomain bool
	var base, kind string
	err := q.QueryRow(ctx, `WITH RECURSIVE w AS (
	SELECT t.oid, t.typtype, t.typbasetype, t.typelem, t.typcategory, t.typtypmod, -1 AS mod, false AS via_domain, 0 AS dims, 0 AS depth
	FROM pg_catalog.pg_type t WHERE t.oid = $1
	UNION ALL
	SELECT n.oid, n.typtype, n.typbasetype, n.typelem, n.typcategory, n.typtypmod,
	       CASE WHEN w.typtype = 'd' THEN w.typtypmod ELSE w.mod END,
	       w.via_domain OR w.typtype = 'd', w.dims + CASE WHEN w.typtype = 'd' THEN 0 ELSE 1 END, w.depth + 1
	FROM w JOIN pg_catalog.pg_type n ON n.oid = CASE WHEN w.typtype = 'd' THEN w.typbasetype ELSE w.typelem END
	WHERE (w.typtype = 'd' OR w.typcategory = 'A' AND w.typelem <> 0) AND w.depth < 16
)
SELECT pg_catalog.format_type(w.oid, w.mod) || pg_catalog.repeat('[]', w.dims), w.dims, w.via_domain,
       n.nspname::text, t.typname::text, w.typtype::text, w.oid
FROM w JOIN pg_catalog.pg_type t ON t.oid = w.oid JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
ORDER BY w.depth DESC LIMIT 1`, oid).Scan(&base, &s.dims, &viaDomain, &s.schema, &s.name, &kind, &s.oid)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if viaDomain {
		s.base = base
	}
	if kind != "" {
		s.kind = kind[0]
	}
	return s, nil
}

// overBase names a type and, for a domain, the type under it.
func overBase(typ, base string) string {
	if typ == base {
		return typ
	}
	return typ + " (a domain over " + base + ")"
}
