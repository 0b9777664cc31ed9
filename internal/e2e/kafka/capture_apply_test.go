package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/syncbuf"
	"github.com/repstream/repstream/internal/testbin"
)

// proc is a repstream process of a test: its output kept, killed at the
// test's end.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan error
}

func startProc(t *testing.T, name string, argv ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, out: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(testbin.Repstream(t), argv...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL (kill -9) and waits for the process.
func (p *proc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Errorf("%s after SIGTERM: %v\n%s", p.name, err, p.out.Tail(30))
		}
	case <-time.After(30 * time.Second):
		p.t.Errorf("%s did not stop on SIGTERM:\n%s", p.name, p.out.Tail(30))
	}
}

// alive fails the test if the process has exited.
// waitLogged waits up to timeout until p has logged a line holding line,
// failing the test as soon as p exits.
func (p *proc) waitLogged(line string, timeout time.Duration) {
	p.t.Helper()
	pgtest.WaitFor(p.t, p.name+" to log "+line, timeout, func() (bool, error) {
		p.alive()
		return strings.Contains(p.out.Tail(50), line), nil
	})
}

func (p *proc) alive() {
	p.t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		p.t.Fatalf("%s exited: %v\n%s", p.name, err, p.out.Tail(40))
	default:
	}
}

// TestKafkaCaptureApply (issue 30): one capture into a broker, two applies
// into two databases with --create-tables; a live workload with a
// 200,000-row transaction streamed in progress; the capture killed -9 inside
// it and restarted; the second target started later (its own initial copy);
// one apply killed -9 and restarted. Both targets end equal to the source,
// with no row twice (a keyless table counts its inserts).
func TestKafkaCaptureApply(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	src := pgtest.Shared(t, "source")
	tgtC := pgtest.Shared(t, "target")
	srcDB := pgtest.NewDB(t, src)
	tgt1, tgt2 := pgtest.NewDB(t, tgtC), pgtest.NewDB(t, tgtC)
	ctx := t.Context()
	s, err := pgx.Connect(ctx, src.DSN(srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	exec1 := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("source: %s: %v", firstLine(sql), err)
		}
	}
	exec1(`CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE TABLE events (at int NOT NULL, what text);
		ALTER TABLE events REPLICA IDENTITY FULL;
		CREATE TABLE big (id int PRIMARY KEY, payload text);
		INSERT INTO acct SELECT g, 0, 'start' FROM generate_series(1, 1000) g;`)
	slot := "k_" + strings.TrimPrefix(srcDB, "t_")
	if len(slot) > 40 {
		slot = slot[:40]
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), src.DSN(srcDB))
		if err == nil {
			_, _ = c.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
			c.Close(context.Background())
		}
	})
	brokers := strings.Join(k.Addrs(), ",")
	common := []string{"--source", src.DSN(srcDB), "--slot", slot, "--kafka", brokers, "--log-level", "info"}
	captureArgs := append([]string{"capture", "--tables", "public.*", "--decoding-work-mem", "64kB",
		"--status-interval", "1s"}, common...)
	applyArgs := func(db string) []string {
		return append([]string{"apply", "--target", tgtC.DSN(db), "--create-tables",
			"--spill-dir", filepath.Join(t.TempDir(), "spill")}, common...)
	}

	capt := startProc(t, "capture", captureArgs...)
	// The topic exists once the capture has started.
	pgtest.WaitFor(t, "the capture's slot", 30*time.Second, func() (bool, error) {
		capt.alive()
		var n int
		err := s.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot).Scan(&n)
		return n == 1, err
	})
	ap1 := startProc(t, "apply 1", applyArgs(tgt1)...)

	// A live workload: small transactions, all the while.
	seq := 0
	small := func(n int) {
		t.Helper()
		for range n {
			seq++
			exec1("UPDATE acct SET v = v + 1 WHERE id = $1", seq%1000+1)
			exec1("INSERT INTO events VALUES ($1, 'small')", seq)
		}
	}
	small(300)
	// Apply 1 is streaming (its copy done) before the large transaction:
	// it applies it eagerly while the topic brings it in progress.
	sameTables(t, s, tgtC.DSN(tgt1), 60*time.Second, []*proc{capt, ap1}, "acct")
	// The large transaction: streamed in progress (64kB decoding work mem).
	o, err := k.Admin(t).ListEndOffsets(ctx, "repstream."+slot)
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := o.Lookup("repstream."+slot, 0)
	streamFrom := lo.Offset
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 100000) g"); err != nil {
		t.Fatal(err)
	}
	// The capture killed while the transaction streams (its first blocks
	// in the topic), and restarted.
	adm := k.Admin(t)
	topic := "repstream." + slot
	pgtest.WaitFor(t, "the large transaction's first blocks in the topic", 30*time.Second, func() (bool, error) {
		o, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false, err
		}
		lo, _ := o.Lookup(topic, 0)
		return lo.Offset >= streamFrom+3, nil
	})
	capt.kill()
	if _, err := tx.Exec(ctx, "INSERT INTO big SELECT g, 'second half' FROM generate_series(100001, 200000) g; INSERT INTO events VALUES (-1, 'big')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	capt = startProc(t, "capture (restarted)", captureArgs...)
	small(200)
	// The second target starts late: its own initial copy.
	ap2 := startProc(t, "apply 2", applyArgs(tgt2)...)
	small(200)
	// Apply 1 killed: the slot does not wait for it (a stopped target
	// costs the source nothing), then it is restarted.
	ap1.kill()
	small(100)
	var walNow string
	if err := s.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walNow); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the slot to confirm "+walNow+" with apply 1 stopped", 30*time.Second, func() (bool, error) {
		var ok bool
		err := s.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", slot, walNow).Scan(&ok)
		return ok, err
	})
	ap1 = startProc(t, "apply 1 (restarted)", applyArgs(tgt1)...)
	exec1("UPDATE big SET payload = 'updated' WHERE id % 1000 = 0")
	small(200)

	for _, db := range []string{tgt1, tgt2} {
		tc, err := pgx.Connect(ctx, tgtC.DSN(db))
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close(context.Background())
		for _, tb := range []struct{ table, order string }{{"acct", "id"}, {"events", "at, what"}, {"big", "id"}} {
			pgtest.WaitFor(t, fmt.Sprintf("%s.%s equal to the source", db, tb.table), 90*time.Second, func() (bool, error) {
				capt.alive()
				ap1.alive()
				ap2.alive()
				n1, h1 := checksum(t, s, tb.table, tb.order)
				var n2 int64
				var h2 string
				q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY %s)), '') FROM %s x", tb.order, tb.table)
				if err := tc.QueryRow(ctx, q).Scan(&n2, &h2); err != nil {
					return false, err
				}
				if n1 != n2 || h1 != h2 {
					return false, fmt.Errorf("source %d rows, target %d", n1, n2)
				}
				return true, nil
			})
		}
	}
	capt.stop()
	ap1.stop()
	ap2.stop()
}

