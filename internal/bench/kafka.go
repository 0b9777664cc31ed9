package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/stats"
)

// The kafka system: repstream's Kafka mode (docs/kafka.md), its two halves
// as two processes joined by one throwaway broker. `repstream capture`
// writes the slot's stream to the topic repstream.<slot>, `repstream apply`
// reads it into the target. The broker is started once per bench
// invocation, the first time a kafka run needs it, and shared by every
// kafka run; each run deletes its topic at the end.

// kafkaAvailable says what is missing to start a broker (nil: nothing).
var kafkaAvailable = func() error { return kafkatest.Available(kafkatest.Home()) }

// kafkaSettings describes the kafka system's setup (report.json
// settings.kafka).
func kafkaSettings(brokers, targets, heapMB int) string {
	cluster := "one throwaway Apache Kafka %s broker (KRaft, one broker and controller"
	topic := "1 partition, replication factor 1"
	if brokers > 1 {
		cluster = fmt.Sprintf("a throwaway Apache Kafka %%s cluster of %d brokers (KRaft, each a broker and controller", brokers)
		topic = fmt.Sprintf("1 partition, replication factor %d, min.insync.replicas %d", brokers, min(brokers, 2))
	}
	s := fmt.Sprintf("repstream capture and repstream apply (each with the repstream flags) through "+cluster+
		", %d MiB heap each, on this machine, started once for the invocation; their JVMs' CPU is broker_cpu_seconds); "+
		"topic repstream.<slot> (%s, acks=all, idempotent transactional producer), deleted after each run; "+
		"before the load: capture started until its slot exists, apply (no --create-tables) until its initial copy of the empty tables is done, "+
		"both stopped with SIGTERM; at start both started again, capture first; values travel as the capture chooses (binary, its default, when every column is of a built-in type, as in direct mode)",
		kafkatest.Version, heapMB, topic)
	if targets > 1 {
		s += "; a second target (its own database on the target server, its own apply, prepared the same way) stays stopped while the workload loads " +
			"and starts once the first target has everything: stopped_target gives its catch-up and verification, its apply's CPU is not in the engine's"
	}
	return s
}

// kafkaBroker is the invocation's Kafka cluster.
type kafkaBroker struct {
	cluster *kafkatest.Cluster
	addrs   string // the --kafka value
	pids    []int  // the brokers' JVMs
}

