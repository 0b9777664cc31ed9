package stats

import (
	"testing"
	"time"
)

func TestRates(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := func(uptime float64, cs ...ComponentSnapshot) Snapshot {
		return Snapshot{Time: t0.Add(time.Duration(uptime * float64(time.Second))), Uptime: uptime, Components: cs}
	}
	comp := func(name string, items, bytes, txns int64, busy, idle, waiting float64, state string) ComponentSnapshot {
		return ComponentSnapshot{Name: name, Items: items, Bytes: bytes, Txns: txns,
			BusySeconds: busy, IdleSeconds: idle, WaitingSeconds: waiting, State: state}
	}
	tests := []struct {
		name      string
		prev, cur Snapshot
		want      []Rate
	}{
		{
			name: "steady interval",
			prev: snap(10, comp("capture", 1000, 100000, 10, 5, 4, 1, "busy"), comp("apply.0", 0, 0, 0, 0, 10, 0, "idle")),
			cur:  snap(12, comp("capture", 3000, 300000, 30, 6.5, 4, 1.5, "waiting"), comp("apply.0", 500, 1000, 5, 2, 10, 0, "busy")),
			want: []Rate{
				{Name: "capture", Seconds: 2, ItemsPerSec: 1000, BytesPerSec: 100000, TxnsPerSec: 10, Busy: 0.75, Waiting: 0.25, State: "waiting"},
				{Name: "apply.0", Seconds: 2, ItemsPerSec: 250, BytesPerSec: 500, TxnsPerSec: 2.5, Busy: 1, State: "busy"},
			},
		},
		{
			name: "component created during the interval counts from zero",
			prev: snap(10),
			cur:  snap(14, comp("spill", 8, 800, 0, 1, 1, 0, "idle")),
			want: []Rate{{Name: "spill", Seconds: 4, ItemsPerSec: 2, BytesPerSec: 200, Busy: 0.25, Idle: 0.25, State: "idle"}},
		},
		{
			name: "values went backwards (restarted process) count from zero",
			prev: snap(1, comp("queue", 100, 100, 100, 1, 0, 0, "busy")),
			cur:  snap(2, comp("queue", 10, 10, 10, 0.5, 0.5, 0, "idle")),
			want: []Rate{{Name: "queue", Seconds: 1, ItemsPerSec: 10, BytesPerSec: 10, TxnsPerSec: 10, Busy: 0.5, Idle: 0.5, State: "idle"}},
		},
		{
			name: "no elapsed time gives zero rates",
			prev: snap(5, comp("queue", 1, 1, 1, 1, 1, 1, "busy")),
			cur:  snap(5, comp("queue", 9, 9, 9, 2, 2, 2, "busy")),
			want: []Rate{{Name: "queue", State: "busy"}},
		},
		{
			name: "fractions are clamped to [0,1]",
			prev: snap(10, comp("capture", 0, 0, 0, 0, 0, 0, "busy")),
			cur:  snap(11, comp("capture", 0, 0, 0, 1.001, 0, 0, "busy")),
			want: []Rate{{Name: "capture", Seconds: 1, Busy: 1, State: "busy"}},
		},
		{
			name: "empty",
			prev: snap(1),
			cur:  snap(2),
			want: []Rate{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Rates(tt.prev, tt.cur)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d rates, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Name != w.Name || g.State != w.State || !near(g.Seconds, w.Seconds) ||
					!near(g.ItemsPerSec, w.ItemsPerSec) || !near(g.BytesPerSec, w.BytesPerSec) || !near(g.TxnsPerSec, w.TxnsPerSec) ||
					!near(g.Busy, w.Busy) || !near(g.Idle, w.Idle) || !near(g.Waiting, w.Waiting) {
					t.Errorf("rate %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
		})
	}
}

// Rates over two live snapshots of a registry with an injected clock.
func TestRatesFromRegistry(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	r := NewRegistry(WithClock(clk.Now))
	c := r.Component("apply.0")
	prev := r.Snapshot()
	c.SetState(Busy)
	c.Add(300, 3000)
	clk.Advance(3 * time.Second)
	c.SetState(Waiting)
	clk.Advance(time.Second)
	got := Rates(prev, r.Snapshot())
	if len(got) != 1 {
		t.Fatalf("got %d rates", len(got))
	}
	g := got[0]
	if !near(g.Seconds, 4) || !near(g.ItemsPerSec, 75) || !near(g.BytesPerSec, 750) || !near(g.Busy, 0.75) || !near(g.Waiting, 0.25) || g.Idle != 0 || g.State != "waiting" {
		t.Errorf("rate = %+v", g)
	}
}

func TestRateString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    Rate
		want string
	}{
		{
			Rate{Name: "capture", ItemsPerSec: 12345, BytesPerSec: 4_500_000, TxnsPerSec: 120, Busy: 0.754, Waiting: 0.246, State: "waiting"},
			"capture 12.3k/s 4.5MB/s 120txn/s busy 75% idle 0% wait 25% (waiting)",
		},
		{
			Rate{Name: "apply.0", ItemsPerSec: 0.5, BytesPerSec: 999, TxnsPerSec: 0, Idle: 1, State: "idle"},
			"apply.0 0.5/s 999B/s 0txn/s busy 0% idle 100% wait 0% (idle)",
		},
		{
			Rate{Name: "queue", ItemsPerSec: 250_000, BytesPerSec: 2.5e9, TxnsPerSec: 3.25, Busy: 1, State: "busy"},
			"queue 250k/s 2.5GB/s 3.2txn/s busy 100% idle 0% wait 0% (busy)",
		},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
