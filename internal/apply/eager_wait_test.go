package apply

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// TestEagerWaitFollowsProgress: before taking a streamed transaction, Eager
// waits for the transactions before it while apply makes progress — longer
// than one stall when the watermark keeps moving — and gives up after a
// stall without progress. Virtual time (synctest).
func TestEagerWaitFollowsProgress(t *testing.T) {
	const n = 20 // transactions before the streamed one, applied 100 ms apart
	run := func(t *testing.T, stopAt int) (time.Duration, change.LSN) {
		wm := NewWatermark(0)
		for i := 1; i <= n; i++ {
			wm.Register(change.LSN(i * 100))
		}
		e := NewEager(EagerOptions{Watermark: wm})
		go func() {
			for i := 1; i <= stopAt; i++ {
				time.Sleep(100 * time.Millisecond)
				wm.Visible(change.LSN(i * 100))
			}
		}()
		start := time.Now()
		if err := e.visibleWhileProgressing(context.Background(), n*100, takeStall, takeWaitMax); err != nil {
			t.Fatal(err)
		}
		return time.Since(start), wm.VisibleLow()
	}
	synctest.Test(t, func(t *testing.T) {
		// Steady progress: 2 s of waiting, twice one stall.
		took, low := run(t, n)
		if low != n*100 || took != 2*time.Second {
			t.Errorf("steady progress: returned after %s at %s, want 2s at %s", took, low, change.LSN(n*100))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Progress stops after 5 transactions: give up one stall later.
		took, low := run(t, 5)
		if low != 500 || took != 500*time.Millisecond+takeStall {
			t.Errorf("stalled: returned after %s at %s, want %s at 0/1F4", took, low, 500*time.Millisecond+takeStall)
		}
	})
}

// TestEagerAbortAfterRunStopped: once Run has returned (the run ends),
// nothing reads Eager's queue: an Abort of the transaction it had open,
// with the queue full, returns at once instead of waiting out its
// context (a SIGTERM of apply --kafka waited 30 s there), and a Commit
// says eager apply stopped. Virtual time (synctest).
func TestEagerAbortAfterRunStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := NewEager(EagerOptions{Buffer: 1, NewWriter: func(context.Context, *stats.Component) (EagerWriter, func(), error) {
			return nil, func() {}, nil
		}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want canceled", err)
		}
		if err := e.Add(context.Background(), 7, &change.Change{}); err != nil {
			t.Fatalf("Add into the queue's room: %v", err)
		}
		start := time.Now()
		actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer acancel()
		if err := e.Abort(actx, 7, 0); err != nil {
			t.Errorf("Abort after Run stopped: %v, want nil", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Abort after Run stopped took %s, want at once", d)
		}
		if _, err := e.Commit(actx, change.TxnInfo{Xid: 8}); !errors.Is(err, errEagerStopped) {
			t.Errorf("Commit after Run stopped: %v, want %v", err, errEagerStopped)
		}
	})
}
