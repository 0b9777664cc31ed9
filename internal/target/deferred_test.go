package target

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
)

// TestDeferredDDL: what is deferred on a bare table is built once, in
// order, and forgotten; a second record for the same table replaces the
// first; a record of a table that is gone is forgotten; dropping the slot's
// state builds what is still deferred before removing it.
func TestDeferredDDL(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.b (id int NOT NULL, v text); CREATE TABLE public.c (id int NOT NULL)`)
	log := slog.New(slog.DiscardHandler)
	b, c, gone := schema.TableName{Schema: "public", Name: "b"}, schema.TableName{Schema: "public", Name: "c"}, schema.TableName{Schema: "public", Name: "gone"}
	deferIn := func(slot string, tb schema.TableName, indexes []schema.Index, keys ...string) {
		t.Helper()
		if err := pgx.BeginFunc(e.ctx, e.conn, func(tx pgx.Tx) error { return DeferBuild(e.ctx, tx, slot, tb, keys, indexes) }); err != nil {
			t.Fatal(err)
		}
	}
	deferIn("s1", b, nil, "this never runs: replaced")
	deferIn("s1", b, []schema.Index{
		{Name: "b_v", SQL: `CREATE INDEX IF NOT EXISTS b_v ON public.b (v)`},
		// An index the target cannot build is left out and recorded.
		{Name: "b_f", SQL: `CREATE INDEX IF NOT EXISTS b_f ON public.b (public.only_on_source(v))`},
	}, `ALTER TABLE public.b ADD PRIMARY KEY (id)`)
	deferIn("s1", gone, nil, `ALTER TABLE public.gone ADD PRIMARY KEY (id)`)
	deferIn("s2", c, nil, `ALTER TABLE public.c ADD PRIMARY KEY (id)`)
	indexes := func(table string) int {
		return e.count(`SELECT count(*) FROM pg_index WHERE indrelid = 'public.` + table + `'::regclass`)
	}
	if err := BuildAllAfterCopy(e.ctx, e.conn, "s1", false, log); err != nil {
		t.Fatal(err)
	}
	if n := indexes("b"); n != 2 {
		t.Errorf("b has %d indexes after its build, want 2 (key and b_v; b_f cannot be built)", n)
	}
	if n := e.count(`SELECT count(*) FROM repstream.deferred_ddl WHERE slot = 's1'`); n != 0 {
		t.Errorf("%d records of slot s1 left after its build", n)
	}
	unbuilt, err := UnbuiltIndexes(e.ctx, e.conn, "s1")
	if err != nil || len(unbuilt) != 1 || unbuilt[0].Index != "b_f" || unbuilt[0].Table != b || !strings.Contains(unbuilt[0].Error, "only_on_source") {
		t.Errorf("indexes not built: %+v, %v; want b_f of public.b", unbuilt, err)
	}
	if err := BuildAfterCopy(e.ctx, e.conn, "s1", b, false, log); err != nil {
		t.Errorf("a second build of b: %v", err)
	}
	if n := indexes("c"); n != 0 {
		t.Errorf("another slot's table was built")
	}
	if err := DropState(e.ctx, e.conn, "s2", log); err != nil {
		t.Fatal(err)
	}
	if n := indexes("c"); n != 1 {
		t.Errorf("dropping slot s2's state left c without its key: %d indexes", n)
	}
	if n := e.count(`SELECT count(*) FROM repstream.deferred_ddl`); n != 0 {
		t.Errorf("%d records left after DropState", n)
	}
	// Made by hand once the target has what it needs, it is no longer listed.
	for _, sql := range []string{`CREATE FUNCTION public.only_on_source(text) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT upper($1)'`, unbuilt[0].SQL} {
		if _, err := e.check.Exec(e.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if unbuilt, err := UnbuiltIndexes(e.ctx, e.conn, "s1"); err != nil || len(unbuilt) != 0 {
		t.Errorf("indexes not built after it was made by hand: %+v, %v", unbuilt, err)
	}
}
