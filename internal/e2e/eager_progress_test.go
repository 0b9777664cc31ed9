package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
)

// TestEagerRowsCountedWhileSent: a large transaction applied eagerly into
// a slow target (a trigger that sleeps 2 ms per row, ENABLE
// ALWAYS so that it fires in replica mode) shows its rows arriving while
// the target works: eager apply's row counter (what top, advise, the
// progress line and applied_changes_total read) rises in step with the
// rows the target has taken, while the source transaction and the target
// transaction are still open. Counted when buffered, a 4 MiB COPY's rows
// were counted at once and the counter then stood still for the seconds
// the target took to consume them (8 s here).
func TestEagerRowsCountedWhileSent(t *testing.T) {
	t.Parallel() // own databases and slots, mostly waiting: overlaps the other parallel tests, after the rest
	e := newEnv(t)
	e.both(`CREATE TABLE slow (id int PRIMARY KEY, v text)`)
	// slow_seen counts the rows the target's trigger has seen; a sequence
	// is not transactional, so another session reads it while the eager
	// transaction is open.
	e.tgtExec(`CREATE SEQUENCE slow_seen;
CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM nextval('public.slow_seen');
	PERFORM pg_sleep(0.002);
	RETURN NEW;
END $$;
CREATE TRIGGER slow_row BEFORE INSERT ON slow FOR EACH ROW EXECUTE FUNCTION slow_row();
ALTER TABLE slow ENABLE ALWAYS TRIGGER slow_row`)
	cfg := e.config("public.slow")
	cfg.DecodingWorkMem = "64kB"
	e.catchUp(cfg)
	reg := stats.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(t), reg).Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	}()

	conn, err := e.srcConn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// 8,000 rows of 1 kB: the writer flushes its first 4 MiB (about 4,000
	// rows, 8 s of this target's time) while the source transaction is
	// open.
	const rows = 8000
	for _, sql := range []string{`BEGIN`, `INSERT INTO slow SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 8000) g`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	// Poll: whenever the target has taken 400 rows or more since eager
	// apply's counter last moved, the counter must have moved within the
	// last 4 s (about 1,800 rows at this target's pace; a 4 MiB COPY is
	// about 4,000).
	const maxFlat = 4 * time.Second
	var (
		last       int64 = -1
		movedAt          = time.Now()
		seenAtMove int64
		moves      int
		worstFlat  time.Duration
	)
	pgtest.WaitFor(t, "the target to take 3,500 rows of the open transaction", 2*time.Minute, func() (bool, error) {
		var seen int64
		var called bool
		if err := e.Tgt.QueryRow(ctx, `SELECT last_value, is_called FROM slow_seen`).Scan(&seen, &called); err != nil {
			return false, err
		}
		if !called {
			seen = 0
		}
		eg, _ := reg.Snapshot().Component("eager")
		now := time.Now()
		if eg.Counters["eager_txns"] != 0 {
			t.Fatalf("the eager transaction committed while the source's was open")
		}
		if eg.Items != last {
			if last >= 0 {
				worstFlat = max(worstFlat, now.Sub(movedAt))
			}
			last, movedAt, seenAtMove = eg.Items, now, seen
			moves++
		}
		if flat := now.Sub(movedAt); flat > maxFlat && seen-seenAtMove >= 400 {
			t.Fatalf("eager apply's row counter stood at %d for %s while the target took %d rows (%d of %d so far)",
				eg.Items, flat.Round(time.Millisecond), seen-seenAtMove, seen, rows)
		}
		if seen >= 3500 {
			return true, nil
		}
		return false, fmt.Errorf("the target took %d rows; eager apply counted %d (%s)", seen, eg.Items, eg.State)
	})
	t.Logf("eager counter moved %d times; longest flat %s; counted %d rows", moves, worstFlat.Round(time.Millisecond), last)
	if n := e.count(e.Tgt, "SELECT count(*) FROM slow"); n != 0 {
		t.Fatalf("%d rows visible on the target before the source committed", n)
	}
	if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(cfg.Slot, 2*time.Minute)
	e.assertSame("slow", "id")
	eg, _ := reg.Snapshot().Component("eager")
	if eg.Counters["eager_txns"] != 1 || eg.Items != rows {
		t.Errorf("eager: %d transactions, %d rows counted; want 1 and %d", eg.Counters["eager_txns"], eg.Items, rows)
	}
}
