package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func queryString(t *testing.T, c *pgcluster.Cluster, db, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestStartConfigAndQuery(t *testing.T) {
	t.Parallel()
	c := pgtest.Cluster(t, pgcluster.Options{
		Fast:     true,
		Settings: map[string]string{"application_name": "it's repstream", "work_mem": "7MB"},
	})
	ctx := context.Background()

	if err := c.CreateDatabase(ctx, "My DB"); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "My DB", "CREATE TABLE t(id int primary key); INSERT INTO t VALUES (1),(2),(3)"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "My DB", "SELECT count(*)::text FROM t"); got != "3" {
		t.Errorf("count = %s, want 3", got)
	}

	// Both connection string forms reach the same database.
	for _, dsn := range []string{c.DSN("My DB"), c.URL("My DB")} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect %q: %v", dsn, err)
		}
		var db string
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		if db != "My DB" {
			t.Errorf("%q: current_database = %q", dsn, db)
		}
	}

	want := map[string]string{
		"wal_level":             "logical",
		"max_replication_slots": "20",
		"max_wal_senders":       "20",
		"fsync":                 "off",
		"full_page_writes":      "off",
		"synchronous_commit":    "on",
		"listen_addresses":      "127.0.0.1",
		"port":                  strconv.Itoa(c.Port()),
		"shared_buffers":        "128MB",
		"work_mem":              "7MB",
		"application_name":      "it's repstream",
		"server_encoding":       "UTF8",
		"lc_collate":            "C",
	}
	for name, v := range want {
		if got := queryString(t, c, "", "SHOW "+name); got != v {
			t.Errorf("SHOW %s = %q, want %q", name, got, v)
		}
	}
	num, _ := strconv.Atoi(queryString(t, c, "", "SHOW server_version_num"))
	if c.Version() != num/10000 || c.Version() < 10 {
		t.Errorf("Version() = %d, server_version_num = %d", c.Version(), num)
	}
	if fi, err := os.Stat(c.LogPath()); err != nil || fi.Size() == 0 {
		t.Errorf("server log %s missing or empty: %v", c.LogPath(), err)
	}
	if !strings.HasPrefix(filepath.Base(c.Dir()), pgcluster.DirPrefix+"TestStartConfigAndQuery-") {
		t.Errorf("Dir() = %s, want prefix %s<test name>-", c.Dir(), pgcluster.DirPrefix)
	}
	// A replication connection works (the capture code's entry point).
	conn, err := pgx.Connect(ctx, c.ReplicationDSN(""))
	if err != nil {
		t.Fatalf("replication connect: %v", err)
	}
	conn.Close(ctx)
}

func TestDefaultsNotFast(t *testing.T) {
	t.Parallel()
	c := pgtest.Cluster(t, pgcluster.Options{})
	for name, v := range map[string]string{"fsync": "on", "full_page_writes": "on", "wal_level": "logical"} {
		if got := queryString(t, c, "postgres", "SHOW "+name); got != v {
			t.Errorf("SHOW %s = %q, want %q", name, got, v)
		}
	}
}

func TestCrashRestartKeepsCommittedData(t *testing.T) {
	t.Parallel()
	c := pgtest.Cluster(t, pgcluster.Options{Name: "crash"})
	ctx := context.Background()
	port := c.Port()

	if err := c.Exec(ctx, "", "CREATE TABLE t(id int); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Running() {
		t.Error("Running() after Crash")
	}
	if err := c.Exec(ctx, "", "SELECT 1"); err == nil {
		t.Error("Exec succeeded on a crashed cluster")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port() != port {
		t.Errorf("port changed across restart: %d -> %d", port, c.Port())
	}
	if got := queryString(t, c, "", "SELECT count(*)::text FROM t"); got != "1000" {
		t.Errorf("after crash: count = %s, want 1000", got)
	}
	log, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "not properly shut down") {
		t.Error("server log shows no crash recovery after Crash + Restart")
	}

	// Clean stop and restart of a running server.
	if err := c.Exec(ctx, "", "INSERT INTO t VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "", "SELECT count(*)::text FROM t"); got != "1001" {
		t.Errorf("after restart: count = %s, want 1001", got)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := c.Crash(ctx); err == nil {
		t.Error("Crash of a stopped cluster succeeded")
	}
	dir := c.Dir()
	if err := c.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s still exists after Remove: %v", dir, err)
	}
	if err := c.Remove(ctx); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := c.Restart(ctx); err == nil {
		t.Error("Restart after Remove succeeded")
	}
}

func TestTwoClustersAtOnce(t *testing.T) {
	t.Parallel()
	a := pgtest.Cluster(t, pgcluster.Options{Name: "a", Fast: true})
	b := pgtest.Cluster(t, pgcluster.Options{Name: "b", Fast: true})
	if a.Port() == b.Port() {
		t.Fatalf("both clusters on port %d", a.Port())
	}
	if a.Dir() == b.Dir() {
		t.Fatalf("both clusters in %s", a.Dir())
	}
	ctx := context.Background()
	if err := a.Exec(ctx, "", "CREATE TABLE only_in_a(x int)"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, b, "", "SELECT count(*)::text FROM pg_class WHERE relname = 'only_in_a'"); got != "0" {
		t.Errorf("table of cluster a visible in cluster b")
	}
}

