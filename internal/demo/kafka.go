package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/repstream/repstream/internal/bench"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/stats"
)

// The Kafka demo (`repstream demo --kafka`, `make demo-kafka`): a source
// cluster, a target cluster with two databases and one Kafka broker, all
// throwaway; one capture writes the slot's stream to the topic, one apply
// per target database reads it (each with --create-tables and an initial
// copy of its own), in this process: the engines `repstream capture` and
// `repstream apply` run. The workload, in steps:
//
//   - rows that exist before the capture starts (each apply copies them);
//   - small transactions while target_a makes its copy;
//   - one transaction of two thirds of --rows (200,000 by default), which
//     the source streams while it is in progress;
//   - target_b starts after it: its copy at a later snapshot, then the
//     topic from its start;
//   - target_a stopped while more small transactions commit (the slot's
//     confirmed position follows the capture, not the stopped target),
//     then started again: it reads from the offset it recorded;
//   - a last transaction that marks the end.
//
// Then both targets must equal the source, table by table: the row count
// and the md5 of the rows in key order.

const (
	kafkaDemoSlot = "demo"
	kafkaDemoWait = 5 * time.Minute // for a step's positions and for the targets at the end
)

var kafkaDemoTables = []struct{ name, order string }{
	{"conditions", "id"},
	{"accounts", "id"},
	{"demo_done", "id"},
}

// half is one engine of the demo: the capture, or one target's apply.
//
// Invariants: name and cfg never change; mu guards the rest. on is true
// from start until stop, or until failed has seen the engine end by
// itself; done receives Run's result once, and whoever takes it puts it
// back.
type half struct {
	name string
	cfg  config.Config

	mu     sync.Mutex
	eng    *engine.Engine
	cancel context.CancelFunc
	done   chan error
	on     bool
}

// start runs a new engine of h's configuration, with a registry of its own.
func (h *half) start(ctx context.Context, o Options) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.eng = engine.New(h.cfg, o.Logger.With("process", h.name), stats.NewRegistry())
	ectx, cancel := context.WithCancel(ctx)
	h.cancel, h.done, h.on = cancel, make(chan error, 1), true
	eng, done := h.eng, h.done
	go func() {
		err := eng.Run(ectx)
		if err == nil && ectx.Err() == nil {
			err = errors.New("stopped by itself")
		}
		done <- err
	}()
}

// stop ends the engine as SIGTERM does and returns its error, if any.
func (h *half) stop() error {
	h.mu.Lock()
	if !h.on {
		h.mu.Unlock()
		return nil
	}
	h.on = false
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	cancel()
	err := <-done
	done <- err
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", h.name, err)
	}
	return nil
}

// failed is the error of an engine that ended while it should run.
func (h *half) failed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.on {
		return nil
	}
	select {
	case err := <-h.done:
		h.done <- err
		h.on = false
		return fmt.Errorf("%s stopped: %w", h.name, err)
	default:
		return nil
	}
}

func (h *half) running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.on
}

func (h *half) status() stats.LiveStatus {
	h.mu.Lock()
	eng := h.eng
	h.mu.Unlock()
	if eng == nil {
		return stats.LiveStatus{}
	}
	return eng.Status()
}

// flushed is what the engine has acknowledged (capture: to the slot, all
// of it held by the brokers; apply: applied and durable on the target).
func (h *half) flushed() change.LSN {
	h.mu.Lock()
	eng := h.eng
	h.mu.Unlock()
	if eng == nil {
		return 0
	}
	return eng.Flushed()
}

