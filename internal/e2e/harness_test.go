package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/syncbuf"
	"github.com/repstream/repstream/internal/testbin"
)

// TestMain runs twice as many tests at once as there are CPUs: most of
// them wait (on a throttled target, a poll interval, a server's restart)
// far more than they compute: run alone at go test's default, the package
// kept the CPUs about 60% busy.
func TestMain(m *testing.M) {
	pgtest.DefaultParallel(2 * runtime.GOMAXPROCS(0))
	pgtest.Main(m, testbin.Remove)
}

// env is one test's source and target databases.
type env struct {
	t        *testing.T
	src, tgt *pgcluster.Cluster
	srcDB    string
	tgtDB    string
	Src, Tgt *pgx.Conn
	writes   *atomic.Int64 // statements writeLoad has run
}

func newEnv(t *testing.T) *env {
	t.Helper()
	src, tgt := pgtest.Shared(t, "source"), pgtest.Shared(t, "target")
	return envOn(t, src, pgtest.NewDB(t, src), tgt, pgtest.NewDB(t, tgt))
}

// envOn is the env of databases srcDB of src and tgtDB of tgt, made by the
// caller (one may be another env's: a cascade).
func envOn(t *testing.T, src *pgcluster.Cluster, srcDB string, tgt *pgcluster.Cluster, tgtDB string) *env {
	t.Helper()
	e := &env{t: t, src: src, tgt: tgt, srcDB: srcDB, tgtDB: tgtDB}
	ctx := context.Background()
	var err error
	if e.Src, err = pgx.Connect(ctx, e.src.DSN(e.srcDB)); err != nil {
		t.Fatal(err)
	}
	if e.Tgt, err = pgx.Connect(ctx, e.tgt.DSN(e.tgtDB)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Src.Close(ctx)
		e.Tgt.Close(ctx)
		// Slots pin WAL in the shared source cluster: drop this test's.
		if c, err := pgx.Connect(ctx, e.src.DSN(e.srcDB)); err == nil {
			_, _ = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
			c.Close(ctx)
		}
	})
	return e
}

// both runs SQL on the source and the target.
func (e *env) both(sql string) {
	e.t.Helper()
	e.srcExec(sql)
	e.tgtExec(sql)
}

func (e *env) srcExec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.Src.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("source: %s: %v", firstLine(sql), err)
	}
}

func (e *env) tgtExec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.Tgt.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("target: %s: %v", firstLine(sql), err)
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// config returns a run configuration for this env.
func (e *env) config(tables ...string) config.Config {
	c := config.Default()
	c.Source = e.src.DSN(e.srcDB)
	c.Target = e.tgt.DSN(e.tgtDB)
	c.Slot = e.uniqueName("rs_", 63)
	c.Tables = tables
	c.SpillDir = filepath.Join(e.t.TempDir(), "spill") // created 0700 by the queue (t.TempDir is 0755)
	c.StatusInterval = time.Second
	c.Memory = 64 << 20
	return c
}

// uniqueName is prefix and the source database's name (less its "t_"),
// at most max bytes: cut in its middle, it keeps the database's sequence
// suffix, so it is unique also among tests that run at once (slots and
// roles are cluster-wide).
func (e *env) uniqueName(prefix string, max int) string {
	n := prefix + strings.TrimPrefix(e.srcDB, "t_")
	if len(n) > max {
		i := strings.LastIndexByte(n, '_')
		n = n[:max-(len(n)-i)] + n[i:]
	}
	return n
}

// testLogger is the engine's logger in a test: to stderr with -v;
// otherwise kept, and its last lines printed if the test fails (a run
// that stopped or hung says why).
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	buf := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine log (last lines):\n%s", buf.Tail(60))
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// catchUp runs the engine with --until-caught-up and fails the test on error.
func (e *env) catchUp(cfg config.Config) *stats.Registry {
	e.t.Helper()
	reg, err := e.tryCatchUp(cfg)
	if err != nil {
		e.t.Fatalf("run --until-caught-up: %v", err)
	}
	return reg
}

func (e *env) tryCatchUp(cfg config.Config) (*stats.Registry, error) {
	cfg.UntilCaughtUp = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reg := stats.NewRegistry()
	err := engine.New(cfg, testLogger(e.t), reg).Run(ctx)
	return reg, err
}

// start runs the engine in the background until the returned stop is called.
func (e *env) start(cfg config.Config) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(e.t), nil).Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("engine did not stop within 30s")
		}
	}
}

// copiedAt is when slot last copied table (any schema; "" when never,
// or not recorded).
func (e *env) copiedAt(slot, table string) string {
	e.t.Helper()
	var s string
	err := e.Tgt.QueryRow(context.Background(), "SELECT coalesce(max(copied_at)::text, '') FROM repstream.tables WHERE slot = $1 AND table_name = $2", slot, table).Scan(&s)
	if err != nil {
		e.t.Fatalf("when was %s copied: %v", table, err)
	}
	return s
}

