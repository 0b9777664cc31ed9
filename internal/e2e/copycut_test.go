package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/faultproxy"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/syncbuf"
)

// TestCopySourceLinkCut: the source's connection lost in the middle of the
// initial copy is a transient fault, as it is while streaming: the run
// reconnects, copies the table again and catches up. Before, the target's
// COPY, cancelled by the broken pipe (SQLSTATE 57014), was reported instead
// of its cause, and the run stopped (seen in CI in TestFaultsLinks).
func TestCopySourceLinkCut(t *testing.T) {
	src := pgtest.Cluster(t, pgcluster.Options{Name: "cutsrc", Fast: true})
	e := newEnvOn(t, src, pgtest.Shared(t, "target"))
	e.both(`CREATE TABLE big (id int PRIMARY KEY, pad text)`)
	e.srcExec(`INSERT INTO big SELECT g, repeat('c', 300) FROM generate_series(1, 400000) g`)
	proxy, err := faultproxy.Start(context.Background(), fmt.Sprintf("127.0.0.1:%d", src.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cfg := e.config("public.big")
	cfg.Source += " port=" + proxy.Port() + " connect_timeout=3"
	cfg.ReconnectMaxWait = time.Second
	cfg.UntilCaughtUp = true
	reg := stats.NewRegistry()
	var logs syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, capturingLogger(&logs), reg).Run(ctx) }()
	pgtest.WaitForEvery(t, "the copy of big under way on the target", time.Minute, 2*time.Millisecond, func() (bool, error) {
		var n int64
		err := e.Tgt.QueryRow(context.Background(), `SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy WHERE relid = 'big'::regclass`).Scan(&n)
		return n > 10000, err
	})
	if n := proxy.Cut(); n == 0 {
		t.Fatal("no source link to cut")
	}
	if err := <-done; err != nil {
		t.Fatalf("a source link cut during the copy stopped the run: %v\n%s", err, logs.String())
	}
	snap := reg.Snapshot()
	if s, _ := snap.Component("source"); s.Counters["reconnects"] == 0 {
		t.Errorf("no reconnect counted: the cut missed the copy?\n%s", logs.String())
	}
	e.assertSame("big", "id")
}
