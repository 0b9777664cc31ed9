package schema

import (
	"errors"
	"fmt"
	"strings"

	"github.com/repstream/repstream/internal/change"
)

// Errors of the schema-change diff; each is wrapped in an error naming the
// table and column.
var (
	// ErrVolatileDefault: a column was added with a default the source
	// evaluated row by row (random(), clock_timestamp(), an identity…): the
	// target cannot give its existing rows the same values. AlterSQL
	// returns it only when the target table is not empty.
	ErrVolatileDefault = errors.New("added with a default the target cannot reproduce for existing rows")
	// ErrLooksRenamed: one column gone and one added, with no attribute
	// numbers to tell a rename from a drop and an add. Dropping and adding
	// would lose the column's values on the target.
	ErrLooksRenamed = errors.New("one column gone and another added: a rename cannot be told from a drop and an add")
	// ErrTargetMismatch: the target table does not look like the source's
	// table before the change (a column missing, both names of a rename).
	ErrTargetMismatch = errors.New("the target table does not match the source's")
)

// AlterSQL returns the statements that bring the target table cur to the
// definition in m, a schema-change message of an existing table; cur was
// found under m's name or, for a renamed table, under m.Old's. It is pure:
// the statements are ALTER TABLE ... on cur, in order (table rename, column
// renames, drops, adds, type / NOT NULL / default changes).
//
// With m.Old (the source's previous definition), columns are matched by
// attribute number: a changed name is a RENAME, a number gone is a DROP, a
// new number an ADD; types, NOT NULL and defaults change where the source's
// changed. Without it, columns are matched by name against the target, and
// a column gone and another added together is ErrLooksRenamed; a target
// column absent from the source is then left alone only if nothing else
// suggests a drop — it is reported as ErrTargetMismatch.
//
// An added column gets, for the existing rows, the value the source gave
// them (its stored "missing" value, as a literal default that is then
// replaced by the real default expression); a default the source evaluated
// per row is ErrVolatileDefault unless targetEmpty.
func AlterSQL(cur *Table, m *DDLMessage, targetEmpty bool) ([]string, error) {
	tn := m.TableName()
	var stmts []string
	q := cur.TableName()
	if q.Schema != tn.Schema {
		stmts = append(stmts, "ALTER TABLE "+q.Quoted()+" SET SCHEMA "+change.QuoteIdent(tn.Schema))
		q.Schema = tn.Schema
	}
	if q.Name != tn.Name {
		stmts = append(stmts, "ALTER TABLE "+q.Quoted()+" RENAME TO "+change.QuoteIdent(tn.Name))
	}
	qt := tn.Quoted()
	alter := func(s string) { stmts = append(stmts, "ALTER TABLE "+qt+" "+s) }
	have := map[string]*Column{}
	for i := range cur.Columns {
		have[cur.Columns[i].Name] = &cur.Columns[i]
	}
	fail := func(col string, err error, format string, args ...any) error {
		return fmt.Errorf("schema change %q of %s, column %q: %w: %s", m.Tag, tn, col, err, fmt.Sprintf(format, args...))
	}
	newNames := map[string]bool{}
	for _, c := range m.Columns {
		newNames[c.Name] = true
	}

	var oldByNum map[int]*DDLColumn
	if m.Old != nil {
		oldByNum = map[int]*DDLColumn{}
		for i := range m.Old.Columns {
			oldByNum[m.Old.Columns[i].Num] = &m.Old.Columns[i]
		}
		// Renames.
		renamed := map[string]bool{}
		for _, c := range m.Columns {
			o := oldByNum[c.Num]
			if o == nil || o.Name == c.Name {
				continue
			}
			switch {
			case have[c.Name] != nil && have[o.Name] == nil:
				// Renamed on the target already.
			case have[o.Name] != nil && have[c.Name] == nil:
				alter("RENAME COLUMN " + change.QuoteIdent(o.Name) + " TO " + change.QuoteIdent(c.Name))
				have[c.Name] = have[o.Name]
				delete(have, o.Name)
				renamed[c.Name] = true
			default:
				return nil, fail(c.Name, ErrTargetMismatch, "renamed from %q on the source, but the target has %s", o.Name, both(have[o.Name] != nil, have[c.Name] != nil))
			}
		}
		// Drops.
		newNums := map[int]bool{}
		for _, c := range m.Columns {
			newNums[c.Num] = true
		}
		for _, o := range m.Old.Columns {
			if newNums[o.Num] || have[o.Name] == nil || renamed[o.Name] {
				continue
			}
			alter("DROP COLUMN " + change.QuoteIdent(o.Name))
			delete(have, o.Name)
		}
	} else {
		var missing, extra []string
		for _, c := range m.Columns {
			if have[c.Name] == nil {
				missing = append(missing, c.Name)
			}
		}
		for _, c := range cur.Columns {
			if !newNames[c.Name] {
				extra = append(extra, c.Name)
			}
		}
		switch {
		case len(missing) > 0 && len(extra) > 0:
			return nil, fail(missing[0], ErrLooksRenamed, "the target has %s, which the source lacks, and lacks %s (repstream has no earlier definition of the table to compare with): rename or drop the columns on the target yourself, then restart",
				quoteList(extra), quoteList(missing))
		case len(extra) > 0:
			return nil, fail(extra[0], ErrTargetMismatch, "the target has %s, which the source lacks (dropped, or a column of the target's own? repstream has no earlier definition of the table to compare with): drop them on the target yourself if the source dropped them, then restart",
				quoteList(extra))
		}
	}

	// Adds, then changes of the columns both sides have.
	for i := range m.Columns {
		c := &m.Columns[i]
		if have[c.Name] == nil {
			if oldByNum != nil && oldByNum[c.Num] != nil {
				return nil, fail(c.Name, ErrTargetMismatch, "the source had the column before this change, the target lacks it")
			}
			add, err := addColumn(c, targetEmpty)
			if err != nil {
				return nil, fail(c.Name, err, "%s", volatileAdvice(c))
			}
			for _, s := range add {
				alter(s)
			}
			continue
		}
		if c.Generated != nil || c.Identity != "" {
			continue // expression and identity changes are not carried over
		}
		qc := change.QuoteIdent(c.Name)
		tc := have[c.Name]
		var was struct {
			typ     string
			notNull bool
			def     *string
		}
		if o := oldByNum[c.Num]; o != nil {
			was.typ, was.notNull, was.def = o.Type, o.NotNull, o.Default
		} else {
			was.typ, was.notNull = tc.Type, tc.NotNull
			if tc.HasDefault {
				was.def = &tc.Default
			}
		}
		if was.typ != c.Type && tc.Type != c.Type {
			alter("ALTER COLUMN " + qc + " TYPE " + c.Type + " USING " + qc + "::" + c.Type)
		}
		if was.notNull != c.NotNull && tc.NotNull != c.NotNull {
			if c.NotNull {
				alter("ALTER COLUMN " + qc + " SET NOT NULL")
			} else {
				alter("ALTER COLUMN " + qc + " DROP NOT NULL")
			}
		}
		if !sameExpr(was.def, c.Default) {
			if c.Default == nil {
				alter("ALTER COLUMN " + qc + " DROP DEFAULT")
			} else {
				alter("ALTER COLUMN " + qc + " SET DEFAULT " + *c.Default)
			}
		}
	}
	return stmts, nil
}

