package kafkatest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"
)

// Version is the Kafka release that scripts/ensure-kafka.sh caches.
const Version = "4.4.0"

// readyStamp is the content of <home>/READY after a complete fetch; keep it
// in step with scripts/ensure-kafka.sh.
const readyStamp = "kafka_2.13:" + Version + " log4j-slf4j2-impl:2.26.1 slf4j-api:2.0.20"

// Environment variables.
const (
	// EnvHome overrides the jar cache directory (Home).
	EnvHome = "REPSTREAM_KAFKA_HOME"
	// EnvRequire, set to anything but "" or "0", turns a missing Kafka
	// (java, or the cached jars) into a test failure instead of a skip.
	EnvRequire = "REPSTREAM_REQUIRE_KAFKA"
)

// DirPrefix starts the name of every cluster directory under os.TempDir().
const DirPrefix = "repstream-kafka-"

// DefaultHeapMB is each broker's heap (-Xms and -Xmx) unless Options.HeapMB
// says otherwise.
const DefaultHeapMB = 300

const (
	startAttempts = 3                // a port taken between choosing and binding it
	stopTimeout   = 30 * time.Second // SIGTERM (controlled shutdown), then SIGKILL
	logTailLines  = 30
)

// ErrUnavailable is wrapped by the errors of Available and StartCluster when
// java or the cached Kafka jars are missing.
var ErrUnavailable = errors.New("kafka unavailable")

// Options configure StartCluster. The zero value is a valid configuration:
// one broker.
type Options struct {
	// Name labels the cluster in its directory name. Default "kafka".
	Name string
	// Brokers is the number of brokers, each also a controller; default 1.
	// Use an odd number (a majority of the controllers must be up).
	Brokers int
	// HeapMB is each broker's JVM heap in MiB; default DefaultHeapMB.
	HeapMB int
	// Settings are server.properties entries applied over the defaults
	// (listeners, node.id, log.dirs and the quorum must be left alone).
	Settings map[string]string
	// Home is the jar cache; default Home().
	Home string
	// Secure, when set, adds a SASL_SSL client listener (SecureAddrs,
	// CAFile) to every broker.
	Secure *Secure
	// Logger receives lifecycle logs; default: discard.
	Logger *slog.Logger
}

// Home returns the directory where scripts/ensure-kafka.sh caches Kafka:
// $REPSTREAM_KAFKA_HOME, or <user cache dir>/repstream/kafka-<Version>
// (~/.cache/repstream/kafka-4.4.0).
func Home() string {
	if h := os.Getenv(EnvHome); h != "" {
		return h
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = filepath.Join(os.TempDir(), "repstream-cache")
	}
	return filepath.Join(cache, "repstream", "kafka-"+Version)
}

// javaPath returns $JAVA_HOME/bin/java when it exists, else java from PATH.
func javaPath() (string, error) {
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		p := filepath.Join(jh, "bin", "java")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w: java not found (Kafka %s needs Java 17+)", ErrUnavailable, Version)
	}
	return p, nil
}

// Available reports, as an error wrapping ErrUnavailable, what is missing to
// run brokers from home ("" means Home()): java, or the complete jar cache.
func Available(home string) error {
	if home == "" {
		home = Home()
	}
	if _, err := javaPath(); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(home, "READY"))
	if err != nil {
		return fmt.Errorf("%w: Kafka %s is not cached in %s (run `make kafka`, i.e. scripts/ensure-kafka.sh)", ErrUnavailable, Version, home)
	}
	if got := strings.TrimSpace(string(b)); got != readyStamp {
		return fmt.Errorf("%w: %s holds %q, want %q (run `make kafka` again)", ErrUnavailable, home, got, readyStamp)
	}
	return nil
}

// Cluster is a set of running (or stopped) throwaway brokers.
//
// Invariants: dir, home, java, clusterID and the brokers' indexes, node IDs,
// ports and directories never change after StartCluster returns. mu
// serialises the lifecycle methods (Stop, Kill, Restart, Close); a broker's
// proc is non-nil from its start until its process has been waited for.
// closed is set once by Close, after which lifecycle methods fail.
type Cluster struct {
	name      string
	dir       string
	home      string
	java      string
	clusterID string
	heapMB    int
	settings  map[string]string
	secure    *Secure
	log       *slog.Logger
	brokers   []*broker
	archive   string // the brokers' class archive (cds.go), "" for none
	dumpTo    string // a broker started to make the archive writes it here at exit

	mu     sync.Mutex
	closed bool
}