// sameTables waits until each table of db on tgtC equals the source's.
func sameTables(t *testing.T, s *pgx.Conn, tgtDSN string, timeout time.Duration, procs []*proc, tables ...string) {
	t.Helper()
	ctx := t.Context()
	tc, err := pgx.Connect(ctx, tgtDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close(context.Background())
	for _, table := range tables {
		pgtest.WaitFor(t, table+" equal to the source", timeout, func() (bool, error) {
			for _, p := range procs {
				p.alive()
			}
			n1, h1 := checksum(t, s, table, "x")
			var n2 int64
			var h2 string
			q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY x)), '') FROM %s x", table)
			if err := tc.QueryRow(ctx, q).Scan(&n2, &h2); err != nil {
				return false, err
			}
			if n1 != n2 || h1 != h2 {
				return false, fmt.Errorf("source %d rows, target %d", n1, n2)
			}
			return true, nil
		})
	}
}

// logTails logs the last lines of each process's output when the test has
// failed (a wait timed out).
func logTails(t *testing.T, procs ...*proc) {
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("KAFKA_TEST_LOGS") != "" {
			for _, p := range procs {
				t.Logf("%s:\n%s", p.name, p.out.Tail(25))
			}
		}
	})
}

// TestKafkaApplyNonEmptyTarget: an apply's first copy into a target table
// that already holds rows is refused, as run's is, naming the table and
// --truncate, and leaves the rows as they were; with --truncate it
// empties it and copies. It used to empty every such table without a
// word (and --truncate did nothing): an apply pointed at the wrong
// database wiped its tables of those names. A table added to the
// publication later (ALTER PUBLICATION ... ADD TABLE) whose target table
// holds rows of its own is refused the same way, as run refuses it.
func TestKafkaApplyNonEmptyTarget(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	if _, err := tgt.Exec(t.Context(), `CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text);
		INSERT INTO acct VALUES (5000, 1, 'the target''s own')`); err != nil {
		t.Fatal(err)
	}
	// A table the publication does not publish yet (outside --tables
	// public.*), that the target has with rows of its own.
	e.exec(`CREATE SCHEMA side; CREATE TABLE side.extra (id int PRIMARY KEY, v text); INSERT INTO side.extra SELECT g, 'src' FROM generate_series(1, 40) g`)
	if _, err := tgt.Exec(t.Context(), `CREATE SCHEMA side; CREATE TABLE side.extra (id int PRIMARY KEY, v text); INSERT INTO side.extra VALUES (1, 'tgt-only'), (999, 'tgt-only')`); err != nil {
		t.Fatal(err)
	}
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	err := exitOf(t, ap, 90*time.Second)
	if out := ap.out.Tail(1000); err == nil || lineWith(out, "public.acct has rows", "--truncate") == "" {
		t.Fatalf("apply: %v, want a refusal naming public.acct and --truncate:\n%s", err, ap.out.Tail(30))
	}
	var n int
	if err := tgt.QueryRow(t.Context(), "SELECT count(*) FROM acct WHERE id = 5000").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the target's own row after the refused apply: %d, %v; want it kept", n, err)
	}
	ap = e.startApply("apply --truncate", db, "--truncate")
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	ap.stop()

	// Added to the publication later (ALTER PUBLICATION ... ADD TABLE):
	// its copy, run's, does not empty the target's table without
	// --truncate either; the apply stops naming it, its rows kept.
	ap = e.startApply("apply (table added)", db)
	e.exec(`ALTER PUBLICATION ` + e.slot + ` ADD TABLE side.extra`)
	err = exitOf(t, ap, 90*time.Second)
	if out := ap.out.Tail(1000); err == nil || lineWith(out, "side.extra", "tables add --truncate side.extra") == "" {
		t.Fatalf("apply: %v, want a refusal naming side.extra and tables add --truncate:\n%s", err, ap.out.Tail(30))
	}
	if err := tgt.QueryRow(t.Context(), "SELECT count(*) FROM side.extra WHERE v = 'tgt-only'").Scan(&n); err != nil || n != 2 {
		t.Fatalf("the target's own rows of extra after the refused copy: %d, %v; want them kept", n, err)
	}
	ap = e.startApply("apply --truncate (table added)", db, "--truncate")
	waitSame(t, e.s, tgt, append(kafkaTables[:3:3], tableOrder{"side.extra", "id"}), 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()
}

