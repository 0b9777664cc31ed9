package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/stats"
)

// sysEnv is what a system needs to replicate one run's databases.
type sysEnv struct {
	srcDSN, tgtDSN string // the run's source and target databases
	tgt2DSN        string // the kafka system's second target ("": none)
	slot, pub      string
	outDir         string
	label          string
	log            *slog.Logger
}

// replSystem is one way of replicating: repstream or native.
type replSystem interface {
	// prepare creates the slot with replication stopped.
	prepare(ctx context.Context) error
	// start starts replicating from the slot.
	start(ctx context.Context) error
	// dead is closed if the system stopped by itself (an error).
	dead() <-chan struct{}
	// deadErr tells why, once dead is closed.
	deadErr() error
	// poll samples the system's own statistics (once a second).
	poll(ctx context.Context)
	// live is the system's part of the live line.
	live() string
	// stop stops replicating and fills res with what only the system knows.
	stop(ctx context.Context, res *RunResult) error
	// cleanup removes what prepare created (subscription, slot).
	cleanup(ctx context.Context)
}

// ----- repstream (subprocess) -----

// repstreamSys runs the repstream binary as a subprocess.
//
// Invariants: cmd is non-nil between start and stop; done is closed exactly
// once, when the process exited (waitErr then holds its exit error); snaps
// holds the /status snapshots in polling order (guarded by mu).
type repstreamSys struct {
	env    sysEnv
	binary string
	flags  []string

	cmd     *exec.Cmd
	logf    *os.File
	addr    string
	done    chan struct{}
	peakRSS func() int64 // watchPeakRSS of the running engine
	waitErr error
	stopped bool
	// copyMode (initial-copy workload): `run --snapshot --create-tables
	// --until-caught-up`, whose exit 0 is the end of the copy.
	copyMode bool
	// preMade (initial-copy --pre-made): the target's tables exist; run
	// without --create-tables.
	preMade bool
	// half (kafka system): "capture" or "apply", the half of Kafka mode the
	// process is, run with argv instead of baseArgs' `run` (kafka.go).
	half string
	argv []string

	mu       sync.Mutex
	snaps    []stats.Snapshot
	t0       time.Time // epoch for component samples
	samples  []ComponentSample
	lastLive string
}

func newRepstream(env sysEnv, binary string, flags []string) *repstreamSys {
	return &repstreamSys{env: env, binary: binary, flags: flags, done: make(chan struct{})}
}

func (r *repstreamSys) baseArgs() []string {
	if r.argv != nil {
		return slices.Clone(r.argv)
	}
	if r.copyMode && r.preMade {
		return []string{"run", "--source", r.env.srcDSN, "--target", r.env.tgtDSN,
			"--slot", r.env.slot, "--publication", r.env.pub, "--snapshot", "--until-caught-up", "--log-level", "info"}
	}
	if r.copyMode {
		return []string{"run", "--source", r.env.srcDSN, "--target", r.env.tgtDSN,
			"--slot", r.env.slot, "--publication", r.env.pub, "--snapshot", "--create-tables", "--until-caught-up", "--log-level", "info"}
	}
	return []string{"run", "--source", r.env.srcDSN, "--target", r.env.tgtDSN,
		"--slot", r.env.slot, "--publication", r.env.pub, "--snapshot=false", "--log-level", "info"}
}

// name names the process in messages: "repstream", or "repstream capture"
// and "repstream apply".
func (r *repstreamSys) name() string {
	if r.half != "" {
		return "repstream " + r.half
	}
	return "repstream"
}

func (r *repstreamSys) logPath() string {
	suffix := ".repstream.log"
	if r.half != "" {
		suffix = "." + r.half + ".log"
	}
	return filepath.Join(r.env.outDir, "logs", strings.ReplaceAll(r.env.label, " ", "_")+suffix)
}

func (r *repstreamSys) openLog() (*os.File, error) {
	p := r.logPath()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open repstream log: %w", err)
	}
	return f, nil
}

// prepare runs `repstream run --until-caught-up` once on the empty tables: it
// creates the slot and the progress state and exits.
func (r *repstreamSys) prepare(ctx context.Context) error {
	if r.copyMode {
		return nil
	}
	f, err := r.openLog()
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := append(append(r.baseArgs(), "--until-caught-up", "--progress", "0"), r.flags...)
	cmd := exec.CommandContext(ctx, r.binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("repstream setup run (create the slot): %w; log %s:\n%s", err, r.logPath(), tail(r.logPath(), 15))
	}
	return nil
}

