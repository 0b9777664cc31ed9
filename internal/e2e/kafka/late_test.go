package kafka

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

// TestKafkaLateTarget: a target started once the topic holds a history
// reads the topic from where the transactions its copy lacks begin
// (kafkalog.CopyStart), not from the topic's start, and gets every one of
// them once: the load runs all along, and a transaction streamed in
// progress and one not streamed are open when it starts (its copy waits
// for them, so they are in the copy, not applied again). Both targets end
// equal to the source.
func TestKafkaLateTarget(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	ctx := t.Context()
	dbA, tgtA := e.newTarget()
	capt := e.startCapture("capture", "--decoding-work-mem", "64kB")
	apA := e.startApply("apply A", dbA)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 2*time.Millisecond, 10)
	l.waitLoad(300, 60*time.Second)
	waitLedger(t, tgtA, l.next.Load()-1, 60*time.Second, capt, apA)

	// The slot's restart_lsn passes the history at a running-xacts record
	// (a checkpoint writes one) once the capture has confirmed it.
	var mark string
	if err := e.s.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&mark); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitForEvery(t, "the capture slot's restart_lsn to pass the history", 60*time.Second, 500*time.Millisecond, func() (bool, error) {
		capt.alive()
		if _, err := e.s.Exec(ctx, "CHECKPOINT"); err != nil {
			return false, err
		}
		var ok bool
		err := e.s.QueryRow(ctx, "SELECT restart_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", e.slot, mark).Scan(&ok)
		return ok, err
	})

	// Two transactions open across the copy: one the walsender streams
	// before it (over 64kB), one it does not.
	big, small := e.conn(), e.conn()
	run := func(steps ...step) {
		t.Helper()
		for _, q := range steps {
			if _, err := q.c.Exec(ctx, q.sql); err != nil {
				t.Fatalf("%s: %v", q.sql, err)
			}
		}
	}
	run(step{big, "BEGIN"},
		step{big, "INSERT INTO events SELECT g, repeat('s', 200) FROM generate_series(1000001, 1005000) g"},
		step{small, "BEGIN"},
		step{small, "INSERT INTO acct VALUES (5000, 0, 'open across the copy')"})
	var at string
	if err := e.s.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&at); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the walsender to stream the open transaction", 30*time.Second, func() (bool, error) {
		capt.alive()
		var ok bool
		err := e.s.QueryRow(ctx, `SELECT coalesce(bool_or(r.sent_lsn >= $2::pg_lsn), false)
			FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
			WHERE s.slot_name = $1`, e.slot, at).Scan(&ok)
		return ok, err
	})

	// The late target's copy waits for them to end (its snapshot's slot
	// waits for the transactions running when it is made): commit them
	// once it waits, so that what they wrote is in the copy and must not
	// come again from the topic.
	dbB, tgtB := e.newTarget()
	apB := e.startApply("apply B (late)", dbB)
	pgtest.WaitFor(t, "apply B's copy to wait for the open transactions", 60*time.Second, func() (bool, error) {
		apB.alive()
		var n int
		err := e.s.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE temporary AND slot_name <> $1`, e.slot).Scan(&n)
		return n > 0, err
	})
	time.Sleep(time.Second)
	run(step{big, "INSERT INTO events SELECT g, 'later' FROM generate_series(1005001, 1006000) g"},
		step{big, "COMMIT"},
		step{small, "UPDATE acct SET note = 'committed while the copy waited' WHERE id = 5000"},
		step{small, "COMMIT"})
	var done string
	pgtest.WaitFor(t, "apply B's initial copy", 60*time.Second, func() (bool, error) {
		apB.alive()
		done = lineWith(apB.out.Tail(400), "initial copy done")
		return done != "", nil
	})
	m := regexp.MustCompile(`topic_offset=(\d+)`).FindStringSubmatch(done)
	if m == nil {
		t.Fatalf("no topic_offset in %q", done)
	}
	offset, _ := strconv.ParseInt(m[1], 10, 64)
	t.Logf("apply B: %s", done)
	if offset == 0 {
		t.Errorf("the late target reads the topic from its start, not from where its copy's transactions begin: %s", done)
	}

	// A third target's copy, stopped (SIGTERM) once it began and finished
	// by its next start: the stop keeps what the copy did (as a kill -9
	// would), and that start reads the topic from the offset the first one
	// recorded before it copied, not from the topic's start.
	dbC, tgtC := e.newTarget()
	if _, err := tgtC.Exec(ctx, `CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE TABLE ledger (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE events (at bigint NOT NULL, what text)`); err != nil {
		t.Fatal(err)
	}
	lock, err := pgx.Connect(ctx, e.tgtC.DSN(dbC))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	// SHARE: the start's check that the tables are empty reads them, and
	// the copy's COPY into events waits.
	if _, err := lock.Exec(ctx, `BEGIN; LOCK TABLE events IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	apC := e.startApply("apply C (copy stopped)", dbC)
	pgtest.WaitFor(t, "apply C's copy to begin", 60*time.Second, func() (bool, error) {
		apC.alive()
		var n int
		err := tgtC.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'repstream' AND tablename = 'tables'`).Scan(&n)
		if err != nil || n == 0 {
			return false, err
		}
		err = tgtC.QueryRow(ctx, `SELECT count(*) FROM repstream.tables`).Scan(&n)
		return n > 0, err
	})
	apC.stop()
	if _, err := lock.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	var kept int
	if err := tgtC.QueryRow(ctx, `SELECT count(*) FROM repstream.tables WHERE slot = $1`, e.slot).Scan(&kept); err != nil {
		t.Fatalf("after apply C's stop during its copy: %v", err)
	}
	if kept == 0 {
		t.Errorf("apply C's stop during its first copy removed this target's state: the next start copies every table again\n%s", apC.out.Tail(20))
	}
	apC = e.startApply("apply C (copy finished)", dbC)
	pgtest.WaitFor(t, "apply C's initial copy", 60*time.Second, func() (bool, error) {
		apC.alive()
		done = lineWith(apC.out.Tail(400), "initial copy done")
		return done != "", nil
	})
	t.Logf("apply C: %s", done)
	if m := regexp.MustCompile(`topic_offset=(\d+)`).FindStringSubmatch(done); m == nil || m[1] == "0" {
		t.Errorf("the target whose copy a later start finished reads the topic from its start: %s", done)
	}

	l.waitLoad(200, 60*time.Second)
	l.halt()
	waitSame(t, e.s, tgtA, kafkaTables, 90*time.Second, capt, apA, apB, apC)
	waitSame(t, e.s, tgtB, kafkaTables, 90*time.Second, capt, apA, apB, apC)
	waitSame(t, e.s, tgtC, kafkaTables, 90*time.Second, capt, apA, apB, apC)
	capt.stop()
	apA.stop()
	apB.stop()
	apC.stop()
}

// step is a statement of a test on a connection of its own.
type step struct {
	c   *pgx.Conn
	sql string
}

// conn opens a connection of its own to the source database, closed at
// the test's end.
func (e *kafkaEnv) conn() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(e.t.Context(), e.src.DSN(e.srcDB))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
