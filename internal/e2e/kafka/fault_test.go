package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// Faults of Kafka mode (issue 30): brokers missing at the start, lost and
// back while capture and apply run, a partition leader killed, a value
// larger than any record, a foreign record in the topic, a second capture
// of the slot, an apply killed inside its grouped target transactions.
// Each test ends with its targets compared row for row with the source,
// with a keyless insert-only table (events) that counts every insert, so
// that a transaction applied twice shows.

// kafkaEnv is a source database, its slot's name and the brokers of a
// Kafka mode test.
type kafkaEnv struct {
	t       *testing.T
	src     *pgcluster.Cluster
	tgtC    *pgcluster.Cluster
	srcDB   string
	s       *pgx.Conn // the test's own source connection
	slot    string
	brokers string
	tables  string // the capture's --tables (newKafkaEnv: public.*)
}

// newKafkaEnv makes a source database with the tables acct (keyed,
// updated), ledger (keyed, insert-only) and events (keyless, insert-only:
// a transaction applied twice shows as a row twice), whose slot is
// dropped at the end.
// loadAndCompare runs the ledger load until it has committed rows rows,
// stops it, and waits until tgt equals the source (procs: what to report
// if one of them exits meanwhile).
func (e *kafkaEnv) loadAndCompare(tgt *pgx.Conn, rows int64, procs ...*proc) {
	e.t.Helper()
	l := startKafkaLoad(e.t, e.src.DSN(e.srcDB), 5*time.Millisecond, 10)
	l.waitLoad(rows, 30*time.Second)
	l.halt()
	waitSame(e.t, e.s, tgt, kafkaTables, 60*time.Second, procs...)
}

// nothingLeft fails the test if the source has the env's slot or any
// publication: what starts that failed must not leave behind.
func (e *kafkaEnv) nothingLeft(who string) {
	e.t.Helper()
	var n int
	if err := e.s.QueryRow(e.t.Context(), "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1) + (SELECT count(*) FROM pg_publication)", e.slot).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	if n != 0 {
		e.t.Fatalf("%s left %d slot(s) or publication(s) on the source", who, n)
	}
}

func newKafkaEnv(t *testing.T, brokers string) *kafkaEnv {
	t.Helper()
	return newKafkaEnvOn(t, brokers, pgtest.Shared(t, "source"))
}

// newKafkaEnvOn is newKafkaEnv with the source database in src.
func newKafkaEnvOn(t *testing.T, brokers string, src *pgcluster.Cluster) *kafkaEnv {
	t.Helper()
	e := &kafkaEnv{t: t, src: src, tgtC: pgtest.Shared(t, "target"), brokers: brokers, tables: "public.*"}
	e.srcDB = pgtest.NewDB(t, e.src)
	// The slot's name keeps the database's sequence suffix: unique.
	name := strings.TrimPrefix(e.srcDB, "t_")
	if len(name) > 40 {
		i := strings.LastIndexByte(name, '_')
		name = name[:40-(len(name)-i)] + name[i:]
	}
	e.slot = "k_" + name
	ctx := t.Context()
	var err error
	if e.s, err = pgx.Connect(ctx, e.src.DSN(e.srcDB)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.s.Close(context.Background())
		c, err := pgx.Connect(context.Background(), e.src.DSN(e.srcDB))
		if err == nil {
			_, _ = c.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
			c.Close(context.Background())
		}
	})
	e.exec(`CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE TABLE ledger (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE events (at bigint NOT NULL, what text);
		ALTER TABLE events REPLICA IDENTITY FULL;
		INSERT INTO acct SELECT g, 0, 'start' FROM generate_series(1, 1000) g;
		INSERT INTO events SELECT -g, 'before' FROM generate_series(1, 100) g;`)
	return e
}

func (e *kafkaEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.s.Exec(e.t.Context(), sql, args...); err != nil {
		e.t.Fatalf("source: %s: %v", firstLine(sql), err)
	}
}

func (e *kafkaEnv) topic() string { return kafkalog.Topic(e.slot) }

// sourceRole makes a login role with REPLICATION and SELECT on the source's
// public tables (what an apply's source role has before repstream's own
// grants), named prefix + the slot, dropped at the end.
func (e *kafkaEnv) sourceRole(prefix string) string {
	e.t.Helper()
	role := prefix + e.slot
	e.exec("CREATE ROLE " + role + " LOGIN REPLICATION")
	e.exec("GRANT SELECT ON ALL TABLES IN SCHEMA public TO " + role)
	e.t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), e.src.DSN(e.srcDB)); err == nil {
			_, _ = c.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
			c.Close(context.Background())
		}
	})
	return role
}

// waitSlotReleased waits until no walsender holds the slot: a stopped
// capture's walsender exits a moment after it, and dropping the slot in
// between fails ("replication slot ... is active").
func (e *kafkaEnv) waitSlotReleased(timeout time.Duration) {
	e.t.Helper()
	pgtest.WaitFor(e.t, "the slot released", timeout, func() (bool, error) {
		var n int
		err := e.s.QueryRow(e.t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", e.slot).Scan(&n)
		return n == 1, err
	})
}

// waitCaptured waits until the capture has written everything the source
// has committed so far to the topic (the slot confirms what the brokers
// acknowledged), failing the test if capt exits meanwhile.
func (e *kafkaEnv) waitCaptured(capt *proc) {
	e.t.Helper()
	var wal string
	if err := e.s.QueryRow(e.t.Context(), "SELECT pg_current_wal_lsn()::text").Scan(&wal); err != nil {
		e.t.Fatal(err)
	}
	pgtest.WaitFor(e.t, "the capture to write what the source committed", 60*time.Second, func() (bool, error) {
		capt.alive()
		var ok bool
		err := e.s.QueryRow(e.t.Context(), "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", e.slot, wal).Scan(&ok)
		return ok, err
	})
}

func (e *kafkaEnv) common() []string {
	return []string{"--source", e.src.DSN(e.srcDB), "--slot", e.slot, "--kafka", e.brokers, "--log-level", "info"}
}

func (e *kafkaEnv) captureArgs(extra ...string) []string {
	a := append([]string{"capture", "--tables", e.tables, "--status-interval", "1s"}, e.common()...)
	return append(a, extra...)
}

func (e *kafkaEnv) applyArgs(db string, extra ...string) []string {
	a := append([]string{"apply", "--target", e.tgtC.DSN(db), "--create-tables",
		"--spill-dir", filepath.Join(e.t.TempDir(), "spill")}, e.common()...)
	return append(a, extra...)
}

// newTarget makes a target database and a connection to it.
func (e *kafkaEnv) newTarget() (string, *pgx.Conn) {
	e.t.Helper()
	db := pgtest.NewDB(e.t, e.tgtC)
	c, err := pgx.Connect(e.t.Context(), e.tgtC.DSN(db))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return db, c
}

// startCapture starts a capture and waits for it to stream from the slot
// (the topic exists from then on): its walsender replicating, not merely
// the slot active, which it is while CREATE_REPLICATION_SLOT waits for
// the source's open transactions too. TestKafkaStatusStoppedCopy then
// took its lock before the slot was made, and met the slot inactive for
// the moment between its creation and START_REPLICATION.
func (e *kafkaEnv) startCapture(name string, extra ...string) *proc {
	e.t.Helper()
	p := startProc(e.t, name, e.captureArgs(extra...)...)
	logTails(e.t, p)
	pgtest.WaitFor(e.t, "the capture to stream from its slot", 60*time.Second, func() (bool, error) {
		p.alive()
		var n int
		err := e.s.QueryRow(e.t.Context(), `SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1 AND r.state IN ('catchup', 'streaming')`, e.slot).Scan(&n)
		return n == 1, err
	})
	return p
}

// startApply starts an apply into db.
func (e *kafkaEnv) startApply(name, db string, extra ...string) *proc {
	e.t.Helper()
	p := startProc(e.t, name, e.applyArgs(db, extra...)...)
	logTails(e.t, p)
	return p
}

// tableOrder is a table and the order its rows are compared in.
type tableOrder struct{ table, order string }

var kafkaTables = []tableOrder{{"acct", "id"}, {"ledger", "id"}, {"events", "at, what"}}

// tableSum is a table's row count and the md5 of its rows in order.
func tableSum(ctx context.Context, c *pgx.Conn, tb tableOrder) (int64, string, error) {
	var n int64
	var h string
	q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY %s)), '') FROM %s x", tb.order, tb.table)
	err := c.QueryRow(ctx, q).Scan(&n, &h)
	return n, h, err
}

