package schema

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testConn(t *testing.T, setup string) *pgx.Conn {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test")
	}
	c := pgtest.Shared(t, "pg")
	db := pgtest.NewDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, setup); err != nil {
		t.Fatalf("setup: %v", err)
	}
	return conn
}

const fixture = `
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE SCHEMA app;
CREATE TABLE app.orders (
	tenant int NOT NULL,
	id bigint NOT NULL,
	note varchar(20),
	amount numeric(10,2) NOT NULL DEFAULT 0,
	dropped int,
	m mood,
	tags text[],
	total numeric GENERATED ALWAYS AS (amount * 2) STORED,
	PRIMARY KEY (id, tenant)
);
ALTER TABLE app.orders DROP COLUMN dropped;
CREATE TABLE app.full_t (a int, b text);
ALTER TABLE app.full_t REPLICA IDENTITY FULL;
CREATE TABLE app.idx_t (a int NOT NULL, b int NOT NULL, c text);
CREATE UNIQUE INDEX idx_t_ab ON app.idx_t (b, a);
ALTER TABLE app.idx_t REPLICA IDENTITY USING INDEX idx_t_ab;
CREATE TABLE app.parted (id int PRIMARY KEY) PARTITION BY RANGE (id);
CREATE TABLE app.parted_1 PARTITION OF app.parted FOR VALUES FROM (0) TO (100);
CREATE VIEW app.v AS SELECT 1 AS x;
CREATE SEQUENCE app.seq;
CREATE TABLE "Mixed Case" (id int);
CREATE TABLE public.plain (id int);
`

func TestLoadTable(t *testing.T) {
	conn := testConn(t, fixture)
	ctx := context.Background()

	tab, err := LoadTable(ctx, conn, "app", "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := []Column{
		{Name: "tenant", Type: "integer", NotNull: true},
		{Name: "id", Type: "bigint", NotNull: true},
		{Name: "note", Type: "character varying(20)"},
		{Name: "amount", Type: "numeric(10,2)", NotNull: true},
		{Name: "m", Type: "mood"},
		{Name: "tags", Type: "text[]"},
		{Name: "total", Type: "numeric", Generated: true, GenerationExpr: "(amount * (2)::numeric)"},
	}
	for i := range tab.Columns {
		if tab.Columns[i].TypeOID == 0 {
			t.Errorf("column %s: TypeOID 0", tab.Columns[i].Name)
		}
		tab.Columns[i].TypeOID = 0
	}
	if !reflect.DeepEqual(tab.Columns, want) {
		t.Errorf("columns:\n got %+v\nwant %+v", tab.Columns, want)
	}
	if !reflect.DeepEqual(tab.PrimaryKey, []string{"id", "tenant"}) || !reflect.DeepEqual(tab.IdentityKey, tab.PrimaryKey) {
		t.Errorf("keys: pk %v ident %v", tab.PrimaryKey, tab.IdentityKey)
	}
	if tab.ReplicaIdentity != 'd' || tab.Partitioned {
		t.Errorf("identity %c partitioned %v", tab.ReplicaIdentity, tab.Partitioned)
	}

	// CREATE TABLE from the description works and round-trips.
	if _, err := conn.Exec(ctx, strings.Replace(CreateTableSQL(tab), `"app"."orders"`, `"public"."orders_copy"`, 1)); err != nil {
		t.Fatalf("CreateTableSQL output does not run: %v", err)
	}
	cp, err := LoadTable(ctx, conn, "public", "orders_copy")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cp.Columns {
		cp.Columns[i].TypeOID = 0
	}
	if !reflect.DeepEqual(cp.Columns, want) || !reflect.DeepEqual(cp.PrimaryKey, tab.PrimaryKey) {
		t.Errorf("recreated table differs: %+v pk %v", cp.Columns, cp.PrimaryKey)
	}

	full, err := LoadTable(ctx, conn, "app", "full_t")
	if err != nil || full.ReplicaIdentity != 'f' || full.PrimaryKey != nil || full.IdentityKey != nil {
		t.Errorf("full_t: %+v %v", full, err)
	}
	idx, err := LoadTable(ctx, conn, "app", "idx_t")
	if err != nil || idx.ReplicaIdentity != 'i' || !reflect.DeepEqual(idx.IdentityKey, []string{"b", "a"}) {
		t.Errorf("idx_t: %+v %v", idx, err)
	}
	parted, err := LoadTable(ctx, conn, "app", "parted")
	if err != nil || !parted.Partitioned {
		t.Errorf("parted: %+v %v", parted, err)
	}
	mixed, err := LoadTable(ctx, conn, "public", "Mixed Case")
	if err != nil || len(mixed.Columns) != 1 {
		t.Errorf("Mixed Case: %+v %v", mixed, err)
	}

	for _, name := range []string{"nope", "v", "seq"} {
		_, err = LoadTable(ctx, conn, "app", name)
		if !errors.Is(err, ErrTableNotFound) {
			t.Errorf("LoadTable(app.%s) error = %v, want ErrTableNotFound", name, err)
		} else if want := `table "app"."` + name + `" not found`; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

func TestResolveTables(t *testing.T) {
	conn := testConn(t, fixture)
	ctx := context.Background()
	tn := func(s, n string) TableName { return TableName{s, n} }
	tests := []struct {
		patterns []string
		want     []TableName
		errHas   string
	}{
		{patterns: []string{"app.*"}, want: []TableName{tn("app", "full_t"), tn("app", "idx_t"), tn("app", "orders"), tn("app", "parted")}},
		{patterns: []string{"plain", "app.orders", "public.plain"}, want: []TableName{tn("app", "orders"), tn("public", "plain")}},
		{patterns: []string{`"Mixed Case"`}, want: []TableName{tn("public", "Mixed Case")}},
		{patterns: []string{"app.parted_1"}, want: []TableName{tn("app", "parted_1")}},
		{patterns: []string{"app.orders", "app.missing"}, errHas: `"app.missing" matches no table`},
		{patterns: []string{"app.v"}, errHas: `"app.v" matches no table`},
		{patterns: []string{"nosuch.*"}, errHas: `"nosuch.*" matches no table`},
		{patterns: []string{"a.b.c"}, errHas: "want schema.table"},
	}
	for _, tt := range tests {
		got, err := ResolveTables(ctx, conn, tt.patterns)
		if tt.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("ResolveTables(%q) error = %v, want containing %q", tt.patterns, err, tt.errHas)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ResolveTables(%q) = %v, %v; want %v", tt.patterns, got, err, tt.want)
		}
	}
}
