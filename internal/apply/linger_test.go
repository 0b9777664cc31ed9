package apply

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// TestApplierGroupWait: transactions that come less than GroupWait apart
// are gathered into groups spanning at most GroupWait from their first
// transaction; transactions further apart go alone, at once, and without
// GroupWait, or while capture gathers the stream itself (Gathers), every one
// goes alone. Time is virtual (synctest).
func TestApplierGroupWait(t *testing.T) {
	const n = 30
	var gathers func() bool
	run := func(t *testing.T, wait, apart time.Duration) (groups int) {
		f, wm := newSequentialFake(t, n)
		txns := f.txns
		ar := startApplier(t, f, Options{
			Writer: target.WriterOptions{Slot: "test"}, Parallelism: 2, CommitOrder: "full", GroupMaxTxns: 1000, GroupMaxBytes: 1 << 20,
			GroupWait: wait, Gathers: gathers, Watermark: wm, Stats: stats.NewRegistry(),
		})
		produced := make([]time.Time, n)
		for i, tx := range txns {
			produced[i] = time.Now()
			produce(ar.ctx, t, ar.q, wm, uint32(i+1), tx)
			time.Sleep(apart)
		}
		ar.waitLow(t, wm, txns[n-1].end)
		_ = ar.stop()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.commits) != n {
			t.Fatalf("%d transactions committed, want %d", len(f.commits), n)
		}
		return f.groups
	}
	synctest.Test(t, func(t *testing.T) {
		// 1 ms apart, wait 3 ms: groups of 3 (the first alone: no gap yet).
		if g := run(t, 3*time.Millisecond, time.Millisecond); g < n/4 || g > n/3+2 {
			t.Errorf("1 ms apart, group wait 3 ms: %d target transactions for %d source transactions, want about %d", g, n, n/3)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		if g := run(t, 3*time.Millisecond, 5*time.Millisecond); g != n {
			t.Errorf("5 ms apart, group wait 3 ms: %d target transactions for %d source transactions, want %d (alone, at once)", g, n, n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		if g := run(t, 0, time.Millisecond); g != n {
			t.Errorf("no group wait: %d target transactions for %d source transactions, want %d", g, n, n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		gathers = func() bool { return true }
		defer func() { gathers = nil }()
		if g := run(t, 3*time.Millisecond, time.Millisecond); g != n {
			t.Errorf("capture gathers: %d target transactions for %d source transactions, want %d (the coordinator does not wait again)", g, n, n)
		}
	})
}

// newSequentialFake returns a fake apply of n one-key transactions, 1000 LSN
// apart, each on its own key, with its watermark.
func newSequentialFake(t *testing.T, n int) (*fakeApply, *Watermark) {
	txns := make([]simTxn, n)
	index := map[change.LSN]int{}
	for i := range txns {
		txns[i] = simTxn{end: change.LSN(1000 * (i + 1)), keys: []int{i}}
		index[txns[i].end] = i
	}
	wm := NewWatermark(0)
	return &fakeApply{t: t, txns: txns, index: index, r: rand.New(rand.NewPCG(1, 2)), full: true, wm: wm, done: map[change.LSN]bool{}}, wm
}
