package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
)

// TestDDLStreamedSubxactAbort replays PostgreSQL's
// src/test/subscription/t/019_stream_subxact_ddl_abort.pl: a large
// transaction, streamed while in progress, adds columns inside savepoints
// that are then rolled back. pgoutput sends the event trigger's messages
// of a streamed transaction with the top-level xid, so a subtransaction's
// STREAM ABORT did not cover them: the target got the rolled-back columns
// d and e. A second transaction, run statement by statement so that each
// savepoint's schema changes reach repstream before it is rolled back,
// drops a column holding data, drops a table and creates one, then renames
// a table and a column, in savepoints it rolls back: none of it may reach
// the target (the dropped column's and table's data stay). With and without
// eager apply.
func TestDDLStreamedSubxactAbort(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, eager := range []bool{false, true} {
		t.Run(map[bool]string{false: "queue", true: "eager"}[eager], func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE test_tab (a int PRIMARY KEY, b text);
				INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar');
				CREATE TABLE keep_me (id int PRIMARY KEY, v text);
				INSERT INTO keep_me SELECT g, 'k' || g FROM generate_series(1, 100) g`)
			cfg := e.config("public.*")
			cfg.CreateTables = true
			cfg.Eager = eager
			cfg.DecodingWorkMem = "64kB"
			e.catchUp(cfg)
			r := e.startStatements(cfg)
			defer func() {
				if err := r.stop(); err != nil {
					t.Errorf("engine: %v", err)
				}
			}()

			e.srcExec(`BEGIN;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series(3, 500) s(i);
				ALTER TABLE test_tab ADD COLUMN c INT;
				SAVEPOINT s1;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i FROM generate_series(501, 1000) s(i);
				ALTER TABLE test_tab ADD COLUMN d INT;
				SAVEPOINT s2;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i FROM generate_series(1001, 1500) s(i);
				ALTER TABLE test_tab ADD COLUMN e INT;
				SAVEPOINT s3;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i, -3*i FROM generate_series(1501, 2000) s(i);
				ALTER TABLE test_tab DROP COLUMN c;
				ROLLBACK TO s1;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), i FROM generate_series(501, 1000) s(i);
				COMMIT`)

			exec, streamed, captured := r.exec, r.streamed, r.captured
			exec(`BEGIN`)
			exec(`INSERT INTO test_tab SELECT i, repeat('x', 100), i FROM generate_series(2001, 3500) s(i)`)
			exec(`SAVEPOINT x`)
			mark := captured()
			exec(`ALTER TABLE test_tab DROP COLUMN c`)
			exec(`INSERT INTO test_tab SELECT i, repeat('y', 100) FROM generate_series(3501, 6000) s(i)`)
			exec(`DROP TABLE keep_me`)
			exec(`CREATE TABLE ghost (id int PRIMARY KEY, v text)`)
			exec(`INSERT INTO ghost SELECT i, repeat('g', 100) FROM generate_series(1, 3000) s(i)`)
			streamed(mark, 4000)
			exec(`ROLLBACK TO x`)
			exec(`SAVEPOINT y`)
			mark = captured()
			exec(`ALTER TABLE keep_me RENAME TO kept`)
			exec(`ALTER TABLE test_tab RENAME COLUMN b TO bb`)
			exec(`INSERT INTO test_tab SELECT i, repeat('z', 100), i FROM generate_series(3501, 6000) s(i)`)
			streamed(mark, 1500)
			exec(`ROLLBACK TO y`)
			exec(`UPDATE test_tab SET c = c + 1 WHERE a % 2 = 0`)
			exec(`INSERT INTO keep_me VALUES (101, 'after')`)
			exec(`COMMIT`)

			e.waitCaughtUp(cfg.Slot, time.Minute)
			if err := r.stop(); err != nil {
				t.Fatalf("engine: %v", err)
			}
			e.assertSameTable("test_tab", "a")
			e.assertSameTable("keep_me", "id")
			if n := e.count(e.Tgt, "SELECT count(*) FROM test_tab WHERE c IS NOT NULL"); n != 2000 {
				t.Errorf("%d target rows with c set, want 2000", n)
			}
			for _, table := range []string{"ghost", "kept"} {
				if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = '"+table+"'"); n != 0 {
					t.Errorf("table %s, made in a rolled-back savepoint, is on the target", table)
				}
			}
			if n := e.count(e.Src, `SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = '`+cfg.Slot+`'`); n < 2 {
				t.Fatalf("the walsender streamed %d transactions; the test meant to exercise streaming", n)
			}
		})
	}
}

// TestDDLStreamedConcurrentAbort: a large transaction whose savepoints
// were already rolled back when the walsender decodes it (here: no engine
// ran while the source wrote it; under load, a walsender lagging behind).
// Streaming it, the walsender meets a row of a subtransaction that has
// aborted meanwhile, stops the stream there and discards what it had not
// sent of the whole transaction, the schema change adding d with it; the
// subtransactions after that (savepoint s2's ADD COLUMN e, made in the
// event trigger's exception block) are sent in the next stream all the
// same, before their STREAM ABORT. Eager apply met ADD COLUMN e without d
// and stopped: "the source had the column before this change, the target
// lacks it". With and without eager apply.
func TestDDLStreamedConcurrentAbort(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, eager := range []bool{false, true} {
		t.Run(map[bool]string{false: "queue", true: "eager"}[eager], func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE test_tab (a int PRIMARY KEY, b text);
				INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar')`)
			cfg := e.concurrentAbortConfig(eager)
			e.catchUp(cfg)

			// s1 writes one row before its ADD COLUMN d: the walsender
			// streams it with d's message behind it, and stops at it.
			// s2's and s3's rows each fill more than one stream.
			e.srcExec(`BEGIN;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series(3, 1000) s(i);
				ALTER TABLE test_tab ADD COLUMN c INT;
				SAVEPOINT s1;
				INSERT INTO test_tab VALUES (1001, 'one', 1);
				ALTER TABLE test_tab ADD COLUMN d INT;
				SAVEPOINT s2;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i FROM generate_series(2001, 3500) s(i);
				ALTER TABLE test_tab ADD COLUMN e INT;
				SAVEPOINT s3;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i, -3*i FROM generate_series(3501, 5000) s(i);
				ALTER TABLE test_tab DROP COLUMN c;
				ROLLBACK TO s1;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea), i FROM generate_series(1001, 1500) s(i);
				COMMIT`)

			reg := e.catchUp(cfg)
			e.assertSameTable("test_tab", "a")
			if n := e.count(e.Tgt, "SELECT count(*) FROM test_tab WHERE c IS NOT NULL"); n != 500 {
				t.Errorf("%d target rows with c set, want 500", n)
			}
			e.assertStreamedOnce(cfg, reg, eager)
		})
	}
}