type broker struct {
	index      int
	nodeID     int32
	port       int // PLAINTEXT listener
	ctrlPort   int // CONTROLLER listener
	securePort int // SECURE listener (SASL_SSL), with Options.Secure
	dir        string
	proc       *process // nil while stopped
}

// process is a running broker JVM. done is closed once Wait has returned,
// err then holds its result.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartCluster creates, formats and starts the brokers of a new cluster and
// returns once every broker serves and sees all the others registered. On
// failure nothing is left behind and the error includes the tail of the
// failing broker's log.
func StartCluster(ctx context.Context, opts Options) (*Cluster, error) {
	home := opts.Home
	if home == "" {
		home = Home()
	}
	if err := Available(home); err != nil {
		return nil, err
	}
	java, _ := javaPath()
	reapOnce.Do(func() {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := ReapStale(rctx, opts.Logger); err != nil && opts.Logger != nil {
			opts.Logger.Warn("kafkatest: reaping stale clusters", "err", err)
		}
	})
	if opts.Brokers <= 0 {
		opts.Brokers = 1
	}
	if opts.HeapMB <= 0 {
		opts.HeapMB = DefaultHeapMB
	}
	if opts.Name == "" {
		opts.Name = "kafka"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	archive := ensureArchive(ctx, home, java, logger)
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		c, err := startOnce(ctx, opts, home, java, archive, "", logger)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
		logger.Info("kafkatest: port taken, retrying on others", "attempt", attempt, "err", err)
	}
	return nil, lastErr
}

// startOnce starts the cluster opts describes; archive is the brokers'
// class archive ("": none), dumpTo where a broker writes one at exit ("":
// nowhere).
func startOnce(ctx context.Context, opts Options, home, java, archive, dumpTo string, logger *slog.Logger) (*Cluster, error) {
	name := sanitizeName(opts.Name)
	dir, err := os.MkdirTemp(os.TempDir(), DirPrefix+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: create cluster dir: %w", err)
	}
	id, err := newClusterID()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{
		name:      name,
		dir:       dir,
		home:      home,
		java:      java,
		clusterID: id,
		heapMB:    opts.HeapMB,
		settings:  opts.Settings,
		secure:    opts.Secure,
		log:       logger.With("component", "kafkatest", "cluster", name),
		archive:   archive,
		dumpTo:    dumpTo,
	}
	fail := func(err error) (*Cluster, error) {
		c.killAll()
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			c.log.Warn("remove failed cluster dir", "dir", dir, "err", rmErr)
		}
		return nil, err
	}
	if err := writeOwner(dir); err != nil {
		return fail(err)
	}
	ports, err := freePorts(3 * opts.Brokers)
	if err != nil {
		return fail(err)
	}
	for i := range opts.Brokers {
		b := &broker{
			index:      i,
			nodeID:     int32(i + 1),
			port:       ports[3*i],
			ctrlPort:   ports[3*i+1],
			securePort: ports[3*i+2],
			dir:        filepath.Join(dir, "broker-"+strconv.Itoa(i)),
		}
		c.brokers = append(c.brokers, b)
	}
	if c.secure != nil {
		if err := c.writeCertificates(); err != nil {
			return fail(err)
		}
	}
	t0 := time.Now()
	// Format every broker's storage: one JVM each, two at a time (as many
	// as the machine has cores, in the test environment).
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for _, b := range c.brokers {
		g.Go(func() error { return c.format(gctx, b) })
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	tFormat := time.Since(t0)
	// A quorum of several controllers elects a leader only once a majority
	// runs: start them all, then wait.
	for _, b := range c.brokers {
		if err := c.startProcess(b); err != nil {
			return fail(err)
		}
	}
	if err := c.waitServing(ctx, c.brokers); err != nil {
		return fail(err)
	}
	c.log.Info("cluster started", "dir", dir, "brokers", c.Addrs(),
		"format", tFormat.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond))
	return c, nil
}

