package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DirPrefix starts the name of every cluster directory under os.TempDir().
const DirPrefix = "repstream-pg-"

// Superuser is the database superuser of every cluster (trust auth, no password).
const Superuser = "postgres"

const (
	startAttempts = 3
	startTimeout  = 60 // seconds, pg_ctl -t
	stopTimeout   = 60 // seconds, pg_ctl -t
	logTailLines  = 25
)

// Options configure Start. The zero value is a valid configuration.
type Options struct {
	// Name labels the cluster in its directory name and in logs. Characters
	// other than letters, digits, '-' and '_' are replaced; it is truncated to
	// keep the Unix socket path short. Default "cluster".
	Name string
	// Settings are postgresql.conf parameters applied on top of the defaults
	// (they override them, including wal_level). A "port" setting fixes the
	// port (no retry on another one); listen_addresses and
	// unix_socket_directories must be left alone (DSN relies on them).
	Settings map[string]string
	// Fast sets fsync=off and full_page_writes=off. It never touches
	// synchronous_commit: benchmarks compare commit behaviour.
	Fast bool
	// Logger receives the cluster's lifecycle logs; default: discard.
	Logger *slog.Logger
	// BinDir holds the server binaries (initdb, pg_ctl, postgres) of this
	// cluster; default BinDir(). Clusters of different majors run side by
	// side (the version matrix: scripts/fetch-postgres.sh).
	BinDir string
	// HBA are pg_hba.conf lines placed before initdb's, which trust every
	// connection (the first matching line wins): "host all app 127.0.0.1/32
	// scram-sha-256" has role app log in over TCP with its password. DSN and
	// the other helpers connect as Superuser: leave it to the trust lines.
	HBA []string
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster.
//
// Invariants: dir, dataDir, binDir, cred and version never change after
// Start returns. port is fixed after Start (Restart reuses it). running is
// true between a successful start and a stop/crash; mu serialises the
// lifecycle methods (Stop, Crash, Restart, Remove) so that running always
// reflects the last pg_ctl outcome. removed is set once by Remove, after
// which lifecycle methods fail.
type Cluster struct {
	name    string
	dir     string
	dataDir string
	logPath string
	binDir  string
	cred    *syscall.Credential // nil: run as the current user
	version int
	log     *slog.Logger

	mu      sync.Mutex
	port    int
	running bool
	removed bool
}

// Start creates and starts a new cluster. On failure nothing is left behind
// and the error includes the tail of the server log when the server was tried.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = BinDir(); err != nil {
			return nil, err
		}
	} else if missing := missingBinaries(binDir); missing != "" {
		return nil, fmt.Errorf("%w: %s lacks %s", ErrNoBinaries, binDir, missing)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	name := sanitizeName(opts.Name)
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "pgcluster", "cluster", name)

	dir, err := os.MkdirTemp(os.TempDir(), DirPrefix+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("create cluster dir for %q: %w", name, err)
	}
	c := &Cluster{
		name:    name,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "server.log"),
		binDir:  binDir,
		cred:    cred,
		log:     logger,
	}
	if err := c.create(ctx, opts); err != nil {
		c.stopLeftover()
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			logger.Warn("remove failed cluster dir", "dir", dir, "err", rmErr)
		}
		return nil, err
	}
	return c, nil
}

// create runs initdb, writes the configuration and starts the server, trying
// up to startAttempts free ports.
func (c *Cluster) create(ctx context.Context, opts Options) error {
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return fmt.Errorf("chmod cluster dir %s: %w", c.dir, err)
	}
	if err := writeOwner(c.dir); err != nil {
		return err
	}
	if err := c.chown(c.dir); err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.initData(ctx); err != nil {
		return err
	}
	v, err := readVersion(c.dataDir)
	if err != nil {
		return err
	}
	c.version = v
	if err := appendFile(filepath.Join(c.dataDir, "postgresql.conf"), "\ninclude 'repstream.conf'\n"); err != nil {
		return fmt.Errorf("configure cluster %s: %w", c.name, err)
	}
	if err := c.prependHBA(opts.HBA); err != nil {
		return fmt.Errorf("configure cluster %s: %w", c.name, err)
	}

	// A port chosen in Settings is used as is, without retries.
	fixedPort := 0
	if p, ok := opts.Settings["port"]; ok {
		if fixedPort, err = strconv.Atoi(p); err != nil || fixedPort <= 0 || fixedPort > 65535 {
			return fmt.Errorf("cluster %s: invalid port setting %q", c.name, p)
		}
	}
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		port := fixedPort
		if port == 0 {
			if port, err = freePort(); err != nil {
				return err
			}
		}
		if err := c.writeConf(port, opts); err != nil {
			return err
		}
		c.port = port
		logStart := fileSize(c.logPath)
		if lastErr = c.start(ctx); lastErr == nil {
			c.log.Info("cluster started", "port", port, "dir", c.dir, "version", c.version,
				"attempt", attempt, "elapsed", time.Since(t0).Round(time.Millisecond))
			return nil
		}
		if ctx.Err() != nil || fixedPort != 0 || !portConflict(c.logPath, logStart) {
			break
		}
		c.log.Warn("cluster port taken, retrying on another port", "port", port, "attempt", attempt)
	}
	return lastErr
}