// cpuSeconds is the CPU the brokers' JVMs have used.
func (b *kafkaBroker) cpuSeconds() (float64, error) {
	var sum float64
	for _, pid := range b.pids {
		v, err := procCPUSeconds(pid)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// kafka returns the invocation's Kafka cluster, starting it on first use.
func (r *runner) kafka(ctx context.Context) (*kafkaBroker, error) {
	if r.broker != nil {
		return r.broker, nil
	}
	fmt.Fprintf(r.out, "starting Kafka %s (%d broker(s)) ...\n", kafkatest.Version, r.o.KafkaBrokers)
	t0 := time.Now()
	c, err := kafkatest.StartCluster(ctx, kafkatest.Options{Brokers: r.o.KafkaBrokers, Name: "bench", HeapMB: r.o.KafkaHeapMB, Logger: r.o.Logger})
	if err != nil {
		return nil, fmt.Errorf("start the Kafka broker: %w", err)
	}
	b := &kafkaBroker{cluster: c, addrs: strings.Join(c.Addrs(), ",")}
	for i := range c.Len() {
		pid, err := readPid(filepath.Join(c.Dir(), "broker-"+strconv.Itoa(i), "pid"))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("read the Kafka broker's pid: %w", err)
		}
		b.pids = append(b.pids, pid)
	}
	r.log.Info("kafka started", "addrs", b.addrs, "pids", b.pids, "dir", c.Dir(), "seconds", time.Since(t0).Seconds())
	warm := kafkaWarmUp
	if r.o.kafkaWarmUp != 0 {
		warm = r.o.kafkaWarmUp
	}
	fmt.Fprintf(r.out, "warming Kafka up for %s ...\n", warm)
	if err := b.warmUp(ctx, warm); err != nil {
		c.Close()
		return nil, fmt.Errorf("warm the Kafka broker up: %w", err)
	}
	r.broker = b
	if r.o.kafkaStarted != nil {
		r.o.kafkaStarted(b)
	}
	return b, nil
}

// DefaultKafkaHeapMB is the bench brokers' JVM heap: Kafka's own default
// (kafka-server-start.sh's -Xmx1G), not the tests' smaller one. With less
// the young collections, about 25 ms each, come often enough to show in a
// live run's p99.
const DefaultKafkaHeapMB = 1024

// kafkaWarmUp is how long a fresh cluster serves produce and fetch
// requests before the first measured run.
const kafkaWarmUp = 5 * time.Second

// warmUp produces small records one at a time, as a live capture does,
// and reads each back, for d: the brokers' JVMs compile their request
// paths before the first measured run instead of during it (a fresh
// broker's first seconds are slower than its steady state). Its topic is
// deleted after.
func (b *kafkaBroker) warmUp(ctx context.Context, d time.Duration) error {
	brokers := kafkalog.Brokers(b.addrs)
	adm, admCl, err := kafkalog.NewAdmin(kafkalog.Plain(brokers))
	if err != nil {
		return err
	}
	defer admCl.Close()
	const topic = "bench-warm-up"
	if _, err := kafkalog.EnsureTopic(ctx, adm, topic); err != nil {
		return err
	}
	defer func() { _, _ = adm.DeleteTopics(context.Background(), topic) }()
	prod, err := kafkalog.NewProducer(kafkalog.Plain(brokers), topic, 0, kgo.NoCompression())
	if err != nil {
		return err
	}
	defer prod.Close()
	if err := prod.BeginTransaction(); err != nil { // the capture's producer is transactional
		return err
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cons.Close()
	val := make([]byte, 2<<10)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: val}).FirstErr(); err != nil {
			return err
		}
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			return fe.Err
		}
	}
	return nil
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// closeKafka stops the broker, if one was started.
func (r *runner) closeKafka() {
	if r.broker == nil {
		return
	}
	if err := r.broker.cluster.Close(); err != nil {
		r.log.Warn("close the Kafka broker", "err", err)
	}
	r.broker = nil
}

// kafkaSys runs the two halves. capture and apply are the processes of the
// measured interval (start to stop); prepare runs halves of its own.
//
// Invariants: done is closed once, after start, when either measured half
// has exited (then exited names it); cpu0 is the broker's CPU seconds at
// start, valid when cpuOK.
//
// With a second target (env.tgt2DSN), stopped is its apply: prepared like
// the first, not started with the others; catchUpStopped starts it once
// the first target has everything.
type kafkaSys struct {
	env     sysEnv
	binary  string
	flags   []string
	broker  *kafkaBroker
	capture *repstreamSys
	apply   *repstreamSys
	stopped *repstreamSys // nil with one target

	started time.Time // when start began
	// prep are prepare's processes (killed by cleanup if still there).
	prep []*repstreamSys

	cpu0  float64
	cpuOK bool

	done   chan struct{}
	exited *repstreamSys
}

func newKafka(env sysEnv, binary string, flags []string, broker *kafkaBroker) *kafkaSys {
	k := &kafkaSys{env: env, binary: binary, flags: flags, broker: broker, done: make(chan struct{})}
	k.capture, k.apply = k.half("capture"), k.half("apply")
	if env.tgt2DSN != "" {
		k.stopped = k.secondApply()
	}
	return k
}

// half returns a process (not started) of one half; an apply's target is
// the first.
func (k *kafkaSys) half(role string) *repstreamSys {
	return k.halfOn(role, role, k.env.tgtDSN)
}

// secondApply returns an apply (not started) into the second target.
func (k *kafkaSys) secondApply() *repstreamSys { return k.halfOn("apply", "apply-2", k.env.tgt2DSN) }

// halfOn returns a process (not started) of one half, named name in logs
// and messages; an apply writes into tgtDSN.
func (k *kafkaSys) halfOn(role, name, tgtDSN string) *repstreamSys {
	h := newRepstream(k.env, k.binary, k.flags)
	h.half = name
	h.argv = []string{role, "--source", k.env.srcDSN}
	if role == "apply" {
		// The workload's DDL filled the target's tables as the
		// source's: the apply's initial copy replaces them.
		h.argv = append(h.argv, "--target", tgtDSN, "--truncate")
	}
	h.argv = append(h.argv, "--slot", k.env.slot, "--publication", k.env.pub, "--kafka", k.broker.addrs, "--log-level", "info")
	return h
}

