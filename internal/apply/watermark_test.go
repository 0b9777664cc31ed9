package apply

import (
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

func TestWatermarkInOrder(t *testing.T) {
	w := NewWatermark(100)
	w.Register(200)
	w.Register(300)
	if got := w.Flush(); got != 100 {
		t.Fatalf("flush before any done = %v", got)
	}
	w.Observe(1000) // pending work: idle position must not count
	if got := w.Flush(); got != 100 {
		t.Fatalf("flush with pending = %v, want 100", got)
	}
	w.Done(300)
	if got := w.Low(); got != 100 {
		t.Fatalf("low passed an unapplied txn: %v", got)
	}
	w.Done(200)
	if got := w.Low(); got != 300 {
		t.Fatalf("low = %v, want 300", got)
	}
	if got := w.Flush(); got != 1000 {
		t.Fatalf("idle flush = %v, want 1000", got)
	}
	w.Register(1200)
	if got := w.Flush(); got != 1000 {
		t.Fatalf("flush went backwards: %v", got)
	}
	if w.Pending() != 1 {
		t.Fatalf("pending = %d", w.Pending())
	}
}

func TestWatermarkIgnoresReplays(t *testing.T) {
	w := NewWatermark(500)
	w.Register(400) // already applied: ignored
	w.Register(600)
	w.Register(600)
	w.Done(600)
	if w.Low() != 600 || w.Pending() != 0 {
		t.Fatalf("low %v pending %d", w.Low(), w.Pending())
	}
}

// TestWatermarkRandomized marks transactions done in random order and checks
// after every step that the low watermark equals the newest end below which
// everything is done — never past an unapplied transaction.
func TestWatermarkRandomized(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		w := NewWatermark(0)
		n := 1 + r.IntN(3000)
		ends := make([]change.LSN, n)
		for i := range ends {
			ends[i] = change.LSN(10 * (i + 1))
			w.Register(ends[i])
		}
		done := make([]bool, n)
		order := r.Perm(n)
		for _, i := range order {
			w.Done(ends[i])
			done[i] = true
			want := change.LSN(0)
			for j := 0; j < n && done[j]; j++ {
				want = ends[j]
			}
			if got := w.Low(); got != want {
				t.Fatalf("seed %d: low %v, want %v", seed, got, want)
			}
		}
		if w.Flush() != ends[n-1] {
			t.Fatalf("seed %d: final flush %v", seed, w.Flush())
		}
	}
}

func TestWatermarkChanged(t *testing.T) {
	w := NewWatermark(0)
	ch := w.Changed()
	w.Register(10)
	select {
	case <-ch:
		t.Fatal("signalled without progress")
	default:
	}
	w.Done(10)
	select {
	case <-ch:
	default:
		t.Fatal("not signalled after progress")
	}
}

func BenchmarkWatermark(b *testing.B) {
	w := NewWatermark(0)
	for i := 0; i < b.N; i++ {
		e := change.LSN(i + 1)
		w.Register(e)
		w.Done(e)
	}
}

// TestWatermarkTraceLatency: each registered transaction's commit → stage
// latencies go to the registry, once per stage, under the names given; a
// transaction without a commit time and a replayed one are not counted.
func TestWatermarkTraceLatency(t *testing.T) {
	reg := stats.NewRegistry()
	w := NewWatermark(100)
	w.TraceLatency(reg.CommitLatency(), stats.StageVisible, stats.StageDurable)
	commit := time.Now().Add(-time.Second)
	w.RegisterCommit(200, commit)
	w.RegisterCommit(300, commit)
	w.RegisterCommit(300, commit) // replayed: ignored
	w.Register(400)               // no commit time
	w.Visible(200)
	w.Visible(200)
	w.Done(200)
	w.Done(300) // done without visible first: both
	w.Done(400)
	counts := map[string]int64{}
	for _, l := range reg.Snapshot().CommitLatency {
		counts[l.Stage] = l.Count
		if l.P50 < 1000 || l.P50 > 1100 {
			t.Errorf("%s p50 = %v ms, want about 1000", l.Stage, l.P50)
		}
	}
	if want := map[string]int64{stats.StageReceived: 2, stats.StageVisible: 2, stats.StageDurable: 2}; !maps.Equal(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}

	// The capture's: only Done, under its own name.
	reg = stats.NewRegistry()
	w = NewWatermark(100)
	w.TraceLatency(reg.CommitLatency(), "", stats.StageAcked)
	w.RegisterCommit(200, commit)
	w.Done(200)
	got := reg.Snapshot().CommitLatency
	if len(got) != 2 || got[0].Stage != stats.StageAcked || got[1].Stage != stats.StageReceived {
		t.Errorf("capture's stages %+v, want acked and received", got)
	}
}
