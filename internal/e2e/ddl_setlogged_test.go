package e2e

import (
	"testing"
	"time"
)

// TestDDLSetLoggedTakesTableUp: ALTER TABLE ... SET LOGGED of an unlogged
// table in a replicated schema (FOR TABLES IN SCHEMA) makes it published
// with rows the stream never carried (an unlogged table's writes are not
// decoded); the run stopped at it ("not found on the target"). Now the
// table is created on the target and copied at a snapshot as `tables add`
// does, then streamed. The same for a table moved into the published
// schema by SET SCHEMA; a table of the target's own moved with it,
// holding rows, is emptied for its copy only with --truncate (here given).
func TestDDLSetLoggedTakesTableUp(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
	}
	e.srcExec(`CREATE TABLE base (id int PRIMARY KEY, v text);
		CREATE UNLOGGED TABLE ul (id int PRIMARY KEY, v text, n int DEFAULT 1);
		INSERT INTO ul SELECT g, 'u' || g, g FROM generate_series(1, 500) g;
		CREATE SCHEMA outside;
		CREATE TABLE outside.moved (id int PRIMARY KEY, v text);
		INSERT INTO outside.moved SELECT g, 'm' || g FROM generate_series(1, 300) g;
		CREATE TABLE outside.moved2 (id int PRIMARY KEY, v text);
		INSERT INTO outside.moved2 SELECT g, 'm' || g FROM generate_series(1, 200) g`)
	// The target has a table of its own under the old name: not the
	// source's (never replicated).
	e.tgtExec(`CREATE SCHEMA outside; CREATE TABLE outside.moved2 (id int PRIMARY KEY, v text); INSERT INTO outside.moved2 VALUES (1, 'the target''s own'), (1000, 'x')`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	cfg.Truncate = true
	e.catchUp(cfg)
	stop := e.startOnce(cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`INSERT INTO base VALUES (1, 'before')`)
	e.srcExec(`BEGIN; UPDATE ul SET v = 'before set logged' WHERE id = 1; ALTER TABLE ul SET LOGGED; UPDATE ul SET v = 'same transaction' WHERE id = 2; COMMIT`)
	e.srcExec(`INSERT INTO ul VALUES (501, 'after'); UPDATE ul SET n = n * 10 WHERE id % 7 = 0; DELETE FROM ul WHERE id % 11 = 0`)
	e.srcExec(`ALTER TABLE outside.moved SET SCHEMA public`)
	e.srcExec(`INSERT INTO moved VALUES (301, 'after'); UPDATE moved SET v = 'upd' WHERE id <= 10`)
	e.srcExec(`ALTER TABLE outside.moved2 SET SCHEMA public; UPDATE moved2 SET v = 'upd' WHERE id <= 10`)
	e.waitTableReady("ul", time.Minute)
	e.waitTableReady("moved", time.Minute)
	e.waitTableReady("moved2", time.Minute)
	e.srcExec(`INSERT INTO ul VALUES (502, 'after the copy'); INSERT INTO moved VALUES (302, 'after the copy'); INSERT INTO base VALUES (2, 'last')`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	e.assertSameTable("public.ul", "id")
	e.assertSameTable("public.moved", "id")
	e.assertSameTable("public.moved2", "id")
	e.assertSameTable("public.base", "id")
}

// TestDDLSetLoggedTargetHasTable: SET LOGGED of an unlogged table whose
// name the target already has (made by hand, or kept from before it was set
// UNLOGGED): the target's rows are not the source's, so it is copied anew,
// not left with different rows that then receive the stream — but they
// are not the replication's either: without --truncate the run stops,
// naming it, its rows kept, as for a table added to the publication.
func TestDDLSetLoggedTargetHasTable(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
	}
	e.srcExec(`CREATE TABLE base2 (id int PRIMARY KEY);
		CREATE UNLOGGED TABLE ul2 (id int PRIMARY KEY, v text);
		INSERT INTO ul2 SELECT g, 'u' || g FROM generate_series(1, 300) g`)
	e.tgtExec(`CREATE TABLE ul2 (id int PRIMARY KEY, v text); INSERT INTO ul2 VALUES (1, 'the target''s own'), (9999, 'stale')`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`ALTER TABLE ul2 SET LOGGED`)
	e.srcExec(`UPDATE ul2 SET v = 'after' WHERE id <= 5`)
	e.mustFail(cfg, "target table is not empty", "public.ul2", "--truncate")
	if n := e.count(e.Tgt, "SELECT count(*) FROM ul2"); n != 2 {
		t.Errorf("target ul2: %d rows, want its 2 kept", n)
	}
	cfg.Truncate = true
	e.catchUp(cfg)
	e.assertSameTable("public.ul2", "id")
}

// TestDDLSetUnloggedAfterSourceCrash: repstream.ddl_state, the trigger's
// last description of each table, is unlogged: a crash of the source
// empties it (here emptied by hand). The trigger told a table set UNLOGGED
// only by its description there, so after a crash the SET UNLOGGED of a
// table a schema publishes went unsaid: its rows left the WAL, the target
// kept what it had, and the run said caught up. Now it stops, naming it.
func TestDDLSetUnloggedAfterSourceCrash(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
	}
	e.srcExec(`CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY); INSERT INTO app.t VALUES (1)`)
	cfg := e.config("app.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`DELETE FROM repstream.ddl_state`) // what a crash of the source leaves
	e.srcExec(`ALTER TABLE app.t SET UNLOGGED`)
	e.srcExec(`INSERT INTO app.t SELECT g FROM generate_series(2, 100) g`)
	cfg.Tables = nil // the slot's publication, as it is (--tables app.* matches no table now)
	e.mustFail(cfg, "app.t", "the source set the table UNLOGGED")
}