// checksum returns the row count and an md5 of the ordered contents.
func checksum(t *testing.T, conn *pgx.Conn, table, orderBy string) (int64, string) {
	t.Helper()
	var n int64
	var h string
	q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY %s)), '') FROM %s x", orderBy, table)
	if err := conn.QueryRow(context.Background(), q).Scan(&n, &h); err != nil {
		t.Fatalf("checksum %s: %v", table, err)
	}
	return n, h
}

// assertSame fails unless table has the same contents on source and target.
func (e *env) assertSame(table, orderBy string) {
	e.t.Helper()
	n1, h1 := checksum(e.t, e.Src, table, orderBy)
	n2, h2 := checksum(e.t, e.Tgt, table, orderBy)
	if n1 != n2 || h1 != h2 {
		e.t.Fatalf("%s differs: source %d rows %s, target %d rows %s\n%s", table, n1, h1, n2, h2, e.diff(table, orderBy))
	}
}

// diff shows a few differing rows, to make a failure readable.
func (e *env) diff(table, orderBy string) string {
	rows := func(c *pgx.Conn) map[string]bool {
		out := map[string]bool{}
		r, err := c.Query(context.Background(), fmt.Sprintf("SELECT x::text FROM %s x ORDER BY %s LIMIT 100000", table, orderBy))
		if err != nil {
			return out
		}
		defer r.Close()
		for r.Next() {
			var s string
			_ = r.Scan(&s)
			out[s] = true
		}
		return out
	}
	s, t := rows(e.Src), rows(e.Tgt)
	var b strings.Builder
	n := 0
	for k := range s {
		if !t[k] && n < 5 {
			fmt.Fprintf(&b, "  only on source: %.200s\n", k)
			n++
		}
	}
	n = 0
	for k := range t {
		if !s[k] && n < 5 {
			fmt.Fprintf(&b, "  only on target: %.200s\n", k)
			n++
		}
	}
	return b.String()
}

// args renders a config as command-line flags.
func args(c config.Config, extra ...string) []string {
	a := []string{"run", "--source", c.Source, "--target", c.Target, "--slot", c.Slot,
		"--memory", c.Memory.String(), "--spill-dir", c.SpillDir,
		fmt.Sprintf("--apply-parallelism=%d", c.ApplyParallelism), "--commit-order", c.CommitOrder.String(),
		"--status-interval", c.StatusInterval.String(), "--log-level", "info"}
	if len(c.Tables) > 0 {
		a = append(a, "--tables", strings.Join(c.Tables, ","))
	}
	if c.CreateTables {
		a = append(a, "--create-tables")
	}
	if !c.Snapshot {
		a = append(a, "--snapshot=false")
	}
	return append(a, extra...)
}

// appSession opens an application's session on the target database (else
// the source's), closed when the test ends, and returns it with its
// backend pid.
func (e *env) appSession(ctx context.Context, onTarget bool) (*pgx.Conn, uint32) {
	e.t.Helper()
	dsn := e.src.DSN(e.srcDB)
	if onTarget {
		dsn = e.tgt.DSN(e.tgtDB)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close(context.Background()) })
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		e.t.Fatal(err)
	}
	return conn, pid
}

func (e *env) srcConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, e.src.DSN(e.srcDB))
}

// waitCaughtUp polls until the slot's confirmed position reaches the
// source's current WAL position (as of the call).
func (e *env) waitCaughtUp(slot string, timeout time.Duration) {
	e.t.Helper()
	ctx := context.Background()
	var target string
	if err := e.Src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		e.t.Fatal(err)
	}
	pgtest.WaitFor(e.t, "slot "+slot+" to confirm "+target, timeout, func() (bool, error) {
		var ok bool
		err := e.Src.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`, slot, target).Scan(&ok)
		return ok, err
	})
	// A table waiting for its copy (pending, copying) is not caught up:
	// apply skipped its changes, the copy brings them. (One the source no
	// longer has waits for ever.)
	pgtest.WaitFor(e.t, "slot "+slot+"'s tables to be copied", timeout, func() (bool, error) {
		var waiting []string
		rows, err := e.Tgt.Query(ctx, `SELECT format('%I.%I', schema_name, table_name) FROM repstream.tables WHERE slot = $1 AND state <> 'ready'`, slot)
		if err != nil {
			return false, err
		}
		if waiting, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return false, err
		}
		var n int
		err = e.Src.QueryRow(ctx, `SELECT count(to_regclass(t)) FROM unnest($1::text[]) t`, waiting).Scan(&n)
		return n == 0, err
	})
}