func TestRemoveRunningKillsServer(t *testing.T) {
	t.Parallel()
	c := pgtest.Cluster(t, pgcluster.Options{Name: "remove", Fast: true})
	pid := postmasterPID(t, c.DataDir())
	if err := c.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitExited(t, pid, "the postmaster to be gone after Remove")
}

func TestReapStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A cluster whose owner is a process that has exited: it must be reaped.
	c, err := pgcluster.Start(ctx, pgcluster.Options{Name: "stale", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Remove(context.Background()) })
	pid := postmasterPID(t, c.DataDir())
	dead := deadPID(t)
	if err := os.WriteFile(filepath.Join(c.Dir(), "owner"), []byte(strconv.Itoa(dead)+" 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * pgcluster.ReapMinAge)
	if err := os.Chtimes(c.Dir(), old, old); err != nil {
		t.Fatal(err)
	}
	// A live cluster (owner: this process) must survive.
	live := pgtest.Cluster(t, pgcluster.Options{Name: "live", Fast: true})
	if err := os.Chtimes(live.Dir(), old, old); err != nil {
		t.Fatal(err)
	}

	if _, err := pgcluster.ReapStale(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale dir %s survived: %v", c.Dir(), err)
	}
	waitExited(t, pid, "the stale postmaster to be gone")
	if err := live.Exec(ctx, "", "SELECT 1"); err != nil {
		t.Errorf("live cluster was harmed: %v", err)
	}
}

// waitExited waits until pid no longer runs (zombies count as gone): the
// postmaster removes its pid file, which ends pg_ctl's wait, a moment before
// it exits.
func waitExited(t *testing.T, pid int, what string) {
	t.Helper()
	pgtest.WaitFor(t, fmt.Sprintf("%s (pid %d)", what, pid), 10*time.Second, func() (bool, error) {
		if syscall.Kill(pid, 0) != nil {
			return true, nil
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true, nil
		}
		i := strings.LastIndexByte(string(b), ')')
		return i >= 0 && len(b) > i+2 && b[i+2] == 'Z', nil
	})
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

func postmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestStartWithoutTemplate(t *testing.T) {
	t.Setenv(pgcluster.EnvNoTemplate, "1")
	c := pgtest.Cluster(t, pgcluster.Options{Name: "notemplate", Fast: true})
	if got := queryString(t, c, "", "SHOW wal_level"); got != "logical" {
		t.Errorf("wal_level = %q", got)
	}
}

func TestStartFailureReportsLog(t *testing.T) {
	t.Parallel()
	_, err := pgcluster.Start(context.Background(), pgcluster.Options{
		Name:     "bad",
		Settings: map[string]string{"shared_buffers": "nonsense"},
		Logger:   slogDiscard(),
	})
	if err == nil {
		t.Fatal("Start with an invalid setting succeeded")
	}
	if !strings.Contains(err.Error(), "shared_buffers") || !strings.Contains(err.Error(), "server log tail") {
		t.Errorf("error lacks the server log tail: %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), pgcluster.DirPrefix+"bad-*"))
	for _, m := range matches {
		if alive, _ := ownedByUs(m); alive {
			t.Errorf("failed Start left %s behind", m)
		}
	}
}

func TestStartCancelledLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Name: "cancelled", Logger: slogDiscard()})
	if err == nil {
		// The machine was fast enough; that is fine too.
		_ = c.Remove(context.Background())
		return
	}
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), pgcluster.DirPrefix+"cancelled-*"))
	for _, m := range matches {
		if alive, _ := ownedByUs(m); alive {
			t.Errorf("cancelled Start left %s behind", m)
		}
	}
}

// ownedByUs reports whether the cluster dir was made by this process.
func ownedByUs(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false, err
	}
	f := strings.Fields(string(b))
	return len(f) > 0 && f[0] == strconv.Itoa(os.Getpid()), nil
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func BenchmarkStartRemove(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		c, err := pgcluster.Start(ctx, pgcluster.Options{Name: "bench", Fast: true, Logger: slogDiscard()})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Remove(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFixedPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := l.Addr().(*net.TCPAddr).Port
	_, err = pgcluster.Start(context.Background(), pgcluster.Options{
		Name: "busy", Settings: map[string]string{"port": strconv.Itoa(busy)}, Logger: slogDiscard(),
	})
	l.Close()
	if err == nil || !strings.Contains(err.Error(), "Address already in use") ||
		!strings.Contains(err.Error(), "port "+strconv.Itoa(busy)) {
		t.Errorf("Start on busy fixed port %d: err = %v", busy, err)
	}

	// The port is free now: the cluster takes exactly it.
	c := pgtest.Cluster(t, pgcluster.Options{Name: "fixed", Settings: map[string]string{"port": strconv.Itoa(busy)}})
	if c.Port() != busy {
		t.Errorf("Port() = %d, want %d", c.Port(), busy)
	}
	if err := c.Exec(context.Background(), "", "SELECT 1"); err != nil {
		t.Error(err)
	}
}