func (r *repstreamSys) start(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	r.addr = fmt.Sprintf("127.0.0.1:%d", port)
	f, err := r.openLog()
	if err != nil {
		return err
	}
	r.logf = f
	args := append(append(r.baseArgs(), "--http", r.addr, "--progress", "0", "--status-interval", "1s"), r.flags...)
	r.cmd = exec.Command(r.binary, args...)
	r.cmd.Stdout, r.cmd.Stderr = f, f
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", r.binary, err)
	}
	r.env.log.Info(r.name()+" started", "pid", r.cmd.Process.Pid, "args", strings.Join(r.flags, " "), "log", r.logPath())
	go func() {
		r.waitErr = r.cmd.Wait()
		close(r.done)
	}()
	r.peakRSS = watchPeakRSS(r.cmd.Process.Pid, r.done)
	// Wait for the status endpoint: the engine is set up once it answers.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if snap, err := r.fetch(ctx); err == nil {
			r.mu.Lock()
			r.snaps = append(r.snaps, snap)
			r.mu.Unlock()
			return nil
		}
		select {
		case <-r.done:
			if r.copyMode && r.waitErr == nil {
				return nil // copied before the status endpoint was asked
			}
			return fmt.Errorf("%s exited at start: %v; log %s:\n%s", r.name(), r.waitErr, r.logPath(), tail(r.logPath(), 15))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's status endpoint %s did not answer within 60s", r.name(), r.addr)
		}
	}
}

func (r *repstreamSys) dead() <-chan struct{} { return r.done }

func (r *repstreamSys) deadErr() error {
	return fmt.Errorf("%s exited during the run (%v); log %s:\n%s", r.name(), r.waitErr, r.logPath(), tail(r.logPath(), 15))
}

