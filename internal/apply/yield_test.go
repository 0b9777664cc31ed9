package apply

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

var _ LockHolder = (*target.Writer)(nil)

// lockTable is the target's row locks as the lockWriters see them: one
// row every transaction writes (a table's record in repstream.tables),
// held by a session until it commits or rolls back.
type lockTable struct {
	mu      sync.Mutex
	holder  uint32        // session holding the row; 0: free
	free    chan struct{} // closed when the holder lets go
	waiting map[uint32]bool
	commits []change.LSN
}

// lockWriter is a session (pid) that takes the row at its transaction's
// first change; the transaction ending at slow waits a little first, so
// that a later group takes the row before it.
type lockWriter struct {
	l       *lockTable
	pid     uint32
	slow    change.LSN
	holding bool
}

func (w *lockWriter) Begin(context.Context) error { return nil }

func (w *lockWriter) Write(ctx context.Context, c *change.Change) error {
	if c.LSN+1 == w.slow {
		time.Sleep(50 * time.Millisecond)
	}
	for !w.holding {
		w.l.mu.Lock()
		if w.l.holder == 0 {
			w.l.holder, w.l.free, w.holding = w.pid, make(chan struct{}), true
			delete(w.l.waiting, w.pid)
			w.l.mu.Unlock()
			break
		}
		w.l.waiting[w.pid] = true
		free := w.l.free
		w.l.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *lockWriter) release() {
	if w.holding {
		w.l.mu.Lock()
		w.l.holder = 0
		close(w.l.free)
		w.l.mu.Unlock()
		w.holding = false
	}
}

func (w *lockWriter) CommitLSN(_ context.Context, applied []change.LSN) (change.LSN, error) {
	w.l.mu.Lock()
	w.l.commits = append(w.l.commits, applied...)
	w.l.mu.Unlock()
	w.release()
	return 0, nil
}

func (w *lockWriter) Rollback(context.Context) error {
	w.release()
	return nil
}

func (w *lockWriter) BackendPID() uint32 { return w.pid }

func (w *lockWriter) Blocks(_ context.Context, pids []uint32) (bool, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	if w.l.holder != w.pid {
		return false, nil
	}
	for _, p := range pids {
		if w.l.waiting[p] {
			return true, nil
		}
	}
	return false, nil
}

// TestWorkerYieldsToEarlierGroup: two transactions on different keys
// (independent, so two workers apply them at once) both write one row
// (as two groups taking the same table up for a copy record it in
// repstream.tables). The later group takes the row first, then waits for
// the earlier one to commit (commit order full), which waits for the
// row: PostgreSQL sees no deadlock. The later group's worker sees that
// its session blocks the earlier one's, rolls back and applies its group
// again after it: both commit, in source order. Virtual time (synctest):
// without the yield the bubble deadlocks.
func TestWorkerYieldsToEarlierGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lockTable{waiting: map[uint32]bool{}}
		wm := NewWatermark(0)
		reg := stats.NewRegistry()
		txns := []simTxn{{end: 1000, keys: []int{1}}, {end: 2000, keys: []int{2}}}
		opts := Options{
			Writer: target.WriterOptions{Slot: "test"}, Parallelism: 2, CommitOrder: "full",
			GroupMaxTxns: 1, GroupMaxBytes: 1 << 20, Watermark: wm, Stats: reg,
			NewWriter: func(_ context.Context, id int, _ *stats.Component) (Writer, func(), error) {
				return &lockWriter{l: l, pid: uint32(100 + id), slow: txns[0].end}, func() {}, nil
			},
		}
		run := startApplierWith(t, opts)
		for i, tx := range txns {
			produce(run.ctx, t, run.q, wm, uint32(i+1), tx)
		}
		run.waitLow(t, wm, txns[1].end)
		if err := run.stop(); err != nil {
			t.Fatal(err)
		}
		if want := []change.LSN{1000, 2000}; !slices.Equal(l.commits, want) {
			t.Errorf("commits %v, want %v", l.commits, want)
		}
		var retries int64
		for _, c := range reg.Snapshot().Components {
			retries += c.Counters["lock_retries"]
		}
		if retries != 1 {
			t.Errorf("%d groups applied again, want 1 (the later one, after yielding)", retries)
		}
	})
}
