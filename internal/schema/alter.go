package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
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
func AlterSQL(cur *Table, m *ddlmsg.Message, targetEmpty bool) ([]string, error) {
	d := newAlterDiff(cur, m)
	d.moveTable(cur.TableName())
	if m.Old != nil {
		renamed, err := d.renameColumns()
		if err != nil {
			return nil, err
		}
		d.dropColumns(renamed)
	} else if err := d.checkUnmatched(cur); err != nil {
		return nil, err
	}
	// Adds, then changes of the columns both sides have, in the source's
	// column order.
	for i := range m.Columns {
		c := &m.Columns[i]
		if d.have[c.Name] == nil {
			if err := d.add(c, targetEmpty); err != nil {
				return nil, err
			}
			continue
		}
		d.changeColumn(c)
	}
	return d.stmts, nil
}

// TakenName is a column the source added (an attribute number m.Old did
// not have) under a name the target table has already: a column of the
// target's own, or one added there first. AlterSQL makes it the source's
// (type, default) but leaves its values: the caller checks that the
// target's rows hold what the source gave its existing rows (Differs, a
// condition true of a row that does not; "" when the source computed a
// value per row, which no check can see: then the table must be empty).
type TakenName struct {
	Column  string
	Differs string
	// Source says what the source gave its existing rows, for an error.
	Source string
}

// TakenNames returns the columns m adds under a name cur has (needs m.Old:
// without it, columns are matched by name). A generated column is left
// out: the target computes its values.
func TakenNames(cur *Table, m *ddlmsg.Message) []TakenName {
	if m.Old == nil {
		return nil
	}
	old, oldName := map[int]bool{}, map[string]bool{}
	for _, c := range m.Old.Columns {
		old[c.Num], oldName[c.Name] = true, true
	}
	var out []TakenName
	for i := range m.Columns {
		c := &m.Columns[i]
		// A target column named as one the source had is that one (the
		// change drops or renames it first: DROP b, ADD b), not the
		// target's own.
		if old[c.Num] || oldName[c.Name] || cur.Column(c.Name) < 0 || c.Generated != nil {
			continue
		}
		qc := change.QuoteIdent(c.Name)
		t := TakenName{Column: c.Name}
		switch {
		case c.Identity != "":
			t.Source = "an identity's values"
		case c.HasMissing && c.Missing != nil:
			// Compared as text: the target's column may be of another
			// type, which a cast could fail on.
			v := QuoteLiteral(*c.Missing) + "::" + c.Type
			t.Differs, t.Source = qc+"::text IS DISTINCT FROM ("+v+")::text", v
		case c.Default != nil && !strings.HasPrefix(*c.Default, "NULL::"):
			t.Source = "values of its default " + *c.Default + ", computed for each row"
		default:
			t.Differs, t.Source = qc+" IS NOT NULL", "NULL"
		}
		out = append(out, t)
	}
	return out
}

// alterDiff is AlterSQL's state while it builds the statements, one step
// after the other: every step after moveTable alters the table under its
// new name (qt), and have maps the target's column names, as the
// statements so far leave them, to the target's columns.
type alterDiff struct {
	m     *ddlmsg.Message
	tn    TableName
	qt    string // tn, quoted
	have  map[string]*Column
	stmts []string
	// oldByNum: m.Old's columns by attribute number; nil without m.Old
	// (then every look-up finds nothing).
	oldByNum map[int]*ddlmsg.Column
}

func newAlterDiff(cur *Table, m *ddlmsg.Message) *alterDiff {
	tn := NameFromDDL(&m.Table)
	d := &alterDiff{m: m, tn: tn, qt: tn.Quoted(), have: map[string]*Column{}}
	for i := range cur.Columns {
		d.have[cur.Columns[i].Name] = &cur.Columns[i]
	}
	if m.Old != nil {
		d.oldByNum = map[int]*ddlmsg.Column{}
		for i := range m.Old.Columns {
			d.oldByNum[m.Old.Columns[i].Num] = &m.Old.Columns[i]
		}
	}
	return d
}

// alter appends an ALTER TABLE of the table under its new name.
func (d *alterDiff) alter(s string) { d.stmts = append(d.stmts, "ALTER TABLE "+d.qt+" "+s) }

func (d *alterDiff) fail(col string, err error, format string, args ...any) error {
	return fmt.Errorf("schema change %q of %s, column %q: %w: %s", d.m.Tag, d.tn, col, err, fmt.Sprintf(format, args...))
}

