package apply

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// TestDurability: a transaction committed asynchronously is Done in the
// watermark only once the target's flush position passes its commit. Time is
// virtual (synctest): every sleep lets the poller poll many times over.
func TestDurability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var flushed atomic.Uint64
		var polls atomic.Int64
		wm := NewWatermark(0)
		d := newDurability(wm, func(context.Context) (change.LSN, change.LSN, error) {
			polls.Add(1)
			return 0, change.LSN(flushed.Load()), nil
		}, stats.NewRegistry().Component("c"))
		d.every = time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.run(ctx)

		for _, e := range []change.LSN{10, 20, 30} {
			wm.Register(e)
		}
		d.add(500, []change.LSN{10, 20}) // committed at target position 500
		d.add(0, []change.LSN{30})       // durable at once
		time.Sleep(20 * time.Millisecond)
		if wm.Low() != 0 {
			t.Fatalf("watermark passed transactions whose commit is not flushed: %s", wm.Low())
		}
		if polls.Load() < 10 {
			t.Fatalf("the flush position was read %d times in 20 ms of polling every 1 ms", polls.Load())
		}
		flushed.Store(499)
		time.Sleep(20 * time.Millisecond)
		if wm.Low() != 0 {
			t.Fatalf("watermark passed at flush 499 < 500: %s", wm.Low())
		}
		flushed.Store(500)
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if wm.Low() != 30 {
			t.Fatalf("low = %s once the target flushed past the commit, want 30", wm.Low())
		}
		// Nothing pending: the poller sleeps until the next add.
		n := polls.Load()
		time.Sleep(time.Second)
		if polls.Load() != n {
			t.Errorf("the poller polled %d times with nothing pending", polls.Load()-n)
		}
	})
}

// TestDurabilityUnreadPosition: a commit whose WAL position was not read
// (target.UnreadPosition) waits for the insert position the next poll reads
// beside the flush position.
func TestDurabilityUnreadPosition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var insert, flushed atomic.Uint64
		insert.Store(700)
		wm := NewWatermark(0)
		d := newDurability(wm, func(context.Context) (change.LSN, change.LSN, error) {
			return change.LSN(insert.Load()), change.LSN(flushed.Load()), nil
		}, stats.NewRegistry().Component("c"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.run(ctx)

		wm.Register(10)
		d.add(target.UnreadPosition, []change.LSN{10})
		time.Sleep(100 * time.Millisecond)
		insert.Store(900) // later commits: the group keeps the position read first
		flushed.Store(699)
		time.Sleep(100 * time.Millisecond)
		if wm.Low() != 0 {
			t.Fatalf("watermark passed a commit before the target flushed the insert position read after it: %s", wm.Low())
		}
		flushed.Store(700)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if wm.Low() != 10 {
			t.Fatalf("low = %s once the target flushed past the position read after the commit, want 10", wm.Low())
		}
	})
}
