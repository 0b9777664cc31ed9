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

// TestExtensionTypeKey: a key of an extension's type (hstore, 002_types.pl)
// and a REPLICA IDENTITY FULL table holding one. The type's "=" is in the
// extension's schema (public), which repstream's search_path (pg_catalog,
// pg_temp) does not search: every UPDATE and DELETE of such a row stopped
// the run ("operator does not exist: public.hstore = unknown"). The
// writer names the type's own operator with its schema.
func TestExtensionTypeKey(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if _, err := e.Src.Exec(t.Context(), `CREATE EXTENSION hstore`); err != nil {
		t.Skipf("no hstore on this server: %v", err)
	}
	e.tgtExec(`CREATE EXTENSION hstore`)
	e.both(`CREATE TABLE hk (k hstore PRIMARY KEY, v int);
		CREATE TABLE hf (a int, h hstore); ALTER TABLE hf REPLICA IDENTITY FULL`)
	e.srcExec(`INSERT INTO hk VALUES ('"a"=>"1"', 1), ('"b"=>"2"', 2); INSERT INTO hf VALUES (1, '"x"=>"1"'), (2, '"y"=>"2"')`)
	cfg := e.config("public.hk", "public.hf")
	e.catchUp(cfg)
	e.srcExec(`UPDATE hk SET v = 10 WHERE v = 1; DELETE FROM hk WHERE v = 2; UPDATE hk SET k = '"c"=>"3"' WHERE v = 10;
		UPDATE hf SET a = 10 WHERE a = 1; DELETE FROM hf WHERE a = 2`)
	e.catchUp(cfg)
	e.assertSame("hk", "v")
	e.assertSame("hf", "a")
}
