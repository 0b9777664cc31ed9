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