// TestKafkaTrimmedOffset (issue 30): an apply whose next offset is gone
// from the topic (retention; here DeleteRecords) stops with an error that
// names the target and the way out, never a silent reset; `drop
// --target-only` then a new start seeds that target again, while the
// capture keeps its slot. The same for a topic deleted while the apply is
// stopped and made again by the capture's next start, with more records
// than the apply's offset: its offsets start again at 0, and the rows
// written meanwhile went with the old topic; read from the recorded
// offset, it would skip them and the new topic's first records without a
// word. Before that, the capture's slot is dropped: a capture started
// then refuses to make a new slot behind the topic's records (it would go
// on after a gap), naming the topic's deletion as the way out.
func TestKafkaTrimmedOffset(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	src := pgtest.Shared(t, "source")
	tgtC := pgtest.Shared(t, "target")
	srcDB, tgtDB := pgtest.NewDB(t, src), pgtest.NewDB(t, tgtC)
	ctx := t.Context()
	s, err := pgx.Connect(ctx, src.DSN(srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Exec(ctx, "CREATE TABLE tr (id int PRIMARY KEY, v text); INSERT INTO tr SELECT g, 'old' FROM generate_series(1, 100) g"); err != nil {
		t.Fatal(err)
	}
	slot := "kt_" + strings.TrimPrefix(srcDB, "t_")
	if len(slot) > 40 {
		slot = slot[:40]
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), src.DSN(srcDB)); err == nil {
			_, _ = c.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
			c.Close(context.Background())
		}
	})
	brokers := strings.Join(k.Addrs(), ",")
	common := []string{"--source", src.DSN(srcDB), "--slot", slot, "--kafka", brokers}
	spill := filepath.Join(t.TempDir(), "spill")
	applyArgs := append([]string{"apply", "--target", tgtC.DSN(tgtDB), "--create-tables", "--spill-dir", spill}, common...)
	capt := startProc(t, "capture", append([]string{"capture", "--tables", "public.tr"}, common...)...)
	ap := startProc(t, "apply", applyArgs...)
	logTails(t, capt, ap)
	insert := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if _, err := s.Exec(ctx, "INSERT INTO tr VALUES ($1, 'new')", i); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(101, 150)
	sameTables(t, s, tgtC.DSN(tgtDB), 60*time.Second, []*proc{capt, ap}, "tr")
	// Stopped once it streams: its copy done and its offset recorded.
	tc, err := pgx.Connect(ctx, tgtC.DSN(tgtDB))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close(context.Background())
	pgtest.WaitFor(t, "the apply's offset recorded", 30*time.Second, func() (bool, error) {
		var off int64
		err := tc.QueryRow(ctx, "SELECT kafka_offset FROM repstream.progress WHERE slot = $1 AND snapshot = 'done'", slot).Scan(&off)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, err
		}
		return err == nil && off >= 0, err
	})
	ap.stop()
	adm := k.Admin(t)
	topic := "repstream." + slot
	endOffset := func() int64 {
		t.Helper()
		o, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		lo, _ := o.Lookup(topic, 0)
		return lo.Offset
	}
	before := endOffset()
	insert(151, 200)
	// The records the stopped apply still needs go (retention would):
	// once the brokers hold the new rows (the slot confirms past them).
	var wal string
	if err := s.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&wal); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the capture to write the 50 new rows", 30*time.Second, func() (bool, error) {
		var ok bool
		err := s.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", slot, wal).Scan(&ok)
		return ok, err
	})
	end := endOffset()
	if end <= before {
		t.Fatalf("topic end %d after the new rows, was %d", end, before)
	}
	var trim kadm.Offsets
	trim.Add(kadm.Offset{Topic: topic, Partition: 0, At: end})
	if _, err := adm.DeleteRecords(ctx, trim); err != nil {
		t.Fatal(err)
	}
	// status --kafka says so, exit code 2.
	st := exec.Command(testbin.Repstream(t), "status", "--kafka", brokers, "--source", src.DSN(srcDB), "--target", tgtC.DSN(tgtDB), "--slot", slot)
	if out, err := st.CombinedOutput(); err == nil || st.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "drop --target-only") || !strings.Contains(string(out), "kafka topic") {
		t.Fatalf("status --kafka with the target's offset trimmed: %v, want exit 2 naming drop --target-only:\n%s", err, out)
	}
	// And check --kafka: the brokers and the topic OK, the offset FAIL.
	ck := exec.Command(testbin.Repstream(t), "check", "--kafka", brokers, "--source", src.DSN(srcDB), "--target", tgtC.DSN(tgtDB), "--slot", slot)
	out, err := ck.CombinedOutput()
	for _, want := range []string{"OK    kafka   brokers: 1 reachable", "kafka   topic " + topic + ": one copy", "FAIL  kafka   target's offset", "drop --target-only"} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("check --kafka with the target's offset trimmed: %v, want a failure and %q:\n%s", err, want, out)
		}
	}
	// The apply stops, naming the target and the way out; that way out:
	// this target's state dropped, the slot kept, a new copy.
	reseeded := func(why string, want ...string) *proc {
		t.Helper()
		ap := startProc(t, "apply ("+why+")", applyArgs...)
		select {
		case err := <-ap.exited:
			out := ap.out.Tail(20)
			for _, w := range append([]string{"re-seed", tgtDB, "drop --target-only"}, want...) {
				if err == nil || !strings.Contains(out, w) {
					t.Fatalf("apply %s: exit %v, want an error naming %q:\n%s", why, err, w, out)
				}
			}
			ap.exited <- err
		case <-time.After(60 * time.Second):
			t.Fatalf("apply %s did not stop:\n%s", why, ap.out.Tail(20))
		}
		drop := exec.Command(testbin.Repstream(t), "drop", "--target-only", "--source", src.DSN(srcDB), "--target", tgtC.DSN(tgtDB), "--slot", slot, "--spill-dir", spill)
		if out, err := drop.CombinedOutput(); err != nil {
			t.Fatalf("drop --target-only: %v\n%s", err, out)
		}
		var active bool
		if err := s.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil || !active {
			t.Fatalf("the capture's slot after drop --target-only: active %v, %v", active, err)
		}
		// The tables hold the earlier seed's rows: emptied on request.
		ap = startProc(t, "apply (re-seeded after "+why+")", append(applyArgs, "--truncate")...)
		logTails(t, ap)
		return ap
	}
	ap = reseeded("after the trim")
	insert(201, 220)
	sameTables(t, s, tgtC.DSN(tgtDB), 60*time.Second, []*proc{capt, ap}, "tr")

	// The topic deleted while the apply is stopped, with rows it has not
	// applied, and made again by the capture's next start.
	recorded := func() int64 {
		t.Helper()
		var off int64
		pgtest.WaitFor(t, "the apply's offset recorded", 30*time.Second, func() (bool, error) {
			err := tc.QueryRow(ctx, "SELECT kafka_offset FROM repstream.progress WHERE slot = $1 AND snapshot = 'done'", slot).Scan(&off)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			return err == nil && off >= 0, err
		})
		return off
	}
	recorded()
	ap.stop()
	from := recorded()
	insert(221, 260)
	if err := s.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&wal); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the capture to write rows 221 to 260", 30*time.Second, func() (bool, error) {
		var ok bool
		err := s.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", slot, wal).Scan(&ok)
		return ok, err
	})
	capt.stop()
	// The slot dropped meanwhile, and the topic's records removed by
	// retention since: a capture starting with a new slot would go on
	// after a gap in the same topic (its offsets go on). It refuses,
	// naming the way out, and makes nothing. (The capture's walsender
	// may hold the slot a moment after the process is gone.)
	pgtest.WaitFor(t, "the stopped capture's walsender to release the slot", 30*time.Second, func() (bool, error) {
		var active bool
		err := s.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		return err == nil && !active, err
	})
	if _, err := s.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
		t.Fatal(err)
	}
	var all kadm.Offsets
	all.Add(kadm.Offset{Topic: topic, Partition: 0, At: endOffset()})
	if _, err := adm.DeleteRecords(ctx, all); err != nil {
		t.Fatal(err)
	}
	refused := startProc(t, "capture (its slot dropped)", append([]string{"capture", "--tables", "public.tr"}, common...)...)
	select {
	case err := <-refused.exited:
		out := refused.out.Tail(20)
		for _, w := range []string{"replication slot \"" + slot + "\" does not exist", "a capture of it wrote to topic " + topic, "removed since by retention", "drop --kafka " + brokers + " --slot " + slot, "drop --target-only"} {
			if err == nil || !strings.Contains(out, w) {
				t.Fatalf("capture with its slot dropped: exit %v, want an error naming %q:\n%s", err, w, out)
			}
		}
		refused.exited <- err
	case <-time.After(60 * time.Second):
		t.Fatalf("capture with its slot dropped did not stop:\n%s", refused.out.Tail(20))
	}
	var slots int
	if err := s.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("slots named %s after the refused capture: %d, %v", slot, slots, err)
	}
	// The way out it names: the topic deleted (the capture makes it
	// again); each target then sees another topic id and asks for a
	// re-seed.
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the topic deleted", 30*time.Second, func() (bool, error) {
		td, err := adm.ListTopics(ctx, topic)
		return err == nil && !td.Has(topic), err
	})
	capt = startProc(t, "capture (a new topic)", append([]string{"capture", "--tables", "public.tr"}, common...)...)
	logTails(t, capt)
	capt.waitLogged("capture session started", 60*time.Second)
	for next := 261; ; next += 20 {
		insert(next, next+19)
		if n, err := adm.ListEndOffsets(ctx, topic); err == nil {
			if o, ok := n.Lookup(topic, 0); ok && o.Err == nil && o.Offset > from+5 {
				break
			}
		}
		if next > 20000 {
			t.Fatalf("the new topic does not pass offset %d", from)
		}
	}
	ck = exec.Command(testbin.Repstream(t), "check", "--kafka", brokers, "--source", src.DSN(srcDB), "--target", tgtC.DSN(tgtDB), "--slot", slot)
	out, err = ck.CombinedOutput()
	for _, want := range []string{"FAIL  kafka   target's offset", "was deleted and made again", "drop --target-only"} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("check --kafka with the topic made again: %v, want a failure and %q:\n%s", err, want, out)
		}
	}
	st = exec.Command(testbin.Repstream(t), "status", "--kafka", brokers, "--source", src.DSN(srcDB), "--target", tgtC.DSN(tgtDB), "--slot", slot)
	if out, err := st.CombinedOutput(); err == nil || st.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "deleted and made again") || !strings.Contains(string(out), "drop --target-only") {
		t.Fatalf("status --kafka with the topic made again: %v, want exit 2 naming drop --target-only:\n%s", err, out)
	}
	ap = reseeded("after the topic was made again", "was deleted and made again")
	sameTables(t, s, tgtC.DSN(tgtDB), 60*time.Second, []*proc{capt, ap}, "tr")

	// The replication taken down: `drop --kafka` refuses while the
	// capture runs, then removes the slot, the publication the capture
	// made, the topic and the target's state, so that a new capture of
	// the same name starts afresh.
	dropKafka := func() (string, error) {
		out, err := exec.Command(testbin.Repstream(t), "drop", "--kafka", brokers, "--source", src.DSN(srcDB), "--slot", slot,
			"--target", tgtC.DSN(tgtDB), "--spill-dir", spill).CombinedOutput()
		return string(out), err
	}
	ap.stop()
	if out, err := dropKafka(); err == nil || !strings.Contains(out, "is in use") {
		t.Fatalf("drop --kafka while the capture runs: %v, want a refusal:\n%s", err, out)
	}
	capt.stop()
	if out, err := dropKafka(); err != nil {
		t.Fatalf("drop --kafka: %v\n%s", err, out)
	}
	var left string
	if err := s.QueryRow(ctx, `SELECT concat_ws(' ',
		(SELECT 'slot' FROM pg_replication_slots WHERE slot_name = $1),
		(SELECT 'publication' FROM pg_publication WHERE pubname = $1))`, slot).Scan(&left); err != nil || left != "" {
		t.Fatalf("left on the source after drop --kafka: %q, %v", left, err)
	}
	if td, err := adm.ListTopics(ctx, topic); err != nil || td.Has(topic) {
		t.Fatalf("topic %s after drop --kafka: listed %v, %v", topic, td.Has(topic), err)
	}
	var states int
	if err := tc.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'").Scan(&states); err != nil || states != 0 {
		t.Fatalf("the schema repstream on the target after drop --kafka: %d, %v", states, err)
	}
	capt = startProc(t, "capture (after drop --kafka)", append([]string{"capture", "--tables", "public.tr"}, common...)...)
	logTails(t, capt)
	capt.waitLogged("capture session started", 60*time.Second)
	capt.stop()
}