// waitSame waits until every table of tables has the same rows on src and
// tgt, failing t after timeout or as soon as one of alive has exited.
func waitSame(t *testing.T, src, tgt *pgx.Conn, tables []tableOrder, timeout time.Duration, alive ...*proc) {
	t.Helper()
	ctx := t.Context()
	for _, tb := range tables {
		pgtest.WaitFor(t, fmt.Sprintf("%s equal on source and target", tb.table), timeout, func() (bool, error) {
			for _, p := range alive {
				p.alive()
			}
			// Counts first: while the target catches up they differ,
			// and a count costs the servers a fraction of a checksum.
			var c1, c2 int64
			if err := src.QueryRow(ctx, "SELECT count(*) FROM "+tb.table+" x").Scan(&c1); err != nil {
				return false, fmt.Errorf("source: %w", err)
			}
			if err := tgt.QueryRow(ctx, "SELECT count(*) FROM "+tb.table+" x").Scan(&c2); err != nil {
				return false, fmt.Errorf("target: %w", err)
			}
			if c1 != c2 {
				return false, fmt.Errorf("source %d rows, target %d rows", c1, c2)
			}
			n1, h1, err := tableSum(ctx, src, tb)
			if err != nil {
				return false, fmt.Errorf("source: %w", err)
			}
			n2, h2, err := tableSum(ctx, tgt, tb)
			if err != nil {
				return false, fmt.Errorf("target: %w", err)
			}
			if n1 != n2 || h1 != h2 {
				return false, fmt.Errorf("source %d rows (%s), target %d rows (%s)", n1, h1, n2, h2)
			}
			return true, nil
		})
	}
	// Equal rows may come before an apply's first start has recorded its
	// copy: a test that stops it then would interrupt that start (which
	// removes what it made). Wait for every copy on the target recorded.
	pgtest.WaitFor(t, "the target's initial copies recorded", timeout, func() (bool, error) {
		for _, p := range alive {
			p.alive()
		}
		var copying, all int
		err := tgt.QueryRow(ctx, "SELECT count(*) FILTER (WHERE snapshot <> 'done'), count(*) FROM repstream.progress").Scan(&copying, &all)
		if err != nil {
			return false, err
		}
		if copying > 0 || all == 0 {
			return false, fmt.Errorf("%d of %d copies not recorded done", copying, all)
		}
		return true, nil
	})
	// A duplicate of an insert-only row would be counted above; say so
	// plainly when it happens.
	for _, tb := range tables {
		if tb.table != "events" {
			continue
		}
		var dup int64
		if err := tgt.QueryRow(ctx, "SELECT count(*) FROM (SELECT at FROM events GROUP BY at HAVING count(*) > 1) d").Scan(&dup); err != nil {
			t.Fatal(err)
		}
		if dup > 0 {
			t.Fatalf("target: %d events rows applied more than once", dup)
		}
	}
}

// waitLedger waits until the target holds the ledger row id (the apply
// streams up to there), failing t after timeout or as soon as one of
// alive has exited.
func waitLedger(t *testing.T, tgt *pgx.Conn, id int64, timeout time.Duration, alive ...*proc) {
	t.Helper()
	pgtest.WaitFor(t, fmt.Sprintf("ledger row %d on the target", id), timeout, func() (bool, error) {
		for _, p := range alive {
			p.alive()
		}
		var ok bool
		err := tgt.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM ledger WHERE id = $1)", id).Scan(&ok)
		return ok, err
	})
}

// kafkaLoader writes small transactions to the source, one statement each,
// until halted: transaction n updates an acct row and inserts ledger row
// n, and every keylessEvery-th also inserts events row n. A keyless table
// makes a transaction a barrier the apply does not group with others, so
// most transactions leave it alone.
type kafkaLoader struct {
	t        *testing.T
	next     atomic.Int64 // the events.at of the next insert
	done     atomic.Int64 // transactions committed
	maxLat   atomic.Int64 // the slowest commit, in nanoseconds
	stopping chan struct{}
	stopped  chan struct{}
	mu       sync.Mutex
	err      error
}

// startKafkaLoad starts a kafkaLoader on dsn pausing pause between transactions.
func startKafkaLoad(t *testing.T, dsn string, pause time.Duration, keylessEvery int64) *kafkaLoader {
	t.Helper()
	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	l := &kafkaLoader{t: t, stopping: make(chan struct{}), stopped: make(chan struct{})}
	l.next.Store(1)
	go func() {
		defer close(l.stopped)
		defer c.Close(context.Background())
		for {
			select {
			case <-l.stopping:
				return
			default:
			}
			n := l.next.Load()
			t0 := time.Now()
			_, err := c.Exec(context.Background(), `WITH u AS (UPDATE acct SET v = v + 1 WHERE id = $1), l AS (INSERT INTO ledger (id) VALUES ($2))
				INSERT INTO events SELECT $2, 'load' WHERE $2 % $3 = 0`, n%1000+1, n, keylessEvery)
			if err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			if d := int64(time.Since(t0)); d > l.maxLat.Load() {
				l.maxLat.Store(d)
			}
			l.next.Add(1)
			l.done.Add(1)
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
	t.Cleanup(l.halt)
	return l
}

// halt stops the loader and fails t if a write failed.
func (l *kafkaLoader) halt() {
	select {
	case <-l.stopping:
	default:
		close(l.stopping)
	}
	<-l.stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		l.t.Errorf("source load: %v", l.err)
		l.err = nil
	}
}

// waitLoad waits until the loader has committed n more transactions.
func (l *kafkaLoader) waitLoad(n int64, timeout time.Duration) {
	l.t.Helper()
	want := l.done.Load() + n
	pgtest.WaitFor(l.t, fmt.Sprintf("%d more source transactions", n), timeout, func() (bool, error) {
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		return l.done.Load() >= want, err
	})
}

// exitOf waits up to timeout for p to exit and returns its error (nil:
// exit status 0); it fails t if p is still running then.
func exitOf(t *testing.T, p *proc, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("%s still runs after %s:\n%s", p.name, timeout, p.out.Tail(40))
		return nil
	}
}

