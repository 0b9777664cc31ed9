package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgcluster"
)

// Peers: the replication tools the bench compares repstream and native
// with. Each is set up the way its documentation recommends for a
// PostgreSQL -> PostgreSQL copy, on the same two servers, and verified row
// for row like the others. A peer that is not installed is skipped (with
// the command that installs it), never failed.

// PgstreamVersion is the pgstream release the bench is written against
// (scripts/ensure-peers.sh installs it).
const PgstreamVersion = "v0.6.0"

// installHint is the command that installs a peer.
func installHint(s System) string {
	switch s {
	case SystemPglogical:
		return "apt-get install postgresql-15-pglogical (or: make bench-peers)"
	case SystemPgcopydb:
		return "apt-get install pgcopydb (or: make bench-peers)"
	case SystemPgstream:
		return "go install github.com/xataio/pgstream@" + PgstreamVersion + " and apt-get install postgresql-15-wal2json (or: make bench-peers)"
	case SystemKafka:
		return "make kafka"
	}
	return ""
}

// pgLibDir is the server's extension library directory, derived from the
// binaries pgcluster would use ("" if unknown).
func pgLibDir() string {
	bin, err := pgcluster.BinDir()
	if err != nil {
		return ""
	}
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return filepath.Join(filepath.Dir(bin), "lib")
}

// pgstreamBinary finds pgstream in PATH or in Go's install directory.
func pgstreamBinary() (string, bool) {
	if p, err := exec.LookPath("pgstream"); err == nil {
		return p, true
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "pgstream")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, true
		}
	}
	return "", false
}

// peerSupport says why a peer cannot run a workload ("" if it can).
func peerSupport(s System, wl *Workload) string {
	switch {
	case wl.Name == "dbl" && s.IsPeer():
		return "dbl measures the application beside repstream and native only"
	case s == SystemPgcopydb && !wl.Copy:
		return "pgcopydb copies a database once: it runs in the initial-copy workload only"
	case s == SystemPgstream && wl.Copy:
		return "pgstream's snapshot is not wired into the initial-copy workload (it streams in the other workloads)"
	case s == SystemKafka && wl.Copy:
		return "the Kafka path's initial copy is each apply's own, that of run: the initial-copy workload measures it as repstream"
	}
	return ""
}

// localPeerCheck says why a peer is missing on this machine ("" if it is
// installed). With own clusters the server's library directory is checked;
// with --source/--target the servers are asked later (serverPeerCheck).
func localPeerCheck(s System, ownClusters bool) string {
	lib := pgLibDir()
	hasLib := func(name string) bool {
		if lib == "" {
			return true // unknown: the server will tell
		}
		_, err := os.Stat(filepath.Join(lib, name))
		return err == nil
	}
	switch s {
	case SystemPglogical:
		if ownClusters && !hasLib("pglogical.so") {
			return "pglogical is not installed (" + filepath.Join(lib, "pglogical.so") + " missing)"
		}
	case SystemPgcopydb:
		if _, err := exec.LookPath("pgcopydb"); err != nil {
			return "pgcopydb is not installed (not in PATH)"
		}
	case SystemPgstream:
		if _, ok := pgstreamBinary(); !ok {
			return "pgstream is not installed (not in PATH nor in Go's bin directory)"
		}
		if ownClusters && !hasLib("wal2json.so") {
			return "wal2json is not installed (" + filepath.Join(lib, "wal2json.so") + " missing)"
		}
	}
	return ""
}

// serverPeerCheck asks existing servers whether pglogical can run there.
func serverPeerCheck(ctx context.Context, s System, srv ...*server) string {
	if s != SystemPglogical {
		return ""
	}
	for _, v := range srv {
		c, err := pgx.Connect(ctx, v.admin)
		if err != nil {
			return fmt.Sprintf("connect to %s: %v", v.admin, err)
		}
		var avail bool
		var preload string
		err = c.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pglogical'), current_setting('shared_preload_libraries')").Scan(&avail, &preload)
		c.Close(context.Background())
		if err != nil {
			return fmt.Sprintf("ask the server about pglogical: %v", err)
		}
		if !avail {
			return "pglogical is not installed on the server " + v.admin
		}
		if !strings.Contains(preload, "pglogical") {
			return "shared_preload_libraries lacks pglogical on the server " + v.admin
		}
	}
	return ""
}

