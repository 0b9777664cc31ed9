package schema

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/repstream/repstream/internal/change"
)

// UserType is a user-defined type that a replicated table's columns need:
// an enum, a composite, a domain or a range, as the source's catalog
// describes it. TypesFor lists them in dependency order; CreateSQL recreates
// one on the target.
type UserType struct {
	OID          uint32
	Schema, Name string
	Kind         byte // 'e' enum, 'c' composite, 'd' domain, 'r' range

	Labels []string    // enum: labels in sort order
	Attrs  []TypeField // composite: attributes in order
	// Domain: the base type (format_type with modifier), NOT NULL, the
	// default expression and the CHECK constraints (name, definition).
	Base    string
	NotNull bool
	Default string
	Checks  [][2]string
	// Range: the subtype.
	Subtype string
	// Owner is the role that owns the type (quoted), OwnerSuper whether
	// it is a superuser: made on the target from the source's definition,
	// a domain's default and constraints are the source owner's code.
	Owner      string
	OwnerSuper bool
}

// TypeField is one attribute of a composite type.
type TypeField struct{ Name, Type string }

// QualifiedName is the type's quoted, schema-qualified name.
func (u *UserType) QualifiedName() string {
	return change.QuoteIdent(u.Schema) + "." + change.QuoteIdent(u.Name)
}

func (u *UserType) String() string { return u.Schema + "." + u.Name }

// ErrExtensionType is wrapped when a table needs a type an extension
// provides: repstream does not create extensions.
var ErrExtensionType = errors.New("type of an extension")

// ExtensionNeeded names an extension whose type a table needs.
type ExtensionNeeded struct {
	Extension string
	Type      string
}

const typeQuery = `
SELECT n.nspname::text, t.typname::text, t.typtype::text, t.typcategory::text,
       t.typelem, t.typbasetype, t.typrelid,
       COALESCE((SELECT e.extname::text FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
                  WHERE d.classid = 'pg_catalog.pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
                    AND d.refclassid = 'pg_catalog.pg_extension'::regclass), ''),
       t.typnotnull, COALESCE(t.typdefault, ''),
       CASE WHEN t.typtype = 'd' THEN pg_catalog.format_type(t.typbasetype, t.typtypmod) ELSE '' END,
       COALESCE((SELECT r.rngsubtype FROM pg_catalog.pg_range r WHERE r.rngtypid = t.oid), 0),
       COALESCE((SELECT r.rngtypid FROM pg_catalog.pg_range r WHERE r.rngmultitypid = t.oid), 0),
       COALESCE((SELECT pg_catalog.quote_ident(o.rolname) FROM pg_catalog.pg_roles o WHERE o.oid = t.typowner), ''),
       COALESCE((SELECT o.rolsuper FROM pg_catalog.pg_roles o WHERE o.oid = t.typowner), false)
FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid = $1`

// TypesFor returns the user-defined types that the columns of tables need
// (through arrays, domains, composite attributes and range subtypes),
// every type after the types it needs, each once. Built-in types are not
// listed; a type an extension provides is listed in exts instead.
func TypesFor(ctx context.Context, q Querier, tables []*Table) (types []*UserType, exts []ExtensionNeeded, err error) {
	w := &typeWalk{ctx: ctx, q: q, seen: map[uint32]bool{}}
	for _, t := range tables {
		for _, c := range t.Columns {
			if err := w.visit(c.TypeOID, t.TableName().String()+"."+c.Name); err != nil {
				return nil, nil, err
			}
		}
	}
	return w.types, w.exts, nil
}

// typeWalk is TypesFor's depth-first walk of the types the columns need:
// a type is appended to types only after every type it needs (visit reads
// and visits them first), and seen keeps a type from being read twice (or
// a cycle from looping).
type typeWalk struct {
	ctx   context.Context
	q     Querier
	seen  map[uint32]bool
	types []*UserType
	exts  []ExtensionNeeded
}

// typeRow is a pg_type row as typeQuery reads it.
type typeRow struct {
	nsp, name, typtype, category, ext, base, dflt, owner string
	elem, baseOID, relid, subtype, rangeOf               uint32
	notNull, ownerSuper                                  bool
}