func (k *kafkaSys) topic() string { return kafkalog.Topic(k.env.slot) }

// prepare makes the slot and each apply's initial copy (of the empty
// tables) with the load not yet begun: capture until its slot exists, each
// apply until its progress record says the copy is done and it streams;
// then all stop (SIGTERM), and the workload loads with replication stopped.
func (k *kafkaSys) prepare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	capt := k.half("capture")
	k.prep = append(k.prep, capt)
	defer capt.terminate()
	if err := capt.start(ctx); err != nil {
		return err
	}
	src, err := pgx.Connect(ctx, withApp(k.env.srcDSN))
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	err = waitFor(ctx, capt, time.Minute, "capture's slot "+k.env.slot+" on the source", func() (bool, error) {
		var ok bool
		err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", k.env.slot).Scan(&ok)
		return ok, err
	})
	if err != nil {
		return err
	}
	if err := k.prepareApply(ctx, k.half("apply"), k.env.tgtDSN); err != nil {
		return err
	}
	if k.stopped != nil {
		return k.prepareApply(ctx, k.secondApply(), k.env.tgt2DSN)
	}
	return nil
}

// prepareApply runs ap until its initial copy into tgtDSN is done and it
// streams, then stops it.
func (k *kafkaSys) prepareApply(ctx context.Context, ap *repstreamSys, tgtDSN string) error {
	k.prep = append(k.prep, ap)
	defer ap.terminate()
	if err := ap.start(ctx); err != nil {
		return err
	}
	tgt, err := pgx.Connect(ctx, withApp(tgtDSN))
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())
	err = waitFor(ctx, ap, 2*time.Minute, ap.name()+"'s initial copy (repstream.progress snapshot 'done')", func() (bool, error) {
		var snap string
		err := tgt.QueryRow(ctx, "SELECT snapshot FROM repstream.progress WHERE slot = $1", k.env.slot).Scan(&snap)
		if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
			return false, nil
		}
		return snap == "done", err
	})
	if err != nil {
		return err
	}
	return waitStreaming(ctx, ap)
}

// waitStreaming waits until a half's /status says it streams.
func waitStreaming(ctx context.Context, h *repstreamSys) error {
	return waitFor(ctx, h, time.Minute, h.name()+" streaming (its /status phase)", func() (bool, error) {
		s, err := h.fetch(ctx)
		if err != nil {
			return false, nil
		}
		eng, _ := s.Component(stats.CompEngine)
		return eng.Info[stats.InfoPhase] == "streaming", nil
	})
}

// waitFor polls cond every 50 ms until it is true, the process h exits, or
// limit passes.
func waitFor(ctx context.Context, h *repstreamSys, limit time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for the %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within %s; log %s:\n%s", what, limit, h.logPath(), tail(h.logPath(), 15))
		}
		select {
		case <-h.done:
			return fmt.Errorf("%s exited while waiting for the %s: %v; log %s:\n%s", h.name(), what, h.waitErr, h.logPath(), tail(h.logPath(), 15))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isUndefinedTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "SQLSTATE 42P01")
}

// start starts capture, then apply, and waits until the apply streams.
func (k *kafkaSys) start(ctx context.Context) error {
	k.started = time.Now()
	if v, err := k.broker.cpuSeconds(); err == nil {
		k.cpu0, k.cpuOK = v, true
	}
	if err := k.capture.start(ctx); err != nil {
		return err
	}
	if err := k.apply.start(ctx); err != nil {
		return err
	}
	go func() {
		select {
		case <-k.capture.done:
			k.exited = k.capture
		case <-k.apply.done:
			k.exited = k.apply
		}
		close(k.done)
	}()
	return waitStreaming(ctx, k.apply)
}