// lineWith is the last line of out holding every one of subs ("" if none).
func lineWith(out string, subs ...string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(lines[i], s)
		}
		if ok {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// closedAddr is the address of a listener just closed: nothing listens there.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestKafkaBrokerDownAtStart: capture and apply given brokers where nothing
// listens fail at once, naming the address, having made nothing on the
// source or the target; with a broker there afterwards, the same commands
// replicate.
func TestKafkaBrokerDownAtStart(t *testing.T) {
	t.Parallel() // see doc.go
	addr := closedAddr(t)
	e := newKafkaEnv(t, addr)
	tgtDB, tgt := e.newTarget()
	ctx := t.Context()

	for _, c := range []struct {
		name string
		argv []string
	}{
		{"capture", e.captureArgs()},
		{"apply", e.applyArgs(tgtDB)},
	} {
		t0 := time.Now()
		p := startProc(t, c.name, c.argv...)
		err := exitOf(t, p, 30*time.Second)
		out := p.out.Tail(20)
		t.Logf("%s exited after %s: %v: %s", c.name, time.Since(t0).Round(time.Millisecond), err, strings.TrimSpace(out))
		if err == nil {
			t.Fatalf("%s with no broker at %s exited 0:\n%s", c.name, addr, out)
		}
		if !strings.Contains(out, addr) {
			t.Fatalf("%s: the error does not name the broker address %s:\n%s", c.name, addr, out)
		}
	}
	var n int
	if err := e.s.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1) + (SELECT count(*) FROM pg_publication)", e.slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the failed capture left %d slot(s) or publication(s) on the source", n)
	}
	if err := tgt.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'repstream%' OR nspname = '_repstream'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the failed apply left %d repstream schema(s) on the target", n)
	}

	// The brokers come: the same commands, with their address, replicate.
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1})
	e.brokers = strings.Join(k.Addrs(), ",")
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	e.loadAndCompare(tgt, 200, capt, ap)
	capt.stop()
	ap.stop()
}

// TestKafkaBrokersWithoutTransactions: a capture against a broker that
// cannot serve Kafka transactions (its __transaction_state topic would
// need 3 brokers) stops at once, naming the setting, having made nothing
// on the source (it could not fence an earlier capture of the slot).
func TestKafkaBrokersWithoutTransactions(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1, Settings: map[string]string{"transaction.state.log.replication.factor": "3"}})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	t0 := time.Now()
	p := startProc(t, "capture", e.captureArgs()...)
	err := exitOf(t, p, 60*time.Second)
	out := p.out.Tail(20)
	t.Logf("capture exited after %s: %v: %s", time.Since(t0).Round(time.Millisecond), err, lastLine(out))
	if err == nil || !strings.Contains(out, "transaction.state.log.replication.factor is 3 and there are 1 broker(s)") {
		t.Fatalf("capture against brokers without transactions: %v\n%s", err, out)
	}
	e.nothingLeft("the failed capture")
	// check --kafka says so beforehand.
	tgtDB, _ := e.newTarget()
	ck := exec.Command(testbin.Repstream(t), "check", "--kafka", e.brokers, "--source", e.src.DSN(e.srcDB), "--target", e.tgtC.DSN(tgtDB), "--slot", e.slot)
	ckOut, err := ck.CombinedOutput()
	if l := lineWith(string(ckOut), "transactions", "transaction.state.log.replication.factor is 3"); err == nil || !strings.Contains(l, "FAIL") {
		t.Fatalf("check --kafka against brokers without transactions: %v, want a FAIL naming the setting:\n%s", err, ckOut)
	} else {
		t.Logf("check: %s", l)
	}
}

// TestKafkaTopicRefused: a topic made beforehand by someone else that
// could not hold the stream (compacted: the capture's records have no key
// and every one is needed; or messages smaller than the capture's
// batches) stops the capture before it makes anything on the source,
// naming the setting and the fix; check --kafka says so too.
//
// Its subtest "another source" (topicOfAnotherSource) runs on the same
// broker.
func TestKafkaTopicRefused(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	t.Run("settings", func(t *testing.T) { topicSettingsRefused(t, k) })
	t.Run("another source", func(t *testing.T) { topicOfAnotherSource(t, k) })
	t.Run("database made again", func(t *testing.T) { topicOfDatabaseMadeAgain(t, k) })
	t.Run("later marker of another database", func(t *testing.T) { laterMarkerOfAnotherDatabase(t, k) })
}

func topicSettingsRefused(t *testing.T, k *kafkatest.Cluster) {
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	adm, cl, err := kafkalog.NewAdmin(kafkalog.Plain(kafkalog.Brokers(e.brokers)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact := "compact"
	if _, err := adm.CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": &compact}, e.topic()); err != nil {
		t.Fatal(err)
	}
	tgtDB, _ := e.newTarget()
	for _, c := range []struct{ set, value, want string }{
		{"cleanup.policy", "compact", "cleanup.policy=compact: a slot's stream needs every record"},
		{"max.message.bytes", "100000", "max.message.bytes=100000: the capture writes batches of up to"},
	} {
		v := c.value
		if _, err := adm.AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: c.set, Value: &v}}, e.topic()); err != nil {
			t.Fatal(err)
		}
		// The controller answers before the broker has replayed the
		// change: wait until the broker describes it (and the last
		// round's fix).
		waitTopicConfig(t, adm, e.topic(), c.set, c.value)
		if c.set != "cleanup.policy" {
			waitTopicConfig(t, adm, e.topic(), "cleanup.policy", "delete")
		}
		p := startProc(t, "capture", e.captureArgs()...)
		err := exitOf(t, p, 60*time.Second)
		out := p.out.Tail(20)
		if err == nil || !strings.Contains(out, c.want) {
			t.Fatalf("capture into a topic with %s=%s: %v, want a stop naming %q\n%s", c.set, c.value, err, c.want, out)
		}
		t.Logf("capture: %s", lineWith(out, c.want))
		e.nothingLeft("the refused capture")
		ck := exec.Command(testbin.Repstream(t), "check", "--kafka", e.brokers, "--source", e.src.DSN(e.srcDB), "--target", e.tgtC.DSN(tgtDB), "--slot", e.slot)
		ckOut, err := ck.CombinedOutput()
		if l := lineWith(string(ckOut), c.want); err == nil || !strings.Contains(l, "FAIL") {
			t.Fatalf("check --kafka on a topic with %s=%s: %v, want a FAIL naming it:\n%s", c.set, c.value, err, ckOut)
		}
		// The next round's topic has the fix for this one.
		fix := map[string]string{"cleanup.policy": "delete", "max.message.bytes": strconv.Itoa(kafkalog.MaxBatchBytes)}[c.set]
		if _, err := adm.AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: c.set, Value: &fix}}, e.topic()); err != nil {
			t.Fatal(err)
		}
	}
	// Both fixed: the capture runs.
	waitTopicConfig(t, adm, e.topic(), "max.message.bytes", strconv.Itoa(kafkalog.MaxBatchBytes))
	capt := e.startCapture("capture")
	capt.stop()
}

