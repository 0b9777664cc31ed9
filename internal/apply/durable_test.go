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

// lockstepPoll returns a flush-position reader for newDurability that hands
// each poll's flush position to the test on the returned channel and waits
// for it to be taken: the test steps the poller poll by poll.
func lockstepPoll(insert, flushed *atomic.Uint64) (func(context.Context) (change.LSN, change.LSN, error), <-chan change.LSN) {
	polls := make(chan change.LSN)
	return func(ctx context.Context) (change.LSN, change.LSN, error) {
		i, f := change.LSN(insert.Load()), change.LSN(flushed.Load())
		select {
		case polls <- f:
		case <-ctx.Done():
		}
		return i, f, nil
	}, polls
}

// pollReading takes polls until one reads flushed position f.
func pollReading(t *testing.T, polls <-chan change.LSN, f change.LSN) {
	t.Helper()
	for {
		select {
		case got := <-polls:
			if got == f {
				return
			}
		case <-time.After(time.Minute):
			t.Fatalf("no poll read flush position %s", f)
		}
	}
}

// TestDurability: a transaction committed asynchronously is Done in the
// watermark only once the target's flush position passes its commit. Time is
// virtual (synctest); the poller hands every poll to the test, which checks
// the watermark after the poll that read each flush position.
func TestDurability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var insert, flushed atomic.Uint64
		poll, polls := lockstepPoll(&insert, &flushed)
		wm := NewWatermark(0)
		d := newDurability(wm, poll, stats.NewRegistry().Component("c"))
		d.every = time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.run(ctx)

		for _, e := range []change.LSN{10, 20, 30} {
			wm.Register(e)
		}
		d.add(500, []change.LSN{10, 20}) // committed at target position 500
		d.add(0, []change.LSN{30})       // durable at once
		t0 := time.Now()
		for range 10 {
			pollReading(t, polls, 0)
		}
		if el := time.Since(t0); el > 20*time.Millisecond {
			t.Fatalf("10 polls took %v polling every %v", el, d.every)
		}
		synctest.Wait()
		if wm.Low() != 0 {
			t.Fatalf("watermark passed transactions whose commit is not flushed: %s", wm.Low())
		}
		flushed.Store(499)
		pollReading(t, polls, 499)
		synctest.Wait()
		if wm.Low() != 0 {
			t.Fatalf("watermark passed at flush 499 < 500: %s", wm.Low())
		}
		flushed.Store(500)
		pollReading(t, polls, 500)
		synctest.Wait()
		if wm.Low() != 30 {
			t.Fatalf("low = %s once the target flushed past the commit, want 30", wm.Low())
		}
		// Nothing pending: the poller waits for the next add.
		select {
		case <-polls:
			t.Error("the poller polled with nothing pending")
		case <-time.After(time.Second):
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
		poll, polls := lockstepPoll(&insert, &flushed)
		wm := NewWatermark(0)
		d := newDurability(wm, poll, stats.NewRegistry().Component("c"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.run(ctx)

		wm.Register(10)
		d.add(target.UnreadPosition, []change.LSN{10})
		pollReading(t, polls, 0) // reads insert position 700 for the commit
		synctest.Wait()
		insert.Store(900) // later commits: the group keeps the position read first
		flushed.Store(699)
		pollReading(t, polls, 699)
		synctest.Wait()
		if wm.Low() != 0 {
			t.Fatalf("watermark passed a commit before the target flushed the insert position read after it: %s", wm.Low())
		}
		flushed.Store(700)
		pollReading(t, polls, 700)
		synctest.Wait()
		if wm.Low() != 10 {
			t.Fatalf("low = %s once the target flushed past the position read after the commit, want 10", wm.Low())
		}
	})
}
