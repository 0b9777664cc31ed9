package e2e

import "testing"

// TestDDLDropTableTargetDependents: DROP TABLE ... CASCADE on the source
// of a table that a table only the target has references by a foreign key
// (100_bugs.pl-like). The target's DROP is never CASCADE (it would drop
// the target's own objects): the run stops, naming the table, the LSN, the
// dependent constraint and the way out; once the dependency is gone on
// the target, the next run drops the table and goes on.
func TestDDLDropTableTargetDependents(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE keep (id int PRIMARY KEY); INSERT INTO t VALUES (1)`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.tgtExec(`CREATE TABLE mine (id int REFERENCES t); INSERT INTO mine VALUES (1)`)
	e.srcExec(`DROP TABLE t CASCADE`)
	e.srcExec(`INSERT INTO keep VALUES (7)`)
	e.mustFail(cfg, `"DROP TABLE" of public.t`, "never drops with CASCADE", "mine_id_fkey")
	e.tgtExec(`ALTER TABLE mine DROP CONSTRAINT mine_id_fkey`)
	e.catchUp(cfg)
	e.assertSame("keep", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 't' AND relnamespace = 'public'::regnamespace"); n != 0 {
		t.Errorf("the target still has table t")
	}
}