// waitTopicConfig waits until the brokers describe topic's config name
// as value.
func waitTopicConfig(t *testing.T, adm *kadm.Client, topic, name, value string) {
	t.Helper()
	pgtest.WaitFor(t, "topic "+topic+" to have "+name+"="+value, 30*time.Second, func() (bool, error) {
		rcs, err := adm.DescribeTopicConfigs(t.Context(), topic)
		if err != nil {
			return false, err
		}
		rc, err := rcs.On(topic, nil)
		if err != nil {
			return false, err
		}
		for _, c := range rc.Configs {
			if c.Key == name {
				return c.MaybeValue() == value, nil
			}
		}
		return false, nil
	})
}

// topicOfAnotherSource (TestKafkaTopicRefused/another_source): a slot's topic written by the capture of
// one source database is not taken up by the capture of another source
// under the same slot name (it would skip its own transactions below that
// stream's LSNs, and its records would reach the first source's targets),
// nor applied by an apply whose --source is that other database (its copy
// would be of one database, its stream of the other). Each stops before
// it makes anything, naming both sources.
func topicOfAnotherSource(t *testing.T, k *kafkatest.Cluster) {
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()

	// Another source: a database with the same tables on another server.
	other := pgtest.NewDB(t, e.tgtC)
	oc, err := pgx.Connect(t.Context(), e.tgtC.DSN(other))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close(context.Background())
	if _, err := oc.Exec(t.Context(), `CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE TABLE ledger (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE events (at bigint NOT NULL, what text)`); err != nil {
		t.Fatal(err)
	}
	withSource := func(args []string) []string {
		out := slices.Clone(args)
		i := slices.Index(out, "--source")
		out[i+1] = e.tgtC.DSN(other)
		return out
	}
	p := startProc(t, "capture of another source", withSource(e.captureArgs())...)
	err = exitOf(t, p, 60*time.Second)
	out := p.out.Tail(20)
	if err == nil || !strings.Contains(out, "holds the stream of another source") || !strings.Contains(out, "give this capture another --slot") {
		t.Fatalf("capture of another source into the topic: %v, want a stop naming both sources\n%s", err, out)
	}
	t.Logf("capture: %s", lineWith(out, "another source"))
	var left int
	if err := oc.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1) + (SELECT count(*) FROM pg_publication)", e.slot).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the refused capture left %d slot(s) or publication(s) on the other source (%v)", left, err)
	}

	db2, tgt2 := e.newTarget()
	p = startProc(t, "apply from another source", withSource(e.applyArgs(db2))...)
	err = exitOf(t, p, 60*time.Second)
	out = p.out.Tail(20)
	if err == nil || !strings.Contains(out, "point --source at the database the capture of slot "+e.slot+" reads") {
		t.Fatalf("apply with another --source: %v, want a stop naming both sources\n%s", err, out)
	}
	t.Logf("apply: %s", lineWith(out, "another source"))
	var made int
	if err := tgt2.QueryRow(t.Context(), "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')").Scan(&made); err != nil || made != 0 {
		t.Fatalf("the refused apply made %d relations on its target (%v)", made, err)
	}
}

// topicOfDatabaseMadeAgain (TestKafkaTopicRefused/database_made_again):
// the source database is dropped and made again under the same name on
// the same server, from a copy made earlier (CREATE DATABASE ... TEMPLATE:
// the same tables, OIDs, publication and event triggers, an older state),
// and the slot is made again by hand. Same system identifier, same name,
// another database OID. Its capture does not write into the slot's topic
// (whose markers name the dropped database's OID), and an apply whose
// --source is the new database does not take that topic, its target's
// or a new one: the target, which holds rows the copy lacks, would go on
// with the new database's stream and differ from its source without an
// error. Each stops before it makes anything, naming both OIDs.
func topicOfDatabaseMadeAgain(t *testing.T, k *kafkatest.Cluster) {
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()

	var oldOID uint32
	if err := e.s.QueryRow(t.Context(), "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&oldOID); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(t.Context(), e.src.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	adminExec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := admin.Exec(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	// The copy, then rows the target takes and the copy lacks.
	snap := e.srcDB + "_copy"
	e.s.Close(context.Background())
	adminExec("CREATE DATABASE " + snap + " TEMPLATE " + e.srcDB)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+snap+" WITH (FORCE)") })
	if e.s, err = pgx.Connect(t.Context(), e.src.DSN(e.srcDB)); err != nil {
		t.Fatal(err)
	}
	capt = e.startCapture("capture (2)")
	ap = e.startApply("apply (2)", db)
	e.exec("INSERT INTO events VALUES (2, 'not in the copy')")
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()
	e.waitSlotReleased(30 * time.Second)

	e.s.Close(context.Background())
	adminExec("SELECT pg_drop_replication_slot('"+e.slot+"')",
		"DROP DATABASE "+e.srcDB+" WITH (FORCE)",
		"CREATE DATABASE "+e.srcDB+" TEMPLATE "+snap)
	if e.s, err = pgx.Connect(t.Context(), e.src.DSN(e.srcDB)); err != nil {
		t.Fatal(err)
	}
	var newOID uint32
	if err := e.s.QueryRow(t.Context(), "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&newOID); err != nil || newOID == oldOID {
		t.Fatalf("the database made again has OID %d, the dropped one %d (%v)", newOID, oldOID, err)
	}
	e.exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", e.slot)

	p := startProc(t, "capture of the database made again", e.captureArgs()...)
	logTails(t, p)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(30 * time.Second):
		// It took the topic: the dropped database's target reads this
		// one's changes on top of rows this one lacks.
		ap := e.startApply("apply (restarted)", db)
		e.exec("INSERT INTO events VALUES (1, 'written in the database made again')")
		time.Sleep(10 * time.Second)
		var took, lacks int
		_ = tgt.QueryRow(t.Context(), "SELECT count(*) FILTER (WHERE at = 1), count(*) FILTER (WHERE at = 2) FROM events").Scan(&took, &lacks)
		ap.kill()
		p.kill()
		t.Fatalf("the capture of the database made again (OID %d) wrote into the topic of the dropped one (OID %d): its target took %d of the new database's changes and keeps %d row(s) the new database lacks:\n%s",
			newOID, oldOID, took, lacks, p.out.Tail(20))
	}
	err = exitOf(t, p, time.Second)
	out := p.out.Tail(20)
	want := []string{"holds the stream of another source", fmt.Sprintf("OID %d", oldOID), fmt.Sprintf("OID %d", newOID)}
	if err == nil || lineWith(out, want...) == "" {
		t.Fatalf("capture of the database made again: %v, want a stop naming %q\n%s", err, want, out)
	}
	t.Logf("capture: %s", lineWith(out, want...))

	want = append(want, "point --source at the database the capture of slot "+e.slot+" reads")
	db2, tgt2 := e.newTarget()
	for _, c := range []struct {
		name, db string
		tgt      *pgx.Conn
	}{{"apply (restarted) from the database made again", db, tgt}, {"apply (new target) from the database made again", db2, tgt2}} {
		var before int
		if err := c.tgt.QueryRow(t.Context(), "SELECT count(*) FROM pg_class").Scan(&before); err != nil {
			t.Fatal(err)
		}
		p = startProc(t, c.name, e.applyArgs(c.db)...)
		err = exitOf(t, p, 60*time.Second)
		out = p.out.Tail(20)
		if err == nil || lineWith(out, want...) == "" {
			t.Fatalf("%s: %v, want a stop naming %q\n%s", c.name, err, want, out)
		}
		t.Logf("%s: %s", c.name, lineWith(out, want...))
		var after int
		if err := c.tgt.QueryRow(t.Context(), "SELECT count(*) FROM pg_class").Scan(&after); err != nil || after != before {
			t.Fatalf("%s made relations on its target: %d before, %d after (%v)", c.name, before, after, err)
		}
	}
}