// TestKafkaTablesAdd (issue 30): `tables add` through Kafka, run for one
// target: it adds the table to the publication, and that target's apply
// copies the table at a snapshot of its own while it runs. The other
// target's apply meets the ALTER PUBLICATION in the stream (the source's
// event trigger reports it) and copies the table too, at a snapshot of its
// own, without a `tables add` of its own; both then apply the table's
// later changes. Without the event trigger (--ddl=relation) nothing in the
// stream says the table was added: the other target's apply copies it
// because its first change is of a table that target never copied. A
// capture started again with a wider --tables adds the new tables to its
// publication; before, it used it as it was, and they reached no target.
func TestKafkaTablesAdd(t *testing.T) {
	k := kafkatest.Shared(t)
	for _, ddl := range []string{"trigger", "relation"} {
		t.Run(ddl, func(t *testing.T) {
			t.Parallel() // each its own databases and slot
			kafkaTablesAdd(t, k, ddl)
		})
	}
}

func kafkaTablesAdd(t *testing.T, k *kafkatest.Cluster, ddl string) {
	src := pgtest.Shared(t, "source")
	tgtC := pgtest.Shared(t, "target")
	srcDB := pgtest.NewDB(t, src)
	tgt1, tgt2 := pgtest.NewDB(t, tgtC), pgtest.NewDB(t, tgtC)
	ctx := t.Context()
	s, err := pgx.Connect(ctx, src.DSN(srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Exec(ctx, `CREATE TABLE first (id int PRIMARY KEY, v text); CREATE TABLE later (id int PRIMARY KEY, v text);
		INSERT INTO later SELECT g, 'before' FROM generate_series(1, 500) g`); err != nil {
		t.Fatal(err)
	}
	slot := "ka_" + strings.TrimPrefix(srcDB, "t_")
	if len(slot) > 40 {
		slot = slot[:40]
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), src.DSN(srcDB)); err == nil {
			_, _ = c.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
			c.Close(context.Background())
		}
	})
	brokers := strings.Join(k.Addrs(), ",")
	common := []string{"--source", src.DSN(srcDB), "--slot", slot, "--kafka", brokers}
	captArgs := []string{"capture", "--tables", "public.first"}
	if ddl == "relation" {
		captArgs = append(captArgs, "--ddl", "relation")
	}
	capt := startProc(t, "capture", append(captArgs, common...)...)
	var aps []*proc
	for i, db := range []string{tgt1, tgt2} {
		aps = append(aps, startProc(t, fmt.Sprintf("apply %d", i+1), append([]string{"apply", "--target", tgtC.DSN(db), "--create-tables",
			"--spill-dir", filepath.Join(t.TempDir(), "spill")}, common...)...))
	}
	logTails(t, append([]*proc{capt}, aps...)...)
	if _, err := s.Exec(ctx, "INSERT INTO first SELECT g, 'x' FROM generate_series(1, 100) g"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{tgt1, tgt2} {
		sameTables(t, s, tgtC.DSN(db), 60*time.Second, append([]*proc{capt}, aps...), "first")
	}
	tablesAdd := func(db, wait string) {
		t.Helper()
		add := exec.Command(testbin.Repstream(t), "tables", "add", "public.later", "--create-tables", "--source", src.DSN(srcDB),
			"--target", tgtC.DSN(db), "--slot", slot, "--wait", wait)
		out, err := add.CombinedOutput()
		if err != nil {
			t.Fatalf("tables add on %s: %v\n%s", db, err, out)
		}
		if strings.Contains(string(out), "not created by repstream") {
			t.Errorf("tables add on %s says the capture's publication was not created by repstream:\n%s", db, out)
		}
	}
	tablesAdd(tgt1, "60s")
	if _, err := s.Exec(ctx, "UPDATE later SET v = 'while one target has it' WHERE id = 500"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{tgt1, tgt2} {
		sameTables(t, s, tgtC.DSN(db), 60*time.Second, append([]*proc{capt}, aps...), "first", "later")
	}
	if ddl == "trigger" {
		// The second target learnt of the table from the ALTER
		// PUBLICATION in the topic: its warning says so, not that the
		// table was set LOGGED or moved into a published schema.
		out := aps[1].out.Tail(1 << 20)
		if l := lineWith(out, "a table was added to the publication", "public.later"); l == "" || strings.Contains(out, "SET LOGGED, SET SCHEMA") {
			t.Errorf("%s: want the warning that a table was added to the publication, and none naming SET LOGGED or SET SCHEMA:\n%s", aps[1].name, out)
		}
	}
	for i := range 200 {
		if _, err := s.Exec(ctx, "UPDATE later SET v = 'after' WHERE id = $1", i+1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Exec(ctx, "INSERT INTO first VALUES ($1, 'y')", 1000+i); err != nil {
			t.Fatal(err)
		}
	}
	for _, db := range []string{tgt1, tgt2} {
		sameTables(t, s, tgtC.DSN(db), 60*time.Second, append([]*proc{capt}, aps...), "first", "later")
	}
	// The capture started again with a wider --tables: it adds the
	// tables to its publication, and every target copies them (before,
	// it used the publication as it was: the new table reached none).
	capt.stop()
	if _, err := s.Exec(ctx, `CREATE TABLE third (id int PRIMARY KEY, v text); INSERT INTO third SELECT g, 't' FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	captArgs[2] = "public.first,public.third"
	capt = startProc(t, "capture again", append(captArgs, common...)...)
	if _, err := s.Exec(ctx, "UPDATE third SET v = 'after' WHERE id <= 10"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{tgt1, tgt2} {
		sameTables(t, s, tgtC.DSN(db), 60*time.Second, append([]*proc{capt}, aps...), "first", "later", "third")
	}
	capt.stop()
	for _, ap := range aps {
		ap.stop()
	}
}

// TestKafkaEagerAfterNewSession: an apply stopped while the source commits
// a backlog of small transactions, a capture restarted (a new session in
// the topic), then a large transaction streamed in progress that updates
// a row the backlog updates too; the apply started again. Before, the new
// session's decoder knew no commit before it: eager apply took the large
// transaction at once, ahead of the backlog, wrote its row and held it in
// an open target transaction, while the backlog's update of that row
// waited for it and it waited for the backlog (a wait PostgreSQL cannot
// see): the apply hung for ever, silent, the target half applied. Now the
// large transaction waits for the earlier sessions' commits first, and
// the target ends equal to the source. And apply --sync-sequences sets the
// target's sequences at its stop.
func TestKafkaEagerAfterNewSession(t *testing.T) {
	t.Parallel() // see doc.go
	e := newKafkaEnv(t, strings.Join(kafkatest.Shared(t).Addrs(), ","))
	e.exec(`CREATE TABLE kv (id int PRIMARY KEY, v int NOT NULL);
		INSERT INTO kv SELECT g, 0 FROM generate_series(1, 10) g;
		CREATE TABLE big (id serial PRIMARY KEY, t text)`)
	ctx, s, slot, exec1 := t.Context(), e.s, e.slot, e.exec
	tgtDB, tc := e.newTarget()
	tgtDSN := e.tgtC.DSN(tgtDB)
	capt := e.startCapture("capture", "--decoding-work-mem", "64kB")
	ap := e.startApply("apply", tgtDB, "--sync-sequences")
	ap.waitLogged("initial copy done", 60*time.Second)
	exec1("UPDATE kv SET v = 1")
	sameTables(t, s, tgtDSN, 60*time.Second, []*proc{capt, ap}, "kv")
	ap.stop()

	// The backlog: every row of kv updated again and again.
	for i := 1; i <= 1500; i++ {
		exec1("UPDATE kv SET v = $1 WHERE id = $2", i, i%10+1)
	}
	// A new capture session once the topic holds the backlog.
	e.waitCaptured(capt)
	capt.stop()
	pgtest.WaitFor(t, "the slot released", 30*time.Second, func() (bool, error) {
		var n int
		err := s.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", slot).Scan(&n)
		return n == 1, err
	})
	capt = e.startCapture("capture (restarted)", "--decoding-work-mem", "64kB")
	// The large transaction, streamed in progress, updating row 1.
	exec1(`BEGIN; UPDATE kv SET v = 200 WHERE id = 1;
		INSERT INTO big (t) SELECT md5(g::text) FROM generate_series(1, 20000) g; COMMIT`)
	time.Sleep(2 * time.Second)
	ap = e.startApply("apply (restarted)", tgtDB, "--sync-sequences")
	sameTables(t, s, tgtDSN, 90*time.Second, []*proc{capt, ap}, "kv", "big")

	// --sync-sequences: the apply's stop sets the target's sequences to
	// the source's, as run's does (before, apply took the flag and did
	// nothing).
	ap.stop()
	var want, got int64
	if err := s.QueryRow(ctx, "SELECT last_value FROM big_id_seq").Scan(&want); err != nil {
		t.Fatal(err)
	}
	if err := tc.QueryRow(ctx, "SELECT last_value FROM big_id_seq").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("big_id_seq after apply --sync-sequences stopped: target %d, source %d", got, want)
	}
}