// selectSystems drops the systems that cannot run (not installed, or not
// for this workload) and returns why, by system.
func selectSystems(o *Options, wl *Workload) map[string]string {
	skipped := map[string]string{}
	var keep []System
	for _, s := range o.Systems {
		why := peerSupport(s, wl)
		if why == "" && s.IsPeer() {
			if why = localPeerCheck(s, o.SourceDSN == ""); why != "" {
				why += "; install: " + installHint(s)
			}
		}
		if why == "" && s == SystemKafka {
			if err := kafkaAvailable(); err != nil {
				why = err.Error() + "; install: " + installHint(s)
			}
		}
		if why != "" {
			skipped[string(s)] = why
			continue
		}
		keep = append(keep, s)
	}
	o.Systems = keep
	return skipped
}

// withPreload adds pglogical to shared_preload_libraries of the throwaway
// clusters when pglogical is among the systems.
func withPreload(settings map[string]string, systems []System) map[string]string {
	if !slices.Contains(systems, SystemPglogical) {
		return settings
	}
	out := map[string]string{}
	for k, v := range settings {
		out[k] = v
	}
	pre := strings.Trim(out["shared_preload_libraries"], "'\" ")
	if !strings.Contains(pre, "pglogical") {
		if pre != "" {
			pre += ","
		}
		pre += "pglogical"
	}
	out["shared_preload_libraries"] = pre
	return out
}