// laterMarkerOfAnotherDatabase (TestKafkaTopicRefused/later_marker_of_another_database):
// a running apply meets an epoch marker naming its source's system
// identifier and database name but another database OID (the marker of
// a capture of a database made again under that name): it stops at that
// marker, naming both OIDs, as its start would.
func laterMarkerOfAnotherDatabase(t *testing.T, k *kafkatest.Cluster) {
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	var marker *kgo.Record
	var last kafkalog.Header
	eachRecord(t, k, e.topic(), func(r *kgo.Record) {
		h, _, err := kafkalog.ParseHeader(r.Value)
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if h.Kind == kafkalog.KindEpoch {
			marker = r
		}
		last = h
	})
	if marker == nil {
		t.Fatal("no epoch marker in the topic")
	}
	_, body, _ := kafkalog.ParseHeader(marker.Value)
	ep, err := kafkalog.ParseEpochRecord(body, marker.Headers)
	if err != nil || ep.DatabaseOID == 0 {
		t.Fatalf("the capture's marker %+v names no database OID (%v)", ep, err)
	}
	other := ep
	other.DatabaseOID++
	v := kafkalog.AppendHeader(nil, kafkalog.Header{Kind: kafkalog.KindEpoch, Epoch: last.Epoch + 1, LastCommit: last.LastCommit, Proto: last.Proto, Binary: last.Binary})
	rec := &kgo.Record{Value: kafkalog.AppendEpoch(v, other), Headers: kafkalog.EpochHeaders(other)}
	if err := k.Client(t, kgo.DefaultProduceTopic(e.topic())).ProduceSync(t.Context(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	err = exitOf(t, ap, 60*time.Second)
	want := []string{fmt.Sprintf("offset %d", rec.Offset), "holds the stream of another source", fmt.Sprintf("OID %d", ep.DatabaseOID), fmt.Sprintf("OID %d", other.DatabaseOID)}
	if out := ap.out.Tail(20); err == nil || lineWith(out, want...) == "" {
		t.Fatalf("an apply that meets a marker of another database OID: %v, want a stop naming %q\n%s", err, want, out)
	}
	t.Logf("apply: %s", lineWith(ap.out.Tail(20), want...))
	capt.stop()
}

// TestKafkaApplySourceOnAnotherServer: an apply whose --source is a
// database of the same name and OID as the capture's on another server
// (the first database made on a server has OID 16384), whose role may
// not call pg_control_system() (revoked from PUBLIC there), is refused
// before it makes anything, naming both system identifiers: it reads its
// server's with IDENTIFY_SYSTEM. It would have copied that server's
// tables and applied the topic's stream of the capture's on top. Serial:
// t.Setenv (a server of its own initdb, not a copy of the shared
// template, has a system identifier of its own).
func TestKafkaApplySourceOnAnotherServer(t *testing.T) {
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	capt := e.startCapture("capture")
	var oid uint32
	var sysid string
	if err := e.s.QueryRow(t.Context(), "SELECT d.oid, s.system_identifier::text FROM pg_database d, pg_control_system() s WHERE d.datname = current_database()").Scan(&oid, &sysid); err != nil {
		t.Fatal(err)
	}

	t.Setenv(pgcluster.EnvNoTemplate, "1")
	other := pgtest.Cluster(t, pgcluster.Options{Fast: true})
	admin, err := pgx.Connect(t.Context(), other.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var otherID string
	if err := admin.QueryRow(t.Context(), "SELECT system_identifier::text FROM pg_control_system()").Scan(&otherID); err != nil || otherID == sysid {
		t.Fatalf("the other server's system identifier %s, the source's %s (%v)", otherID, sysid, err)
	}
	role := "applysrc_" + e.slot
	for _, q := range []string{
		fmt.Sprintf("CREATE DATABASE %s OID %d", e.srcDB, oid),
		"CREATE ROLE " + role + " LOGIN REPLICATION",
	} {
		if _, err := admin.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	oc, err := pgx.Connect(t.Context(), other.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close(context.Background())
	// As the capture of a slot of that name there would have made them.
	for _, q := range []string{`CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE TABLE ledger (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE events (at bigint NOT NULL, what text);
		INSERT INTO acct VALUES (1, 1, 'the other server');
		GRANT SELECT ON ALL TABLES IN SCHEMA public TO ` + role + `;
		CREATE PUBLICATION ` + e.slot + ` FOR TABLE acct, ledger, events;
		REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC`,
		"SELECT pg_create_logical_replication_slot('" + e.slot + "', 'pgoutput')",
	} {
		if _, err := oc.Exec(t.Context(), q); err != nil {
			t.Fatalf("other server: %s: %v", firstLine(q), err)
		}
	}
	defer func() { _, _ = oc.Exec(context.Background(), "SELECT pg_drop_replication_slot('"+e.slot+"')") }()

	args := e.applyArgs("")
	db, tgt := e.newTarget()
	i := slices.Index(args, "--source")
	args[i+1] = strings.Replace(other.DSN(e.srcDB), "user="+pgcluster.Superuser+" ", "user="+role+" ", 1)
	args[slices.Index(args, "--target")+1] = e.tgtC.DSN(db)
	p := startProc(t, "apply from another server", args...)
	logTails(t, p)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(30 * time.Second):
		var n int
		_ = tgt.QueryRow(t.Context(), "SELECT count(*) FROM acct").Scan(&n)
		t.Fatalf("the apply from the other server (system identifier %s) took the topic of the capture of system identifier %s: its target has %d row(s) in acct, copied from the other server\n%s",
			otherID, sysid, n, p.out.Tail(20))
	}
	err = exitOf(t, p, time.Second)
	want := []string{"holds the stream of another source", "system identifier " + sysid, "system identifier " + otherID, "point --source at the database"}
	if out := p.out.Tail(20); err == nil || lineWith(out, want...) == "" {
		t.Fatalf("apply from another server: %v, want a stop naming %q\n%s", err, want, out)
	}
	t.Logf("apply: %s", lineWith(p.out.Tail(20), want...))
	var made int
	if err := tgt.QueryRow(t.Context(), "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')").Scan(&made); err != nil || made != 0 {
		t.Fatalf("the refused apply made %d relations on its target (%v)", made, err)
	}
	capt.stop()
}

// TestKafkaBrokerAwayPastTxnTimeout: the broker is away for longer than
// the capture's Kafka transaction timeout (here 6 s), so that, back, it
// aborts the capture's open transaction and refuses its producer: the
// capture starts a new session by itself and goes on; the target ends
// equal to the source.
func TestKafkaBrokerAwayPastTxnTimeout(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1, Settings: map[string]string{
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture", "--kafka-txn-timeout", "6s")
	ap := e.startApply("apply", tgtDB)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 5*time.Millisecond, 10)
	l.waitLoad(200, 30*time.Second)
	waitLedger(t, tgt, l.next.Load()-1, 60*time.Second, capt, ap)

	if err := k.Kill(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	capt.alive()
	rctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := k.Restart(rctx, 0); err != nil {
		t.Fatal(err)
	}
	l.waitLoad(300, 60*time.Second)
	l.halt()
	waitSame(t, e.s, tgt, kafkaTables, 90*time.Second, capt, ap)
	if line := lineWith(capt.out.Tail(200), "starting a new session"); line != "" {
		t.Logf("%s", line)
	} else {
		t.Logf("the capture's producer was not refused (its transaction outlived the outage)")
	}
	capt.stop()
	ap.stop()
}

// slotConfirmed is the slot's confirmed_flush_lsn and how many bytes it is
// past lsn (negative: before it).
func (e *kafkaEnv) slotConfirmed(lsn string) (string, int64) {
	e.t.Helper()
	var c string
	var past int64
	if err := e.s.QueryRow(e.t.Context(), "SELECT confirmed_flush_lsn::text, (confirmed_flush_lsn - $2::pg_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
		e.slot, lsn).Scan(&c, &past); err != nil {
		e.t.Fatal(err)
	}
	return c, past
}

// TestKafkaBrokerLostWhileRunning: the only broker killed -9 under a
// steady load of small transactions: the source goes on committing
// unhindered, the slot is not acknowledged past what was committed before
// the kill (nor at all while the broker is away), capture and apply ride
// through, and once the broker is back everything arrives, once.
func TestKafkaBrokerLostWhileRunning(t *testing.T) {
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	ctx := t.Context()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 5*time.Millisecond, 10)
	l.waitLoad(200, 30*time.Second)
	waitLedger(t, tgt, l.next.Load()-1, 60*time.Second, capt, ap) // the apply streams

	if err := k.Kill(0); err != nil {
		t.Fatal(err)
	}
	var killedAt string
	if err := e.s.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&killedAt); err != nil {
		t.Fatal(err)
	}
	before := l.done.Load()
	l.maxLat.Store(0)
	t0 := time.Now()
	// Acknowledgements the broker gave before it died reach the slot within
	// a status interval (1 s, here 2.5 s for a slow machine); from then on
	// the slot must stand still.
	time.Sleep(2500 * time.Millisecond)
	c1, past1 := e.slotConfirmed(killedAt)
	time.Sleep(time.Until(t0.Add(5 * time.Second)))
	c2, past2 := e.slotConfirmed(killedAt)
	during := l.done.Load() - before
	t.Logf("broker down 5 s: %d source transactions committed (slowest %s); slot confirmed %s then %s; WAL at the kill %s",
		during, time.Duration(l.maxLat.Load()).Round(time.Millisecond), c1, c2, killedAt)
	if past1 > 0 || past2 > 0 {
		t.Fatalf("with the broker down the slot is confirmed up to %s, %d bytes past the WAL end at the kill (%s)", c2, max(past1, past2), killedAt)
	}
	if c1 != c2 {
		t.Fatalf("with the broker down the slot's confirmed position moved from %s to %s", c1, c2)
	}
	if during < 20 || time.Duration(l.maxLat.Load()) > 3*time.Second {
		t.Fatalf("the source was held up while the broker was down: %d transactions in 5 s, the slowest took %s",
			during, time.Duration(l.maxLat.Load()))
	}
	capt.alive()
	ap.alive()

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t1 := time.Now()
	if err := k.Restart(rctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker back after %s", time.Since(t1).Round(time.Millisecond))
	l.waitLoad(200, 30*time.Second)
	l.halt()
	t2 := time.Now()
	waitSame(t, e.s, tgt, kafkaTables, 90*time.Second, capt, ap)
	t.Logf("target equal %s after the load stopped", time.Since(t2).Round(time.Millisecond))
	var end string
	if err := e.s.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the slot confirmed past the kill", 30*time.Second, func() (bool, error) {
		_, past := e.slotConfirmed(killedAt)
		return past > 0, nil
	})
	capt.stop()
	ap.stop()
}

// TestKafkaLeaderKilled: three brokers (replication factor 3,
// min.insync.replicas 2); under a steady load the partition leader of the
// slot's topic is killed -9: nothing lost, nothing applied twice.
func TestKafkaLeaderKilled(t *testing.T) {
	if testing.Short() || os.Getenv("REPSTREAM_KAFKA_FAULTS") == "" {
		t.Skip("starts three brokers and kills the leader: set REPSTREAM_KAFKA_FAULTS=1 to run it")
	}
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 3})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 2*time.Millisecond, 10)
	l.waitLoad(300, 30*time.Second)
	waitLedger(t, tgt, l.next.Load()-1, 60*time.Second, capt, ap) // the apply streams

	leader := k.Leader(t, e.topic(), 0)
	t.Logf("partition leader of %s: broker %d; killing it after %d source transactions", e.topic(), leader, l.done.Load())
	if err := k.Kill(leader); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l.waitLoad(500, 60*time.Second)
	l.halt()
	waitSame(t, e.s, tgt, kafkaTables, 90*time.Second, capt, ap)
	t.Logf("target equal %s after the kill (%d source transactions)", time.Since(t0).Round(time.Millisecond), l.done.Load())
	if nl := k.Leader(t, e.topic(), 0); nl == leader {
		t.Fatalf("broker %d still leads after its kill", leader)
	}
	capt.stop()
	ap.stop()
}