// visit lists the type oid (needed by from, a column or a type, for
// errors) after the types it needs: an extension's type in exts, an
// array's element type in its place, a built-in type nowhere.
func (w *typeWalk) visit(oid uint32, from string) error {
	if oid == 0 || w.seen[oid] {
		return nil
	}
	w.seen[oid] = true
	var r typeRow
	if err := w.q.QueryRow(w.ctx, typeQuery, oid).Scan(&r.nsp, &r.name, &r.typtype, &r.category, &r.elem, &r.baseOID, &r.relid, &r.ext,
		&r.notNull, &r.dflt, &r.base, &r.subtype, &r.rangeOf, &r.owner, &r.ownerSuper); err != nil {
		return fmt.Errorf("read type %d (of %s): %w", oid, from, err)
	}
	switch {
	case r.ext != "":
		w.exts = append(w.exts, ExtensionNeeded{Extension: r.ext, Type: r.nsp + "." + r.name})
		return nil
	case r.category == "A" && r.elem != 0:
		return w.visit(r.elem, from)
	case r.nsp == "pg_catalog" || r.nsp == "information_schema":
		return nil
	}
	u := &UserType{OID: oid, Schema: r.nsp, Name: r.name, Owner: r.owner, OwnerSuper: r.ownerSuper}
	var err error
	switch r.typtype {
	case "e":
		err = w.readEnum(u)
	case "c":
		err = w.readComposite(u, r.relid)
	case "d":
		err = w.readDomain(u, &r)
	case "r":
		err = w.readRange(u, r.subtype)
	case "m":
		return w.visit(r.rangeOf, from) // created with its range
	default:
		return fmt.Errorf("column type %s (of %s) is a user-defined %s type: repstream cannot create it on the target; create it there first",
			u, from, map[string]string{"b": "base", "p": "pseudo"}[r.typtype])
	}
	if err != nil {
		return err
	}
	w.types = append(w.types, u) // after everything it needs
	return nil
}

// readEnum reads the enum u's labels in sort order.
func (w *typeWalk) readEnum(u *UserType) error {
	u.Kind = 'e'
	rows, err := w.q.Query(w.ctx, "SELECT enumlabel::text FROM pg_catalog.pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder", u.OID)
	if err != nil {
		return fmt.Errorf("read enum %s: %w", u, err)
	}
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			rows.Close()
			return fmt.Errorf("read enum %s: %w", u, err)
		}
		u.Labels = append(u.Labels, l)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read enum %s: %w", u, err)
	}
	return nil
}

