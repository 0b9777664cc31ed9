package stats

import (
	"testing"
	"time"
)

func TestCommitLatency(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	r := NewRegistry(WithClock(clk.Now))
	l := r.CommitLatency()
	commit := clk.Now().UnixNano()
	clk.Advance(5 * time.Millisecond)
	l.Observe(StageDurable, commit)
	l.Observe(StageReceived, commit)
	l.Observe("custom", commit)
	clk.Advance(2 * time.Hour) // past the histogram's range: counted as an hour
	l.Observe(StageAcked, commit)
	l.Observe(StageVisible, clk.Now().Add(time.Second).UnixNano()) // a commit "after" now (another clock): 1 µs
	l.Observe(StageVisible, 0)                                     // unknown commit time: not recorded
	got := OrderStages(r.Snapshot().CommitLatency)
	want := []struct {
		stage string
		p50   float64
	}{{StageReceived, 5}, {StageAcked, 3600_000}, {StageVisible, 0.001}, {StageDurable, 5}, {"custom", 5}}
	if len(got) != len(want) {
		t.Fatalf("stages %+v, want %v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.Stage != w.stage || g.Count != 1 || g.P50 < w.p50*0.99 || g.P50 > w.p50*1.01 || g.Max != g.P50 {
			t.Errorf("stage %d = %+v, want %s with p50 ≈ %v ms", i, g, w.stage, w.p50)
		}
	}
	var nilReg *Registry
	nilReg.CommitLatency().Observe(StageReceived, commit) // a nil registry records nothing, and does not panic
	if s := nilReg.CommitLatency().Snapshot(); s != nil {
		t.Errorf("nil registry's latencies = %v", s)
	}
}

func BenchmarkCommitLatencyObserve(b *testing.B) {
	l := NewRegistry().CommitLatency()
	commit := time.Now().Add(-3 * time.Millisecond).UnixNano()
	b.ReportAllocs()
	for b.Loop() {
		l.Observe(StageVisible, commit)
	}
}

// TestCommitLatencyRecent: the recent figures cover the last one to two
// LatencyWindows; those since the start, everything.
func TestCommitLatencyRecent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	l := NewRegistry(WithClock(clk.Now)).CommitLatency()
	observe := func(lat time.Duration) { l.Observe(StageVisible, clk.Now().Add(-lat).UnixNano()) }
	check := func(when string, count, recent int64, recentP50 float64) {
		t.Helper()
		s := l.Snapshot()
		if len(s) != 1 {
			t.Fatalf("%s: %+v", when, s)
		}
		g := s[0]
		if g.Count != count || g.RecentCount != recent || g.RecentP50 < recentP50*0.99 || g.RecentP50 > recentP50*1.01 {
			t.Errorf("%s: count %d, recent %d with p50 %v ms; want %d, %d with p50 %v", when, g.Count, g.RecentCount, g.RecentP50, count, recent, recentP50)
		}
	}
	observe(5 * time.Millisecond) // t = 0
	clk.Advance(30 * time.Second)
	observe(5 * time.Millisecond)
	check("within the first window", 2, 2, 5)
	clk.Advance(45 * time.Second) // t = 75 s: the first window is the previous one
	check("in the second window", 2, 2, 5)
	observe(20 * time.Millisecond)
	check("in the second window, after another", 3, 3, 5)
	clk.Advance(60 * time.Second) // t = 135 s: the window of the first two is gone
	check("in the third window", 3, 1, 20)
	clk.Advance(5 * time.Minute)
	check("after a quiet while", 3, 0, 0)
	observe(7 * time.Millisecond)
	check("after a quiet while, then one", 4, 1, 7)
}
