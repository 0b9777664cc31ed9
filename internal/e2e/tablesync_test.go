package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/cli"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/syncbuf"
	"github.com/repstream/repstream/internal/tablesync"
)

// tableSync is a table's row of repstream.tables on the target.
type tableSync struct {
	state, syncLSN string
	copiedAt       time.Time
	rows           int64
}

func (e *env) tableSync(table string) (tableSync, bool) {
	e.t.Helper()
	var s tableSync
	var exists bool
	if err := e.Tgt.QueryRow(context.Background(), "SELECT to_regclass('repstream.tables') IS NOT NULL").Scan(&exists); err != nil {
		e.t.Fatal(err)
	}
	if !exists {
		return s, false
	}
	err := e.Tgt.QueryRow(context.Background(), `SELECT state, coalesce(sync_lsn::text, ''), coalesce(copied_at, 'epoch'), rows
		FROM repstream.tables WHERE schema_name = 'public' AND table_name = $1`, table).Scan(&s.state, &s.syncLSN, &s.copiedAt, &s.rows)
	if err == pgx.ErrNoRows {
		return s, false
	}
	if err != nil {
		e.t.Fatalf("read repstream.tables for %s: %v", table, err)
	}
	return s, true
}

// waitTableReady waits until the target records table as ready.
func (e *env) waitTableReady(table string, timeout time.Duration) tableSync {
	e.t.Helper()
	var s tableSync
	pgtest.WaitFor(e.t, table+" ready in repstream.tables", timeout, func() (bool, error) {
		var ok bool
		s, ok = e.tableSync(table)
		return ok && s.state == "ready", nil
	})
	return s
}

// writeLoad changes the tables (id int primary key, v int, pad text, ids
// 1..keys exist at the start) on the source until the returned stop is
// called: inserts of new ids, updates and deletes of existing ones, one
// table or two per transaction, a few hundred transactions a second.
func (e *env) writeLoad(tables []string, keys int) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := e.srcConn(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.writes == nil {
		e.writes = new(atomic.Int64)
	}
	writes := e.writes
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		defer conn.Close(context.Background())
		tick := time.NewTicker(2 * time.Millisecond) // the pace
		defer tick.Stop()
		next := 10_000_000
		for i := 0; ctx.Err() == nil; i++ {
			t := tables[rand.IntN(len(tables))]
			id := 1 + rand.IntN(keys)
			var err error
			switch i % 5 {
			case 0, 1:
				next++
				_, err = conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES ($1, 0, 'new')", t), next)
			case 2:
				_, err = conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = $1", t), id)
			case 3:
				_, err = conn.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE id = $1", t), id)
			case 4: // two tables in one transaction
				u := tables[rand.IntN(len(tables))]
				next++
				b := &pgx.Batch{}
				b.Queue(fmt.Sprintf("UPDATE %s SET v = v + 10 WHERE id = $1", t), id)
				b.Queue(fmt.Sprintf("INSERT INTO %s VALUES ($1, 1, 'pair')", u), next)
				err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
			}
			if err != nil && ctx.Err() == nil {
				werr = err
				return
			}
			writes.Add(1)
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		if werr != nil {
			e.t.Fatalf("write load: %v", werr)
		}
	}
}

// waitLoadWrites waits until writeLoad has run n more statements from now:
// changes that come after whatever the test just saw (a copy's snapshot).
func (e *env) waitLoadWrites(n int64) {
	e.t.Helper()
	from := e.writes.Load()
	pgtest.WaitFor(e.t, fmt.Sprintf("%d more statements of the write load", n), time.Minute, func() (bool, error) {
		return e.writes.Load() >= from+n, nil
	})
}

// TestTableSyncResumeInitialCopy: an initial copy stopped once its first
// table is copied is resumed by the next run, which keeps that table (its
// copied_at and sync LSN unchanged) and copies the others again from a new
// snapshot at a known position, while the source takes writes on every
// table throughout; the target ends equal to the source. With
// --create-tables, the tables are made bare and every one ends with its
// primary key and index, also those whose copy the first run left undone.
func TestTableSyncResumeInitialCopy(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	t.Run("target tables made by hand", func(t *testing.T) { t.Parallel(); testResumeInitialCopy(t, false) })
	t.Run("target tables made by --create-tables", func(t *testing.T) { t.Parallel(); testResumeInitialCopy(t, true) })
}