// readComposite reads the composite u's attributes (of its relation relid)
// in order, then visits their types, once the rows are read.
func (w *typeWalk) readComposite(u *UserType, relid uint32) error {
	u.Kind = 'c'
	rows, err := w.q.Query(w.ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.atttypid
				FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, relid)
	if err != nil {
		return fmt.Errorf("read composite %s: %w", u, err)
	}
	var attrOIDs []uint32
	for rows.Next() {
		var f TypeField
		var t uint32
		if err := rows.Scan(&f.Name, &f.Type, &t); err != nil {
			rows.Close()
			return fmt.Errorf("read composite %s: %w", u, err)
		}
		u.Attrs = append(u.Attrs, f)
		attrOIDs = append(attrOIDs, t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read composite %s: %w", u, err)
	}
	for _, t := range attrOIDs {
		if err := w.visit(t, u.String()); err != nil {
			return err
		}
	}
	return nil
}

// readDomain takes the domain u's base type, NOT NULL and default from its
// row r, visits the base type, then reads its CHECK constraints by name.
func (w *typeWalk) readDomain(u *UserType, r *typeRow) error {
	u.Kind, u.Base, u.NotNull, u.Default = 'd', r.base, r.notNull, r.dflt
	if err := w.visit(r.baseOID, u.String()); err != nil {
		return err
	}
	rows, err := w.q.Query(w.ctx, `SELECT conname::text, pg_catalog.pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint
				WHERE contypid = $1 AND contype = 'c' ORDER BY conname`, u.OID)
	if err != nil {
		return fmt.Errorf("read domain %s: %w", u, err)
	}
	for rows.Next() {
		var c [2]string
		if err := rows.Scan(&c[0], &c[1]); err != nil {
			rows.Close()
			return fmt.Errorf("read domain %s: %w", u, err)
		}
		u.Checks = append(u.Checks, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read domain %s: %w", u, err)
	}
	return nil
}

// readRange names the range u's subtype, then visits it.
func (w *typeWalk) readRange(u *UserType, subtype uint32) error {
	u.Kind = 'r'
	if err := w.q.QueryRow(w.ctx, "SELECT pg_catalog.format_type($1, NULL)", subtype).Scan(&u.Subtype); err != nil {
		return fmt.Errorf("read range %s: %w", u, err)
	}
	return w.visit(subtype, u.String())
}

// CreateSQL returns the statement that creates u.
func (u *UserType) CreateSQL() string {
	var b strings.Builder
	switch u.Kind {
	case 'e':
		b.WriteString("CREATE TYPE " + u.QualifiedName() + " AS ENUM (")
		for i, l := range u.Labels {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(QuoteLiteral(l))
		}
		b.WriteString(")")
	case 'c':
		b.WriteString("CREATE TYPE " + u.QualifiedName() + " AS (")
		for i, f := range u.Attrs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(change.QuoteIdent(f.Name) + " " + f.Type)
		}
		b.WriteString(")")
	case 'd':
		b.WriteString("CREATE DOMAIN " + u.QualifiedName() + " AS " + u.Base)
		if u.Default != "" {
			b.WriteString(" DEFAULT " + u.Default)
		}
		if u.NotNull {
			b.WriteString(" NOT NULL")
		}
		for _, c := range u.Checks {
			b.WriteString(" CONSTRAINT " + change.QuoteIdent(c[0]) + " " + c[1])
		}
	case 'r':
		b.WriteString("CREATE TYPE " + u.QualifiedName() + " AS RANGE (SUBTYPE = " + u.Subtype + ")")
	}
	return b.String()
}

// Structure is u's structure as one canonical text, what a value of it
// depends on (its name, owner and a domain's constraints aside): a
// composite's attributes in order, with their types ("composite ("x"
// integer, "y" integer)"); an enum's labels in order; a range's subtype;
// a domain's base type. Two types of the same structure take the same
// text values alike (target.RecordTypes keeps it).
func (u *UserType) Structure() string {
	switch u.Kind {
	case 'e':
		labels := make([]string, len(u.Labels))
		for i, l := range u.Labels {
			labels[i] = QuoteLiteral(l)
		}
		return "enum (" + strings.Join(labels, ", ") + ")"
	case 'c':
		attrs := make([]string, len(u.Attrs))
		for i, f := range u.Attrs {
			attrs[i] = change.QuoteIdent(f.Name) + " " + f.Type
		}
		return "composite (" + strings.Join(attrs, ", ") + ")"
	case 'd':
		return "domain over " + u.Base
	case 'r':
		return "range of " + u.Subtype
	}
	return "type"
}

// DropSQL returns the statement that drops u (RESTRICT: not while a column
// or another type uses it).
func (u *UserType) DropSQL() string {
	if u.Kind == 'd' {
		return "DROP DOMAIN " + u.QualifiedName()
	}
	return "DROP TYPE " + u.QualifiedName()
}

// Incompatible says why the type the target already has under u's name
// cannot hold u's values ("" if it can): an enum must have u's labels in
// u's order (more are fine), a composite the same attributes and types, a
// domain the same base type, a range the same subtype. t is the target's
// description of the type (TypesFor on the target, or LoadType).
func (u *UserType) Incompatible(t *UserType) string {
	if t.Kind != u.Kind {
		return fmt.Sprintf("it is a %s on the target, a %s on the source", kindName(t.Kind), kindName(u.Kind))
	}
	switch u.Kind {
	case 'e':
		at := 0
		for _, l := range u.Labels {
			i := slices.Index(t.Labels[at:], l)
			if i < 0 {
				return fmt.Sprintf("enum label %q is missing on the target, or out of the source's order", l)
			}
			at += i + 1
		}
	case 'c':
		if len(t.Attrs) != len(u.Attrs) {
			return fmt.Sprintf("%d attributes on the target, %d on the source", len(t.Attrs), len(u.Attrs))
		}
		for i, f := range u.Attrs {
			if t.Attrs[i] != f {
				return fmt.Sprintf("attribute %d is %s %s on the target, %s %s on the source", i+1, t.Attrs[i].Name, t.Attrs[i].Type, f.Name, f.Type)
			}
		}
	case 'd':
		if t.Base != u.Base {
			return fmt.Sprintf("a domain over %s on the target, over %s on the source", t.Base, u.Base)
		}
	case 'r':
		if t.Subtype != u.Subtype {
			return fmt.Sprintf("a range of %s on the target, of %s on the source", t.Subtype, u.Subtype)
		}
	}
	return ""
}

func kindName(k byte) string {
	switch k {
	case 'e':
		return "enum"
	case 'c':
		return "composite type"
	case 'd':
		return "domain"
	case 'r':
		return "range type"
	}
	return "type"
}

// LoadType describes the type schema.name in q's database, or returns nil
// when there is none.
func LoadType(ctx context.Context, q Querier, schema, name string) (*UserType, error) {
	var oid uint32
	err := q.QueryRow(ctx, `SELECT COALESCE((SELECT t.oid FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = $1 AND t.typname = $2), 0)`, schema, name).Scan(&oid)
	if err != nil || oid == 0 {
		return nil, err
	}
	types, _, err := TypesFor(ctx, q, []*Table{{Schema: "-", Name: "-", Columns: []Column{{Name: name, TypeOID: oid}}}})
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		if t.OID == oid {
			return t, nil
		}
	}
	return nil, nil
}

// QuoteLiteral is s as an SQL string literal that reads the same whatever
// the session's standard_conforming_strings (as PostgreSQL's
// quote_literal writes it): a string with a backslash is written E'...'
// with the backslashes doubled. With the setting off (a database's or a
// role's, which their owner may set), a backslash before a quote would
// end the literal early and the rest of s would be SQL: repstream's sessions pin it on too
// (pgdsn.SetValueFormat).
func QuoteLiteral(s string) string {
	q := strings.ReplaceAll(s, "'", "''")
	if strings.Contains(s, `\`) {
		return "E'" + strings.ReplaceAll(q, `\`, `\\`) + "'"
	}
	return "'" + q + "'"
}
