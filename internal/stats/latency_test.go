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