// RunKafka runs the Kafka demo (see above) and returns an error if
// anything fails, including a target that does not match the source.
func RunKafka(ctx context.Context, o Options) (err error) {
	if o.Rows <= 0 {
		o.Rows = 300_000
	}
	if o.TxnRows <= 0 {
		o.TxnRows = 100
	}
	if o.Memory <= 0 {
		o.Memory = 256 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if err := kafkatest.Available(""); err != nil {
		return err
	}
	t0 := time.Now()
	fmt.Fprintln(out, "repstream demo --kafka: starting a source and a target PostgreSQL cluster and a Kafka broker ...")
	src, err := pgcluster.Start(ctx, pgcluster.Options{Name: "demo-source", Logger: o.Logger})
	if err != nil {
		return err
	}
	defer src.Remove(context.Background())
	tgt, err := pgcluster.Start(ctx, pgcluster.Options{Name: "demo-target", Logger: o.Logger})
	if err != nil {
		return err
	}
	defer tgt.Remove(context.Background())
	for _, db := range []string{"target_a", "target_b"} {
		if err := tgt.CreateDatabase(ctx, db); err != nil {
			return err
		}
	}
	k, err := kafkatest.StartCluster(ctx, kafkatest.Options{Name: "demo", Brokers: 1, Logger: o.Logger})
	if err != nil {
		return err
	}
	defer k.Close()
	brokers := strings.Join(k.Addrs(), ",")
	fmt.Fprintf(out, "  source: PostgreSQL %d on port %d; targets: databases target_a and target_b on port %d\n", src.Version(), src.Port(), tgt.Port())
	fmt.Fprintf(out, "  Kafka %s broker (KRaft) at %s (%.1f s to start everything)\n", kafkatest.Version, brokers, time.Since(t0).Seconds())

	// The workload's sizes: rows before the start, the large transaction,
	// and three runs of small transactions.
	initial := o.Rows / 10
	large := o.Rows * 2 / 3
	rest := o.Rows - initial - large
	next := int64(initial + 1)
	run := func(n int) (from, to int) {
		from, to = int(next), int(next)+n-1
		next += int64(n)
		return from, to
	}

	w, err := bench.Lookup("conditions")
	if err != nil {
		return err
	}
	if err := src.Exec(ctx, "postgres", w.DDL+`
		CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text);
		CREATE TABLE demo_done (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
		INSERT INTO accounts SELECT g, 0, 'opened' FROM generate_series(1, 1000) g;`+
		fmt.Sprintf(`INSERT INTO conditions
		SELECT g, g %% 1000, now(), now() + interval '1 hour', random(), random(), 0 FROM generate_series(1, %d) g`, initial)); err != nil {
		return err
	}
	srcConn, err := pgx.Connect(ctx, src.DSN("postgres"))
	if err != nil {
		return err
	}
	defer srcConn.Close(context.Background())
	adm, admCl, err := kafkalog.NewAdmin(kafkalog.Plain(k.Addrs()))
	if err != nil {
		return err
	}
	defer admCl.Close()
	spill, err := os.MkdirTemp("", "repstream-demo-kafka-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(spill)

	capCfg := config.Default()
	capCfg.Role, capCfg.Source, capCfg.Slot, capCfg.Kafka = config.RoleCapture, src.DSN("postgres"), kafkaDemoSlot, brokers
	capCfg.Tables = []string{"public.*"}
	capCfg.Progress = 0
	capt := &half{name: "capture", cfg: capCfg}
	applyHalf := func(db string) *half {
		c := config.Default()
		c.Role, c.Source, c.Target, c.Slot, c.Kafka = config.RoleApply, src.DSN("postgres"), tgt.DSN(db), kafkaDemoSlot, brokers
		c.CreateTables = true
		c.Memory = o.Memory
		c.SpillDir = filepath.Join(spill, db)
		c.Progress = 0
		if o.Parallelism > 0 {
			c.ApplyParallelism = o.Parallelism
		}
		return &half{name: db, cfg: c}
	}
	apA, apB := applyHalf("target_a"), applyHalf("target_b")
	halves := []*half{capt, apA, apB}
	defer func() {
		for _, h := range []*half{apB, apA, capt} {
			if serr := h.stop(); err == nil {
				err = serr
			}
		}
	}()
	anyFailed := func() error {
		for _, h := range halves {
			if err := h.failed(); err != nil {
				return err
			}
		}
		return nil
	}

	fmt.Fprintln(out, "\nwhat runs (in this process; the same engines as these commands):")
	fmt.Fprintf(out, "  repstream capture --source '%s' --slot %s --tables 'public.*' --kafka %s\n", capCfg.Source, kafkaDemoSlot, brokers)
	for _, h := range []*half{apA, apB} {
		fmt.Fprintf(out, "  repstream apply --source '%s' --target '%s' --slot %s --kafka %s --create-tables\n", h.cfg.Source, h.cfg.Target, kafkaDemoSlot, brokers)
	}
	fmt.Fprintln(out)

	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "  [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	// waitFor polls cond until it holds, an engine fails or the wait ends.
	waitFor := func(what string, cond func() (bool, error)) error {
		deadline := time.Now().Add(kafkaDemoWait)
		for {
			if err := anyFailed(); err != nil {
				return err
			}
			ok, err := cond()
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no %s after %s", what, kafkaDemoWait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	walLSN := func() (change.LSN, error) {
		var s string
		if err := srcConn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
			return 0, err
		}
		return change.ParseLSN(s)
	}
	// captured waits until the capture has acknowledged to the slot
	// everything the source wrote so far (the brokers hold it all), and
	// returns the topic's end offset then.
	captured := func() (change.LSN, int64, error) {
		at, err := walLSN()
		if err != nil {
			return 0, 0, err
		}
		if err := waitFor("capture acknowledgement of "+at.String(), func() (bool, error) {
			return capt.flushed() >= at, nil
		}); err != nil {
			return 0, 0, err
		}
		_, end, err := kafkalog.Offsets(ctx, adm, kafkalog.Topic(kafkaDemoSlot))
		return at, end, err
	}

	// One progress line a second, from the engines' status.
	progCtx, stopProgress := context.WithCancel(ctx)
	var progWG sync.WaitGroup
	progWG.Go(func() { kafkaProgress(progCtx, out, start, adm, capt, apA, apB) })
	defer func() { stopProgress(); progWG.Wait() }()

	capt.start(ctx, o)
	if err := waitFor("capture streaming", func() (bool, error) { return capt.status().Phase == "streaming", nil }); err != nil {
		return err
	}
	info, err := kafkalog.EnsureTopic(ctx, adm, kafkalog.Topic(kafkaDemoSlot))
	if err != nil {
		return err
	}
	say("capture started: slot %s, %s", kafkaDemoSlot, info)

	apA.start(ctx, o)
	say("apply target_a started: it copies the %d existing rows of conditions (and accounts) at a snapshot of its own, then reads the topic", initial)
	n1 := rest / 3
	from, to := run(n1)
	say("source: %d rows in transactions of %d rows (with updates and deletes) ...", n1, o.TxnRows)
	if err := load(ctx, src.DSN("postgres"), from, to, o.TxnRows); err != nil {
		return err
	}
	_, beforeLarge, err := captured()
	if err != nil {
		return err
	}

	from, to = run(large)
	say("source: one transaction of %d rows into conditions and an update of all 1,000 accounts ...", large)
	tl := time.Now()
	tx, err := srcConn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO conditions SELECT g, g %% 1000, now(), now() + interval '1 hour', random(), random(), 0
		FROM generate_series(%d, %d) g`, from, to)); err != nil {
		return fmt.Errorf("the large transaction: %w", err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 100, note = 'large'"); err != nil {
		return fmt.Errorf("the large transaction: %w", err)
	}
	// The source streams it while it is in progress: the capture writes
	// it to the topic before its commit.
	inProgress, err := settledEnd(ctx, adm)
	if err != nil {
		return err
	}
	say("before its commit the topic holds %d records of it (the source streams a transaction larger than logical_decoding_work_mem while it is in progress; the capture writes it as it comes)", inProgress-beforeLarge)
	tc := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("the large transaction: %w", err)
	}
	largeEnd, afterLarge, err := captured()
	if err != nil {
		return err
	}
	say("the large transaction took %.1f s and is in the topic: records %d to %d (%d records of at most %d KiB); the slot acknowledged its end %s %.1f s after the commit",
		time.Since(tl).Seconds(), beforeLarge, afterLarge-1, afterLarge-beforeLarge, kafkalog.DefaultMaxRecord>>10, largeEnd, time.Since(tc).Seconds())

	apB.start(ctx, o)
	say("apply target_b started: its own copy, at a later snapshot, then the topic from its start (what its copy holds is skipped)")

	if err := waitFor("target_a streaming", func() (bool, error) { return apA.status().Phase == "streaming", nil }); err != nil {
		return err
	}
	if err := apA.stop(); err != nil {
		return err
	}
	stoppedAt := apA.flushed()
	say("apply target_a stopped (as by SIGTERM), applied up to %s: its position and topic offset are recorded in target_a", stoppedAt)
	n2 := rest / 3
	from, to = run(n2)
	say("source: %d rows in transactions of %d rows while target_a is stopped ...", n2, o.TxnRows)
	if err := load(ctx, src.DSN("postgres"), from, to, o.TxnRows); err != nil {
		return err
	}
	at, _, err := captured()
	if err != nil {
		return err
	}
	var confirmed change.LSN
	if err := waitFor("the slot's confirmed position at "+at.String(), func() (bool, error) {
		var s string
		if err := srcConn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", kafkaDemoSlot).Scan(&s); err != nil {
			return false, err
		}
		confirmed, err = change.ParseLSN(s)
		return confirmed >= at, err
	}); err != nil {
		return err
	}
	say("the slot's confirmed position reached %s (the source's WAL position after those transactions: %s) while target_a stays at %s: a stopped target holds back nothing on the source", confirmed, at, stoppedAt)
	apA.start(ctx, o)
	say("apply target_a started again: it reads the topic from the offset it recorded")

	from, to = run(rest - n1 - n2)
	say("source: %d rows in transactions of %d rows, then the last transaction (demo_done) ...", to-from+1, o.TxnRows)
	if err := load(ctx, src.DSN("postgres"), from, to, o.TxnRows); err != nil {
		return err
	}
	if _, err := srcConn.Exec(ctx, "INSERT INTO demo_done VALUES (1)"); err != nil {
		return err
	}
	loadTime := time.Since(start)

	// The last transaction on both targets: in commit order, so is
	// everything before it.
	for _, h := range []*half{apA, apB} {
		tc, err := pgx.Connect(ctx, h.cfg.Target)
		if err != nil {
			return err
		}
		err = waitFor("demo_done on "+h.name, func() (bool, error) {
			var n int
			if err := tc.QueryRow(ctx, "SELECT count(*) FROM demo_done").Scan(&n); err != nil {
				return false, nil // not created yet
			}
			return n > 0, nil
		})
		tc.Close(context.Background())
		if err != nil {
			return err
		}
	}
	total := time.Since(start)
	// Both targets hold the last transaction: their durable positions
	// meet at its end once the targets have flushed it.
	if err := waitFor("the targets' durable positions to meet", func() (bool, error) {
		return apA.flushed() == apB.flushed() || time.Since(start) > total+10*time.Second, nil
	}); err != nil {
		return err
	}
	stopProgress()
	progWG.Wait()
	endA, endB := apA.status(), apB.status()
	_, topicEnd, err := kafkalog.Offsets(ctx, adm, kafkalog.Topic(kafkaDemoSlot))
	if err != nil {
		return err
	}
	for _, h := range []*half{apB, apA, capt} {
		if err := h.stop(); err != nil {
			return err
		}
	}

	// Verify: every table, row for row.
	fmt.Fprintf(out, "\nverification (count and md5 of the rows in key order, table by table)\n")
	fmt.Fprintf(out, "  %-12s %-44s %-44s %s\n", "table", "source", "target_a", "target_b")
	var diffs []string
	for _, tb := range kafkaDemoTables {
		sums := make([]string, 0, 3)
		for _, dsn := range []string{src.DSN("postgres"), apA.cfg.Target, apB.cfg.Target} {
			s, err := tableSum(ctx, dsn, tb.name, tb.order)
			if err != nil {
				return err
			}
			sums = append(sums, s)
		}
		fmt.Fprintf(out, "  %-12s %-44s %-44s %s\n", tb.name, sums[0], sums[1], sums[2])
		for i, db := range []string{"target_a", "target_b"} {
			if sums[i+1] != sums[0] {
				diffs = append(diffs, fmt.Sprintf("%s.%s: %s, the source %s", db, tb.name, sums[i+1], sums[0]))
			}
		}
	}
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  topic              %s: %d records\n", kafkalog.Topic(kafkaDemoSlot), topicEnd)
	fmt.Fprintf(out, "  rows               %d before the start, %d in small transactions, %d in one transaction\n", initial, rest, large)
	fmt.Fprintf(out, "  workload time      %.2f s (the capture's start to the source's last transaction, target_a stopped meanwhile)\n", loadTime.Seconds())
	fmt.Fprintf(out, "  replication time   %.2f s (the capture's start to the last transaction on both targets)\n", total.Seconds())
	fmt.Fprintf(out, "  target_a           applied and flushed up to %s, topic read up to offset %d\n", endA.FlushedLSN, endA.KafkaOffset)
	fmt.Fprintf(out, "  target_b           applied and flushed up to %s, topic read up to offset %d\n", endB.FlushedLSN, endB.KafkaOffset)
	if len(diffs) > 0 {
		return fmt.Errorf("a target does not match the source: %s", strings.Join(diffs, "; "))
	}
	fmt.Fprintln(out, "  verification       OK: both targets match the source, row for row")
	return nil
}

// tableSum is a table's row count and the md5 of its rows in order.
func tableSum(ctx context.Context, dsn, table, order string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var n int64
	var h string
	q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY %s)), '') FROM %s x", order, pgx.Identifier{table}.Sanitize())
	if err := conn.QueryRow(ctx, q).Scan(&n, &h); err != nil {
		return "", fmt.Errorf("%s: %w", table, err)
	}
	return fmt.Sprintf("%d row%s %s", n, map[bool]string{true: "", false: "s"}[n == 1], h), nil
}

// settledEnd returns the topic's end offset once it has not moved for
// half a second (five seconds at most).
func settledEnd(ctx context.Context, adm *kadm.Client) (int64, error) {
	var last int64 = -1
	since := time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		_, end, err := kafkalog.Offsets(ctx, adm, kafkalog.Topic(kafkaDemoSlot))
		if err != nil {
			return 0, err
		}
		if end != last {
			last, since = end, time.Now()
		} else if time.Since(since) >= 500*time.Millisecond {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return last, nil
}

// kafkaProgress prints one line a second: what the capture has
// acknowledged, the topic's end, and where each apply is.
func kafkaProgress(ctx context.Context, out io.Writer, start time.Time, adm *kadm.Client, capt *half, applies ...*half) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !capt.running() {
			continue
		}
		var b strings.Builder
		if s := capt.status(); s.Phase != "streaming" {
			fmt.Fprintf(&b, "capture: %s", s.Phase)
		} else {
			fmt.Fprintf(&b, "capture: acknowledged %s", capt.flushed())
		}
		if _, end, err := kafkalog.Offsets(ctx, adm, kafkalog.Topic(kafkaDemoSlot)); err == nil {
			fmt.Fprintf(&b, ", topic %d records", end)
		}
		for _, h := range applies {
			if !h.running() {
				continue
			}
			s := h.status()
			switch s.Phase {
			case "streaming":
				fmt.Fprintf(&b, " | %s: offset %d, applied %s", h.name, s.KafkaOffset, s.FlushedLSN)
			default:
				fmt.Fprintf(&b, " | %s: %s", h.name, s.Phase)
			}
		}
		if ctx.Err() == nil {
			fmt.Fprintf(out, "  [%5.1fs] %s\n", time.Since(start).Seconds(), b.String())
		}
	}
}
