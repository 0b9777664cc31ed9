package e2e

import (
	"testing"
	"time"
)

// TestDDLSchemaRenameAndSetSchema: ALTER SCHEMA ... RENAME of a replicated
// schema (published FOR TABLES IN SCHEMA, which follows the schema by
// identity) and ALTER TABLE ... SET SCHEMA out of it. pgoutput does not
// describe a table again after its schema's rename, so the target's
// old-named tables silently received the renamed tables' changes; and a
// table moved out of the published schema was left, stale, on the target
// (its message named only publications of its new schema). Now the
// schema's tables move on the target too, the rows after the rename reach
// them under the new name, and a table moved out is moved out on the target.
func TestDDLSchemaRenameAndSetSchema(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
	}
	e.srcExec(`CREATE SCHEMA app;
		CREATE TABLE app.a (id int PRIMARY KEY, v text);
		CREATE TABLE app.b (id int PRIMARY KEY, v text);
		CREATE TABLE app.leaving (id int PRIMARY KEY, v text);
		INSERT INTO app.a SELECT g, 'a' || g FROM generate_series(1, 100) g;
		INSERT INTO app.b SELECT g, 'b' || g FROM generate_series(1, 100) g;
		INSERT INTO app.leaving SELECT g, 'l' || g FROM generate_series(1, 100) g;
		CREATE SCHEMA elsewhere`)
	cfg := e.config("app.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	stop := e.startOnce(cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`INSERT INTO app.a VALUES (101, 'before')`)
	e.srcExec(`ALTER TABLE app.leaving SET SCHEMA elsewhere`)
	e.srcExec(`INSERT INTO elsewhere.leaving VALUES (101, 'not replicated')`)
	e.srcExec(`BEGIN; INSERT INTO app.b VALUES (101, 'same transaction, before'); ALTER SCHEMA app RENAME TO app2; INSERT INTO app2.b VALUES (102, 'same transaction, after'); COMMIT`)
	e.srcExec(`INSERT INTO app2.a VALUES (102, 'after the rename'); UPDATE app2.a SET v = 'updated' WHERE id <= 10; DELETE FROM app2.b WHERE id <= 5`)
	e.srcExec(`CREATE SCHEMA app; CREATE TABLE app.a (id int PRIMARY KEY, v text); INSERT INTO app.a VALUES (1, 'a new schema app, not published')`)
	e.srcExec(`INSERT INTO app2.a VALUES (103, 'last')`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	e.assertSameTable("app2.a", "id")
	e.assertSameTable("app2.b", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'app' AND c.relname IN ('a', 'b')"); n != 0 {
		t.Errorf("%d tables left under the old schema name app on the target", n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'app' AND c.relname = 'leaving'"); n != 0 {
		t.Errorf("app.leaving, moved out of the published schema on the source, is still in it on the target")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM elsewhere.leaving"); n != 100 {
		t.Errorf("elsewhere.leaving has %d rows on the target, want the 100 it had when it left", n)
	}
}

// TestDDLStreamedSchemaRename: ALTER SCHEMA ... RENAME inside large
// transactions that are streamed while in progress. pgoutput describes the
// schema's tables neither after the rename nor after a ROLLBACK TO the
// savepoint before it: a rename rolled back with its savepoint must be
// forgotten with it (the rows after the rollback go to app.a), and a
// committed one must outlive its transaction (the rows after it go to
// app2.a). Queue and eager apply.
func TestDDLStreamedSchemaRename(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, eager := range []bool{false, true} {
		t.Run(map[bool]string{false: "queue", true: "eager"}[eager], func(t *testing.T) {
			e := newEnv(t)
			if e.srcMajor() < 15 {
				t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
			}
			e.srcExec(`CREATE SCHEMA app;
				CREATE TABLE app.a (id int PRIMARY KEY, v text);
				INSERT INTO app.a SELECT g, 'a' || g FROM generate_series(1, 100) g`)
			cfg := e.config("app.*")
			cfg.CreateTables = true
			cfg.Eager = eager
			cfg.DecodingWorkMem = "64kB" // the transactions below are streamed
			e.catchUp(cfg)
			r := e.startStatements(cfg)
			defer func() {
				if err := r.stop(); err != nil {
					t.Errorf("engine: %v", err)
				}
			}()
			StreamedSchemaRename(r.exec, r.captured, r.streamed)
			e.srcExec(`INSERT INTO app2.a VALUES (100001, 'after both')`)
			e.waitCaughtUp(cfg.Slot, time.Minute)
			if err := r.stop(); err != nil {
				t.Fatalf("engine: %v", err)
			}
			e.assertSameTable("app2.a", "id")
		})
	}
}

// StreamedSchemaRename runs TestDDLStreamedSchemaRename's workload on a
// table app.a (id int PRIMARY KEY, v text) holding ids 1..100, statement
// by statement: two large transactions, each streamed before and after an
// ALTER SCHEMA app RENAME TO app2, the first rolling it back to a
// savepoint, the second committing it.
func StreamedSchemaRename(exec func(string), captured func() int64, streamed func(mark, n int64)) {
	exec(`BEGIN`)
	exec(`INSERT INTO app.a SELECT g, repeat('b', 100) FROM generate_series(1001, 2000) g`)
	exec(`SAVEPOINT s`)
	mark := captured()
	exec(`ALTER SCHEMA app RENAME TO app2`)
	exec(`INSERT INTO app2.a SELECT g, repeat('r', 100) FROM generate_series(2001, 3000) g`)
	streamed(mark, 1000)
	exec(`ROLLBACK TO s`)
	exec(`INSERT INTO app.a SELECT g, repeat('a', 100) FROM generate_series(3001, 4000) g`)
	exec(`UPDATE app.a SET v = 'after the rollback' WHERE id <= 20`)
	exec(`COMMIT`)
	exec(`INSERT INTO app.a VALUES (4001, 'after the first transaction')`)
	exec(`BEGIN`)
	exec(`INSERT INTO app.a SELECT g, repeat('c', 100) FROM generate_series(5001, 6000) g`)
	mark = captured()
	exec(`ALTER SCHEMA app RENAME TO app2`)
	exec(`INSERT INTO app2.a SELECT g, repeat('d', 100) FROM generate_series(6001, 7000) g`)
	streamed(mark, 1000)
	exec(`UPDATE app2.a SET v = 'renamed, same transaction' WHERE id BETWEEN 21 AND 40`)
	exec(`COMMIT`)
}

// TestDDLSetSchemaThenRename: a table moved into the published schema (SET
// SCHEMA), then renamed there, while an engine runs and while none does.
// Stopped, the next start found it published under its later name and
// copied it; the stream's SET SCHEMA (older than that copy) then took it up
// again under its first name: a record pending for ever under a name the
// source no longer has, so that no run was caught up again ("tables not
// copied yet"), and an empty table of that name on the target.
func TestDDLSetSchemaThenRename(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, running := range []bool{true, false} {
		t.Run(map[bool]string{true: "running", false: "stopped"}[running], func(t *testing.T) {
			e := newEnv(t)
			if e.srcMajor() < 15 {
				t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
			}
			e.srcExec(`CREATE SCHEMA sch1; CREATE TABLE sch1.t1 (a int PRIMARY KEY);
				CREATE TABLE public.tab4 (a int PRIMARY KEY, b text); INSERT INTO public.tab4 SELECT g, 'a' FROM generate_series(1, 50) g`)
			cfg := e.config("sch1.*")
			cfg.CreateTables = true
			e.catchUp(cfg)
			stop := func() error { return nil }
			if running {
				stop = e.startOnce(cfg)
				e.waitStreaming(cfg.Slot)
			}
			e.srcExec(`ALTER TABLE public.tab4 SET SCHEMA sch1`)
			e.srcExec(`ALTER TABLE sch1.tab4 RENAME TO tab4r`)
			e.srcExec(`UPDATE sch1.tab4r SET b = 'c' WHERE a <= 10`)
			if running {
				e.waitCaughtUp(cfg.Slot, time.Minute)
			}
			if err := stop(); err != nil {
				t.Fatalf("engine: %v", err)
			}
			e.catchUp(cfg)
			e.catchUp(cfg) // and again: nothing left pending
			e.assertSameTable("sch1.tab4r", "a")
			if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE table_name = 'tab4'"); n != 0 {
				t.Errorf("a record of sch1.tab4, a name the source no longer has, is left")
			}
			if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'tab4'"); n != 0 {
				t.Errorf("a table tab4 is left on the target")
			}
		})
	}
}