// settings returns the postgresql.conf parameters for port and opts.
func settings(port int, dir string, opts Options) map[string]string {
	s := map[string]string{
		"listen_addresses":                  "127.0.0.1",
		"port":                              strconv.Itoa(port),
		"unix_socket_directories":           dir,
		"wal_level":                         "logical",
		"max_wal_senders":                   "20",
		"max_replication_slots":             "20",
		"max_worker_processes":              "24",
		"max_logical_replication_workers":   "12",
		"max_sync_workers_per_subscription": "4",
		"shared_buffers":                    "128MB",
		"max_wal_size":                      "4GB",
		"checkpoint_timeout":                "30min",
		"logging_collector":                 "off",
		"log_line_prefix":                   "%m [%p] %q%u@%d ",
	}
	if opts.Fast {
		s["fsync"] = "off"
		s["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		s[k] = v
	}
	return s
}

// writeConf writes <data>/repstream.conf for port.
func (c *Cluster) writeConf(port int, opts Options) error {
	s := settings(port, c.dir, opts)
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by repstream pgcluster.Start; overrides postgresql.conf\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(s[k], "'", "''"))
	}
	path := filepath.Join(c.dataDir, "repstream.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return c.chown(path)
}

// prependHBA puts lines at the top of <data>/pg_hba.conf (the file keeps
// its owner).
func (c *Cluster) prependHBA(lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	path := filepath.Join(c.dataDir, "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	head := "# written by repstream pgcluster.Start (Options.HBA)\n" + strings.Join(lines, "\n") + "\n\n"
	return os.WriteFile(path, append([]byte(head), old...), 0o600)
}

// start runs pg_ctl start on the configured port. Caller holds mu or owns c.
func (c *Cluster) start(ctx context.Context) error {
	_, err := c.run(ctx, "pg_ctl", "start", "-D", c.dataDir, "-l", c.logPath, "-w",
		"-t", strconv.Itoa(startTimeout), "-s")
	if err != nil {
		return fmt.Errorf("start cluster %s on port %d: %w\nserver log tail (%s):\n%s",
			c.name, c.port, err, c.logPath, tail(c.logPath, logTailLines))
	}
	c.running = true
	return nil
}

// stop runs pg_ctl stop with mode ("fast" or "immediate"). Caller holds mu.
func (c *Cluster) stop(ctx context.Context, mode string) error {
	_, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", mode, "-w",
		"-t", strconv.Itoa(stopTimeout), "-s")
	if err != nil {
		return fmt.Errorf("stop (%s) cluster %s on port %d: %w", mode, c.name, c.port, err)
	}
	c.running = false
	return nil
}

// portConflict reports whether the server log, from byte offset from on,
// says the server could not listen on its port (then another port is worth a
// try; for any other failure, retrying would fail the same way).
func portConflict(logPath string, from int64) bool {
	f, err := os.Open(logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("Address already in use")) ||
		bytes.Contains(b, []byte("could not create any TCP/IP sockets"))
}

// fileSize returns the size of the file at path, 0 if it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// stopLeftover stops (immediately) a server that a failed or interrupted
// start may have left running, so that no postmaster outlives its directory.
// It uses its own context: the caller's may be the reason start failed.
func (c *Cluster) stopLeftover() {
	if !fileExists(filepath.Join(c.dataDir, "postmaster.pid")) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.stop(ctx, "immediate"); err != nil {
		c.log.Debug("stop leftover server", "err", err)
	}
}

// Stop shuts the server down cleanly (pg_ctl stop -m fast) and waits.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return fmt.Errorf("stop cluster %s: removed", c.name)
	}
	if !c.running {
		return nil
	}
	c.log.Info("cluster stopping", "port", c.port)
	return c.stop(ctx, "fast")
}

// Crash stops the server without a shutdown checkpoint (pg_ctl stop -m
// immediate), as a crash would: the next start runs crash recovery.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return fmt.Errorf("crash cluster %s: removed", c.name)
	}
	if !c.running {
		return fmt.Errorf("crash cluster %s: not running", c.name)
	}
	c.log.Info("cluster crashing (immediate stop)", "port", c.port)
	return c.stop(ctx, "immediate")
}

// Restart stops the server if it runs (fast) and starts it again on the same
// port. After Crash it starts the server, which then recovers.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return fmt.Errorf("restart cluster %s: removed", c.name)
	}
	if c.running {
		if err := c.stop(ctx, "fast"); err != nil {
			return err
		}
	}
	if err := c.start(ctx); err != nil {
		return err
	}
	c.log.Info("cluster restarted", "port", c.port)
	return nil
}