// moveTable moves the target table q (found under m's name or m.Old's) into
// the new schema, then renames it: the RENAME names the table by its new
// schema and old name.
func (d *alterDiff) moveTable(q TableName) {
	if q.Schema != d.tn.Schema {
		d.stmts = append(d.stmts, "ALTER TABLE "+q.Quoted()+" SET SCHEMA "+change.QuoteIdent(d.tn.Schema))
		q.Schema = d.tn.Schema
	}
	if q.Name != d.tn.Name {
		d.stmts = append(d.stmts, "ALTER TABLE "+q.Quoted()+" RENAME TO "+change.QuoteIdent(d.tn.Name))
	}
}

// renameColumns (with m.Old) renames the target's columns whose attribute
// number has a new name on the source, unless the target has the new name
// already; it returns the new names of the columns it renamed: an old
// column under such a name is the renamed column now, not one to drop.
func (d *alterDiff) renameColumns() (map[string]bool, error) {
	renamed := map[string]bool{}
	for _, c := range d.m.Columns {
		o := d.oldByNum[c.Num]
		if o == nil || o.Name == c.Name {
			continue
		}
		switch {
		case d.have[c.Name] != nil && d.have[o.Name] == nil:
			// Renamed on the target already.
		case d.have[o.Name] != nil && d.have[c.Name] == nil:
			d.alter("RENAME COLUMN " + change.QuoteIdent(o.Name) + " TO " + change.QuoteIdent(c.Name))
			d.have[c.Name] = d.have[o.Name]
			delete(d.have, o.Name)
			renamed[c.Name] = true
		default:
			return nil, d.fail(c.Name, ErrTargetMismatch, "renamed from %q on the source, but the target has %s", o.Name, both(d.have[o.Name] != nil, d.have[c.Name] != nil))
		}
	}
	return renamed, nil
}

// dropColumns (with m.Old, after renameColumns) drops the target's columns
// whose attribute number the source no longer has.
func (d *alterDiff) dropColumns(renamed map[string]bool) {
	newNums := map[int]bool{}
	for _, c := range d.m.Columns {
		newNums[c.Num] = true
	}
	for _, o := range d.m.Old.Columns {
		if newNums[o.Num] || d.have[o.Name] == nil || renamed[o.Name] {
			continue
		}
		d.alter("DROP COLUMN " + change.QuoteIdent(o.Name))
		delete(d.have, o.Name)
	}
}