// TestKafkaLargeValue: a 50 MB text value (larger than any record: it
// goes as fragments, inside a transaction streamed in progress) arrives
// byte for byte, and stays when an update leaves it unchanged.
func TestKafkaLargeValue(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	e.exec("CREATE TABLE big (id int PRIMARY KEY, n int NOT NULL, payload text)")
	tgtDB, tgt := e.newTarget()
	ctx := t.Context()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	tables := append([]tableOrder{{"big", "id"}}, kafkaTables...)
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap) // the initial copy is done

	// 50 MiB of md5 hex digits, none repeated: 1,638,400 digests.
	t0 := time.Now()
	e.exec(`INSERT INTO big SELECT 1, 0, string_agg(md5(g::text), '' ORDER BY g) FROM generate_series(1, 1638400) g;
		INSERT INTO events VALUES (1, 'after the big row')`)
	e.exec("INSERT INTO big VALUES (2, 0, 'small')")
	var size int64
	var sum string
	if err := e.s.QueryRow(ctx, "SELECT octet_length(payload), md5(payload) FROM big WHERE id = 1").Scan(&size, &sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("source row of %d bytes written in %s", size, time.Since(t0).Round(time.Millisecond))
	if size != 50<<20 {
		t.Fatalf("the source value has %d bytes, want %d", size, 50<<20)
	}
	check := func(what string) {
		t.Helper()
		pgtest.WaitFor(t, what, 90*time.Second, func() (bool, error) {
			capt.alive()
			ap.alive()
			var n int
			var tsize int64
			var tsum string
			err := tgt.QueryRow(ctx, "SELECT n, octet_length(payload), md5(payload) FROM big WHERE id = 1").Scan(&n, &tsize, &tsum)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			var sn int
			if err := e.s.QueryRow(ctx, "SELECT n FROM big WHERE id = 1").Scan(&sn); err != nil {
				return false, err
			}
			if n != sn {
				return false, nil
			}
			if tsize != size || tsum != sum {
				t.Fatalf("%s: the target's value has %d bytes, md5 %s; the source's %d bytes, md5 %s", what, tsize, tsum, size, sum)
			}
			return true, nil
		})
	}
	check("the 50 MB row on the target")
	t.Logf("50 MB row on the target %s after the insert began", time.Since(t0).Round(time.Millisecond))
	kinds := recordKinds(t, k, e.topic())
	t.Logf("topic records by kind: %d data, %d fragments, %d epoch markers", kinds[kafkalog.KindData], kinds[kafkalog.KindFragment], kinds[kafkalog.KindEpoch])
	if min := (50 << 20) / kafkalog.DefaultMaxRecord; kinds[kafkalog.KindFragment] < min {
		t.Fatalf("%d fragment records, want at least %d for the 50 MB value", kinds[kafkalog.KindFragment], min)
	}
	// An update that leaves the value alone (pgoutput sends it as unchanged TOAST).
	e.exec("UPDATE big SET n = n + 1 WHERE id = 1")
	check("the update of the 50 MB row on the target")
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()
}