// addColumn returns the ALTER TABLE actions (without "ALTER TABLE t") that
// add c, giving existing rows the source's values.
func addColumn(c *DDLColumn, targetEmpty bool) ([]string, error) {
	qc := change.QuoteIdent(c.Name)
	def := "ADD COLUMN " + qc + " " + c.Type
	notNull := ""
	if c.NotNull {
		notNull = " NOT NULL"
	}
	switch {
	case c.Generated != nil:
		return []string{def + " GENERATED ALWAYS AS (" + *c.Generated + ") STORED"}, nil
	case c.Identity != "":
		if !targetEmpty {
			return nil, ErrVolatileDefault
		}
		kind := "BY DEFAULT"
		if c.Identity == "a" {
			kind = "ALWAYS"
		}
		return []string{def + " GENERATED " + kind + " AS IDENTITY" + notNull}, nil
	case c.HasMissing && c.Missing != nil:
		// The value the source's existing rows have, as a constant; then
		// the real default for rows to come.
		out := []string{def + " DEFAULT " + quoteLiteral(*c.Missing) + "::" + c.Type + notNull}
		if c.Default != nil {
			out = append(out, "ALTER COLUMN "+qc+" SET DEFAULT "+*c.Default)
		} else {
			out = append(out, "ALTER COLUMN "+qc+" DROP DEFAULT")
		}
		return out, nil
	case c.Default != nil && !strings.HasPrefix(*c.Default, "NULL::"):
		if !targetEmpty {
			return nil, ErrVolatileDefault
		}
		return []string{def + " DEFAULT " + *c.Default + notNull}, nil
	case c.Default != nil:
		return []string{def + " DEFAULT " + *c.Default + notNull}, nil
	}
	return []string{def + notNull}, nil
}