// Dir returns the cluster's directory.
func (c *Cluster) Dir() string { return c.dir }

// ClusterID returns the KRaft cluster ID the brokers were formatted with.
func (c *Cluster) ClusterID() string { return c.clusterID }

// Len returns the number of brokers (running or not).
func (c *Cluster) Len() int { return len(c.brokers) }

// Addr returns the host:port of broker i's client listener.
func (c *Cluster) Addr(i int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.brokers[i].port))
}

// Addrs returns every broker's host:port, in index order: seed brokers for
// a client (whether or not each is running).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.brokers))
	for i := range c.brokers {
		out[i] = c.Addr(i)
	}
	return out
}

// NodeID returns broker i's node.id (i+1).
func (c *Cluster) NodeID(i int) int32 { return c.brokers[i].nodeID }

// Index returns the index of the broker with node.id id, or -1.
func (c *Cluster) Index(id int32) int {
	for _, b := range c.brokers {
		if b.nodeID == id {
			return b.index
		}
	}
	return -1
}

// Running reports whether broker i's process runs (it may not serve yet).
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.brokers[i].proc
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// LogPath returns the path of broker i's server log.
func (c *Cluster) LogPath(i int) string { return filepath.Join(c.brokers[i].dir, "server.log") }

// Stop shuts broker i down cleanly (SIGTERM: a controlled shutdown that
// moves its partition leaderships away first), killing it after 30 s.
// Stopping a stopped broker does nothing.
func (c *Cluster) Stop(i int) error {
	return c.halt(i, syscall.SIGTERM)
}

// Kill kills broker i with SIGKILL (kill -9: no controlled shutdown, no
// flush; what the page cache holds survives) and waits for it to be gone.
// Killing a stopped broker does nothing.
func (c *Cluster) Kill(i int) error {
	return c.halt(i, syscall.SIGKILL)
}

func (c *Cluster) halt(i int, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("kafkatest: cluster %s is closed", c.name)
	}
	b := c.brokers[i]
	if b.proc == nil {
		return nil
	}
	c.signalAndWait(b, sig)
	c.log.Info("broker halted", "broker", i, "signal", sig)
	return nil
}

// signalAndWait sends sig to b's JVM and waits for it to exit, sending
// SIGKILL when it outlives stopTimeout. c.mu is held.
func (c *Cluster) signalAndWait(b *broker, sig syscall.Signal) {
	p := b.proc
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		c.log.Warn("broker outlived its stop; killing it", "broker", b.index)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	b.proc = nil
	_ = os.Remove(filepath.Join(b.dir, "pid"))
}

// Restart starts broker i again on its ports and data directory (killing
// it first if it runs) and returns once it serves and sees every running
// broker registered.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("kafkatest: cluster %s is closed", c.name)
	}
	b := c.brokers[i]
	if b.proc != nil {
		c.signalAndWait(b, syscall.SIGKILL)
	}
	err := c.startProcess(b)
	var running []*broker
	for _, o := range c.brokers {
		if o.proc != nil {
			running = append(running, o)
		}
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.waitServing(ctx, running); err != nil {
		return err
	}
	c.log.Info("broker restarted", "broker", i, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// Close kills every broker and removes the cluster directory. It is
// idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.killAllLocked()
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("kafkatest: remove %s: %w", c.dir, err)
	}
	return nil
}

func (c *Cluster) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killAllLocked()
}

func (c *Cluster) killAllLocked() {
	for _, b := range c.brokers {
		if b.proc != nil {
			_ = b.proc.cmd.Process.Kill()
		}
	}
	for _, b := range c.brokers {
		if b.proc != nil {
			c.signalAndWait(b, syscall.SIGKILL)
		}
	}
}

// format writes broker b's configuration and formats its storage
// (kafka-storage.sh format, i.e. kafka.tools.StorageTool).
func (c *Cluster) format(ctx context.Context, b *broker) error {
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "server.properties"), []byte(c.serverProperties(b)), 0o644); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "log4j2.properties"), []byte(log4jProperties(b.dir)), 0o644); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	args := append(c.jvmArgs(b, 128), "kafka.tools.StorageTool", "format",
		"--config", filepath.Join(b.dir, "server.properties"),
		"--cluster-id", c.clusterID)
	if c.secure != nil {
		args = append(args, c.scramArgs()...)
	}
	cmd := exec.CommandContext(ctx, c.java, args...)
	cmd.Dir = b.dir
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafkatest: format broker %d: %w\n%s", b.index, err, lastLines(string(out), logTailLines))
	}
	return nil
}

