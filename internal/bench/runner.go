package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgcluster"
)

// ErrNotVerified is returned (wrapped) by Run when a system's target did not
// equal its source (or the run failed): that run is reported FAILED.
var ErrNotVerified = errors.New("a run failed or did not verify")

// Options configure Run.
type Options struct {
	Workload string
	Mode     Mode     // ModeLive (the zero value) or ModeBacklog
	Systems  []System // default AllSystems
	Params   Params
	// Vary is "flag=v1,v2,...": repstream runs once per value with --flag=v.
	Vary string
	// Repeat runs every system this many rounds (default 1), alternating
	// the order (ABBA) so that drift of a shared machine hits both alike;
	// ratios are then taken within a round and summarised by their median.
	Repeat int
	// RepstreamFlags pass through to `repstream run` (e.g. "--apply-parallelism=2").
	RepstreamFlags []string
	// SourceDSN and TargetDSN point at existing servers (any database as the
	// admin connection; bench creates and drops its own databases). Empty:
	// bench starts throwaway clusters.
	SourceDSN, TargetDSN string
	// ServerSettings are applied to throwaway clusters (both the same).
	ServerSettings map[string]string
	// NativeBinary runs the native subscription with binary = true (default:
	// PostgreSQL's default, text).
	NativeBinary bool
	// Fast starts throwaway clusters with fsync off (not for real figures).
	Fast bool
	// UnixSocket connects everything — repstream, the native subscription
	// and the bench itself — through the throwaway clusters' Unix sockets
	// instead of TCP on 127.0.0.1.
	UnixSocket bool
	// Binary is the repstream executable (default: this executable).
	Binary string
	// Out is the report directory (created).
	Out string
	// Timeout bounds one system's run (default 30 min).
	Timeout time.Duration
	// Live receives the live line once a second (nil or Quiet: none).
	Live  io.Writer
	Quiet bool
	// Charts can be turned off (tests of the runner that do not need them).
	NoCharts bool
	Logger   *slog.Logger

	// KafkaBrokers is how many brokers the kafka system's throwaway Kafka
	// cluster has (default 1, at most 3; with 3 the topic has replication
	// factor 3 and min.insync.replicas 2).
	KafkaBrokers int
	// KafkaTargets is how many targets the kafka system applies to
	// (default 1). The second is stopped while the workload loads: its
	// apply starts once the first target has everything, and the run
	// measures its catch-up and the source's retained WAL meanwhile.
	KafkaTargets int
	// KafkaHeapMB is each broker's JVM heap in MiB (default
	// DefaultKafkaHeapMB).
	KafkaHeapMB int

	// Tests: kafkaStarted is called once the broker is started,
	// kafkaAfterRun after each kafka run's cleanup; kafkaWarmUp, if not
	// 0, replaces the fresh cluster's warm-up (kafkaWarmUp): a test
	// measures nothing, only that the figures are there.
	kafkaStarted, kafkaAfterRun func(*kafkaBroker)
	kafkaWarmUp                 time.Duration
}

// server is a PostgreSQL server the bench uses: a throwaway cluster or an
// existing one given by DSN.
type server struct {
	admin   string
	dsnFor  func(db string) string
	cluster *pgcluster.Cluster
}

func clusterServer(c *pgcluster.Cluster, unixSocket bool) *server {
	if unixSocket {
		return &server{admin: c.SocketDSN("postgres"), dsnFor: c.SocketDSN, cluster: c}
	}
	return &server{admin: c.DSN("postgres"), dsnFor: c.DSN, cluster: c}
}

func dsnServer(dsn string) (*server, error) {
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return nil, fmt.Errorf("DSN %q: %w", dsn, err)
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("DSN URL: %w", err)
		}
		return &server{admin: dsn, dsnFor: func(db string) string {
			v := *u
			v.Path = "/" + db
			return v.String()
		}}, nil
	}
	return &server{admin: dsn, dsnFor: func(db string) string { return dsn + " dbname=" + db }}, nil
}

// appName marks the bench's own connections so that their CPU is not counted.
const appName = "repstream-bench"

func withApp(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "application_name=" + appName
	}
	return dsn + " application_name=" + appName
}

// runSpec is one system run.
type runSpec struct {
	idx       int
	round     int // 1-based round of --repeat; 0 without it
	system    System
	label     string
	varyValue string
	flags     []string
}

