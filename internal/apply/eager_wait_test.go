package apply

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
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
		// Steady progress: 2 s of waiting, ten times one stall.
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