func testResumeInitialCopy(t *testing.T, create bool) {
	e := newEnv(t)
	tables := []string{"a_small", "b_big", "c_small"}
	for _, tb := range tables {
		ddl := fmt.Sprintf(`CREATE TABLE %[1]s (id int PRIMARY KEY, v int NOT NULL, pad text); CREATE INDEX %[1]s_v ON %[1]s (v)`, tb)
		if create {
			e.srcExec(ddl)
		} else {
			e.both(ddl)
		}
	}
	e.srcExec(`INSERT INTO a_small SELECT g, 0, 'a' FROM generate_series(1, 2000) g`)
	e.srcExec(`INSERT INTO b_big SELECT g, 0, repeat('b', 200) FROM generate_series(1, 150000) g`)
	e.srcExec(`INSERT INTO c_small SELECT g, 0, 'c' FROM generate_series(1, 2000) g`)
	cfg := e.config("public.a_small", "public.b_big", "public.c_small")
	cfg.SnapshotWorkers = 1 // in name order: a_small, b_big, c_small
	cfg.CreateTables = create

	stopLoad := e.writeLoad(tables, 2000)
	// Stop the first run as soon as a_small is copied (b_big takes seconds).
	if err := e.runUntilReady(cfg, "a_small"); err == nil || !strings.Contains(err.Error(), "initial copy") {
		t.Logf("first run ended with: %v", err)
	}
	kept, _ := e.tableSync("a_small")
	if s, _ := e.tableSync("b_big"); s.state == "ready" {
		t.Fatalf("b_big was copied before the first run stopped: the test interrupts nothing (make it larger)")
	}
	var snap string
	if err := e.Tgt.QueryRow(context.Background(), "SELECT snapshot FROM repstream.progress WHERE slot = $1", cfg.Slot).Scan(&snap); err != nil || snap != "running" {
		t.Fatalf("progress after the interrupted copy: snapshot %q, %v", snap, err)
	}
	if create {
		// b_big was made bare: its key and index wait for its copy.
		if n := e.count(e.Tgt, "SELECT count(*) FROM pg_index WHERE indrelid = 'b_big'::regclass"); n != 0 {
			t.Errorf("b_big has %d indexes before its copy is complete, want none (built after the copy)", n)
		}
		if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.deferred_ddl WHERE table_name = 'b_big'"); n != 2 {
			t.Errorf("%d statements deferred for b_big, want 2 (its primary key and index)", n)
		}
	}

	// The next run resumes under the same write load.
	stop := e.start(cfg)
	b := e.waitTableReady("b_big", 2*time.Minute)
	c := e.waitTableReady("c_small", time.Minute)
	e.waitLoadWrites(200) // changes after the recopy's snapshot, applied
	stopLoad()
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("second run: %v", err)
	}

	for _, tb := range tables {
		if n := e.count(e.Tgt, "SELECT count(*) FROM pg_index WHERE indrelid = '"+tb+"'::regclass AND (indisprimary OR indexrelid = to_regclass('"+tb+"_v'))"); n != 2 {
			t.Errorf("target %s has %d of its primary key and index, want both", tb, n)
		}
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.deferred_ddl"); n != 0 {
		t.Errorf("%d statements still deferred after the copy", n)
	}
	again, _ := e.tableSync("a_small")
	if again.state != "ready" || !again.copiedAt.Equal(kept.copiedAt) || again.syncLSN != kept.syncLSN {
		t.Errorf("a_small was copied again: before %+v, after %+v", kept, again)
	}
	if b.syncLSN == kept.syncLSN || c.syncLSN != b.syncLSN || b.rows == 0 {
		t.Errorf("b_big and c_small should be copied at one new snapshot: a_small %+v, b_big %+v, c_small %+v", kept, b, c)
	}
	for _, tb := range tables {
		e.assertSame(tb, "id")
	}
}