type runner struct {
	o        Options
	wl       *Workload
	src, tgt *server
	log      *slog.Logger
	version  int
	out      io.Writer
	// dblSink, when set, receives the dbl workload's results of the current run.
	dblSink *dblSink
	// keepDBs leaves the run databases in place: with pglogical 2.4
	// preloaded on PostgreSQL 15, DROP DATABASE waits forever for the
	// pglogical supervisor to accept its ProcSignalBarrier (pglogical issues
	// 399, 418), and terminating the supervisor ends it for good (it exits
	// 0, so it is not restarted).
	keepDBs bool
	// lastNative is when the last native subscription was started.
	lastNative time.Time
	// broker is the Kafka broker of the kafka runs (nil until the first
	// one starts it; closed when Run returns).
	broker *kafkaBroker
}

// nativeSpacing waits, before a native run starts its subscription, until
// the target's wal_retrieve_retry_interval has passed since the previous one
// started: PostgreSQL's launcher (up to 15) starts at most one apply worker
// per interval, so a subscription created sooner would wait for its worker
// inside the measured time (seen: 5 s added to a 0.2 s catch-up).
func (r *runner) nativeSpacing(ctx context.Context, tgtDSN string) error {
	if r.lastNative.IsZero() {
		return nil
	}
	c, err := pgx.Connect(ctx, tgtDSN)
	if err != nil {
		return err
	}
	var ms int64
	err = c.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_retrieve_retry_interval'").Scan(&ms)
	c.Close(context.Background())
	if err != nil {
		return fmt.Errorf("read wal_retrieve_retry_interval on the target: %w", err)
	}
	wait := time.Duration(ms)*time.Millisecond + 100*time.Millisecond - time.Since(r.lastNative)
	if wait <= 0 {
		return nil
	}
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EnsureDefaults fills what is left zero: mode live (always live for dbl,
// which measures the application while replication runs), both systems,
// scale 1, a 30-minute timeout, a discarding logger, the report directory
// bench-WORKLOAD.
func (o *Options) EnsureDefaults() {
	if o.Mode == "" || o.Workload == "dbl" {
		o.Mode = ModeLive
	}
	if len(o.Systems) == 0 {
		o.Systems = slices.Clone(AllSystems)
	}
	if o.Params.Scale <= 0 {
		o.Params.Scale = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Minute
	}
	if o.KafkaBrokers <= 0 {
		o.KafkaBrokers = 1
	}
	if o.KafkaTargets <= 0 {
		o.KafkaTargets = 1
	}
	if o.KafkaHeapMB <= 0 {
		o.KafkaHeapMB = DefaultKafkaHeapMB
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Out == "" {
		o.Out = "bench-" + o.Workload
	}
}

// Validate checks the options before anything starts; every problem is
// reported, each naming its flag.
func (o *Options) Validate() error {
	var errs []error
	if _, err := Lookup(o.Workload); err != nil {
		errs = append(errs, err)
	}
	if o.Workload == "dbl" && o.Repeat > 1 {
		errs = append(errs, errors.New("--repeat: not for dbl (it runs its own series of jobs)"))
	}
	if o.Repeat < 0 {
		errs = append(errs, fmt.Errorf("--repeat %d: at least 1", o.Repeat))
	}
	if o.Repeat > 1 && o.Vary != "" {
		errs = append(errs, errors.New("--repeat and --vary: one at a time"))
	}
	if o.Mode != ModeLive && o.Mode != ModeBacklog {
		errs = append(errs, fmt.Errorf("--mode %q: want %s or %s", o.Mode, ModeLive, ModeBacklog))
	}
	for _, s := range o.Systems {
		if _, err := ParseSystem(string(s)); err != nil {
			errs = append(errs, fmt.Errorf("--systems: %w", err))
		}
	}
	if _, _, err := parseVary(o.Vary); err != nil {
		errs = append(errs, err)
	}
	if o.KafkaBrokers > 3 {
		errs = append(errs, fmt.Errorf("--kafka-brokers %d: 1 to 3 (each broker takes about 350 MB)", o.KafkaBrokers))
	}
	if o.KafkaTargets > 2 {
		errs = append(errs, fmt.Errorf("--kafka-targets %d: 1 or 2 (the second is the stopped one)", o.KafkaTargets))
	}
	if (o.KafkaBrokers > 1 || o.KafkaTargets > 1 || o.KafkaHeapMB != DefaultKafkaHeapMB) && !slices.Contains(o.Systems, SystemKafka) {
		errs = append(errs, errors.New("--kafka-brokers, --kafka-targets and --kafka-heap are the kafka system's: add kafka to --systems"))
	}
	if o.KafkaHeapMB < 128 {
		errs = append(errs, fmt.Errorf("--kafka-heap %d: at least 128 (MiB)", o.KafkaHeapMB))
	}
	if o.KafkaTargets > 1 && o.Mode != ModeLive {
		errs = append(errs, errors.New("--kafka-targets 2: live mode only (the second target is stopped while the workload loads)"))
	}
	if o.KafkaTargets > 1 && o.Workload == "initial-copy" {
		errs = append(errs, errors.New("--kafka-targets 2: not for initial-copy"))
	}
	if (o.SourceDSN == "") != (o.TargetDSN == "") {
		errs = append(errs, errors.New("--source and --target go together"))
	}
	if o.SourceDSN != "" && o.UnixSocket {
		errs = append(errs, errors.New("--unix-socket applies to throwaway clusters: with --source/--target, put host=/socket/dir in the DSNs"))
	}
	return errors.Join(errs...)
}

// Run executes the benchmark and writes the report files into o.Out. The
// report is returned also when a run failed (then with ErrNotVerified).
func Run(ctx context.Context, o Options) (*Report, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	wl, err := Lookup(o.Workload)
	if err != nil {
		return nil, err
	}
	if o.Binary == "" {
		if o.Binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the repstream executable: %w", err)
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("create report directory: %w", err)
	}
	r := &runner{o: o, wl: wl, log: o.Logger.With("component", "bench"), out: io.Discard}
	if o.Live != nil && !o.Quiet {
		r.out = o.Live
	}
	skipped := r.skip(selectSystems(&o, wl))
	if len(o.Systems) == 0 {
		return nil, fmt.Errorf("--systems: no system can run %s (%v)", wl.Name, skipped)
	}
	o.ServerSettings = withPreload(o.ServerSettings, o.Systems)
	r.o = o
	r.keepDBs = slices.Contains(o.Systems, SystemPglogical)
	defer r.closeKafka()

	// Servers.
	if o.SourceDSN != "" {
		if r.src, err = dsnServer(o.SourceDSN); err != nil {
			return nil, err
		}
		if r.tgt, err = dsnServer(o.TargetDSN); err != nil {
			return nil, err
		}
	} else {
		fmt.Fprintf(r.out, "starting source and target PostgreSQL clusters ...\n")
		sc, err := pgcluster.Start(ctx, pgcluster.Options{Name: "bench-source", Settings: o.ServerSettings, Fast: o.Fast, Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("start the source cluster: %w", err)
		}
		defer sc.Remove(context.Background())
		tc, err := pgcluster.Start(ctx, pgcluster.Options{Name: "bench-target", Settings: o.ServerSettings, Fast: o.Fast, Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("start the target cluster: %w", err)
		}
		defer tc.Remove(context.Background())
		r.src, r.tgt = clusterServer(sc, o.UnixSocket), clusterServer(tc, o.UnixSocket)
	}
	if o.SourceDSN != "" && slices.Contains(o.Systems, SystemPglogical) {
		if why := serverPeerCheck(ctx, SystemPglogical, r.src, r.tgt); why != "" {
			maps.Copy(skipped, r.skip(map[string]string{string(SystemPglogical): why + "; install: " + installHint(SystemPglogical)}))
			o.Systems = slices.DeleteFunc(o.Systems, func(s System) bool { return s == SystemPglogical })
			r.o = o
		}
	}
	specs, err := plan(o)
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("--systems: no system can run %s (%v)", wl.Name, skipped)
	}

	rep := &Report{SchemaVersion: SchemaVersion, Workload: wl.Name, Description: wl.Description, Mode: o.Mode,
		Started: time.Now().UTC().Format(time.RFC3339)}
	if err := r.describe(ctx, rep); err != nil {
		return nil, err
	}
	if len(skipped) > 0 {
		rep.Settings.Skipped = skipped
	}
	rep.Settings.Peers = peerSettings(o.Systems)
	if slices.Contains(o.Systems, SystemKafka) {
		rep.Settings.Kafka = kafkaSettings(o.KafkaBrokers, o.KafkaTargets, o.KafkaHeapMB)
	}
	if wl.Name == "dbl" {
		err = r.runDBL(ctx, rep, specs)
	} else {
		for _, sp := range specs {
			if ctx.Err() != nil {
				break
			}
			if wl.Copy {
				fmt.Fprintf(r.out, "== %s: %s\n", sp.label, wl.Name)
			} else {
				fmt.Fprintf(r.out, "== %s: %s, %s mode\n", sp.label, wl.Name, o.Mode)
			}
			res := r.runSystem(ctx, sp)
			rep.Runs = append(rep.Runs, res)
			fmt.Fprintf(r.out, "== %s\n", summaryLine(res))
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	if werr := writeOutputs(rep, o.Out, !o.NoCharts); werr != nil {
		return rep, errors.Join(err, werr)
	}
	if err != nil {
		return rep, err
	}
	for _, res := range rep.Runs {
		if !res.Verified {
			return rep, fmt.Errorf("%s: %w", res.Label, ErrNotVerified)
		}
	}
	return rep, nil
}

// parseVary splits --vary "flag=v1,v2,...": name "" when vary is "".
func parseVary(vary string) (name string, vals []string, err error) {
	if vary == "" {
		return "", nil, nil
	}
	name, list, ok := strings.Cut(vary, "=")
	if !ok || name == "" || list == "" {
		return "", nil, fmt.Errorf("--vary %q: want flag=v1,v2[,...] (values separated by commas)", vary)
	}
	return strings.TrimPrefix(name, "--"), strings.Split(list, ","), nil
}

// plan lists the system runs: repstream once (or once per --vary value),
// then native once; with --repeat N, N such rounds, every second one in
// reverse order.
func plan(o Options) ([]runSpec, error) {
	var specs []runSpec
	varyName, varyVals, err := parseVary(o.Vary)
	if err != nil {
		return nil, err
	}
	for _, s := range o.Systems {
		switch {
		case s == SystemRepstream && varyName != "":
			for _, v := range varyVals {
				flags := append(slices.Clone(o.RepstreamFlags), "--"+varyName+"="+strings.TrimSpace(v))
				specs = append(specs, runSpec{system: s, label: fmt.Sprintf("repstream %s=%s", varyName, strings.TrimSpace(v)),
					varyValue: strings.TrimSpace(v), flags: flags})
			}
		default:
			specs = append(specs, runSpec{system: s, label: s.String(), flags: slices.Clone(o.RepstreamFlags)})
		}
	}
	if o.Repeat > 1 {
		one := specs
		specs = nil
		for round := 1; round <= o.Repeat; round++ {
			rs := slices.Clone(one)
			if round%2 == 0 {
				slices.Reverse(rs)
			}
			for i := range rs {
				rs[i].round = round
				rs[i].label = fmt.Sprintf("%s #%d", rs[i].label, round)
			}
			specs = append(specs, rs...)
		}
	}
	for i := range specs {
		specs[i].idx = i + 1
	}
	return specs, nil
}

func (r *runner) describe(ctx context.Context, rep *Report) error {
	o := r.o
	rep.Settings = Settings{Scale: o.Params.Scale, Rows: o.Params.Rows, Params: o.Params.Map(), Systems: o.Systems,
		Vary: o.Vary, Repeat: o.Repeat, RepstreamFlags: append([]string{}, o.RepstreamFlags...), ServerSettings: o.ServerSettings,
		OwnClusters: o.SourceDSN == "", Connection: connectionNote(o),
		Native: map[string]string{"subscription_options": nativeOptions(r.version, o.NativeBinary), "binary": nativeBinaryNote(o.NativeBinary),
			"streaming": "on (PG15; parallel on PG16+)", "copy_data": "false (tables created empty on the target)",
			"apply_synchronous_commit": "off (subscription default)"},
		Generation: "the workload is generated once per system run, in that run's own fresh source database; " +
			"systems run one after the other against the same two servers",
	}
	if r.wl.Copy {
		rep.Settings.Native["subscription_options"] = strings.Replace(rep.Settings.Native["subscription_options"], "copy_data = false", "copy_data = true", 1)
		rep.Settings.Native["copy_data"] = "true (initial-copy: the tables, with their indexes, created empty on the target beforehand)"
		rep.Settings.Generation = "the source is loaded, vacuumed and checkpointed once per system run, in that run's own fresh source database, " +
			"before the system starts; systems run one after the other against the same two servers"
	}
	if rep.Settings.RepstreamFlags == nil {
		rep.Settings.RepstreamFlags = []string{}
	}
	if rep.Settings.ServerSettings == nil {
		rep.Settings.ServerSettings = map[string]string{}
	}
	if o.Fast {
		rep.Settings.ServerSettings["fsync"] = "off (Fast)"
		rep.Settings.ServerSettings["full_page_writes"] = "off (Fast)"
	}
	m := Machine{CPUs: runtime.NumCPU(), MemoryBytes: memTotal(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	for _, s := range []struct {
		srv *server
		dst *string
		num *int
	}{{r.src, &m.SourceVersion, &m.SourceServerNum}, {r.tgt, &m.TargetVersion, nil}} {
		c, err := pgx.Connect(ctx, s.srv.admin)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", s.srv.admin, err)
		}
		var num int
		err = c.QueryRow(ctx, "SELECT version(), current_setting('server_version_num')::int").Scan(s.dst, &num)
		c.Close(context.Background())
		if err != nil {
			return fmt.Errorf("read server version: %w", err)
		}
		if s.num != nil {
			*s.num = num
		}
	}
	r.version = m.SourceServerNum
	rep.Machine = m
	return nil
}

// runSystem runs the workload once for one system; errors end up in the result.
func (r *runner) runSystem(ctx context.Context, sp runSpec) *RunResult {
	res := &RunResult{System: sp.system, Label: sp.label, VaryValue: sp.varyValue, Round: sp.round}
	if err := r.doRun(ctx, sp, res); err != nil {
		res.Error = err.Error()
		res.Verified = false
		r.log.Error("run failed", "system", sp.label, "err", err)
	}
	return res
}

func (r *runner) createDB(ctx context.Context, srv *server, db string) error {
	c, err := pgx.Connect(ctx, srv.admin)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", srv.admin, err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+change.QuoteIdent(db)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop old database %s: %w", db, err)
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE "+change.QuoteIdent(db)); err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}

func (r *runner) dropDB(srv *server, db string) {
	if r.keepDBs {
		r.log.Info("database left in place: pglogical 2.4's supervisor blocks DROP DATABASE on PostgreSQL 15", "db", db)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.admin)
	if err != nil {
		return
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+change.QuoteIdent(db)+" WITH (FORCE)"); err != nil {
		r.log.Warn("drop database", "db", db, "err", err)
	}
}

// setupDatabases creates the run's databases, tables and publication.
func (r *runner) setupDatabases(ctx context.Context, db string) error {
	for _, srv := range []*server{r.src, r.tgt} {
		if err := r.createDB(ctx, srv, db); err != nil {
			return err
		}
		if err := execOn(ctx, srv.dsnFor(db), r.wl.DDL+"\n"+ProbeDDL); err != nil {
			return fmt.Errorf("create the workload's tables: %w", err)
		}
	}
	tables := append(append([]string{}, r.wl.Tables...), ProbeTable)
	for i, t := range tables {
		tables[i] = "public." + change.QuoteIdent(t)
	}
	return execOn(ctx, r.src.dsnFor(db), "CREATE PUBLICATION bench_pub FOR TABLE "+strings.Join(tables, ", "))
}

func currentLSN(ctx context.Context, dsn string) (change.LSN, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var s string
	// The insert position counts WAL generated, also what asynchronous
	// commits left in the WAL buffers.
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0, fmt.Errorf("read WAL position: %w", err)
	}
	return change.ParseLSN(s)
}

// waitSlotActive waits until a walsender streams from slot.
func waitSlotActive(ctx context.Context, srcDSN, slot string, sys replSystem) error {
	c, err := pgx.Connect(ctx, srcDSN)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	deadline := time.Now().Add(60 * time.Second)
	for {
		var active bool
		if err := c.QueryRow(ctx, "SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)", slot).Scan(&active); err != nil {
			return fmt.Errorf("read slot %s: %w", slot, err)
		}
		if active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no walsender started streaming from slot %s within 60s", slot)
		}
		select {
		case <-sys.dead():
			return sys.deadErr()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitVisible waits for the marker probe, then for every replicated table's
// count to equal the source's, and returns when both were true.
func (r *runner) waitVisible(ctx context.Context, probe *Probe, markID int64, srcDSN, tgtDSN string, sys replSystem) (time.Time, error) {
	wctx, cancel := untilDead(ctx, sys)
	defer cancel()
	seen, err := probe.WaitSeen(wctx, markID)
	if err != nil {
		if isClosed(sys.dead()) {
			return time.Time{}, sys.deadErr()
		}
		return time.Time{}, fmt.Errorf("waiting for the target to catch up: %w", err)
	}
	if len(r.wl.Tables) == 0 {
		return seen, nil
	}
	src, err := pgx.Connect(ctx, withApp(srcDSN))
	if err != nil {
		return time.Time{}, err
	}
	defer src.Close(context.Background())
	want, err := counts(ctx, src, r.wl.Tables)
	if err != nil {
		return time.Time{}, err
	}
	tgt, err := pgx.Connect(ctx, withApp(tgtDSN))
	if err != nil {
		return time.Time{}, err
	}
	defer tgt.Close(context.Background())
	for first := true; ; first = false {
		got, err := counts(wctx, tgt, r.wl.Tables)
		if err != nil {
			if isClosed(sys.dead()) {
				return time.Time{}, sys.deadErr()
			}
			return time.Time{}, err
		}
		if slices.Equal(got, want) {
			if first {
				return seen, nil
			}
			return time.Now(), nil
		}
		select {
		case <-wctx.Done():
			if isClosed(sys.dead()) {
				return time.Time{}, sys.deadErr()
			}
			return time.Time{}, fmt.Errorf("target row counts %v never reached the source's %v: %w", got, want, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitProbes stops the probe's ticker and waits until every probe committed
// is visible on the target, or the system dies.
func (r *runner) waitProbes(ctx context.Context, probe *Probe, sys replSystem) error {
	wctx, cancel := untilDead(ctx, sys)
	defer cancel()
	if err := probe.StopTicking(wctx); err != nil {
		if isClosed(sys.dead()) {
			return sys.deadErr()
		}
		return fmt.Errorf("waiting for the last probes on the target: %w", err)
	}
	return nil
}

// untilDead returns ctx, also cancelled when sys dies.
func untilDead(ctx context.Context, sys replSystem) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sys.dead():
			cancel()
		case <-wctx.Done():
		}
	}()
	return wctx, cancel
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// slotStats reads the walsender's spill and stream counters of slot.
func slotStats(ctx context.Context, srcDSN, slot string, res *RunResult) {
	c, err := pgx.Connect(ctx, srcDSN)
	if err != nil {
		return
	}
	defer c.Close(context.Background())
	_ = c.QueryRow(ctx, "SELECT coalesce(spill_bytes, 0), coalesce(stream_bytes, 0) FROM pg_stat_replication_slots WHERE slot_name = $1", slot).
		Scan(&res.Spill.SlotSpillBytes, &res.Spill.SlotStreamBytes)
}

// summaryLine is the one-line result of a run.
func summaryLine(res *RunResult) string {
	if !res.Verified {
		return fmt.Sprintf("%s: FAILED: %s", res.Label, res.Error)
	}
	if res.CopyTables != nil {
		return fmt.Sprintf("%s: verified; copy %.2fs, %.0f rows/s, %.2f MB/s, total CPU %.2fs",
			res.Label, res.Replication.Seconds, res.Replication.RowsPerSec, res.Replication.MBPerSec, res.Resources.TotalCPUSeconds)
	}
	return fmt.Sprintf("%s: verified; replication %.2fs, %.0f rows/s, %.2f MB/s, last commit→visible %.2fs, probe p50 %.0fms p99 %.0fms max %.0fms",
		res.Label, res.Replication.Seconds, res.Replication.RowsPerSec, res.Replication.MBPerSec,
		res.Replication.LastCommitToVisibleSeconds, res.Latency.P50Ms, res.Latency.P99Ms, res.Latency.MaxMs)
}

// connectionNote says how both systems reach the servers.
func connectionNote(o Options) string {
	switch {
	case o.SourceDSN != "":
		return "as given by --source/--target"
	case o.UnixSocket:
		return "Unix sockets (--unix-socket)"
	}
	return "TCP on 127.0.0.1"
}

// skip prints why systems are skipped and returns the same map.
func (r *runner) skip(why map[string]string) map[string]string {
	for _, s := range sortedKeys(why) {
		fmt.Fprintf(r.out, "skipping %s: %s\n", s, why[s])
		r.log.Warn("system skipped", "system", s, "reason", why[s])
	}
	return why
}