// Remove stops the server (immediately; a not-running server is fine) and
// deletes the cluster directory. It is idempotent.
func (c *Cluster) Remove(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	var errs []error
	if c.running || fileExists(filepath.Join(c.dataDir, "postmaster.pid")) {
		// Immediate: the data is about to be deleted, a checkpoint is wasted work.
		if err := c.stop(ctx, "immediate"); err != nil && fileExists(filepath.Join(c.dataDir, "postmaster.pid")) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove cluster dir %s: %w", c.dir, err))
	}
	if len(errs) == 0 {
		c.removed = true
		c.running = false
		c.log.Debug("cluster removed", "dir", c.dir)
	}
	return errors.Join(errs...)
}

// Name returns the sanitized name given in Options.
func (c *Cluster) Name() string { return c.name }

// Port returns the TCP port on 127.0.0.1 the server listens on.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// Dir returns the cluster's temporary directory (the data directory is Dir()/data).
func (c *Cluster) Dir() string { return c.dir }

// DataDir returns the PGDATA directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogPath returns the path of the server log file.
func (c *Cluster) LogPath() string { return c.logPath }

// BinDir returns the directory of the server binaries the cluster runs.
func (c *Cluster) BinDir() string { return c.binDir }

// Version returns the server's major version (e.g. 15).
func (c *Cluster) Version() int { return c.version }

// Running reports whether the server was started and not stopped since.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// DSN returns a key=value connection string for database db ("" means
// "postgres") over TCP 127.0.0.1 as the superuser, without password or TLS.
func (c *Cluster) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable",
		c.Port(), Superuser, quoteDSNValue(db))
}

// SocketDSN is DSN(db) through the server's Unix socket (in Dir()) instead
// of TCP.
func (c *Cluster) SocketDSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable",
		quoteDSNValue(c.dir), c.Port(), Superuser, quoteDSNValue(db))
}

// ReplicationDSN is DSN(db) plus replication=database, for a logical
// replication (walsender) connection.
func (c *Cluster) ReplicationDSN(db string) string {
	return c.DSN(db) + " replication=database"
}

// URL returns the same connection as DSN, as a postgres:// URL.
func (c *Cluster) URL(db string) string {
	if db == "" {
		db = "postgres"
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Connect opens a pgx connection to database db. The caller closes it.
func (c *Cluster) Connect(ctx context.Context, db string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.DSN(db))
	if err != nil {
		return nil, fmt.Errorf("connect to cluster %s db %q: %w", c.name, db, err)
	}
	return conn, nil
}

// Exec runs sql (one or more statements, simple protocol) in database db on
// a fresh connection.
func (c *Cluster) Exec(ctx context.Context, db, sql string) error {
	conn, err := c.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("exec on cluster %s db %q: %w", c.name, db, err)
	}
	return nil
}

// CreateDatabase creates database name (quoted as an identifier).
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// DropDatabase drops database name if it exists, ending the sessions still
// in it (WITH (FORCE)); a replication slot in it makes it fail.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return c.Exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// run executes a server binary as the server's OS user, in the cluster dir,
// with PG* variables removed from the environment. The error carries the
// program's combined output.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, prog), args...)
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl start leaves the postmaster holding no pipe of ours (-l), but be
	// safe against a child that keeps stdout open.
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	err := cmd.Run()
	c.log.Debug("ran", "prog", prog, "args", args, "elapsed", time.Since(t0).Round(time.Millisecond), "err", err)
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err,
			strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// chown gives path to the server's OS user when running as root.
func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("chown %s to the postgres user: %w", path, err)
	}
	return nil
}

// serverCredential returns the credential to run server programs with: nil
// when not root, else the "postgres" OS user's.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and initdb refuses root, but there is no OS user "+
			"\"postgres\" to run the server as (%w): install the postgresql package "+
			"(scripts/ensure-postgres.sh) or create one with `useradd -r -M -s /usr/sbin/nologin postgres`", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("OS user postgres has non-numeric uid %q / gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// serverEnv is the process environment minus PG* variables (PGDATA, PGPORT,
// PGHOST... would redirect initdb or pg_ctl) and with a neutral locale.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("release probe port %d: %w", port, err)
	}
	return port, nil
}

// sanitizeName maps name to [A-Za-z0-9_-], at most 24 bytes, default "cluster".
func sanitizeName(name string) string {
	const maxLen = 24 // keeps <tmp>/repstream-pg-<name>-<rand>/.s.PGSQL.<port> under 107 bytes
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name) && len(b) < maxLen; i++ {
		ch := name[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '_':
			b = append(b, ch)
		default:
			b = append(b, '_')
		}
	}
	if len(b) == 0 {
		return "cluster"
	}
	return string(b)
}

// quoteDSNValue quotes v for a key=value connection string if needed.
func quoteDSNValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return "'" + v + "'"
}

// readVersion reads the major version from dataDir/PG_VERSION.
func readVersion(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return 0, fmt.Errorf("read server version: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '.'); i >= 0 { // 9.6 and older
		s = s[:i]
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("parse server version %q in %s: %w", s, dataDir, err)
	}
	return v, nil
}

// tail returns the last n lines of the file at path (or a note why not).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	defer f.Close()
	const maxRead = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxRead {
		if _, err := f.Seek(fi.Size()-maxRead, io.SeekStart); err != nil {
			return "(read server log: " + err.Error() + ")"
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "(read server log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("append to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