// TestTablesAddWhileRunning: `repstream tables add` of a table with rows,
// while the engine streams another and the source writes to both (also in
// transactions touching both) before, during and after the copy. The
// engine copies it at a snapshot of known position L, skips its changes up
// to L and applies the later ones: the target ends equal row for row.
func TestTablesAddWhileRunning(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE t1 (id int PRIMARY KEY, v int NOT NULL, pad text);
		CREATE TABLE t2 (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	e.srcExec(`INSERT INTO t1 SELECT g, 0, 'one' FROM generate_series(1, 3000) g`)
	e.srcExec(`INSERT INTO t2 SELECT g, 0, repeat('two', 50) FROM generate_series(1, 100000) g`)
	cfg := e.config("public.t1")
	cfg.ApplyParallelism = 4
	stopLoad := e.writeLoad([]string{"t1", "t2"}, 3000)
	stop := e.start(cfg)
	e.waitTableReady("t1", time.Minute)
	e.waitLoadWrites(100) // t2 changes before its copy

	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), []string{"tables", "add", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot, "public.t2"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "public.t2: pending: the running engine copies it") {
		t.Fatalf("tables add: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	s := e.waitTableReady("t2", 2*time.Minute)
	e.waitLoadWrites(200) // changes after L, applied
	stopLoad()
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if s.rows < 90000 {
		t.Errorf("t2 copy: %+v", s)
	}
	e.assertSame("t1", "id")
	e.assertSame("t2", "id")
}

// TestTablesList: `tables list` shows each table of the publication and its
// copy state; a table added while no engine runs is pending, and the next
// run copies it before it streams (until caught up), after which it is
// ready with its sync LSN and rows.
func TestTablesList(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE l1 (id int PRIMARY KEY, v int NOT NULL, pad text);
		CREATE TABLE l2 (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	e.srcExec(`INSERT INTO l1 SELECT g, 0, 'x' FROM generate_series(1, 10) g`)
	e.srcExec(`INSERT INTO l2 SELECT g, 0, 'y' FROM generate_series(1, 25) g`)
	cfg := e.config("public.l1")
	e.catchUp(cfg)
	conn := []string{"--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot}
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.Run(context.Background(), append(args, conn...), &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
		return out.String()
	}
	if out := run("tables", "add", "public.l2"); !strings.Contains(out, "public.l2: pending: the next run copies it") {
		t.Fatalf("tables add without a running engine:\n%s", out)
	}
	// Adding it again, or a table already replicated, changes nothing.
	if out := run("tables", "add", "public.l1"); !strings.Contains(out, "public.l1: already replicated") {
		t.Fatalf("tables add of a replicated table:\n%s", out)
	}
	out := run("tables", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TABLE") {
		t.Fatalf("tables list:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "public.l1" || f[1] != "yes" || f[2] != "ready" || f[4] != "10" {
		t.Errorf("tables list, l1: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "public.l2" || f[1] != "yes" || f[2] != "pending" || f[3] != "-" {
		t.Errorf("tables list, l2: %q", lines[2])
	}

	e.srcExec(`INSERT INTO l2 VALUES (26, 0, 'after the add')`)
	e.catchUp(cfg)
	e.srcExec(`UPDATE l2 SET v = 1 WHERE id <= 3`)
	e.catchUp(cfg)
	e.assertSame("l2", "id")

	var rows []tablesync.TableRow
	if err := json.Unmarshal([]byte(run("tables", "list", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].Table != "public.l2" || rows[1].State != "ready" || rows[1].Rows != 26 || rows[1].SyncLSN == "" {
		t.Fatalf("tables list --json after the next run: %+v", rows)
	}
}

// TestTablesWidenedOnRestart: a restart whose --tables matches a table the
// publication (made by repstream) lacks adds it as `tables add` does — here
// with --create-tables making the target table — and copies it before it
// streams; writes made while no engine ran are not lost.
func TestTablesWidenedOnRestart(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE w1 (id int PRIMARY KEY, v int NOT NULL)`)
	e.srcExec(`CREATE TABLE w2 (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE INDEX w2_v ON w2 (v)`)
	e.srcExec(`INSERT INTO w1 SELECT g, 0 FROM generate_series(1, 100) g`)
	e.srcExec(`INSERT INTO w2 SELECT g, g, 'before' FROM generate_series(1, 500) g`)
	cfg := e.config("public.w1")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`UPDATE w1 SET v = 1 WHERE id <= 10`)
	e.srcExec(`UPDATE w2 SET note = 'while stopped' WHERE id <= 10`)

	cfg.Tables = []string{"public.w1", "public.w2"}
	e.catchUp(cfg)
	s, ok := e.tableSync("w2")
	if !ok || s.state != "ready" || s.rows != 500 {
		t.Fatalf("w2 after the restart with a wider --tables: %+v (recorded: %v)", s, ok)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_index WHERE indrelid = 'w2'::regclass AND (indisprimary OR indexrelid = to_regclass('w2_v'))"); n != 2 {
		t.Errorf("w2 has %d of its primary key and index on the target, want both (built after its copy)", n)
	}
	e.srcExec(`DELETE FROM w2 WHERE id > 490`)
	e.srcExec(`INSERT INTO w2 VALUES (1000, 0, 'after')`)
	e.catchUp(cfg)
	e.assertSame("w1", "id")
	e.assertSame("w2", "id")
}

// TestTablesAddDuringEagerTransaction: a table added while a large
// transaction is being applied eagerly (streamed, still open on the
// source) is copied only once that transaction has committed (Eager is held,
// then apply quiesced); a large transaction touching it afterwards is applied
// in full; the target ends equal.
func TestTablesAddDuringEagerTransaction(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE e1 (id int PRIMARY KEY, v text);
		CREATE TABLE e2 (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO e2 SELECT g, 'before' FROM generate_series(1, 5000) g`)
	cfg := e.config("public.e1")
	cfg.DecodingWorkMem = "64kB"
	e.catchUp(cfg)
	reg := stats.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(t), reg).Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	}
	defer stop()
	conn, err := e.srcConn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", firstLine(sql), err)
		}
	}
	exec(`BEGIN`)
	exec(`INSERT INTO e1 SELECT g, repeat('a', 50) FROM generate_series(1, 20000) g`)
	pgtest.WaitFor(t, "the open transaction to be applied eagerly", 30*time.Second, func() (bool, error) {
		snap, _ := reg.Snapshot().Component("eager")
		return snap.Items >= 10000, nil // the tail stays in the walsender until more comes
	})

	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), []string{"tables", "add", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot, "public.e2"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("tables add: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	e.srcExec(`UPDATE e2 SET v = 'while the eager one is open' WHERE id <= 100`)
	time.Sleep(3 * time.Second) // the engine finds the table published and waits for the eager transaction
	if s, _ := e.tableSync("e2"); s.state == "ready" {
		t.Fatalf("e2 was copied while an eager transaction was open: %+v", s)
	}
	exec(`COMMIT`)
	e.waitTableReady("e2", time.Minute)

	exec(`BEGIN`)
	exec(`INSERT INTO e1 SELECT g, 'second' FROM generate_series(20001, 40000) g`)
	exec(`UPDATE e2 SET v = 'in a large transaction'`)
	exec(`INSERT INTO e2 SELECT g, 'new' FROM generate_series(5001, 6000) g`)
	exec(`COMMIT`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	stop()
	snap, _ := reg.Snapshot().Component("eager")
	if snap.Counters["eager_txns"] < 1 {
		t.Errorf("no transaction was applied eagerly: %+v", snap.Counters)
	}
	e.assertSame("e1", "id")
	e.assertSame("e2", "id")
}

// TestResumeInitialCopyAfterSchemaChange: the first run made b_big bare
// (--create-tables) and was stopped in the middle of its copy, with its
// primary key and index deferred; before the next run, the source renames
// the indexed column and adds one, and adds a column to a_small, which was
// copied already. The next run makes b_big again as the source now has it,
// copies it and builds its key and index on it; a_small gets its column
// from the stream. The target ends with the source's columns, key and
// index, row for row — also a column dropped and added again, whose
// changes in the stream are skipped (replayed, they would empty what the
// copy wrote). (Before, the next start refused: "the target's tables cannot
// take the source's rows".)
func TestResumeInitialCopyAfterSchemaChange(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e, cfg, stopLoad := interruptBareCopy(t)
	tables := []string{"a_small", "b_big"}

	// Between the runs, under the same load (it writes columns by position).
	e.srcExec(`ALTER TABLE b_big RENAME COLUMN pad TO filler`)
	e.srcExec(`ALTER TABLE b_big ADD COLUMN extra int NOT NULL DEFAULT 7`)
	// Dropped and added again: replayed on the copy, this pair would empty
	// the column the copy filled (the copy has it: it is skipped).
	e.srcExec(`ALTER TABLE b_big DROP COLUMN note`)
	e.srcExec(`ALTER TABLE b_big ADD COLUMN note text`)
	e.srcExec(`UPDATE b_big SET note = 'n' || id WHERE id <= 5000`)
	e.srcExec(`ALTER TABLE a_small ADD COLUMN note text DEFAULT 'x'`) // copied already: the stream brings it

	stop := e.startUntilReady(cfg, "b_big")
	e.waitLoadWrites(200) // changes after the recopy's snapshot, applied
	stopLoad()
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	var cols string
	if err := e.Tgt.QueryRow(context.Background(), `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'b_big'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&cols); err != nil || cols != "id,v,filler,extra,note" {
		t.Errorf("target b_big columns %q (%v), want id,v,filler,extra,note", cols, err)
	}
	if err := e.Tgt.QueryRow(context.Background(), `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'a_small'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&cols); err != nil || cols != "id,v,pad,note" {
		t.Errorf("target a_small columns %q (%v), want id,v,pad,note", cols, err)
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM pg_index WHERE indrelid = 'b_big'::regclass AND indisprimary`); n != 1 {
		t.Errorf("target b_big has %d primary keys, want 1", n)
	}
	var def string
	if err := e.Tgt.QueryRow(context.Background(), `SELECT pg_get_indexdef('b_big_pad'::regclass)`).Scan(&def); err != nil || !strings.Contains(def, "(filler)") {
		t.Errorf("target index b_big_pad: %q (%v), want it on filler", def, err)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.deferred_ddl"); n != 0 {
		t.Errorf("%d statements still deferred after the copy", n)
	}
	for _, tb := range tables {
		e.assertSame(tb, "id")
	}
}

// interruptBareCopy runs a first start with --create-tables over a_small
// and b_big (150,000 rows, an index on pad) under a write load, and stops
// it once a_small is copied: b_big is left bare, its copy incomplete, with
// its key and index deferred. The load goes on.
func interruptBareCopy(t *testing.T) (*env, config.Config, func()) {
	e := newEnv(t)
	e.srcExec(`CREATE TABLE a_small (id int PRIMARY KEY, v int NOT NULL, pad text);
		CREATE TABLE b_big (id int PRIMARY KEY, v int NOT NULL, pad text, note text);
		CREATE INDEX b_big_pad ON b_big (pad)`)
	e.srcExec(`INSERT INTO a_small SELECT g, 0, 'a' FROM generate_series(1, 2000) g`)
	e.srcExec(`INSERT INTO b_big SELECT g, 0, repeat('b', 200) FROM generate_series(1, 150000) g`)
	cfg := e.config("public.a_small", "public.b_big")
	cfg.SnapshotWorkers = 1 // a_small, then b_big
	cfg.CreateTables = true

	stopLoad := e.writeLoad([]string{"a_small", "b_big"}, 2000)
	t.Logf("first run ended with: %v", e.runUntilReady(cfg, "a_small"))
	if s, _ := e.tableSync("b_big"); s.state == "ready" {
		t.Fatalf("b_big was copied before the first run stopped: the test interrupts nothing (make it larger)")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.deferred_ddl WHERE table_name = 'b_big'"); n != 2 {
		t.Fatalf("%d statements deferred for b_big, want 2 (its primary key and index)", n)
	}
	return e, cfg, stopLoad
}

// runUntilReady runs the engine until table is ready, stops it and returns
// how the run ended.
func (e *env) runUntilReady(cfg config.Config, table string) error {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(e.t), nil).Run(ctx) }()
	// Often: the run must stop before the next table is copied whole.
	pgtest.WaitForEvery(e.t, table+" copied", time.Minute, 5*time.Millisecond, func() (bool, error) {
		s, ok := e.tableSync(table)
		return ok && s.state == "ready", nil
	})
	cancel()
	return <-done
}

// startUntilReady starts the engine and waits for table to be ready; it
// fails the test if the run ends first.
func (e *env) startUntilReady(cfg config.Config, table string) (stop func() error) {
	e.t.Helper()
	return e.startUntilReadyLog(cfg, table, testLogger(e.t))
}

// startUntilReadyLog is startUntilReady with the engine logging to log.
func (e *env) startUntilReadyLog(cfg config.Config, table string, log *slog.Logger) (stop func() error) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, log, nil).Run(ctx) }()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if s, ok := e.tableSync(table); ok && s.state == "ready" {
			break
		}
		select {
		case err := <-done:
			e.t.Fatalf("the run ended before %s was copied: %v", table, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			e.t.Fatalf("%s was not copied within 2 minutes", table)
		}
	}
	return func() error {
		cancel()
		return <-done
	}
}

// TestResumeInitialCopyAfterTableRename: as above, but between the runs the
// source renames b_big, whose copy did not complete, to b_huge. The next run
// makes and copies b_huge, and skips the rename in the stream (the copy has
// it); the target ends with b_huge, whole. The part-copied b_big is left on
// the target, its copy state still copying (so that apply skips what the
// stream has for it), and the start says so in a warning naming it.
func TestResumeInitialCopyAfterTableRename(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e, cfg, stopLoad := interruptBareCopy(t)
	stopLoad()
	e.srcExec(`ALTER TABLE b_big RENAME TO b_huge`)
	cfg.Tables = []string{"public.a_small", "public.b_huge"} // as a user would: b_big is no more

	var logs syncbuf.Buffer
	stop := e.startUntilReadyLog(cfg, "b_huge", capturingLogger(&logs))
	e.srcExec(`INSERT INTO b_huge SELECT g, 5, 'late' FROM generate_series(20000001, 20001000) g;
		UPDATE b_huge SET v = v + 1 WHERE id <= 1000;
		DELETE FROM b_huge WHERE id BETWEEN 1001 AND 1100`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM pg_index WHERE indrelid = 'b_huge'::regclass`); n != 2 {
		t.Errorf("target b_huge has %d indexes, want 2 (its primary key and index)", n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.deferred_ddl"); n != 0 {
		t.Errorf("%d statements still deferred after the copy", n)
	}
	e.assertSame("a_small", "id")
	e.assertSame("b_huge", "id")
	if s, _ := e.tableSync("b_big"); s.state != "copying" {
		t.Errorf("b_big's copy state is %q, want copying (left, its changes skipped)", s.state)
	}
	warned := false
	for line := range strings.Lines(logs.String()) {
		warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, "no longer published by the source") &&
			strings.Contains(line, "table=public.b_big")
	}
	if !warned {
		t.Errorf("no warning names the part-copied b_big the source no longer publishes:\n%s", logs.Tail(30))
	}
}

// TestTablesAddWhileTransactionOpen: the copy of an added table takes a
// temporary slot, which waits for every transaction open on the source
// (one that wrote, anywhere in the cluster) before it has a snapshot;
// apply was paused while it waited, so a session left idle in a
// transaction held every table's replication up, with nothing logged.
// Now the copy waits for such transactions before apply pauses: the
// other tables' changes go on reaching the target, and the wait is
// logged; once the transaction ends, the table is copied.
func TestTablesAddWhileTransactionOpen(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	ctx := t.Context()
	e.both(`CREATE TABLE t1 (id int PRIMARY KEY); CREATE TABLE t2 (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY)`)
	e.srcExec(`INSERT INTO t2 SELECT generate_series(1, 100)`)
	cfg := e.config("public.t1")
	e.catchUp(cfg)
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	open, err := pgx.Connect(ctx, e.src.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())
	if _, err := open.Exec(ctx, `BEGIN; INSERT INTO other VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tablesync.AddTables(ctx, cfg, tablesync.AddOptions{Tables: []string{"public.t2"}}, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the engine's watch has taken the table up
	e.srcExec(`INSERT INTO t1 SELECT generate_series(1, 5)`)
	waitFor(t, "t1's rows on the target while a transaction is open on the source", 20*time.Second, func() bool {
		return e.count(e.Tgt, "SELECT count(*) FROM t1") == 5
	})
	if _, err := open.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "t2's copy", 60*time.Second, func() bool {
		return e.count(e.Tgt, "SELECT count(*) FROM t2") == 100
	})
	e.srcExec(`INSERT INTO t2 VALUES (101); INSERT INTO t1 VALUES (6)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	select {
	case err := <-done:
		t.Fatalf("the run ended: %v", err)
	default:
	}
	e.assertSame("t1", "id")
	e.assertSame("t2", "id")
}

// TestTablesAddGoneWhileStopped: tables added while no engine ran (pending),
// then one dropped on the source and the other renamed, before the next
// start. The renamed one is copied under its new name; both pending
// records waited for ever for a table the source no longer has, and no run
// was caught up again ("tables not copied yet"). Now they are given up,
// with a warning each.
func TestTablesAddGoneWhileStopped(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE t1 (a int PRIMARY KEY); CREATE TABLE t2 (a int PRIMARY KEY); CREATE TABLE t3 (a int PRIMARY KEY);
		INSERT INTO t2 VALUES (1); INSERT INTO t3 SELECT g FROM generate_series(1, 20) g`)
	cfg := e.config("public.t1")
	cfg.CreateTables = true
	e.catchUp(cfg)
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), []string{"tables", "add", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot, "--create-tables", "public.t2", "public.t3"}, &out, &errOut); code != 0 {
		t.Fatalf("tables add: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	e.srcExec(`DROP TABLE t2; ALTER TABLE t3 RENAME TO t3r; INSERT INTO t3r VALUES (21)`)
	e.catchUp(cfg)
	e.assertSameTable("public.t3r", "a")
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE table_name IN ('t2', 't3')"); n != 0 {
		t.Errorf("%d records left of tables the source no longer has", n)
	}
}
