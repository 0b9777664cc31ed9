package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/syncbuf"
)

// TestSourceFastShutdownNotHeldUp: `pg_ctl restart -m fast` of the source
// while repstream streams from it and a large transaction it has received
// in part is prepared but not committed: the walsender, which waits at
// shutdown for its client to acknowledge everything sent, is answered at
// once (as native's worker answers it), not after wal_sender_timeout. The
// prepared transaction is then committed and replicated whole.
func TestSourceFastShutdownNotHeldUp(t *testing.T) {
	t.Parallel() // own clusters
	src := pgtest.Cluster(t, pgcluster.Options{Name: "shutsrc", Fast: true, Settings: map[string]string{
		"max_prepared_transactions": "5", "wal_sender_timeout": "60s",
	}})
	tgt := pgtest.Shared(t, "target")
	e := newEnvOn(t, src, tgt)
	e.both(`CREATE TABLE sd (id int PRIMARY KEY, v text)`)
	cfg := e.config("public.sd")
	cfg.DecodingWorkMem = "64kB"
	cfg.ReconnectMaxWait = time.Second
	e.catchUp(cfg)
	reg := stats.NewRegistry()
	log := &syncbuf.Buffer{}
	stop, exited := e.runEngine(cfg, reg, log)
	ctx := context.Background()
	conn, err := e.srcConn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`BEGIN`,
		`INSERT INTO sd SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g`,
		`PREPARE TRANSACTION 'sd_big'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close(ctx)
	// The transaction has been streamed to repstream, in part at least.
	pgtest.WaitFor(t, "the prepared transaction to be streamed", 30*time.Second, func() (bool, error) {
		var n int64
		err := e.Src.QueryRow(ctx, `SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&n)
		return err == nil && n > 0, nil
	})
	e.Src.Close(ctx)
	start := time.Now()
	if err := src.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("fast restart of the source took %s", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Fatalf("the source's fast restart took %s: its walsender waited for repstream (wal_sender_timeout 60s)", took.Round(time.Millisecond))
	}
	if e.Src, err = e.srcConn(ctx); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`COMMIT PREPARED 'sd_big'`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := exited(); err != nil {
		t.Fatalf("the engine exited: %v\n%s", err, log.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	e.assertSame("sd", "id")
}

// TestCaughtUpWhileRecording: the run ends (caught up) while the low
// watermark's record is under way on the target. Its context was the
// run's, so pgx closed the shared target connection under it; the final
// record and the table states read after it found it closed, and the
// run took it for a lost link: it reconnected and caught up again
// (seen replaying 024_add_drop_pub.pl). A record under way now
// completes. Each record is made slow by a trigger on repstream.progress,
// and the source writes elsewhere all the while, so that the watermark
// moves at the end of every run.
func TestCaughtUpWhileRecording(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE pubd (a int PRIMARY KEY)`)
	e.srcExec(`CREATE TABLE noise (a int)`)
	cfg := e.config("public.pubd")
	e.catchUp(cfg)
	e.tgtExec(`CREATE FUNCTION public.zz_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.pg_sleep(0.15); RETURN NEW; END $$;
		CREATE TRIGGER zz_slow BEFORE UPDATE ON repstream.progress FOR EACH ROW EXECUTE FUNCTION public.zz_slow();
		ALTER TABLE repstream.progress ENABLE ALWAYS TRIGGER zz_slow`)
	ctx, cancel := context.WithCancel(t.Context())
	conn, err := pgx.Connect(ctx, cfg.Source)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	noise := make(chan struct{})
	go func() {
		defer close(noise)
		for ctx.Err() == nil {
			_, _ = conn.Exec(ctx, `INSERT INTO noise VALUES (1)`)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-noise }()
	for i := range 5 {
		e.srcExec(fmt.Sprintf(`INSERT INTO pubd VALUES (%d)`, i+1))
		reg, err := e.tryCatchUp(cfg)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if n := reg.Component("target").Counter("reconnects").Load(); n != 0 {
			t.Fatalf("run %d reconnected to the target %d time(s) at its end", i, n)
		}
	}
	e.assertSame("pubd", "a")
}

// TestSourceShutdownNotHeldUp: the source shut down (pg_ctl stop -m fast)
// while the target's apply waits on a lock, with a transaction sent and
// not yet applied. A shutting-down walsender waits until its client
// confirms all it sent, asking again and again; repstream's capture
// answered each time with the position applied, so the source's shutdown
// lasted as long as the target's lock (native's worker, busy applying,
// does not answer and is timed out). Now the capture gives the connection
// up; the run reconnects once the source is back and catches up.
func TestSourceShutdownNotHeldUp(t *testing.T) {
	src := pgtest.Cluster(t, pgcluster.Options{Name: "stopsrc", Fast: true})
	e := newEnvOn(t, src, pgtest.Shared(t, "target"))
	e.both(`CREATE TABLE t (id int PRIMARY KEY)`)
	cfg := e.config("public.t")
	cfg.ReconnectMaxWait = time.Second
	e.catchUp(cfg)
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)

	locker, err := pgx.Connect(t.Context(), e.tgt.DSN(e.tgtDB))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	if _, err := locker.Exec(t.Context(), `BEGIN; LOCK TABLE t`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`INSERT INTO t VALUES (1)`)
	time.Sleep(time.Second) // sent; the apply waits for the lock

	start := time.Now()
	if err := src.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the source's fast shutdown took %s, held up by repstream's apply waiting on a target lock", took.Round(time.Millisecond))
	}
	if _, err := locker.Exec(t.Context(), `COMMIT`); err != nil {
		t.Fatal(err)
	}
	if err := src.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.Src.Close(context.Background())
	if e.Src, err = pgx.Connect(t.Context(), e.src.DSN(e.srcDB)); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`INSERT INTO t VALUES (2)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	e.assertSame("t", "id")
}