// checkUnmatched (without m.Old: columns matched by name) fails when the
// target has columns the source lacks: with columns missing too, it may be
// a rename (ErrLooksRenamed); alone, a drop or a column of the target's own
// (ErrTargetMismatch). Nothing is dropped without m.Old.
func (d *alterDiff) checkUnmatched(cur *Table) error {
	newNames := map[string]bool{}
	for _, c := range d.m.Columns {
		newNames[c.Name] = true
	}
	var missing, extra []string
	for _, c := range d.m.Columns {
		if d.have[c.Name] == nil {
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
		return d.fail(missing[0], ErrLooksRenamed, "the target has %s, which the source lacks, and lacks %s (repstream has no earlier definition of the table to compare with): rename or drop the columns on the target yourself, then restart",
			quoteList(extra), quoteList(missing))
	case len(extra) > 0:
		return d.fail(extra[0], ErrTargetMismatch, "the target has %s, which the source lacks (dropped, or a column of the target's own? repstream has no earlier definition of the table to compare with): drop them on the target yourself if the source dropped them, then restart",
			quoteList(extra))
	}
	return nil
}

// add adds c, which the target lacks; a column the source had before
// this change (by attribute number) the target should have had already.
func (d *alterDiff) add(c *ddlmsg.Column, targetEmpty bool) error {
	if d.oldByNum[c.Num] != nil {
		return d.fail(c.Name, ErrTargetMismatch, "the source had the column before this change, the target lacks it")
	}
	add, err := addColumn(c, targetEmpty, slices.Contains(d.m.PrimaryKey, c.Name))
	if err != nil {
		return d.fail(c.Name, err, "%s", volatileAdvice(c))
	}
	// A serial's default draws from the sequence it owns: made first on
	// the target too, as CreateSQLFromDDL makes it.
	owned := c.Sequence != nil && c.Identity == "" && targetEmpty
	if owned {
		d.stmts = append(d.stmts, "CREATE SEQUENCE IF NOT EXISTS "+*c.Sequence)
	}
	for _, s := range add {
		d.alter(s)
	}
	if owned {
		d.stmts = append(d.stmts, "ALTER SEQUENCE "+*c.Sequence+" OWNED BY "+d.qt+"."+change.QuoteIdent(c.Name))
	}
	return nil
}

// changeColumn changes the type, NOT NULL and default of c, a column both
// sides have, where the source's changed (compared with m.Old's column, or
// without m.Old with the target's) and the target's does not match already.
// A generation expression or type changed (SET EXPRESSION, PostgreSQL 17;
// ALTER COLUMN ... TYPE) is set on the target's generated column (which
// computes its rows anew), and
// one dropped (DROP EXPRESSION: the column keeps its values and is
// written from then on) is dropped there; identities are not carried over.
func (d *alterDiff) changeColumn(c *ddlmsg.Column) {
	qc := change.QuoteIdent(c.Name)
	tc := d.have[c.Name]
	o := d.oldByNum[c.Num]
	if o != nil && o.Generated != nil && c.Generated == nil && tc.Generated {
		d.alter("ALTER COLUMN " + qc + " DROP EXPRESSION")
	}
	if c.Generated != nil {
		// Its type changed: the target computes its rows anew too.
		if o != nil && o.Type != c.Type && tc.Type != c.Type && tc.Generated {
			d.alter("ALTER COLUMN " + qc + " TYPE " + c.Type)
		}
		if o != nil && o.Generated != nil && !sameExpr(o.Generated, c.Generated) && tc.Generated && tc.GenerationExpr != *c.Generated {
			d.alter("ALTER COLUMN " + qc + " SET EXPRESSION AS (" + *c.Generated + ")")
		}
		return
	}
	if c.Identity != "" {
		return
	}
	var was struct {
		typ     string
		notNull bool
		def     *string
	}
	if o := d.oldByNum[c.Num]; o != nil {
		was.typ, was.notNull, was.def = o.Type, o.NotNull, o.Default
	} else {
		was.typ, was.notNull = tc.Type, tc.NotNull
		if tc.HasDefault {
			was.def = &tc.Default
		}
	}
	if was.typ != c.Type && tc.Type != c.Type {
		d.alter("ALTER COLUMN " + qc + " TYPE " + c.Type + " USING " + qc + "::" + c.Type)
	}
	if was.notNull != c.NotNull && tc.NotNull != c.NotNull {
		if c.NotNull {
			d.alter("ALTER COLUMN " + qc + " SET NOT NULL")
		} else {
			d.alter("ALTER COLUMN " + qc + " DROP NOT NULL")
		}
	}
	if !sameExpr(was.def, c.Default) {
		if c.Default == nil {
			d.alter("ALTER COLUMN " + qc + " DROP DEFAULT")
		} else {
			d.alter("ALTER COLUMN " + qc + " SET DEFAULT " + *c.Default)
		}
	}
}

// addColumn returns the ALTER TABLE actions (without "ALTER TABLE t") that
// add c, giving existing rows the source's values.
// An identity ALWAYS is made BY DEFAULT unless key (CreateTableSQL).
func addColumn(c *ddlmsg.Column, targetEmpty, key bool) ([]string, error) {
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
		if c.Identity == "a" && key {
			kind = "ALWAYS"
		}
		return []string{def + " GENERATED " + kind + " AS IDENTITY" + notNull}, nil
	case c.HasMissing && c.Missing != nil:
		// The value the source's existing rows have, as a constant; then
		// the real default for rows to come.
		out := []string{def + " DEFAULT " + QuoteLiteral(*c.Missing) + "::" + c.Type + notNull}
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

func volatileAdvice(c *ddlmsg.Column) string {
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

// RelationTypes returns rel's columns' types in the JSON form of
// install.PublicationColumnTypes: {"name": [type oid, typmod], ...}.
func RelationTypes(rel *change.Relation) string {
	m := make(map[string][2]int64, len(rel.Columns))
	for _, c := range rel.Columns {
		m[c.Name] = [2]int64{int64(c.TypeOID), int64(c.TypeMod)}
	}
	b, _ := json.Marshal(m) // of a map of arrays of integers: cannot fail
	return string(b)
}

// TypesChanged lists the columns of rel whose type or typmod differs
// from what recorded (RelationTypes' JSON; "" or unreadable: nothing is
// known, nil) says; columns recorded has not, or rel has not, are
// neither.
func TypesChanged(recorded string, rel *change.Relation) []string {
	if recorded == "" {
		return nil
	}
	var m map[string][2]int64
	if json.Unmarshal([]byte(recorded), &m) != nil {
		return nil
	}
	var out []string
	for _, c := range rel.Columns {
		if t, ok := m[c.Name]; ok && (t[0] != int64(c.TypeOID) || t[1] != int64(c.TypeMod)) {
			out = append(out, c.Name)
		}
	}
	return out
}

// RelationRetyped reports whether RelationAlterSQL changes the type of a
// column of cur (one whose type differs between prev and next, and on
// the target from next's).
func RelationRetyped(cur *Table, prev, next []RelColumn) bool {
	have := map[string]string{}
	for _, c := range cur.Columns {
		have[c.Name] = c.Type
	}
	for _, p := range prev {
		for _, c := range next {
			if c.Name == p.Name && c.Type != p.Type {
				if t, ok := have[p.Name]; ok && t != c.Type {
					return true
				}
			}
		}
	}
	return false
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
