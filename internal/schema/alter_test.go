package schema

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
)

func sp(s string) *string { return &s }

// tgt builds a target table from "name type" pairs (a trailing " NOT NULL"
// sets NotNull).
func tgt(cols ...string) *Table {
	t := &Table{Schema: "public", Name: "t"}
	for _, c := range cols {
		name, typ, _ := strings.Cut(c, " ")
		col := Column{Name: name, Type: typ}
		if s, ok := strings.CutSuffix(typ, " NOT NULL"); ok {
			col.Type, col.NotNull = s, true
		}
		t.Columns = append(t.Columns, col)
	}
	return t
}

func col(num int, name, typ string) ddlmsg.Column {
	return ddlmsg.Column{Num: num, Name: name, Type: typ}
}

func msg(tag string, old []ddlmsg.Column, cols ...ddlmsg.Column) *ddlmsg.Message {
	m := &ddlmsg.Message{Tag: tag, Table: ddlmsg.Table{Schema: "public", Name: "t", Columns: cols}}
	if old != nil {
		m.Old = &ddlmsg.Table{Schema: "public", Name: "t", Columns: old}
	}
	return m
}

// TestAlterSQL: the diff between the target table and a schema-change
// message, for every kind of change; golden file testdata/alter.txt.
func TestAlterSQL(t *testing.T) {
	id := col(1, "id", "integer")
	id.NotNull = true
	v := col(2, "v", "text")
	withDefault := col(3, "n", "integer")
	withDefault.Default, withDefault.HasMissing, withDefault.Missing = sp("42"), true, sp("42")
	stable := col(3, "ts", "timestamp with time zone")
	stable.Default, stable.HasMissing, stable.Missing = sp("now()"), true, sp("2026-11-24 14:00:00.123456+00")
	volatile := col(3, "r", "double precision")
	volatile.Default = sp("random()")
	nullDefault := col(3, "z", "integer")
	nullDefault.Default = sp("NULL::integer")
	ident := col(3, "k", "bigint")
	ident.Identity, ident.NotNull = "d", true
	gen := col(3, "g", "integer")
	gen.Generated = sp("(id * 2)")
	quoted := col(3, `we"ird col`, "text")
	quoted.HasMissing, quoted.Missing, quoted.Default = true, sp("it's"), sp("'it''s'::text")
	vNotNull := v
	vNotNull.NotNull = true
	vDefault := v
	vDefault.Default = sp("'x'::text")
	vBig := col(2, "v", "bigint")
	renamedV := col(2, "w", "text")
	gen3 := col(3, "g", "integer")
	gen3.Generated = sp("(id * 3)")
	plainG := col(3, "g", "integer")
	genBig := col(3, "g", "bigint")
	genBig.Generated = sp("(id * 2)")
	withGen := func(expr string) *Table {
		t := tgt("id integer NOT NULL", "v text", "g integer")
		t.Columns[2].Generated, t.Columns[2].GenerationExpr = true, expr
		return t
	}

	cases := []struct {
		name  string
		cur   *Table
		m     *ddlmsg.Message
		empty bool
	}{
		{"add column, constant default", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, withDefault), false},
		{"add column, stable default (now())", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, stable), false},
		{"add column, volatile default, rows", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, volatile), false},
		{"add column, volatile default, empty", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, volatile), true},
		{"add column, NULL default", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, nullDefault), false},
		{"add identity, rows", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, ident), false},
		{"add generated", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, gen), false},
		{"add quoted", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, quoted), false},
		{"rename column", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, renamedV), false},
		{"rename column, already done", tgt("id integer NOT NULL", "w text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, renamedV), false},
		{"drop column", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id), false},
		{"drop and add same name", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, col(3, "v", "integer")), false},
		{"target-only column kept", tgt("id integer NOT NULL", "v text", "extra text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, withDefault), false},
		{"type int to bigint", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, vBig), false},
		{"type already changed on target", tgt("id integer NOT NULL", "v bigint"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, vBig), false},
		{"set not null", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, vNotNull), false},
		{"drop not null", tgt("id integer NOT NULL", "v text NOT NULL"), msg("ALTER TABLE", []ddlmsg.Column{id, vNotNull}, id, v), false},
		{"set default", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, vDefault), false},
		{"drop default", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, vDefault}, id, v), false},
		{"no old: add", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", nil, id, v, withDefault), false},
		{"no old: rename-looking", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", nil, id, renamedV), false},
		{"no old: extra column", tgt("id integer NOT NULL", "v text"), msg("ALTER TABLE", nil, id), false},
		{"set expression", withGen("(id * 2)"), msg("ALTER TABLE", []ddlmsg.Column{id, v, gen}, id, v, gen3), false},
		{"set expression, already done", withGen("(id * 3)"), msg("ALTER TABLE", []ddlmsg.Column{id, v, gen}, id, v, gen3), false},
		{"generated column retyped", withGen("(id * 2)"), msg("ALTER TABLE", []ddlmsg.Column{id, v, gen}, id, v, genBig), false},
		{"drop expression", withGen("(id * 2)"), msg("ALTER TABLE", []ddlmsg.Column{id, v, gen}, id, v, plainG), false},
		{"rename: target has neither", tgt("id integer NOT NULL", "x text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, renamedV), false},
	}
	var b strings.Builder
	for _, tc := range cases {
		fmt.Fprintf(&b, "== %s\n", tc.name)
		stmts, err := AlterSQL(tc.cur, tc.m, tc.empty)
		for _, s := range stmts {
			fmt.Fprintf(&b, "%s;\n", s)
		}
		if err != nil {
			fmt.Fprintf(&b, "ERROR: %v\n", err)
		}
	}
	// Table renames.
	m := msg("ALTER TABLE", []ddlmsg.Column{id}, id)
	m.Name, m.Schema = "t2", "other"
	m.Old.Name = "t"
	stmts, err := AlterSQL(tgt("id integer NOT NULL"), m, false)
	fmt.Fprintf(&b, "== rename and move table\n%s;\nerr=%v\n", strings.Join(stmts, ";\n"), err)
	checkGolden(t, "alter.txt", b.String())

	if _, err := AlterSQL(tgt("id integer", "v text"), msg("ALTER TABLE", []ddlmsg.Column{id, v}, id, v, volatile), false); !errors.Is(err, ErrVolatileDefault) {
		t.Errorf("volatile default: %v, want ErrVolatileDefault", err)
	}
	if _, err := AlterSQL(tgt("id integer", "v text"), msg("ALTER TABLE", nil, id, renamedV), false); !errors.Is(err, ErrLooksRenamed) {
		t.Errorf("rename without old definition: %v, want ErrLooksRenamed", err)
	}
}

// TestRelationAlterSQL: the fallback diff of two Relation versions against
// the target; golden file testdata/alter_relation.txt.
func TestRelationAlterSQL(t *testing.T) {
	rc := func(pairs ...string) []RelColumn {
		var out []RelColumn
		for _, p := range pairs {
			n, typ, _ := strings.Cut(p, " ")
			out = append(out, RelColumn{Name: n, Type: typ})
		}
		return out
	}
	cases := []struct {
		name       string
		cur        *Table
		prev, next []RelColumn
	}{
		{"add", tgt("id integer", "v text"), rc("id integer", "v text"), rc("id integer", "v text", "n integer")},
		{"drop", tgt("id integer", "v text"), rc("id integer", "v text"), rc("id integer")},
		{"type", tgt("id integer", "v integer"), rc("id integer", "v integer"), rc("id integer", "v bigint")},
		{"type already on target", tgt("id integer", "v bigint"), rc("id integer", "v integer"), rc("id integer", "v bigint")},
		{"rename-looking", tgt("id integer", "v text"), rc("id integer", "v text"), rc("id integer", "w text")},
		{"user type", tgt("id integer", "v text"), rc("id integer", "v text"), rc("id integer", "v text", "m ")},
		{"first sight: add", tgt("id integer"), nil, rc("id integer", "n integer")},
		{"first sight: nothing", tgt("id integer", "extra text"), nil, rc("id integer")},
		{"first sight: rename-looking", tgt("id integer", "v text"), nil, rc("id integer", "w text")},
		{"no change", tgt("id integer", "v text"), rc("id integer", "v text"), rc("id integer", "v text")},
	}
	var b strings.Builder
	for _, tc := range cases {
		fmt.Fprintf(&b, "== %s\n", tc.name)
		// Every added column: the source's existing rows got 7.
		seven := "7"
		stmts, err := RelationAlterSQL(tc.cur, tc.prev, tc.next, func(column, typ string) ([]string, error) {
			return RelationAddSQL(column, typ, AddedValue{Type: typ, HasMissing: true, Missing: &seven}, false)
		})
		for _, s := range stmts {
			fmt.Fprintf(&b, "%s;\n", s)
		}
		if err != nil {
			fmt.Fprintf(&b, "ERROR: %v\n", err)
		}
	}
	checkGolden(t, "alter_relation.txt", b.String())
}

// TestCreateSQLFromDDL: a CREATE TABLE message becomes the statements
// that make the table on the target.
func TestCreateSQLFromDDL(t *testing.T) {
	m, err := ddlmsg.Parse([]byte(`{"tag":"CREATE TABLE","oid":16400,"schema":"app","name":"n","kind":"r","ident":"d","pubs":["p"],"pkey":["id"],
		"columns":[{"num":1,"name":"id","type":"integer","typeoid":23,"typmod":-1,"notnull":true,"default":"nextval('app.n_id_seq'::regclass)","identity":"","hasmissing":false,"missing":null,"seq":"app.n_id_seq"},
		{"num":2,"name":"v","type":"character varying(10)","typeoid":1043,"typmod":14,"notnull":false,"default":null,"identity":"","hasmissing":false,"missing":null,"seq":null}],"old":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Creates() || !m.Publishes("p") || m.Publishes("q") {
		t.Errorf("Creates=%v Publishes(p)=%v Publishes(q)=%v", m.Creates(), m.Publishes("p"), m.Publishes("q"))
	}
	checkGolden(t, "create_from_message.sql", strings.Join(CreateSQLFromDDL(&m.Table), ";\n")+";\n")
}

func TestSplitSchemaPatterns(t *testing.T) {
	schemas, tables, err := SplitSchemaPatterns([]string{"app.*", "public.t", `"We.ird".*`, "app.*", `s."*"`})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(schemas) != "[app We.ird]" || fmt.Sprint(tables) != `[public.t s."*"]` {
		t.Errorf("schemas %q tables %q", schemas, tables)
	}
}

func TestTypesChanged(t *testing.T) {
	rel := &change.Relation{Columns: []change.Column{{Name: "id", TypeOID: 23, TypeMod: -1}, {Name: "p", TypeOID: 1700, TypeMod: 655366}, {Name: "new", TypeOID: 25, TypeMod: -1}}}
	same := RelationTypes(rel)
	if got := TypesChanged(same, rel); got != nil {
		t.Errorf("TypesChanged of its own record: %q", got)
	}
	// The catalog's form (jsonb text), a column the stream lacks, one
	// retyped, one with another typmod.
	for _, tc := range []struct {
		recorded string
		want     []string
	}{
		{`{"id": [23, -1], "p": [1700, 655366], "gone": [25, -1]}`, nil},
		{`{"id": [20, -1], "p": [1700, 655366]}`, []string{"id"}},
		{`{"id": [23, -1], "p": [1700, 655368]}`, []string{"p"}},
		{``, nil},
		{`not json`, nil},
	} {
		if got := TypesChanged(tc.recorded, rel); !slices.Equal(got, tc.want) {
			t.Errorf("TypesChanged(%s) = %q, want %q", tc.recorded, got, tc.want)
		}
	}
}

// TestTakenNames: the columns a change adds under a name the target has,
// and the condition that finds a target row not holding what the source
// gave its existing rows.
func TestTakenNames(t *testing.T) {
	cur := tgt("id integer NOT NULL", "f text", "d bigint", "g text", "h text")
	id := col(1, "id", "integer")
	f := col(2, "f", "text")
	f.HasMissing, f.Missing, f.Default = true, sp("it's"), sp("'x'::text")
	d := col(3, "d", "integer")
	g := col(4, "g", "text")
	g.Default = sp("md5(random()::text)")
	h := col(5, "h", "text")
	h.Generated = sp("upper(f)")
	kept := col(6, "kept", "text")
	readded := col(8, "kept2", "text") // DROP kept2, ADD kept2
	m := msg("ALTER TABLE", []ddlmsg.Column{id, kept, col(7, "kept2", "text")}, id, f, d, g, h, kept, readded)
	cur.Columns = append(cur.Columns, Column{Name: "kept2", Type: "text"})
	got := TakenNames(cur, m)
	want := []TakenName{
		{Column: "f", Differs: `"f"::text IS DISTINCT FROM ('it''s'::text)::text`, Source: `'it''s'::text`},
		{Column: "d", Differs: `"d" IS NOT NULL`, Source: "NULL"},
		{Column: "g", Source: "values of its default md5(random()::text), computed for each row"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TakenNames:\n got %q\nwant %q", got, want)
	}
	if got := TakenNames(cur, msg("ALTER TABLE", nil, id, f)); got != nil {
		t.Errorf("without the previous definition: %q, want none", got)
	}
}