func (r *repstreamSys) fetch(ctx context.Context) (stats.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/status", nil)
	if err != nil {
		return stats.Snapshot{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return stats.Snapshot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return stats.Snapshot{}, fmt.Errorf("GET /status: %s", resp.Status)
	}
	var sr struct {
		Stats stats.Snapshot `json:"stats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sr); err != nil {
		return stats.Snapshot{}, fmt.Errorf("decode /status: %w", err)
	}
	return sr.Stats, nil
}

// setEpoch sets time zero of the component samples.
func (r *repstreamSys) setEpoch(t time.Time) {
	r.mu.Lock()
	r.t0 = t
	r.mu.Unlock()
}

func (r *repstreamSys) poll(ctx context.Context) {
	if r.cmd == nil {
		return
	}
	select {
	case <-r.done:
		return
	default:
	}
	s, err := r.fetch(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.snaps); n > 0 {
		rates := stats.Rates(r.snaps[n-1], s)
		if !r.t0.IsZero() && !now.Before(r.t0) {
			r.samples = append(r.samples, ComponentSample{T: now.Sub(r.t0).Seconds(), Rates: rates})
		}
		r.lastLive = liveFromRates(rates, s)
	}
	r.snaps = append(r.snaps, s)
}

// liveFromRates renders spill and the busiest component.
func liveFromRates(rates []stats.Rate, s stats.Snapshot) string {
	var busiest stats.Rate
	for _, rt := range rates {
		if rt.Busy > busiest.Busy {
			busiest = rt
		}
	}
	var spill int64
	if sp, ok := s.Component("spill"); ok {
		spill = sp.Counters["bytes"]
	}
	out := "spill " + fmtBytes(spill)
	if busiest.Name != "" {
		out += fmt.Sprintf(" | busiest %s %.0f%%", busiest.Name, busiest.Busy*100)
	}
	return out
}

func (r *repstreamSys) live() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastLive
}

func (r *repstreamSys) stop(ctx context.Context, res *RunResult) error {
	if r.cmd == nil {
		return nil
	}
	r.poll(ctx)
	peak := r.peakRSS()
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	if r.logf != nil {
		r.logf.Close()
	}
	r.stopped = true
	if ps := r.cmd.ProcessState; ps != nil {
		res.Resources.EngineCPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	res.Resources.EnginePeakRSSBytes = peak
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Components = r.samples
	if n := len(r.snaps); n > 0 {
		last := r.snaps[n-1]
		res.FinalStats = &last
		res.Bottleneck, res.BottleneckWorker = bottleneckOf(r.snaps, r.t0)
		if sp, ok := last.Component("spill"); ok {
			res.Spill.EngineBytes = sp.Counters["bytes"]
		}
	}
	return nil
}

func (r *repstreamSys) cleanup(ctx context.Context) {
	r.kill()
	dropSlot(ctx, r.env.srcDSN, r.env.slot, r.env.log)
}

// kill kills the process if it was started and not stopped.
func (r *repstreamSys) kill() {
	if r.cmd != nil && !r.stopped {
		_ = r.cmd.Process.Kill()
		<-r.done
		r.stopped = true
		if r.logf != nil {
			r.logf.Close()
		}
	}
}

// terminate stops the process with SIGTERM (SIGKILL after 30 s) without
// reading its figures.
func (r *repstreamSys) terminate() {
	if r.cmd == nil || r.stopped {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.stopped = true
	if r.logf != nil {
		r.logf.Close()
	}
}

// dropSlot drops a logical slot (waiting for its walsender to go away).
func dropSlot(ctx context.Context, srcDSN, slot string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srcDSN)
	if err != nil {
		log.Warn("drop slot: connect", "err", err)
		return
	}
	defer c.Close(context.Background())
	for ctx.Err() == nil {
		_, err = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Warn("drop slot", "slot", slot, "err", err)
}

// ----- native logical replication -----

// NativeOptions are the subscription options used for native replication on
// PostgreSQL 15 (and later): streaming of large in-progress transactions on
// (PG15's best; 'parallel' exists from PG16), text format (binary=false,
// PostgreSQL's default; bench --native-binary sets binary = true), no
// initial copy (the tables start empty), and the subscription's default
// synchronous_commit=off for its apply worker.
const NativeOptions = "copy_data = false, streaming = on, binary = false"

// nativeOptions returns the subscription options for a source version.
func nativeOptions(version int, binary bool) string {
	opts := NativeOptions
	if version >= 160000 {
		opts = strings.Replace(opts, "streaming = on", "streaming = parallel", 1)
	}
	if binary {
		opts = strings.Replace(opts, "binary = false", "binary = true", 1)
	}
	return opts
}

func nativeBinaryNote(binary bool) string {
	if binary {
		return "true (bench --native-binary)"
	}
	return "false (text format, PostgreSQL's default)"
}

// nativeSys replicates with CREATE SUBSCRIPTION on the target database.
type nativeSys struct {
	env     sysEnv
	sub     string
	version int  // source server_version_num
	binary  bool // subscription binary = true
	// copyData (initial-copy workload): the subscription is created at
	// start, enabled, with copy_data = true.
	copyData bool
	done     chan struct{}
}

func newNative(env sysEnv, version int) *nativeSys {
	return &nativeSys{env: env, sub: env.slot, version: version, done: make(chan struct{})}
}

func (n *nativeSys) options() string {
	return nativeOptions(n.version, n.binary)
}

func (n *nativeSys) prepare(ctx context.Context) error {
	if n.copyData {
		return nil
	}
	sql := fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION %s WITH (%s, enabled = false, slot_name = '%s')",
		n.sub, strings.ReplaceAll(n.env.srcDSN, "'", "''"), n.env.pub, n.options(), n.env.slot)
	return execOn(ctx, n.env.tgtDSN, sql)
}

func (n *nativeSys) start(ctx context.Context) error {
	if n.copyData {
		opts := strings.Replace(n.options(), "copy_data = false", "copy_data = true", 1)
		return execOn(ctx, n.env.tgtDSN, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION %s WITH (%s, slot_name = '%s')",
			n.sub, strings.ReplaceAll(n.env.srcDSN, "'", "''"), n.env.pub, opts, n.env.slot))
	}
	return execOn(ctx, n.env.tgtDSN, "ALTER SUBSCRIPTION "+n.sub+" ENABLE")
}

func (n *nativeSys) dead() <-chan struct{}    { return n.done }
func (n *nativeSys) deadErr() error           { return errors.New("native subscription stopped") }
func (n *nativeSys) poll(ctx context.Context) {}
func (n *nativeSys) live() string             { return "" }

func (n *nativeSys) stop(ctx context.Context, res *RunResult) error {
	return execOn(ctx, n.env.tgtDSN, "ALTER SUBSCRIPTION "+n.sub+" DISABLE")
}

func (n *nativeSys) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := execOn(ctx, n.env.tgtDSN, "DROP SUBSCRIPTION IF EXISTS "+n.sub); err != nil {
		n.env.log.Warn("drop subscription", "err", err)
	}
	dropSlot(ctx, n.env.srcDSN, n.env.slot, n.env.log)
}

// ----- helpers -----

func execOn(ctx context.Context, dsn, sql string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect for %q: %w", firstLine(sql), err)
	}
	defer c.Close(context.Background())
	return execSQL(ctx, c, sql)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file (for error messages).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte{'\n'})
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte{'\n'}))
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
