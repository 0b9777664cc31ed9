package schema

import (
	"errors"
	"github.com/repstream/repstream/internal/golden"
	"testing"
)

func TestParseTableName(t *testing.T) {
	tests := []struct {
		in      string
		want    TableName
		wantErr bool
	}{
		{in: "public.t", want: TableName{"public", "t"}},
		{in: "t", want: TableName{"public", "t"}},
		{in: "Sales.Orders", want: TableName{"sales", "orders"}},
		{in: `"Sales"."Order.Items"`, want: TableName{"Sales", "Order.Items"}},
		{in: `"a""b".c`, want: TableName{`a"b`, "c"}},
		{in: ` s.t `, want: TableName{"s", "t"}},
		{in: `s."*"`, want: TableName{"s", "*"}},
		{in: "s.*", wantErr: true},
		{in: "", wantErr: true},
		{in: "a.b.c", wantErr: true},
		{in: "a.", wantErr: true},
		{in: ".b", wantErr: true},
		{in: `"unterminated`, wantErr: true},
		{in: `""`, wantErr: true},
		{in: `"a"x`, wantErr: true},
		{in: "a b", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTableName(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseTableName(%q) = %v, want error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseTableName(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParsePatternWildcard(t *testing.T) {
	p, err := parsePattern("App.*")
	if err != nil || !p.wildcard || p.Schema != "app" {
		t.Fatalf("parsePattern(App.*) = %+v, %v", p, err)
	}
	if _, err := parsePattern("*.t"); err == nil {
		t.Fatal("wildcard schema accepted")
	}
}

func TestTableNameQuoting(t *testing.T) {
	n := TableName{Schema: `we"ird`, Name: "T x"}
	if got, want := n.Quoted(), `"we""ird"."T x"`; got != want {
		t.Errorf("Quoted() = %s, want %s", got, want)
	}
	if got, want := n.String(), `we"ird.T x`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	// Quoted output parses back to the same name.
	back, err := ParseTableName(n.Quoted())
	if err != nil || back != n {
		t.Errorf("round trip: %v, %v", back, err)
	}
}

func TestNotFoundError(t *testing.T) {
	var err error = &NotFoundError{Table: TableName{"s", "t"}}
	if !errors.Is(err, ErrTableNotFound) {
		t.Fatal("NotFoundError does not match ErrTableNotFound")
	}
	if got, want := err.Error(), `table "s"."t" not found`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestCreateTableSQLGolden(t *testing.T) {
	tables := map[string]*Table{
		"create_basic": {
			Schema: "public", Name: "orders",
			Columns: []Column{
				{Name: "id", Type: "bigint", NotNull: true},
				{Name: "customer", Type: "character varying(40)"},
				{Name: "amount", Type: "numeric(12,2)", NotNull: true},
				{Name: "tags", Type: "text[]"},
				{Name: "total", Type: "numeric", Generated: true, GenerationExpr: "(amount * 1.2)"},
				{Name: "lost", Type: "integer", Generated: true}, // expression unknown: omitted
			},
			PrimaryKey: []string{"id"},
		},
		"create_quoted_composite_key": {
			Schema: "My Schema", Name: `we"ird`,
			Columns: []Column{
				{Name: "Tenant", Type: "integer", NotNull: true},
				{Name: "id", Type: "uuid", NotNull: true},
				{Name: "body", Type: "jsonb"},
			},
			PrimaryKey: []string{"Tenant", "id"},
		},
		"create_no_key": {
			Schema: "public", Name: "log",
			Columns: []Column{{Name: "line", Type: "text"}},
		},
	}
	for name, tab := range tables {
		t.Run(name, func(t *testing.T) {
			checkGolden(t, name+".sql", CreateTableSQL(tab)+"\n")
		})
	}
}

func checkGolden(t *testing.T, file, got string) { t.Helper(); golden.Check(t, file, got) }

func FuzzParseTableName(f *testing.F) {
	for _, s := range []string{"public.t", "t", `"A"."b.c"`, `"a""b".c`, "s.*", "", `"`, "a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseTableName(s)
		if err != nil {
			return
		}
		if n.Schema == "" || n.Name == "" {
			t.Fatalf("ParseTableName(%q) = %+v: empty part", s, n)
		}
		back, err := ParseTableName(n.Quoted())
		if err != nil || back != n {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, n, n.Quoted(), back, err)
		}
	})
}

func TestPrimaryKeySQL(t *testing.T) {
	for _, tc := range []struct {
		tab  Table
		want string
	}{
		{Table{Schema: "My Schema", Name: `we"ird`, PrimaryKey: []string{"Tenant", "id"}}, `ALTER TABLE "My Schema"."we""ird" ADD PRIMARY KEY ("Tenant", "id")`},
		{Table{Schema: "public", Name: "log"}, ""},
	} {
		if got := PrimaryKeySQL(&tc.tab); got != tc.want {
			t.Errorf("PrimaryKeySQL(%s):\n got %s\nwant %s", tc.tab.TableName(), got, tc.want)
		}
	}
}