// TestStreamedConcurrentAbortRows is TestDDLStreamedConcurrentAbort with
// rows: savepoint s1 inserts into t2 (the walsender looks the table up in
// the catalog, finds s1 aborted and discards what it had not sent, row
// 1001 of test_tab with it) and row 1001; its savepoint s2 updates row
// 1001 among many rows, which the walsender still sends, and savepoint s3
// inside it more rows (eager apply sends the update before its savepoint).
// Eager apply found no row 1001 to update and stopped (update_missing)
// before the STREAM ABORT came. With and without eager apply.
func TestStreamedConcurrentAbortRows(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, eager := range []bool{false, true} {
		t.Run(map[bool]string{false: "queue", true: "eager"}[eager], func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE test_tab (a int PRIMARY KEY, b text);
				CREATE TABLE t2 (id int PRIMARY KEY);
				INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar')`)
			cfg := e.concurrentAbortConfig(eager)
			e.catchUp(cfg)

			e.srcExec(`BEGIN;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series(3, 1000) s(i);
				SAVEPOINT s1;
				INSERT INTO t2 VALUES (1);
				INSERT INTO test_tab VALUES (1001, 'k');
				SAVEPOINT s2;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series(2001, 2500) s(i);
				UPDATE test_tab SET b = 'updated' WHERE a = 1001;
				SAVEPOINT s3;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series(2501, 3500) s(i);
				ROLLBACK TO s1;
				INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series(1001, 1500) s(i);
				COMMIT`)

			reg := e.catchUp(cfg)
			e.assertSameTable("test_tab", "a")
			e.assertSameTable("t2", "id")
			e.assertStreamedOnce(cfg, reg, eager)
		})
	}
}

// statements is an engine run with a connection to the source for a
// transaction run statement by statement: a single multi-statement
// exec's savepoint may be rolled back before the walsender streams what
// it did; streamed waits until it has.
type statements struct {
	stop func() error // stops the engine (once), its error
	// exec runs one statement on the connection.
	exec func(sql string)
	// captured is the count of changes capture has decoded.
	captured func() int64
	// streamed waits until capture has at least n more changes than at
	// mark: the statements before those rows (a savepoint's schema
	// changes) have reached repstream.
	streamed func(mark, n int64)
}

// startStatements starts an engine on cfg once the source's slot is free,
// waits until it streams, and opens the connection of statements.
func (e *env) startStatements(cfg config.Config) *statements {
	t := e.t
	t.Helper()
	e.waitSlotReleased(cfg.Slot)
	reg := stats.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(t), reg).Run(ctx) }()
	var once sync.Once
	var runErr error
	r := &statements{stop: func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}}
	e.waitStreaming(cfg.Slot)
	conn, err := pgx.Connect(ctx, e.src.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	r.exec = func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", firstLine(sql), err)
		}
	}
	r.captured = func() int64 {
		c, _ := reg.Snapshot().Component("capture")
		return c.Items
	}
	r.streamed = func(mark, n int64) {
		t.Helper()
		pgtest.WaitFor(t, "the savepoint's changes to be streamed", 30*time.Second, func() (bool, error) {
			return r.captured() >= mark+n, nil
		})
	}
	return r
}

// concurrentAbortConfig is the configuration of the concurrent-abort tests:
// every table, made on the target, streamed in progress past 64 kB, eager
// or through the queue.
func (e *env) concurrentAbortConfig(eager bool) config.Config {
	cfg := e.config("public.*")
	cfg.CreateTables = true
	cfg.Eager = eager
	cfg.DecodingWorkMem = "64kB"
	return cfg
}

// assertStreamedOnce checks that the walsender streamed the transaction in
// progress and, with eager apply, that eager apply committed it.
func (e *env) assertStreamedOnce(cfg config.Config, reg *stats.Registry, eager bool) {
	t := e.t
	t.Helper()
	if n := e.count(e.Src, `SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = '`+cfg.Slot+`'`); n < 1 {
		t.Fatalf("the walsender streamed %d transactions; the test meant to exercise streaming", n)
	}
	if eg, _ := reg.Snapshot().Component("eager"); eager && eg.Counters["eager_txns"] != 1 {
		t.Fatalf("eager apply committed %d transactions, want 1", eg.Counters["eager_txns"])
	}
}