// dropDBSlots drops every replication slot of database db on the source
// (peers name their own slots; DROP DATABASE fails while one exists).
func dropDBSlots(ctx context.Context, srcDSN string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srcDSN)
	if err != nil {
		return
	}
	defer c.Close(context.Background())
	for ctx.Err() == nil {
		_, err := c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = current_database() AND active_pid IS NOT NULL;
			SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active`)
		var n int
		if err == nil {
			if c.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()").Scan(&n) == nil && n == 0 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// qualifiedTables returns public.table for the workload's tables and the probe.
func qualifiedTables(wl *Workload) []string {
	out := make([]string, 0, len(wl.Tables)+1)
	for _, t := range append(slices.Clone(wl.Tables), ProbeTable) {
		out = append(out, "public."+change.QuoteIdent(t))
	}
	return out
}

func sqlLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ----- pglogical -----

// pglogicalSys replicates with pglogical 2: a provider node on the source
// database (the workload's tables in the replication set "default"), a
// subscriber node on the target database and a subscription, applied by
// pglogical's own apply worker on the target. Streaming runs create the
// subscription without data synchronisation (the tables start empty), wait
// until it replicates (its slot exists), and disable it until start; the
// initial-copy run creates it at start with synchronize_data.
type pglogicalSys struct {
	env      sysEnv
	tables   []string // qualified
	sub      string
	copyData bool
	slotName string
	// downSince is when the status "down" was first seen (zero: not down).
	downSince time.Time
	done      chan struct{}
}

func newPglogical(env sysEnv, tables []string, copyData bool) *pglogicalSys {
	return &pglogicalSys{env: env, tables: tables, sub: "bench_sub", copyData: copyData, done: make(chan struct{})}
}

func (p *pglogicalSys) nodes(ctx context.Context) error {
	var src strings.Builder
	src.WriteString("CREATE EXTENSION IF NOT EXISTS pglogical;\n")
	fmt.Fprintf(&src, "SELECT pglogical.create_node(node_name := 'bench_provider', dsn := %s);\n", sqlLit(p.env.srcDSN))
	for _, t := range p.tables {
		fmt.Fprintf(&src, "SELECT pglogical.replication_set_add_table('default', %s::regclass, false);\n", sqlLit(t))
	}
	if err := execOn(ctx, p.env.srcDSN, src.String()); err != nil {
		return fmt.Errorf("pglogical provider node: %w", err)
	}
	tgt := fmt.Sprintf("CREATE EXTENSION IF NOT EXISTS pglogical;\nSELECT pglogical.create_node(node_name := 'bench_subscriber', dsn := %s);", sqlLit(p.env.tgtDSN))
	if err := execOn(ctx, p.env.tgtDSN, tgt); err != nil {
		return fmt.Errorf("pglogical subscriber node: %w", err)
	}
	return nil
}

func (p *pglogicalSys) createSub(ctx context.Context) error {
	sql := fmt.Sprintf("SELECT pglogical.create_subscription(subscription_name := %s, provider_dsn := %s, replication_sets := ARRAY['default'], synchronize_structure := false, synchronize_data := %t, forward_origins := '{}')",
		sqlLit(p.sub), sqlLit(p.env.srcDSN), p.copyData)
	if err := execOn(ctx, p.env.tgtDSN, sql); err != nil {
		return fmt.Errorf("pglogical subscription: %w", err)
	}
	return nil
}

// status returns the subscription's status and slot name.
func (p *pglogicalSys) status(ctx context.Context, c *pgx.Conn) (string, string, error) {
	var st, slot string
	err := c.QueryRow(ctx, "SELECT status, slot_name FROM pglogical.show_subscription_status($1)", p.sub).Scan(&st, &slot)
	if err != nil {
		return "", "", fmt.Errorf("pglogical subscription status: %w", err)
	}
	return st, slot, nil
}

// waitReplicating waits until the subscription replicates and every table
// is synchronised (sync_status 'r').
func (p *pglogicalSys) synced(ctx context.Context, c *pgx.Conn) (bool, error) {
	st, slot, err := p.status(ctx, c)
	if err != nil {
		return false, err
	}
	p.slotName = slot
	if st == "down" {
		// Also the status between creation and its apply worker's start.
		if p.downSince.IsZero() {
			p.downSince = time.Now()
		}
		if time.Since(p.downSince) > time.Minute {
			return false, fmt.Errorf("pglogical subscription %s is down for a minute (see the target's server log)", p.sub)
		}
		return false, nil
	}
	p.downSince = time.Time{}
	if st != "replicating" {
		return false, nil
	}
	var pending int
	err = c.QueryRow(ctx, `SELECT count(*) FROM pglogical.local_sync_status s JOIN pglogical.subscription u ON u.sub_id = s.sync_subid
		WHERE u.sub_name = $1 AND s.sync_status <> 'r'`, p.sub).Scan(&pending)
	if err != nil {
		return false, fmt.Errorf("pglogical sync status: %w", err)
	}
	return pending == 0, nil
}

func (p *pglogicalSys) waitSynced(ctx context.Context) error {
	c, err := pgx.Connect(ctx, withApp(p.env.tgtDSN))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := p.synced(ctx, c)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pglogical subscription %s did not start replicating within 2 min", p.sub)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// prepare: nodes, then (streaming) the subscription, synchronised, disabled.
func (p *pglogicalSys) prepare(ctx context.Context) error {
	if err := p.nodes(ctx); err != nil {
		return err
	}
	if p.copyData {
		return nil
	}
	if err := p.createSub(ctx); err != nil {
		return err
	}
	if err := p.waitSynced(ctx); err != nil {
		return err
	}
	return execOn(ctx, p.env.tgtDSN, fmt.Sprintf("SELECT pglogical.alter_subscription_disable(%s, true)", sqlLit(p.sub)))
}

func (p *pglogicalSys) start(ctx context.Context) error {
	if p.copyData {
		return p.createSub(ctx)
	}
	return execOn(ctx, p.env.tgtDSN, fmt.Sprintf("SELECT pglogical.alter_subscription_enable(%s, true)", sqlLit(p.sub)))
}

// slot is the subscription's slot on the source (known after prepare for
// streaming runs).
func (p *pglogicalSys) slot() string { return p.slotName }

func (p *pglogicalSys) dead() <-chan struct{}    { return p.done }
func (p *pglogicalSys) deadErr() error           { return errors.New("pglogical subscription stopped") }
func (p *pglogicalSys) poll(ctx context.Context) {}
func (p *pglogicalSys) live() string             { return "" }

func (p *pglogicalSys) stop(ctx context.Context, res *RunResult) error {
	return execOn(ctx, p.env.tgtDSN, fmt.Sprintf("SELECT pglogical.alter_subscription_disable(%s, true)", sqlLit(p.sub)))
}

func (p *pglogicalSys) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := execOn(ctx, p.env.tgtDSN, fmt.Sprintf("SELECT pglogical.drop_subscription(%s, true)", sqlLit(p.sub))); err != nil {
		p.env.log.Warn("drop pglogical subscription", "err", err)
	}
	dropDBSlots(ctx, p.env.srcDSN)
	// Without the extension pglogical's supervisor stops starting a manager
	// in the database, which would otherwise block DROP DATABASE.
	for _, x := range []struct{ dsn, node string }{{p.env.tgtDSN, "bench_subscriber"}, {p.env.srcDSN, "bench_provider"}} {
		sql := fmt.Sprintf("SELECT pglogical.drop_node(%s, true); DROP EXTENSION IF EXISTS pglogical CASCADE", sqlLit(x.node))
		if err := execOn(ctx, x.dsn, sql); err != nil {
			p.env.log.Warn("drop pglogical node", "err", err)
		}
	}
}

// ----- pgstream -----

// pgstreamSys replicates with pgstream (PostgreSQL -> PostgreSQL, wal2json):
// `pgstream init` creates its slot and schema-log triggers on the source
// database (prepare), `pgstream run` streams into the target (start). Its
// configuration is an env file in the report's logs directory.
type pgstreamSys struct {
	env    sysEnv
	binary string
	tables []string // unqualified names, the include filter

	cmd     *exec.Cmd
	logf    *os.File
	done    chan struct{}
	peakRSS func() int64 // watchPeakRSS of the running pgstream
	waitErr error
	stopped bool
}

func newPgstream(env sysEnv, tables []string) *pgstreamSys {
	bin, _ := pgstreamBinary()
	return &pgstreamSys{env: env, binary: bin, tables: tables, done: make(chan struct{})}
}

// PgstreamSettings are the pgstream writer settings the bench uses: batches
// of up to 1,000 changes sent at most 100 ms apart (pgstream's defaults are
// 100 and 1 s, tuned for latency-insensitive targets), and its schema log
// kept on the source as its PostgreSQL-to-PostgreSQL tutorial does.
var PgstreamSettings = map[string]string{
	"PGSTREAM_POSTGRES_WRITER_BATCH_SIZE":    "1000",
	"PGSTREAM_POSTGRES_WRITER_BATCH_TIMEOUT": "100ms",
}

func (p *pgstreamSys) base() string {
	return filepath.Join(p.env.outDir, "logs", strings.ReplaceAll(p.env.label, " ", "_"))
}

func (p *pgstreamSys) logPath() string { return p.base() + ".pgstream.log" }

// writeEnv writes the configuration file and returns its path.
func (p *pgstreamSys) writeEnv() (string, error) {
	src, err := pgURL(p.env.srcDSN)
	if err != nil {
		return "", err
	}
	tgt, err := pgURL(p.env.tgtDSN)
	if err != nil {
		return "", err
	}
	lines := []string{
		"PGSTREAM_POSTGRES_LISTENER_URL=" + strconv.Quote(src),
		"PGSTREAM_POSTGRES_REPLICATION_SLOT_NAME=" + p.env.slot,
		"PGSTREAM_POSTGRES_WRITER_TARGET_URL=" + strconv.Quote(tgt),
		"PGSTREAM_POSTGRES_WRITER_SCHEMALOG_STORE_URL=" + strconv.Quote(src),
		"PGSTREAM_FILTER_INCLUDE_TABLES=" + strconv.Quote(strings.Join(p.tables, " ")),
	}
	for _, k := range sortedKeys(PgstreamSettings) {
		lines = append(lines, k+"="+PgstreamSettings[k])
	}
	path := p.base() + ".pgstream.env"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("create log directory: %w", err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write pgstream configuration: %w", err)
	}
	return path, nil
}

func (p *pgstreamSys) openLog() (*os.File, error) {
	f, err := os.OpenFile(p.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open pgstream log: %w", err)
	}
	return f, nil
}

func (p *pgstreamSys) runOnce(ctx context.Context, args ...string) error {
	f, err := p.openLog()
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgstream %s: %w; log %s:\n%s", args[0], err, p.logPath(), tail(p.logPath(), 15))
	}
	return nil
}

func (p *pgstreamSys) prepare(ctx context.Context) error {
	env, err := p.writeEnv()
	if err != nil {
		return err
	}
	return p.runOnce(ctx, "init", "-c", env)
}

func (p *pgstreamSys) start(ctx context.Context) error {
	env := p.base() + ".pgstream.env"
	f, err := p.openLog()
	if err != nil {
		return err
	}
	p.logf = f
	p.cmd = exec.Command(p.binary, "run", "-c", env, "--log-level", "warn")
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.binary, err)
	}
	p.env.log.Info("pgstream started", "pid", p.cmd.Process.Pid, "log", p.logPath())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	p.peakRSS = watchPeakRSS(p.cmd.Process.Pid, p.done)
	return nil
}

func (p *pgstreamSys) dead() <-chan struct{} { return p.done }

func (p *pgstreamSys) deadErr() error {
	return fmt.Errorf("pgstream exited during the run (%v); log %s:\n%s", p.waitErr, p.logPath(), tail(p.logPath(), 15))
}

func (p *pgstreamSys) poll(ctx context.Context) {}
func (p *pgstreamSys) live() string             { return "" }

func (p *pgstreamSys) stop(ctx context.Context, res *RunResult) error {
	if p.cmd == nil {
		return nil
	}
	peak := p.peakRSS()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.stopped = true
	if p.logf != nil {
		p.logf.Close()
	}
	if ps := p.cmd.ProcessState; ps != nil {
		res.Resources.EngineCPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	res.Resources.EnginePeakRSSBytes = peak
	return nil
}

func (p *pgstreamSys) cleanup(ctx context.Context) {
	if p.cmd != nil && !p.stopped {
		_ = p.cmd.Process.Kill()
		<-p.done
		if p.logf != nil {
			p.logf.Close()
		}
	}
	if env := p.base() + ".pgstream.env"; fileExists(env) {
		if err := p.runOnce(ctx, "tear-down", "-c", env); err != nil {
			p.env.log.Warn("pgstream tear-down", "err", err)
		}
	}
	dropDBSlots(ctx, p.env.srcDSN)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// pgURL turns a DSN (key=value or URL) into a postgres:// URL (pgstream
// takes URLs only).
func pgURL(dsn string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return dsn, nil
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("parse DSN: %w", err)
	}
	u := url.URL{Scheme: "postgres", Path: "/" + cfg.Database}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		u.Host = fmt.Sprintf(":%d", cfg.Port)
	} else {
		u.Host = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	}
	if cfg.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// peerSettings describes how each peer among systems is set up (report.json
// settings.peers).
func peerSettings(systems []System) map[string]string {
	out := map[string]string{}
	for _, s := range systems {
		switch s {
		case SystemPglogical:
			out[string(s)] = "pglogical 2 provider/subscriber nodes, replication set 'default' holding the workload's tables, " +
				"create_subscription(synchronize_structure := false, forward_origins := '{}'); streaming runs: synchronize_data := false, " +
				"disabled until start; initial-copy: synchronize_data := true at start; shared_preload_libraries=pglogical on both servers"
		case SystemPgstream:
			var kv []string
			for _, k := range sortedKeys(PgstreamSettings) {
				kv = append(kv, k+"="+PgstreamSettings[k])
			}
			out[string(s)] = "pgstream " + PgstreamVersion + " postgres -> postgres (wal2json): `pgstream init` (slot, schema log) before the load, " +
				"`pgstream run` at start; include filter = the workload's tables; " + strings.Join(kv, ", ")
		case SystemPgcopydb:
			out[string(s)] = "pgcopydb clone --no-owner --no-acl --skip-extensions " + strings.Join(PgcopydbJobs, " ") + " into an empty target database (with --pre-made: --drop-if-exists, over the tables made beforehand)"
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
