package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/faultproxy"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/syncbuf"
	"github.com/repstream/repstream/internal/testbin"
)

// load writes to the source without pause until stopped: one-row
// transactions into faults_a and ten-row ones into faults_b, with an
// update now and then — riding through the source's own restarts (a write
// that fails is tried again on a new connection).
type load struct {
	dsn     string
	stop    chan struct{}
	done    chan struct{}
	written atomic.Int64
}

const faultsSchema = `
CREATE TABLE faults_a (id bigint PRIMARY KEY, v text, n int);
CREATE TABLE faults_b (id bigint PRIMARY KEY, v text);`

func startLoad(t *testing.T, dsn string) *load {
	l := &load{dsn: dsn, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		ctx := context.Background()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(ctx)
			}
		}()
		// pause waits d, or until halt (false).
		pause := func(d time.Duration) bool {
			select {
			case <-l.stop:
				return false
			case <-time.After(d):
				return true
			}
		}
		for i := int64(1); ; {
			select {
			case <-l.stop:
				return
			default:
			}
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, dsn)
				if err != nil {
					pause(100 * time.Millisecond)
					continue
				}
				conn = c
			}
			var err error
			if i%10 == 0 {
				// One transaction, two statements (parameters need one
				// statement per Exec).
				b := &pgx.Batch{}
				b.Queue(`INSERT INTO faults_b SELECT $1::bigint * 10 + g, 'b' FROM generate_series(0, 9) g ON CONFLICT (id) DO NOTHING`, i)
				b.Queue(`UPDATE faults_a SET n = n + 1 WHERE id = $1::bigint - 5`, i)
				err = conn.SendBatch(ctx, b).Close()
			} else {
				_, err = conn.Exec(ctx, `INSERT INTO faults_a VALUES ($1, 'a', 0) ON CONFLICT (id) DO NOTHING`, i)
			}
			if err != nil {
				conn.Close(ctx)
				conn = nil
				pause(50 * time.Millisecond)
				continue
			}
			l.written.Add(1)
			i++
			pause(2 * time.Millisecond) // the pace
		}
	}()
	t.Cleanup(l.halt)
	return l
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// flowing waits until a row written on the source after the call reaches
// the target, and returns how long that took. If the engine exits
// meanwhile (exited returns its error) it fails at once with that error
// and the engine's last log lines.
func (e *env) flowing(timeout time.Duration, exited func() error, log *syncbuf.Buffer) time.Duration {
	e.t.Helper()
	defer func() {
		if e.t.Failed() && log != nil {
			e.t.Logf("engine log (last lines):\n%s", log.Tail(40))
		}
	}()
	start := time.Now()
	ctx := context.Background()
	var mark int64
	pgtest.WaitFor(e.t, "the source to take a write", timeout, func() (bool, error) {
		c, err := pgx.Connect(ctx, e.src.DSN(e.srcDB))
		if err != nil {
			return false, nil
		}
		defer c.Close(ctx)
		err = c.QueryRow(ctx, `INSERT INTO faults_b VALUES (-(SELECT count(*) + 1 FROM faults_b WHERE id < 0), 'mark') RETURNING id`).Scan(&mark)
		return err == nil, nil
	})
	pgtest.WaitFor(e.t, fmt.Sprintf("mark %d to reach the target", mark), timeout-time.Since(start), func() (bool, error) {
		c, err := pgx.Connect(ctx, e.tgt.DSN(e.tgtDB))
		if err != nil {
			return false, nil
		}
		defer c.Close(ctx)
		var ok bool
		err = c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM faults_b WHERE id = $1)`, mark).Scan(&ok)
		if !ok && exited != nil {
			if err := exited(); err != nil {
				e.t.Fatalf("waiting for mark %d: the engine exited: %v", mark, err)
			}
		}
		return ok && err == nil, nil
	})
	return time.Since(start)
}

// runEngine starts the engine in the background, logging into log; stop
// cancels it and returns its error; exited reports whether it ended on its
// own.
func (e *env) runEngine(cfg config.Config, reg *stats.Registry, log *syncbuf.Buffer) (stop func() error, exited func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var runErr error
	done := make(chan struct{})
	go func() {
		err := engine.New(cfg, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})), reg).Run(ctx)
		mu.Lock()
		runErr = err
		mu.Unlock()
		close(done)
	}()
	exited = func() error {
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			if runErr == nil {
				return errors.New("the engine stopped on its own")
			}
			return runErr
		default:
			return nil
		}
	}
	stop = func() error {
		cancel()
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			return runErr
		case <-time.After(30 * time.Second):
			return errors.New("the engine did not stop within 30s of its context ending")
		}
	}
	return stop, exited
}

// fault is one fault a test inflicts; do returns once it is over (the
// server or the link is back).
type fault struct {
	name string
	do   func() error
}

// survive inflicts each fault in turn under the load and checks that rows
// flow again after it (logging how long that took) without the engine
// exiting.
func (e *env) survive(faults []fault, l *load, exited func() error, log *syncbuf.Buffer) {
	e.t.Helper()
	for _, f := range faults {
		before := l.written.Load()
		if err := f.do(); err != nil {
			e.t.Fatalf("%s: %v", f.name, err)
		}
		took := e.flowing(90*time.Second, exited, log)
		e.t.Logf("%s: rows flow again %s after it is over (%d source transactions written meanwhile)",
			f.name, took.Round(10*time.Millisecond), l.written.Load()-before)
		if err := exited(); err != nil {
			e.t.Fatalf("%s: the engine exited: %v", f.name, err)
		}
	}
}

// finish stops the load, waits until the engine has applied everything,
// stops it (cleanly, or the test fails) and compares the tables.
func (e *env) finish(cfg config.Config, l *load, stop func() error) {
	e.t.Helper()
	l.halt()
	e.connect()
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		e.t.Fatalf("the engine did not stop cleanly: %v", err)
	}
	e.assertSame("faults_a", "id")
	e.assertSame("faults_b", "id")
}

// TestFaultsServerRestarts: one engine, started once under a steady load,
// lives through a target restart, a target crash (immediate stop, then
// start: crash recovery) and a source restart; after each, rows flow again
// (the recovery time is logged), the engine never exits, and in the end it
// stops cleanly and every table equals the source's.
func TestFaultsServerRestarts(t *testing.T) {
	src := pgtest.Cluster(t, pgcluster.Options{Name: "faultsrc", Fast: true})
	tgt := pgtest.Cluster(t, pgcluster.Options{Name: "faulttgt", Fast: true})
	e := newEnvOn(t, src, tgt)
	e.both(faultsSchema)
	cfg := e.config("public.faults_a", "public.faults_b")
	cfg.ApplyParallelism = 2
	cfg.ReconnectMaxWait = 2 * time.Second
	reg := stats.NewRegistry()
	l := startLoad(t, e.src.DSN(e.srcDB))
	log := &syncbuf.Buffer{}
	stop, exited := e.runEngine(cfg, reg, log)
	e.flowing(time.Minute, exited, log)

	ctx := context.Background()
	faults := []fault{
		{"target restart", func() error { return tgt.Restart(ctx) }},
		{"target crash", func() error {
			if err := tgt.Crash(ctx); err != nil {
				return err
			}
			time.Sleep(2 * time.Second)
			return tgt.Restart(ctx)
		}},
		{"source restart", func() error { return src.Restart(ctx) }},
	}
	e.survive(faults, l, exited, log)
	e.finish(cfg, l, stop)
	snap := reg.Snapshot()
	s, _ := snap.Component("source")
	tg, _ := snap.Component("target")
	t.Logf("reconnects: source %d, target %d", s.Counters["reconnects"], tg.Counters["reconnects"])
	if s.Counters["reconnects"] == 0 || tg.Counters["reconnects"] == 0 {
		t.Fatalf("reconnects not counted: source %d, target %d", s.Counters["reconnects"], tg.Counters["reconnects"])
	}
}

// TestFaultsLinks: one engine, its links to both servers through fault
// proxies, started once under a steady load, lives through a cut of each
// link (both sides see a reset) and a freeze of each (open but silent: the
// engine must notice by itself — capture's unanswered status request on
// the source side, LinkWatch on the target side); the freeze lasts until
// the engine has given up on the link. After each fault rows flow again,
// the engine never exits, and in the end every table equals the source's.
func TestFaultsLinks(t *testing.T) {
	src := pgtest.Cluster(t, pgcluster.Options{Name: "linksrc", Fast: true})
	tgt := pgtest.Cluster(t, pgcluster.Options{Name: "linktgt", Fast: true})
	e := newEnvOn(t, src, tgt)
	e.both(faultsSchema)
	ctx := context.Background()
	srcProxy, err := faultproxy.Start(ctx, fmt.Sprintf("127.0.0.1:%d", src.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer srcProxy.Close()
	tgtProxy, err := faultproxy.Start(ctx, fmt.Sprintf("127.0.0.1:%d", tgt.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer tgtProxy.Close()

	cfg := e.config("public.faults_a", "public.faults_b")
	cfg.Source += " port=" + srcProxy.Port() + " connect_timeout=3"
	cfg.Target += " port=" + tgtProxy.Port() + " connect_timeout=3"
	cfg.ApplyParallelism = 2
	cfg.SourceTimeout = 6 * time.Second
	cfg.TargetTimeout = 6 * time.Second
	cfg.ReconnectMaxWait = 2 * time.Second
	cfg.StatusInterval = time.Second
	reg := stats.NewRegistry()
	l := startLoad(t, e.src.DSN(e.srcDB))
	log := &syncbuf.Buffer{}
	stop, exited := e.runEngine(cfg, reg, log)
	e.flowing(time.Minute, exited, log)

	reconnects := func() int64 {
		snap := reg.Snapshot()
		s, _ := snap.Component("source")
		tg, _ := snap.Component("target")
		return s.Counters["reconnects"] + tg.Counters["reconnects"]
	}
	freeze := func(p *faultproxy.Proxy) func() error {
		return func() error {
			before := reconnects()
			start := time.Now()
			p.Freeze()
			defer p.Thaw()
			pgtest.WaitFor(t, "the engine to give up on the frozen link", time.Minute, func() (bool, error) {
				return reconnects() > before, nil
			})
			t.Logf("frozen link noticed after %s", time.Since(start).Round(10*time.Millisecond))
			return nil
		}
	}
	faults := []fault{
		{"source link cut", func() error { srcProxy.Cut(); return nil }},
		{"target link cut", func() error { tgtProxy.Cut(); return nil }},
		{"source link frozen", freeze(srcProxy)},
		{"target link frozen", freeze(tgtProxy)},
	}
	e.survive(faults, l, exited, log)
	e.finish(cfg, l, stop)
	snap := reg.Snapshot()
	tg, _ := snap.Component("target")
	if tg.Counters["silent_links"] == 0 {
		t.Fatal("the frozen target link was not closed by the link watch")
	}
}

// TestFaultsSIGTERM: the repstream process exits 0 promptly on SIGTERM
// during its initial copy, while streaming, and while waiting to reconnect
// to a target that is down; nothing is lost — the next run catches up and the tables are
// equal.
func TestFaultsSIGTERM(t *testing.T) {
	src := pgtest.Cluster(t, pgcluster.Options{Name: "termsrc", Fast: true})
	tgt := pgtest.Cluster(t, pgcluster.Options{Name: "termtgt", Fast: true})
	e := newEnvOn(t, src, tgt)
	e.both(faultsSchema)
	cfg := e.config("public.faults_a", "public.faults_b")
	cfg.ReconnectMaxWait = 5 * time.Second
	l := startLoad(t, e.src.DSN(e.srcDB))
	bin := testbin.Repstream(t)
	start := func() (*exec.Cmd, *syncbuf.Buffer) {
		var out syncbuf.Buffer
		cmd := exec.Command(bin, args(cfg, "--progress", "0")...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	term := func(cmd *exec.Cmd, out *syncbuf.Buffer, when string) {
		t.Helper()
		began := time.Now()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: SIGTERM: the process exited with %v\n%s", when, err, out.Tail(30))
			}
			t.Logf("%s: exited 0 %s after SIGTERM", when, time.Since(began).Round(time.Millisecond))
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: still running 15s after SIGTERM\n%s", when, out.Tail(30))
		}
	}

	e.srcExec(`INSERT INTO faults_b SELECT 1000000 + g, repeat('x', 200) FROM generate_series(1, 200000) g`)
	cmd, out := start()
	pgtest.WaitFor(t, "the initial copy to start", time.Minute, func() (bool, error) {
		return strings.Contains(out.Tail(50), "initial copy"), nil
	})
	term(cmd, out, "initial copy")

	// streaming waits until the run streams: a mark reaching the target
	// is not enough after a stopped initial copy, whose next run copies the
	// interrupted table again (its rows, the mark among them) before it
	// streams.
	streaming := func(out *syncbuf.Buffer) {
		t.Helper()
		e.flowing(time.Minute, nil, out)
		pgtest.WaitFor(t, "the engine to stream", time.Minute, func() (bool, error) {
			return strings.Contains(out.String(), "starting replication"), nil
		})
	}
	cmd, out = start()
	streaming(out)
	term(cmd, out, "streaming")

	cmd, out = start()
	streaming(out)
	ctx := context.Background()
	e.Tgt.Close(ctx)
	if err := tgt.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("engine log (last lines):\n%s", out.Tail(40))
		}
	}()
	pgtest.WaitFor(t, "the engine to wait for the target", time.Minute, func() (bool, error) {
		return strings.Contains(out.Tail(50), "reconnecting"), nil
	})
	term(cmd, out, "waiting to reconnect")

	if err := tgt.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	l.halt()
	e.connect()
	e.catchUp(cfg)
	e.assertSame("faults_a", "id")
	e.assertSame("faults_b", "id")
}
