package pgtest

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster"
)

// EnvSkip names the environment variable that, set to "1", turns a missing
// PostgreSQL installation into a skipped test instead of a failure.
const EnvSkip = "REPSTREAM_SKIP_PG"

// EnvBinDirPrefix, followed by a shared cluster's name in upper case
// (REPSTREAM_PG_BINDIR_SOURCE, REPSTREAM_PG_BINDIR_TARGET), selects the
// server binaries of that shared cluster: the version matrix runs a source
// of one PostgreSQL major against a target of another (make test-versions).
const EnvBinDirPrefix = "REPSTREAM_PG_BINDIR_"

// SharedBinDir returns the binary directory chosen for the shared cluster
// name, or "" for the default (pgcluster.BinDir).
func SharedBinDir(name string) string {
	return os.Getenv(EnvBinDirPrefix + strings.ToUpper(name))
}

// startTimeout bounds one cluster start (initdb + pg_ctl start, with retries).
const startTimeout = 3 * time.Minute

// registry holds the process's shared clusters. It is process-wide state by
// nature: Shared hands one cluster per name to every test of the binary and
// Main removes them all after m.Run.
//
// Invariants: mainActive is set before any test runs (by Main) and never
// reset; every cluster in shared is removed exactly once by removeAll;
// perTest holds the clusters of Cluster whose test cleanup has not run yet
// (removeAll removes them on SIGINT/SIGTERM; Remove is idempotent).
type registry struct {
	mu         sync.Mutex
	mainActive bool
	shared     map[string]*sharedEntry
	perTest    map[*pgcluster.Cluster]struct{}
}

type sharedEntry struct {
	once    sync.Once
	cluster *pgcluster.Cluster
	err     error
}

var reg = &registry{shared: map[string]*sharedEntry{}, perTest: map[*pgcluster.Cluster]struct{}{}}

var dbSeq atomic.Uint64

// Cluster starts a new cluster for t and removes it in t.Cleanup (also when
// the test fails). opts.Name defaults to the test name.
func Cluster(t testing.TB, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	requireBinaries(t)
	if opts.Name == "" {
		opts.Name = t.Name()
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("pgtest: start cluster: %v", err)
	}
	reg.mu.Lock()
	reg.perTest[c] = struct{}{}
	reg.mu.Unlock()
	t.Cleanup(func() {
		reg.mu.Lock()
		delete(reg.perTest, c)
		reg.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Remove(ctx); err != nil {
			t.Errorf("pgtest: remove cluster %s: %v", c.Dir(), err)
		}
	})
	return c
}

// Shared returns the test binary's cluster called name, starting it on first
// use (default options plus Fast). It lives until Main's m.Run returns, so
// the test binary's TestMain must call pgtest.Main(m). Tests sharing a
// cluster should each use their own database (NewDB).
func Shared(t testing.TB, name string) *pgcluster.Cluster {
	t.Helper()
	requireBinaries(t)
	reg.mu.Lock()
	if !reg.mainActive {
		reg.mu.Unlock()
		t.Fatalf("pgtest.Shared(%q) needs `func TestMain(m *testing.M) { pgtest.Main(m) }` in the test package "+
			"(it removes shared clusters at exit)", name)
	}
	e, ok := reg.shared[name]
	if !ok {
		e = &sharedEntry{}
		reg.shared[name] = e
	}
	reg.mu.Unlock()

	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		e.cluster, e.err = pgcluster.Start(ctx, pgcluster.Options{
			Name: "shared-" + name,
			Fast: true,
			// A shared server outlives hundreds of tests: WAL beyond
			// 1 GB is checkpointed away (cheap with fsync off) rather
			// than kept, as with the 4 GB a benchmark's server keeps
			// (make test puts its servers on a tmpfs when it can). The
			// last 1 GB is always kept (wal_keep_size): checkpoints are
			// frequent here (each DROP DATABASE of NewDB's cleanup makes
			// one), and once one removed the segment holding a logical
			// slot's restart_lsn seconds after the slot was made
			// ("requested WAL segment ... has already been removed" at
			// the next START_REPLICATION: TestAdminCommandsFindTheirReplication).
			Settings: map[string]string{"max_wal_size": "1GB", "wal_keep_size": "1GB"},
			Logger:   slog.New(slog.DiscardHandler),
			BinDir:   SharedBinDir(name),
		})
	})
	if e.err != nil {
		t.Fatalf("pgtest: start shared cluster %q: %v", name, e.err)
	}
	return e.cluster
}