// jvmArgs returns the JVM options of broker b with a heap of heapMB.
func (c *Cluster) jvmArgs(b *broker, heapMB int) []string {
	args := []string{
		"-Xms" + strconv.Itoa(heapMB) + "m",
		"-Xmx" + strconv.Itoa(heapMB) + "m",
		// A small heap on a small machine: the serial collector adds no
		// GC threads, and C1 alone starts the broker faster.
		"-XX:+UseSerialGC",
		"-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true",
		// Nothing in the shared /tmp: snappy's native library is
		// unpacked into the broker's directory (else one file per start
		// stays in /tmp after a kill -9), and no hsperfdata file.
		"-Dorg.xerial.snappy.tempdir=" + b.dir,
		"-XX:-UsePerfData",
		"-Dlog4j2.configurationFile=" + filepath.Join(b.dir, "log4j2.properties"),
		"-Dkafka.logs.dir=" + b.dir,
		"-cp", filepath.Join(c.home, "libs", "*"),
	}
	if c.archive != "" {
		// Classes loaded and verified once, mapped by every broker
		// (cds.go).
		args = append(args, "-XX:SharedArchiveFile="+c.archive)
	}
	return args
}

// startProcess starts broker b's JVM; the caller waits for it to serve.
func (c *Cluster) startProcess(b *broker) error {
	out, err := os.OpenFile(filepath.Join(b.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	defer out.Close()
	args := c.jvmArgs(b, c.heapMB)
	if c.dumpTo != "" {
		args = append(args, "-XX:ArchiveClassesAtExit="+c.dumpTo)
	}
	args = append(args, "kafka.Kafka", filepath.Join(b.dir, "server.properties"))
	cmd := exec.Command(c.java, args...)
	cmd.Dir = b.dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kafkatest: start broker %d: %w", b.index, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	b.proc = p
	if err := os.WriteFile(filepath.Join(b.dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	return nil
}

// waitServing waits until each broker of bs answers a metadata request that
// lists every broker of bs (registered with the controller and unfenced),
// failing early, with the broker's log tail, when one exits.
func (c *Cluster) waitServing(ctx context.Context, bs []*broker) error {
	want := make(map[int32]bool, len(bs))
	for _, b := range bs {
		want[b.nodeID] = true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, b := range bs {
		c.mu.Lock()
		p := b.proc
		c.mu.Unlock()
		if p == nil {
			return fmt.Errorf("kafkatest: broker %d is not running", b.index)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addr(b.index)),
			kgo.DialTimeout(time.Second), kgo.RetryTimeout(time.Second))
		if err != nil {
			return fmt.Errorf("kafkatest: %w", err)
		}
		err = c.pollServing(ctx, cl, b, p, want)
		cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) pollServing(ctx context.Context, cl *kgo.Client, b *broker, p *process, want map[int32]bool) error {
	pause := 50 * time.Millisecond
	var last error
	for {
		seen, err := brokersSeenBy(ctx, cl)
		if err == nil {
			missing := missingNodes(want, seen)
			if len(missing) == 0 {
				return nil
			}
			err = fmt.Errorf("brokers %v not registered yet", missing)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("kafkatest: broker %d exited (%v) before serving; %s", b.index, p.err, c.tail(b))
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: broker %d not serving: %w (last: %v); %s", b.index, ctx.Err(), last, c.tail(b))
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// brokersSeenBy returns the node IDs that cl's seed broker lists as brokers.
func brokersSeenBy(ctx context.Context, cl *kgo.Client) (map[int32]bool, error) {
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, errors.New("no seed broker")
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	resp, err := seeds[0].Request(rctx, req)
	if err != nil {
		return nil, err
	}
	seen := map[int32]bool{}
	for _, mb := range resp.(*kmsg.MetadataResponse).Brokers {
		seen[mb.NodeID] = true
	}
	return seen, nil
}

func missingNodes(want, seen map[int32]bool) []int32 {
	var out []int32
	for id := range want {
		if !seen[id] {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// LogTails returns the last lines of every broker's server log and JVM
// output, for a failing test to print.
func (c *Cluster) LogTails() string {
	var sb strings.Builder
	for _, b := range c.brokers {
		sb.WriteString(c.tail(b))
		sb.WriteString("\n")
	}
	return sb.String()
}

func (c *Cluster) tail(b *broker) string {
	var sb strings.Builder
	for _, f := range []string{"stdout.log", "server.log"} {
		p := filepath.Join(b.dir, f)
		data, err := os.ReadFile(p)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "--- broker %d %s (last %d lines):\n%s\n", b.index, p, logTailLines, lastLines(string(data), logTailLines))
	}
	if sb.Len() == 0 {
		return fmt.Sprintf("broker %d logged nothing", b.index)
	}
	return sb.String()
}

// serverProperties renders broker b's server.properties.
func (c *Cluster) serverProperties(b *broker) string {
	n := len(c.brokers)
	rf := strconv.Itoa(min(3, n))
	isr := strconv.Itoa(min(2, n))
	voters := make([]string, n)
	for i, o := range c.brokers {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", o.nodeID, o.ctrlPort)
	}
	s := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(int(b.nodeID)),
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"listeners":                                        fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", b.port, b.ctrlPort),
		"advertised.listeners":                             fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", b.port),
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                                         filepath.Join(b.dir, "data"),
		"auto.create.topics.enable":                        "false",
		"num.partitions":                                   "1",
		"default.replication.factor":                       rf,
		"offsets.topic.replication.factor":                 rf,
		"offsets.topic.num.partitions":                     "1",
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    isr,
		"transaction.state.log.num.partitions":             "1",
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            isr,
		"group.initial.rebalance.delay.ms":                 "0",
		// Few threads and a small log-cleaner buffer (128 MiB by default)
		// fit brokers of a few hundred MiB on two cores.
		"num.network.threads":               "2",
		"num.io.threads":                    "2",
		"background.threads":                "2",
		"num.replica.fetchers":              "1",
		"log.cleaner.dedupe.buffer.size":    strconv.Itoa(8 << 20),
		"log.cleaner.threads":               "1",
		"num.recovery.threads.per.data.dir": "1",
		// A killed broker is fenced (its leaderships move) after 4 s
		// rather than 9; a restarted broker registers anew only then.
		"broker.session.timeout.ms":    "4000",
		"broker.heartbeat.interval.ms": "500",
	}
	if c.secure != nil {
		s["listeners"] += fmt.Sprintf(",SECURE://127.0.0.1:%d", b.securePort)
		s["advertised.listeners"] += fmt.Sprintf(",SECURE://127.0.0.1:%d", b.securePort)
		s["listener.security.protocol.map"] += ",SECURE:SASL_SSL"
		for k, v := range c.secureProperties() {
			s[k] = v
		}
	}
	for k, v := range c.settings {
		s[k] = v
	}
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	sb.WriteString("# written by repstream internal/kafkatest\n")
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s=%s\n", k, s[k])
	}
	return sb.String()
}

// log4jProperties logs the broker at INFO into <dir>/server.log.
func log4jProperties(dir string) string {
	return `# written by repstream internal/kafkatest
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ` + filepath.Join(dir, "server.log") + `
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = warn
`
}

// newClusterID returns a random KRaft cluster ID: 16 random bytes in
// unpadded URL-safe base64, as kafka-storage random-uuid prints (Kafka
// refuses IDs whose text starts with '-').
func newClusterID() (string, error) {
	var b [16]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("kafkatest: cluster id: %w", err)
		}
		if s := base64.RawURLEncoding.EncodeToString(b[:]); s[0] != '-' {
			return s, nil
		}
	}
}

// freePorts returns n distinct free TCP ports of 127.0.0.1 (held open
// together while chosen, so that none repeats).
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// sanitizeName keeps letters, digits, '-' and '_' of name (others become
// '_'), at most 32 of them.
func sanitizeName(name string) string {
	var sb strings.Builder
	for _, r := range name {
		if sb.Len() >= 32 {
			break
		}
		if r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
	}
	if sb.Len() == 0 {
		return "kafka"
	}
	return sb.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