// TestKafkaCorruptRecord: a record that repstream did not write, in the
// middle of the slot's topic, stops the apply with an error naming the
// topic and the record's offset (a restart stops there again), having
// applied everything before it; the capture goes on.
func TestKafkaCorruptRecord(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	e.loadAndCompare(tgt, 200, capt, ap)

	cl := k.Client(t, kgo.DefaultProduceTopic(e.topic()))
	rec := &kgo.Record{Value: []byte("hello")}
	if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	t.Logf("foreign record at offset %d of %s", rec.Offset, e.topic())
	// Changes after it: in the topic behind the foreign record.
	e.exec("INSERT INTO events VALUES (0, 'after the foreign record')")

	want := []string{e.topic(), fmt.Sprintf("offset %d", rec.Offset)}
	for i, p := range []*proc{ap, nil} {
		if p == nil {
			p = e.startApply("apply (restarted)", tgtDB)
		}
		t0 := time.Now()
		err := exitOf(t, p, 30*time.Second)
		out := p.out.Tail(20)
		t.Logf("apply %d exited after %s: %v", i+1, time.Since(t0).Round(time.Millisecond), err)
		if err == nil {
			t.Fatalf("%s exited 0 on a foreign record:\n%s", p.name, out)
		}
		line := lineWith(out, want...)
		if line == "" {
			t.Fatalf("%s: no error names %q:\n%s", p.name, want, out)
		}
		t.Logf("%s", line)
	}
	capt.alive()
	// Everything before the foreign record is applied, nothing after it.
	var n int
	if err := tgt.QueryRow(t.Context(), "SELECT count(*) FROM events WHERE at = 0").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a change written after the foreign record was applied")
	}
	e.exec("DELETE FROM events WHERE at = 0")
	waitSame(t, e.s, tgt, kafkaTables, 10*time.Second, capt)
	capt.stop()
}

// TestKafkaTwoCaptures: a second capture of a slot that a capture streams
// from refuses, saying the slot is in use, without disturbing the first:
// its transactions all reach the target, once.
func TestKafkaTwoCaptures(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 5*time.Millisecond, 10)
	l.waitLoad(100, 30*time.Second)

	t0 := time.Now()
	second := startProc(t, "capture 2", e.captureArgs()...)
	err := exitOf(t, second, 40*time.Second)
	out := second.out.Tail(20)
	t.Logf("second capture exited after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("a second capture of the slot exited 0:\n%s", out)
	}
	if !strings.Contains(out, "active") && !strings.Contains(out, "in use") {
		t.Fatalf("the second capture's error does not say the slot is in use:\n%s", out)
	}
	t.Logf("%s", lastLine(out))
	capt.alive()
	l.waitLoad(200, 30*time.Second)
	l.halt()
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	// The refused capture wrote nothing: the topic holds one session.
	if n := recordKinds(t, k, e.topic())[kafkalog.KindEpoch]; n != 1 {
		t.Fatalf("the topic holds %d epoch markers, want 1 (the refused capture wrote one)", n)
	}
	capt.stop()
	ap.stop()
}

// recordKinds counts the records of topic by kind.
func recordKinds(t *testing.T, k *kafkatest.Cluster, topic string) map[byte]int {
	t.Helper()
	n := map[byte]int{}
	for _, h := range recordHeaders(t, k, topic) {
		n[h.Kind]++
	}
	return n
}

// recordHeaders reads the headers of every record of topic, in order.
func recordHeaders(t *testing.T, k *kafkatest.Cluster, topic string) []kafkalog.Header {
	t.Helper()
	var hs []kafkalog.Header
	eachRecord(t, k, topic, func(r *kgo.Record) {
		h, _, err := kafkalog.ParseHeader(r.Value)
		if err != nil {
			t.Fatalf("%s offset %d: %v", topic, r.Offset, err)
		}
		hs = append(hs, h)
	})
	return hs
}

// eachRecord calls f with every record of topic, in order, but the
// control records (the markers of the capture's Kafka transactions).
func eachRecord(t *testing.T, k *kafkatest.Cluster, topic string, f func(*kgo.Record)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	o, err := k.Admin(t).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := o.Lookup(topic, 0)
	cl := k.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}), kgo.KeepControlRecords())
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s up to offset %d of %d: %v", topic, next, end.Offset, ctx.Err())
		}
		for _, r := range fs.Records() {
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				continue // a marker of the capture's Kafka transactions
			}
			f(r)
		}
	}
}

