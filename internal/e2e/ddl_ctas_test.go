package e2e

import (
	"testing"
	"time"
)

// TestDDLCreateTableAs: CREATE TABLE ... AS and SELECT INTO in a published
// schema (FOR TABLES IN SCHEMA public) write the new table's rows before
// the event trigger fires, so the rows come first in the WAL, before the
// schema-change message that creates the table on the target: the run
// stopped with "table not found on target". The table is now created from
// the rows' Relation message and reconciled with the message that follows;
// small transactions, large ones streamed while in progress (eager apply
// and the queue), one in a savepoint rolled back, and rows written to the
// new tables afterwards.
func TestDDLCreateTableAs(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, eager := range []bool{false, true} {
		t.Run(map[bool]string{false: "queue", true: "eager"}[eager], func(t *testing.T) {
			e := newEnv(t)
			if e.srcMajor() < 15 {
				t.Skip("new tables are published by FOR TABLES IN SCHEMA (PostgreSQL 15+)")
			}
			e.srcExec(`CREATE TABLE src (id int PRIMARY KEY, v text, n numeric(10,2));
				INSERT INTO src SELECT g, 'v' || g, g / 3.0 FROM generate_series(1, 5000) g`)
			cfg := e.config("public.*")
			cfg.CreateTables = true
			cfg.Eager = eager
			cfg.DecodingWorkMem = "64kB"
			e.catchUp(cfg)
			stop := e.startOnce(cfg)
			defer func() {
				if err := stop(); err != nil {
					t.Errorf("engine: %v", err)
				}
			}()
			e.waitStreaming(cfg.Slot)
			e.srcExec(`CREATE TABLE small_ctas AS SELECT id, v FROM src WHERE id <= 10`)
			e.srcExec(`SELECT id, n INTO small_into FROM src WHERE id <= 20`)
			e.srcExec(`CREATE TABLE big_ctas AS SELECT id, v, n, repeat('x', 100) AS pad FROM src`)
			e.srcExec(`BEGIN;
				INSERT INTO src SELECT g, 'w' || g, 0 FROM generate_series(5001, 7000) g;
				SELECT id, v, repeat('y', 100) AS pad INTO big_into FROM src;
				INSERT INTO big_into VALUES (-1, 'after, same transaction', 'p');
				COMMIT`)
			e.srcExec(`BEGIN;
				SAVEPOINT a;
				CREATE TABLE ghost_ctas AS SELECT id, repeat('g', 100) AS pad FROM src;
				ROLLBACK TO a;
				CREATE TABLE kept_ctas (k) AS SELECT id FROM src WHERE id % 2 = 0;
				COMMIT`)
			e.srcExec(`INSERT INTO small_ctas VALUES (100, 'later'); UPDATE small_into SET n = 1 WHERE id = 1`)
			e.srcExec(`INSERT INTO big_ctas (id, v) VALUES (100000, 'later')`)
			e.waitCaughtUp(cfg.Slot, time.Minute)
			if err := stop(); err != nil {
				t.Fatalf("engine: %v", err)
			}
			for _, table := range []string{"small_ctas", "small_into", "big_ctas", "big_into"} {
				e.assertSameTable(table, "id")
			}
			e.assertSameTable("kept_ctas", "k")
			if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'ghost_ctas'"); n != 0 {
				t.Errorf("ghost_ctas, made in a rolled-back savepoint, is on the target")
			}
		})
	}
}

// TestDDLCreateTableAsWithoutMessage: rows of a table the target lacks
// with no schema-change message after them (--ddl=false on the user's FOR
// TABLES IN SCHEMA publication: none comes) create
// nothing that stays: the transaction fails at commit naming the table,
// and the run stops.
func TestDDLCreateTableAsWithoutMessage(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("new tables are published by FOR TABLES IN SCHEMA (PostgreSQL 15+)")
	}
	e.srcExec(`CREATE TABLE src (id int PRIMARY KEY, v text); INSERT INTO src SELECT g, 'v' || g FROM generate_series(1, 10) g;
		CREATE PUBLICATION schema_pub FOR TABLES IN SCHEMA public`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	cfg.DDL = "false"
	cfg.Publication = "schema_pub"
	e.catchUp(cfg)
	e.waitSlotReleased(cfg.Slot)
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`CREATE TABLE nomsg AS SELECT * FROM src`)
	var err error
	select {
	case err = <-done:
	case <-time.After(failFast):
		t.Fatalf("the run did not stop within %s", failFast)
	}
	if err == nil {
		t.Fatal("the run ended without an error")
	}
	t.Logf("error (as the user sees it): %v", err)
	wantInError(t, err, "public.nomsg", "which the target lacks", "no CREATE TABLE AS or SELECT INTO of it followed", "end 0/")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'nomsg'"); n != 0 {
		t.Errorf("nomsg was left on the target")
	}
}
