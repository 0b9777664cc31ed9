package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/healthcheck"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/tablesync"
	"github.com/repstream/repstream/internal/testbin"
)

// defs returns, one line each in order, how a table's keys, unique and
// exclusion constraints and indexes are defined on side: what
// --create-tables must recreate exactly. The replica identity index is
// left out (the target's has a name of its own).
func defs(t *testing.T, e *env, side, table string) string {
	t.Helper()
	conn := e.Src
	if side == "target" {
		conn = e.Tgt
	}
	var s string
	err := conn.QueryRow(t.Context(), `
SELECT coalesce(string_agg(d, E'\n' ORDER BY d), '') FROM (
  SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) AS d FROM pg_constraint
   WHERE conrelid = $1::regclass AND contype IN ('p', 'u', 'x')
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1::regclass AND NOT indisreplident
) x`, table).Scan(&s)
	if err != nil {
		t.Fatalf("%s: definitions of %s: %v", side, table, err)
	}
	return s
}

// TestCreateTablesKeysExactly: --create-tables recreates keys and
// constraints as the source has them. PRIMARY KEY (a) INCLUDE (b) used to
// become PRIMARY KEY (a, b) — another key, and a NULL in b stopped the
// copy; a replica identity index with INCLUDE columns became a unique
// index on all of them, refused as replica identity for its nullable
// column. A DEFERRABLE INITIALLY DEFERRED primary key or unique constraint
// (recreated as a plain one, or as a plain unique index) stopped apply on a
// source transaction that swaps keys; an exclusion constraint became a
// plain index. NULLS NOT DISTINCT and a partial unique index are kept. The
// same holds for a table the event trigger reports created later.
func TestCreateTablesKeysExactly(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE SCHEMA app;
		CREATE TABLE app.inc (a int, b int, c text, PRIMARY KEY (a) INCLUDE (b));
		CREATE TABLE app.rinc (id int PRIMARY KEY, code text NOT NULL, note text);
		CREATE UNIQUE INDEX rinc_code ON app.rinc (code) INCLUDE (note);
		ALTER TABLE app.rinc REPLICA IDENTITY USING INDEX rinc_code;
		CREATE TABLE app.cons (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, u int, v int, r int4range, p int,
			CONSTRAINT cons_u UNIQUE (u) DEFERRABLE INITIALLY DEFERRED,
			CONSTRAINT cons_r EXCLUDE USING gist (r WITH &&));
		CREATE UNIQUE INDEX cons_p ON app.cons (p) WHERE p > 0;
		ALTER TABLE app.cons REPLICA IDENTITY FULL; -- a deferrable key cannot be the identity
		INSERT INTO app.inc SELECT g, CASE WHEN g % 2 = 0 THEN g END, 'c' || g FROM generate_series(1, 20) g;
		INSERT INTO app.rinc SELECT g, 'code' || g, CASE WHEN g % 3 = 0 THEN 'n' END FROM generate_series(1, 20) g;
		INSERT INTO app.cons SELECT g, g, g, int4range(g * 10, g * 10 + 5), -g FROM generate_series(1, 20) g;`)
	if e.srcMajor() >= 15 && e.tgt.Version() >= 15 { // NULLS NOT DISTINCT: PostgreSQL 15+ on both sides
		e.srcExec(`ALTER TABLE app.cons ADD CONSTRAINT cons_v UNIQUE NULLS NOT DISTINCT (v)`)
	}
	cfg := e.config("app.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	// Keys swapped within a transaction: only a deferred check lets the
	// rows through in the order the source wrote them.
	e.srcExec(`UPDATE app.cons SET id = 3 - id, u = 3 - u WHERE id IN (1, 2)`)
	e.srcExec(`UPDATE app.inc SET b = NULL WHERE a < 5; UPDATE app.rinc SET code = 'moved' || id, note = NULL WHERE id < 5; DELETE FROM app.rinc WHERE id = 7`)
	if e.srcMajor() >= 15 {
		// Made on the target from the event trigger's message, while the
		// engine streams (the publication is FOR TABLES IN SCHEMA app).
		stop := e.startOnce(cfg)
		defer stop() //nolint:errcheck // reported below
		e.waitStreaming(cfg.Slot)
		e.srcExec(`CREATE TABLE app.later (a int, b int, PRIMARY KEY (a) INCLUDE (b)); INSERT INTO app.later VALUES (1, NULL), (2, 2)`)
		e.waitCaughtUp(cfg.Slot, time.Minute)
		if err := stop(); err != nil {
			t.Fatalf("engine: %v", err)
		}
	}
	e.catchUp(cfg)
	tables := []string{"app.inc", "app.rinc", "app.cons"}
	if e.srcMajor() >= 15 {
		tables = append(tables, "app.later")
	}
	for _, table := range tables {
		e.assertSame(table, "1")
		if s, d := defs(t, e, "source", table), defs(t, e, "target", table); s != d {
			t.Errorf("%s is defined otherwise on the target:\nsource:\n%s\ntarget:\n%s", table, s, d)
		}
	}
	var ident, idx string
	if err := e.Tgt.QueryRow(t.Context(), `SELECT c.relreplident::text, pg_get_indexdef(i.indexrelid) FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid AND i.indisreplident
		WHERE c.oid = 'app.rinc'::regclass`).Scan(&ident, &idx); err != nil || ident != "i" || !strings.HasSuffix(idx, "(code) INCLUDE (note)") {
		t.Errorf("target app.rinc: replica identity %q using %q (%v), want i using (code) INCLUDE (note)", ident, idx, err)
	}
	// `repstream check` names the identity key without its INCLUDE column.
	rep, err := healthcheck.Run(t.Context(), healthcheck.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, Tables: []string{"app.inc", "app.rinc"}})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !strings.Contains(text.String(), "replica identity key (a)") || !strings.Contains(text.String(), "replica identity key (code)") {
		t.Errorf("check reports other identity keys:\n%s", text.String())
	}
}

// TestCreateTablesIndexNotBuildable: a secondary index the target cannot
// build (an expression calling a function only the source has) no longer
// stops the initial copy: the keys and the other indexes are built, the
// run replicates, and the index is reported — a warning naming it and the
// error, `tables list`, `repstream check` (WARN) and
// repstream_indexes_not_built (0 from the start). Made by hand, it is
// reported no more. A key the target cannot build still stops the run,
// naming the table.
func TestCreateTablesIndexNotBuildable(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE FUNCTION public.src_only(text) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT lower($1)';
		CREATE TABLE x (id int PRIMARY KEY, v text, w int);
		CREATE INDEX x_f ON x (public.src_only(v));
		CREATE INDEX x_w ON x (w);
		CREATE UNIQUE INDEX x_vw ON x (v, w);
		INSERT INTO x SELECT g, 'V' || g, g FROM generate_series(1, 100) g;`)
	cfg := e.config("public.x")
	cfg.CreateTables = true
	reg, err := e.tryCatchUp(cfg)
	if err != nil {
		t.Fatalf("an index the target cannot build stopped the run: %v", err)
	}
	for idx, want := range map[string]int64{"x_pkey": 1, "x_w": 1, "x_vw": 1, "x_f": 0} {
		if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE oid = to_regclass('public."+idx+"')"); n != want {
			t.Errorf("target index %s: %d, want %d", idx, n, want)
		}
	}
	var metrics bytes.Buffer
	if err := stats.WriteMetrics(&metrics, reg, stats.CollectorOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics.String(), "\nrepstream_indexes_not_built 1\n") {
		t.Errorf("metrics lack repstream_indexes_not_built 1:\n%s", grepLines(metrics.String(), "indexes_not_built"))
	}
	e.srcExec(`UPDATE x SET v = 'changed' WHERE id % 3 = 0; DELETE FROM x WHERE id % 7 = 0; INSERT INTO x VALUES (101, 'new', 101)`)
	e.catchUp(cfg)
	e.assertSame("x", "id")

	rows, err := tablesync.ListTables(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0].IndexesNotBuilt) != 1 || rows[0].IndexesNotBuilt[0].Index != "x_f" ||
		!strings.Contains(rows[0].IndexesNotBuilt[0].Error, "src_only") || !strings.Contains(rows[0].IndexesNotBuilt[0].SQL, "CREATE INDEX") {
		t.Errorf("tables list: %+v, want x_f not built", rows)
	}
	out, err := exec.Command(testbin.Repstream(t), "tables", "list", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "index x_f: ") || !strings.Contains(string(out), "src_only") {
		t.Errorf("tables list: %v\n%s", err, out)
	}
	rep, err := healthcheck.Run(t.Context(), healthcheck.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, Tables: cfg.Tables})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !strings.Contains(text.String(), "index x_f of public.x") || !strings.Contains(text.String(), "src_only") {
		t.Errorf("check does not warn about x_f:\n%s", text.String())
	}

	// The way out: what the index needs, then the index.
	e.tgtExec(`CREATE FUNCTION public.src_only(text) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT lower($1)'`)
	e.tgtExec(rows[0].IndexesNotBuilt[0].SQL)
	reg = e.catchUp(cfg)
	metrics.Reset()
	_ = stats.WriteMetrics(&metrics, reg, stats.CollectorOptions{})
	if !strings.Contains(metrics.String(), "\nrepstream_indexes_not_built 0\n") {
		t.Errorf("metrics after the index was made: %s", grepLines(metrics.String(), "indexes_not_built"))
	}
	if rows, err := tablesync.ListTables(t.Context(), cfg); err != nil || len(rows[0].IndexesNotBuilt) != 0 {
		t.Errorf("tables list after the index was made: %+v %v", rows, err)
	}

	t.Run("a key that cannot be built stops the run", func(t *testing.T) {
		e := newEnv(t)
		e.srcExec(`CREATE TABLE k (id int PRIMARY KEY, v text); INSERT INTO k SELECT g, 'v' FROM generate_series(1, 10) g`)
		// The target refuses the key (an event trigger stands for whatever
		// the target lacks).
		e.tgtExec(`CREATE FUNCTION public.no_keys() RETURNS event_trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() WHERE object_identity = 'public.k') THEN
					RAISE EXCEPTION 'no keys on this target';
				END IF;
			END $$;
			CREATE EVENT TRIGGER no_keys ON ddl_command_end WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION public.no_keys();
			ALTER EVENT TRIGGER no_keys ENABLE ALWAYS;`)
		cfg := e.config("public.k")
		cfg.CreateTables = true
		e.mustFail(cfg, "build the key of public.k", "no keys on this target", "ADD PRIMARY KEY")
		e.tgtExec(`DROP EVENT TRIGGER no_keys`)
	})
}

func grepLines(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