// catchUpStopped starts the second target's apply and waits until every
// one of tables has the source's row count there (the load and the probes
// are over: the source's counts stay as they are).
func (k *kafkaSys) catchUpStopped(ctx context.Context, tables []string) (*StoppedTarget, error) {
	src, err := pgx.Connect(ctx, withApp(k.env.srcDSN))
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background())
	want, err := counts(ctx, src, tables)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	st := &StoppedTarget{StoppedSeconds: t0.Sub(k.started).Seconds()}
	if err := k.stopped.start(ctx); err != nil {
		return nil, err
	}
	tgt, err := pgx.Connect(ctx, withApp(k.env.tgt2DSN))
	if err != nil {
		return nil, err
	}
	defer tgt.Close(context.Background())
	var got []int64
	err = waitFor(ctx, k.stopped, 10*time.Minute, "second target's row counts "+fmt.Sprint(want), func() (bool, error) {
		got, err = counts(ctx, tgt, tables)
		return slices.Equal(got, want), err
	})
	if err != nil {
		return nil, fmt.Errorf("%w (it has %v)", err, got)
	}
	st.CatchUpSeconds = time.Since(t0).Seconds()
	k.env.log.Info("second target caught up", "stopped_seconds", st.StoppedSeconds, "catch_up_seconds", st.CatchUpSeconds)
	return st, nil
}

func (k *kafkaSys) dead() <-chan struct{} { return k.done }

func (k *kafkaSys) deadErr() error {
	if k.exited == nil {
		return errors.New("neither half of the kafka system exited")
	}
	return k.exited.deadErr()
}

func (k *kafkaSys) poll(ctx context.Context) {
	k.capture.poll(ctx)
	k.apply.poll(ctx)
}

// setEpoch sets time zero of both halves' component samples.
func (k *kafkaSys) setEpoch(t time.Time) {
	k.capture.setEpoch(t)
	k.apply.setEpoch(t)
}

func (k *kafkaSys) live() string {
	c, a := k.capture.live(), k.apply.live()
	if c == "" && a == "" {
		return ""
	}
	return "capture " + c + " | apply " + a
}

// stop stops both halves (SIGINT, at once) and reads the broker's CPU:
// the engine's figures are the two processes' together, the components,
// stats and bottleneck the apply's (the capture's in CaptureFinalStats and
// CaptureBottleneck).
func (k *kafkaSys) stop(ctx context.Context, res *RunResult) error {
	var cr, ar, sr RunResult
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = k.capture.stop(ctx, &cr) }()
	go func() { defer wg.Done(); _ = k.apply.stop(ctx, &ar) }()
	if k.stopped != nil && k.stopped.cmd != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _ = k.stopped.stop(ctx, &sr) }()
	}
	wg.Wait()
	if st := res.StoppedTarget; st != nil {
		st.ApplyCPUSeconds = sr.Resources.EngineCPUSeconds
	}
	if k.cpuOK {
		if v, err := k.broker.cpuSeconds(); err == nil {
			res.Resources.BrokerCPUSeconds = max(0, v-k.cpu0)
		}
	}
	res.Resources.EngineCPUSeconds = cr.Resources.EngineCPUSeconds + ar.Resources.EngineCPUSeconds
	res.Resources.EnginePeakRSSBytes = cr.Resources.EnginePeakRSSBytes + ar.Resources.EnginePeakRSSBytes
	res.Spill.EngineBytes = cr.Spill.EngineBytes + ar.Spill.EngineBytes
	res.Components = ar.Components
	res.FinalStats = ar.FinalStats
	res.Bottleneck, res.BottleneckWorker = ar.Bottleneck, ar.BottleneckWorker
	res.CaptureFinalStats = cr.FinalStats
	res.CaptureBottleneck = cr.Bottleneck
	return nil
}

// cleanup kills what is left, drops the slot and deletes the topic, so
// that nothing of the run remains but its logs.
func (k *kafkaSys) cleanup(ctx context.Context) {
	for _, h := range append([]*repstreamSys{k.apply, k.capture, k.stopped}, k.prep...) {
		if h != nil {
			h.kill()
		}
	}
	dropSlot(ctx, k.env.srcDSN, k.env.slot, k.env.log)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	adm, cl, err := kafkalog.NewAdmin(kafkalog.Plain(kafkalog.Brokers(k.broker.addrs)))
	if err != nil {
		k.env.log.Warn("delete the topic: kafka client", "topic", k.topic(), "err", err)
		return
	}
	defer cl.Close()
	resps, err := adm.DeleteTopics(ctx, k.topic())
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		k.env.log.Warn("delete the topic", "topic", k.topic(), "err", err)
	}
}