func volatileAdvice(c *DDLColumn) string {
	what := "its default"
	switch {
	case c.Identity != "":
		what = "its identity"
	case c.Default != nil:
		what = "its default " + *c.Default
	}
	return "the source computed " + what + " for each existing row; add the column on the target yourself with the source's values " +
		"(e.g. copy them with an UPDATE ... FROM), then restart"
}

// RelColumn is a column as a pgoutput Relation message shows it, with its
// type formatted on the target ("" when the target cannot name it: a type
// that is not built in).
type RelColumn struct {
	Name string
	Type string
}

// RelationAlterSQL is the fallback diff when no event trigger reports
// schema changes (--ddl=relation): it compares two versions of a
// relation's columns as pgoutput describes them (names and types only) and
// returns the statements that change the target table cur the same way.
// prev is nil when there is no earlier version (the first Relation message
// of the run): then only columns the target lacks are added.
//
// A new column is added by the actions add returns for its name and
// target type (pgoutput does not say what the existing rows got: the
// caller asks the source, see RelationAddSQL); a column gone is dropped; a
// type change is applied with USING col::type. One column gone and another
// added in the same version is ErrLooksRenamed: applying a drop and an add
// would lose the column's values on the target. An error of add is
// returned naming the table and column.
func RelationAlterSQL(cur *Table, prev, next []RelColumn, add func(column, typ string) ([]string, error)) ([]string, error) {
	var stmts []string
	tn := cur.TableName()
	alter := func(s string) { stmts = append(stmts, "ALTER TABLE "+tn.Quoted()+" "+s) }
	have := map[string]*Column{}
	for i := range cur.Columns {
		have[cur.Columns[i].Name] = &cur.Columns[i]
	}
	nextBy := map[string]*RelColumn{}
	for i := range next {
		nextBy[next[i].Name] = &next[i]
	}
	typeOf := func(c *RelColumn) (string, error) {
		if c.Type == "" {
			return "", fmt.Errorf("column %q of %s: its type is not built in, repstream cannot name it on the target: change the target table yourself, then restart", c.Name, tn)
		}
		return c.Type, nil
	}
	var added, gone []string
	if prev != nil {
		prevBy := map[string]*RelColumn{}
		for i := range prev {
			prevBy[prev[i].Name] = &prev[i]
		}
		for _, c := range next {
			if prevBy[c.Name] == nil {
				added = append(added, c.Name)
			}
		}
		for _, c := range prev {
			if nextBy[c.Name] == nil {
				gone = append(gone, c.Name)
			}
		}
		if len(added) > 0 && len(gone) > 0 {
			return nil, fmt.Errorf("schema change of %s: %w: %s gone, %s added; without the event trigger (--ddl=relation) repstream cannot tell a RENAME from a DROP and an ADD, and dropping would lose the column's values on the target: rename the column on the target yourself, then restart",
				tn, ErrLooksRenamed, quoteList(gone), quoteList(added))
		}
	} else {
		for _, c := range next {
			if have[c.Name] == nil {
				added = append(added, c.Name)
			}
		}
		for _, c := range cur.Columns {
			if nextBy[c.Name] == nil && !c.Generated && len(added) > 0 {
				return nil, fmt.Errorf("schema change of %s: %w: the target has %q, which the source lacks, and lacks %s; without the event trigger (--ddl=relation) repstream cannot tell a RENAME from a DROP and an ADD: rename or drop the column on the target yourself, then restart",
					tn, ErrLooksRenamed, c.Name, quoteList(added))
			}
		}
	}
	for _, name := range gone {
		if have[name] != nil {
			alter("DROP COLUMN " + change.QuoteIdent(name))
		}
	}
	for _, name := range added {
		if have[name] != nil {
			continue
		}
		typ, err := typeOf(nextBy[name])
		if err != nil {
			return nil, err
		}
		actions, err := add(name, typ)
		if err != nil {
			return nil, fmt.Errorf("schema change of %s, column %q added: %w", tn, name, err)
		}
		for _, a := range actions {
			alter(a)
		}
	}
	for _, p := range prev {
		c := nextBy[p.Name]
		if c == nil || c.Type == p.Type || have[p.Name] == nil || have[p.Name].Type == c.Type {
			continue
		}
		typ, err := typeOf(c)
		if err != nil {
			return nil, err
		}
		qc := change.QuoteIdent(c.Name)
		alter("ALTER COLUMN " + qc + " TYPE " + typ + " USING " + qc + "::" + typ)
	}
	return stmts, nil
}

func sameExpr(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func both(a, b bool) string {
	switch {
	case a && b:
		return "both names"
	case !a && !b:
		return "neither name"
	}
	return "one of them"
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