// NewDB creates a fresh, uniquely named database in c and returns its name.
// Once t and its subtests are over, a database of a test that passed is
// dropped, with the replication slots in it (a shared cluster serves
// hundreds of tests: their files and the WAL their slots hold add up to
// gigabytes, in memory when the cluster is on a tmpfs); a failed test's
// stays for a look until the cluster goes.
func NewDB(t testing.TB, c *pgcluster.Cluster) string {
	t.Helper()
	name := dbName(t.Name(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateDatabase(ctx, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() && c.Running() {
			dropDB(c, name)
		}
	})
	return name
}

// dropDB drops database name of c and its replication slots, ending the
// sessions still in it; what it cannot drop (a slot a session still
// streams from) stays. Best effort: the cluster goes at the end anyway.
func dropDB(c *pgcluster.Cluster, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A walsender may outlive its client by a moment: end it first.
	_, _ = conn.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(active_pid, 5000) FROM pg_catalog.pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
	_, _ = conn.Exec(ctx, `SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE database = $1 AND NOT active`, name)
	_ = c.DropDatabase(ctx, name)
}

// dbName builds a lower-case identifier of at most 63 bytes from a test name
// and a per-process sequence number.
func dbName(testName string, seq uint64) string {
	suffix := fmt.Sprintf("_%d", seq)
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		if b.Len()+len(suffix) >= 63 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteString(suffix)
	return b.String()
}

// Main runs the tests: it first removes stale clusters left by killed test
// processes (pgcluster.ReapStale), then runs m, calls atExit (other shared
// servers' closers, such as kafkatest.CloseShared), removes the shared
// clusters and exits with m's code. On SIGINT/SIGTERM it calls atExit,
// removes the shared clusters and those of running tests, then exits 1.
func Main(m *testing.M, atExit ...func()) {
	reg.mu.Lock()
	reg.mainActive = true
	reg.mu.Unlock()

	if os.Getenv(EnvSkip) != "1" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := pgcluster.ReapStale(ctx, nil); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: reaping stale clusters: %v\n", err)
		}
		cancel()
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "pgtest: %v: removing clusters\n", s)
			for _, f := range atExit {
				f()
			}
			removeAll()
			os.Exit(1)
		case <-done:
		}
	}()

	code := m.Run()
	close(done)
	signal.Stop(sigs)
	for _, f := range atExit {
		f()
	}
	removeAll()
	os.Exit(code)
}

// DefaultParallel makes n the package's -test.parallel unless the command
// line gives one; call it in TestMain before Main. For packages whose
// tests mostly wait (on servers, a throttled target, a poll interval)
// rather than use a CPU: go test's default, GOMAXPROCS, leaves the CPUs
// idle half the time.
func DefaultParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// removeAll removes every shared cluster started so far and every
// per-test cluster not yet cleaned up, reporting errors on stderr.
func removeAll() {
	reg.mu.Lock()
	entries := make([]*sharedEntry, 0, len(reg.shared))
	for name, e := range reg.shared {
		entries = append(entries, e)
		delete(reg.shared, name)
	}
	clusters := make([]*pgcluster.Cluster, 0, len(reg.perTest))
	for c := range reg.perTest {
		clusters = append(clusters, c)
	}
	reg.mu.Unlock()
	for _, e := range entries {
		// Wait for a start in progress; the Once is done or running.
		e.once.Do(func() {})
		if e.cluster != nil {
			clusters = append(clusters, e.cluster)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range clusters {
		if err := c.Remove(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: remove cluster %s: %v\n", c.Dir(), err)
		}
	}
}

// requireBinaries fails (or with REPSTREAM_SKIP_PG=1 skips) t when no
// PostgreSQL server binaries are installed.
func requireBinaries(t testing.TB) {
	t.Helper()
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv(EnvSkip) == "1" {
			t.Skipf("pgtest: %s=1 and PostgreSQL is not installed: %v", EnvSkip, err)
		}
		t.Fatalf("pgtest: PostgreSQL is needed for this test: %v\n"+
			"run `make test` (it installs PostgreSQL via scripts/ensure-postgres.sh), or set %s=1 to skip",
			err, EnvSkip)
	}
}

// testLogger logs cluster lifecycle events through t.Log at Info level.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// WaitFor is the one poller of the integration tests: it calls cond until it
// reports true, first every 10 ms then less often (at most every 200 ms),
// and fails t when timeout passes first — naming what it waited for, how
// long, and cond's last error. An error from cond does not stop the wait
// (the condition may not be checkable yet); it is reported on timeout.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	waitFor(t, what, timeout, 10*time.Millisecond, 200*time.Millisecond, cond)
}

// WaitForEvery is WaitFor calling cond every pause: for a state that may
// last only a moment (a copy caught half done).
func WaitForEvery(t testing.TB, what string, timeout, pause time.Duration, cond func() (bool, error)) {
	t.Helper()
	waitFor(t, what, timeout, pause, pause, cond)
}

func waitFor(t testing.TB, what string, timeout, pause, maxPause time.Duration, cond func() (bool, error)) {
	t.Helper()
	start := time.Now()
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		if err != nil {
			last = err
		}
		if time.Since(start) > timeout {
			if last != nil {
				t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}