// TestKafkaKillApplyInGroup: under a steady load of many small
// transactions (the apply groups them, many to a target transaction) the
// apply is killed -9 while it streams, as soon as it has applied after a
// restart, and halfway through the backlog that built up while it was
// down; restarted each time: no transaction lost, none applied twice.
func TestKafkaKillApplyInGroup(t *testing.T) {
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	ctx := t.Context()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", tgtDB)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap) // the initial copy is done
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 0, 250)
	// The load's transaction n writes ledger row n, and the apply commits
	// in source order: the target holds rows 1..k, and its largest key
	// counts them without a scan of the table at every look (every 5 ms).
	applied := func() int64 {
		var n int64
		if err := tgt.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM ledger").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var atKill int64
	for round := 1; round <= 3; round++ {
		want := atKill + 1
		if round == 3 {
			want = atKill + (l.done.Load()-atKill)/2
		}
		pgtest.WaitForEvery(t, fmt.Sprintf("the apply to apply %d transactions", want), 60*time.Second, 5*time.Millisecond, func() (bool, error) {
			ap.alive()
			return applied() >= want, nil
		})
		ap.kill()
		atKill = applied()
		t.Logf("round %d: apply killed with %d of %d source transactions applied", round, atKill, l.done.Load())
		// A backlog for the restarted apply to group.
		l.waitLoad(1500, 30*time.Second)
		ap = e.startApply(fmt.Sprintf("apply (restart %d)", round), tgtDB)
	}
	l.waitLoad(500, 30*time.Second)
	l.halt()
	t0 := time.Now()
	waitSame(t, e.s, tgt, kafkaTables, 90*time.Second, capt, ap)
	t.Logf("target equal %s after the load stopped", time.Since(t0).Round(time.Millisecond))
	// Rows written by one target transaction share its xmin.
	var groups, largest int64
	if err := tgt.QueryRow(ctx, "SELECT count(*), max(n) FROM (SELECT count(*) AS n FROM ledger GROUP BY xmin::text) g").Scan(&groups, &largest); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d source transactions applied in %d target transactions, the largest of %d", l.done.Load(), groups, largest)
	if largest < 10 {
		t.Fatalf("the apply did not group: at most %d source transactions in a target transaction", largest)
	}
	capt.stop()
	ap.stop()
}

// TestKafkaFrozenCapture: a capture frozen (SIGSTOP) under load for longer
// than the source's wal_sender_timeout loses its slot; a second capture
// takes the slot and writes its epoch marker and records; the first is
// then woken (SIGCONT) holding records it had not produced and WAL its
// socket still held. It must not write after the second's marker (a
// reader drops such records, and a later capture would trust the last of
// them for where the topic ends): the brokers fence it, and it stops.
// The target ends equal to the source.
func TestKafkaFrozenCapture(t *testing.T) {
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	// The first capture's walsender gives up on it 2 s after it freezes.
	first := e.startCapture("capture 1", "--source", e.src.DSN(e.srcDB)+" options='-c wal_sender_timeout=2s'")
	ap := e.startApply("apply", tgtDB)
	pgtest.WaitFor(t, "the first capture's epoch marker", 30*time.Second, func() (bool, error) {
		return recordKinds(t, k, e.topic())[kafkalog.KindEpoch] == 1, nil
	})
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 2*time.Millisecond, 10)
	l.waitLoad(200, 30*time.Second)

	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	t.Cleanup(func() {
		if frozen {
			_ = first.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	t0 := time.Now()
	e.waitSlotReleased(60 * time.Second)
	t.Logf("slot released %s after the freeze", time.Since(t0).Round(time.Millisecond))
	second := e.startCapture("capture 2")
	pgtest.WaitFor(t, "the second capture's epoch marker", 30*time.Second, func() (bool, error) {
		return recordKinds(t, k, e.topic())[kafkalog.KindEpoch] == 2, nil
	})
	l.waitLoad(200, 30*time.Second)

	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen = false
	err := exitOf(t, first, 60*time.Second)
	t.Logf("the woken capture exited: %v: %s", err, lastLine(first.out.Tail(20)))
	if l := lineWith(first.out.Tail(40), "another capture session of the slot began"); l != "" {
		t.Logf("fenced: %s", l)
	}
	if err == nil {
		t.Fatalf("the woken capture exited 0:\n%s", first.out.Tail(30))
	}
	l.waitLoad(200, 30*time.Second)
	l.halt()
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, second, ap)

	// No record of an older session after a newer session's marker.
	var top uint32
	for i, h := range recordHeaders(t, k, e.topic()) {
		if h.Epoch < top {
			t.Errorf("record %d (kind %c) is of epoch %d, after the marker of epoch %d: the frozen capture wrote after the new session began", i, h.Kind, h.Epoch, top)
		}
		top = max(top, h.Epoch)
	}
	second.stop()
	ap.stop()
	// A stopped capture commits its Kafka transaction: the topic ends
	// with a control record, which Tail passes over.
	tail, err := kafkalog.Tail(t.Context(), k.Admin(t), kafkalog.Plain(k.Addrs()), e.topic())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(recordHeaders(t, k, e.topic())); tail.Empty || tail.Epoch != top || tail.End <= int64(n) {
		t.Fatalf("tail %+v of a topic of %d records and their transactions' markers, the last session's epoch %d", tail, n, top)
	}
}

// TestKafkaDropKeepsPublications: `drop --kafka` drops the publication
// only when repstream made it (its comment, PublicationMark) and no other
// pgoutput slot of the database may stream it. A publication the user
// made and gave the capture (--publication) is kept, as is one repstream
// made while another slot exists; once that slot is gone, a second drop
// removes it. The slot and the topic go each time.
func TestKafkaDropKeepsPublications(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	userPub := "user_" + e.slot
	e.exec("CREATE PUBLICATION " + userPub + " FOR TABLE acct, ledger, events")
	drop := func(pub string, want string) {
		t.Helper()
		args := []string{"drop", "--kafka", e.brokers, "--source", e.src.DSN(e.srcDB), "--slot", e.slot}
		if pub != "" {
			args = append(args, "--publication", pub)
		}
		out, err := exec.Command(testbin.Repstream(t), args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("drop --kafka (publication %q): %v, want %q:\n%s", pub, err, want, out)
		}
		t.Logf("drop --kafka: %s", lineWith(string(out), want))
		var slots int
		if err := e.s.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&slots); err != nil || slots != 0 {
			t.Fatalf("the slot after drop --kafka: %d, %v", slots, err)
		}
	}
	pubs := func() string {
		t.Helper()
		var names string
		if err := e.s.QueryRow(t.Context(), "SELECT coalesce(string_agg(pubname, ',' ORDER BY pubname), '') FROM pg_publication").Scan(&names); err != nil {
			t.Fatal(err)
		}
		return names
	}

	// Each capture stopped once its start is over: a start stopped
	// midway removes what it made (the publication too).
	capt := e.startCapture("capture (the user's publication)", "--publication", userPub)
	capt.waitLogged("capture session started", 60*time.Second)
	capt.stop()
	drop(userPub, "kept the publication: not marked as made by repstream")
	if got := pubs(); got != userPub {
		t.Fatalf("publications after drop --kafka: %q, want the user's %q kept", got, userPub)
	}

	capt = e.startCapture("capture (its own publication)")
	capt.waitLogged("capture session started", 60*time.Second)
	capt.stop()
	other := "other_" + e.slot
	e.exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", other)
	drop("", "kept the publication: other logical replication slots of the database may use it")
	if got := pubs(); got != e.slot+","+userPub {
		t.Fatalf("publications after drop --kafka with another slot: %q, want %q", got, e.slot+","+userPub)
	}
	e.exec("SELECT pg_drop_replication_slot($1)", other)
	drop("", "dropped publication")
	if got := pubs(); got != userPub {
		t.Fatalf("publications after the last drop --kafka: %q, want %q", got, userPub)
	}
}
