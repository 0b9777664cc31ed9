package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

// TestProbeHeldBack holds the target back on purpose — a native subscription
// disabled for a known time — and checks that the probe's measured lag
// reflects it: probes committed while it is disabled appear only after it is
// enabled again, so their latency is about the time they waited.
func TestProbeHeldBack(t *testing.T) {
	src, tgt := servers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The launcher restarts a re-enabled subscription's worker only
	// wal_retrieve_retry_interval (default 5s) after its last start: make
	// that short so the hold is the only delay.
	for _, sql := range []string{"ALTER SYSTEM SET wal_retrieve_retry_interval = '50ms'", "SELECT pg_reload_conf()"} {
		if err := tgt.Exec(ctx, "postgres", sql); err != nil {
			t.Fatal(err)
		}
	}
	db := pgtest.NewDB(t, src)
	if err := tgt.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{src.DSN(db), tgt.DSN(db)} {
		if err := execOn(ctx, c, ProbeDDL); err != nil {
			t.Fatal(err)
		}
	}
	if err := execOn(ctx, src.DSN(db), "CREATE PUBLICATION probe_pub FOR TABLE bench_probe"); err != nil {
		t.Fatal(err)
	}
	env := sysEnv{srcDSN: src.DSN(db), tgtDSN: tgt.DSN(db), slot: "probe_sub", pub: "probe_pub", log: discardLogger()}
	sys := newNative(env, 150000)
	if err := sys.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	defer sys.cleanup(context.Background())
	if err := sys.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitSlotActive(ctx, env.srcDSN, env.slot, sys); err != nil {
		t.Fatal(err)
	}

	p := runProbe(t, ctx, env.srcDSN, env.tgtDSN, 100*time.Millisecond)
	epoch := time.Now()
	p.SetTicking(true)
	waitSeen(t, p, epoch, 10) // flowing freely
	id, _, err := p.Mark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitSeen(ctx, id); err != nil {
		t.Fatal(err)
	}
	freeEnd := time.Now()

	const hold = 2 * time.Second
	if err := sys.stop(ctx, &RunResult{}); err != nil { // ALTER SUBSCRIPTION ... DISABLE
		t.Fatal(err)
	}
	// The worker exits asynchronously: wait until the slot is released.
	waitSlotInactive(t, ctx, env.srcDSN, env.slot)
	heldFrom := time.Now()
	time.Sleep(hold)
	if lag := p.Lag(time.Now()); lag < hold*8/10 {
		t.Errorf("Lag while held back = %v, want ≥ %v", lag, hold*8/10)
	}
	// StopTicking waits for every committed probe: not while held back.
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if err := p.StopTicking(sctx); err == nil {
		t.Error("StopTicking returned while the probes were held back")
	}
	scancel()
	p.SetTicking(true)
	if err := sys.start(ctx); err != nil {
		t.Fatal(err)
	}
	id, _, err = p.Mark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitSeen(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := p.StopTicking(ctx); err != nil {
		t.Fatal(err)
	}
	if lag := p.Lag(time.Now()); lag != 0 {
		t.Errorf("after StopTicking a committed probe is not on the target (lag %v)", lag)
	}

	_, free := p.Results(epoch, epoch, freeEnd)
	_, held := p.Results(epoch, heldFrom, heldFrom.Add(300*time.Millisecond))
	pts, all := p.Results(epoch, time.Time{}, time.Time{})
	t.Logf("free: %+v; held: %+v; all: %+v", free, held, all)
	if free.Seen < 5 || free.P99Ms > 500 {
		t.Errorf("free-flowing probes: %+v, want ≥ 5 seen with p99 < 500ms", free)
	}
	if held.Seen == 0 || held.MaxMs < float64(hold.Milliseconds())*0.8 {
		t.Errorf("probes committed at the start of the hold: %+v, want latency ≥ %v", held, hold*8/10)
	}
	if all.MaxMs < float64(hold.Milliseconds())*0.8 || all.MaxMs > float64(hold.Milliseconds())+1500 {
		t.Errorf("max latency %vms, want about %v", all.MaxMs, hold)
	}
	if len(pts) != all.Probes {
		t.Errorf("%d points for %d probes", len(pts), all.Probes)
	}
}

func waitSlotInactive(t *testing.T, ctx context.Context, dsn, slot string) {
	t.Helper()
	c, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for {
		var active bool
		if err := c.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("slot never became inactive")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestProbeResolution points the probe at one database as both source and
// target, so a probe is visible the moment it commits: the latency measured
// is then the probe's own resolution. A poller on a fixed 10 ms clock
// measured every latency under 10 ms as about 9.5 ms.
func TestProbeResolution(t *testing.T) {
	src, _ := servers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewDB(t, src)
	if err := execOn(ctx, src.DSN(db), ProbeDDL); err != nil {
		t.Fatal(err)
	}
	p := runProbe(t, ctx, src.DSN(db), src.DSN(db), 20*time.Millisecond)
	epoch := time.Now()
	p.SetTicking(true)
	waitSeen(t, p, epoch, 50) // a second's worth
	if err := p.StopTicking(ctx); err != nil {
		t.Fatal(err)
	}
	_, fig := p.Results(epoch, time.Time{}, time.Time{})
	if fig.Seen < 50 {
		t.Fatalf("only %d probes seen, after 50 were", fig.Seen)
	}
	if fig.P50Ms > 3 {
		t.Errorf("p50 of probes visible at once = %.2f ms, want ≤ 3 ms (the poller follows the probes)", fig.P50Ms)
	}
	t.Logf("%d probes: p50 %.3f ms, p99 %.3f ms", fig.Seen, fig.P50Ms, fig.P99Ms)
}

// waitSeen waits until n probes since epoch are seen on the target (at the
// probe's interval: n intervals or so; the timeout only ends a hang).
func waitSeen(t *testing.T, p *Probe, epoch time.Time, n int) {
	t.Helper()
	pgtest.WaitFor(t, fmt.Sprintf("%d probes seen", n), 30*time.Second, func() (bool, error) {
		_, fig := p.Results(epoch, time.Time{}, time.Time{})
		return fig.Seen >= n, nil
	})
}

// runProbe runs a probe between srcDSN and tgtDSN until the test ends.
func runProbe(t *testing.T, ctx context.Context, srcDSN, tgtDSN string, interval time.Duration) *Probe {
	p := NewProbe(withApp(srcDSN), withApp(tgtDSN), interval, nil)
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	t.Cleanup(func() { pcancel(); <-done })
	return p
}
