package apply

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// TestDurability: a transaction committed asynchronously is Done in the
// watermark only once the target's flush position passes its commit.
func TestDurability(t *testing.T) {
	var flushed atomic.Uint64
	wm := NewWatermark(0)
	d := newDurability(wm, func(context.Context) (change.LSN, error) { return change.LSN(flushed.Load()), nil },
		stats.NewRegistry().Component("c"))
	d.every = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.run(ctx)

	for _, e := range []change.LSN{10, 20, 30} {
		wm.Register(e)
	}
	d.add(500, []change.LSN{10, 20}) // committed at target position 500
	d.add(0, []change.LSN{30})       // durable at once
	waitFor := func(want change.LSN) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for wm.Low() != want {
			if time.Now().After(deadline) {
				t.Fatalf("low = %s, want %s", wm.Low(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if wm.Low() != 0 {
		t.Fatalf("watermark passed transactions whose commit is not flushed: %s", wm.Low())
	}
	flushed.Store(499)
	time.Sleep(20 * time.Millisecond)
	if wm.Low() != 0 {
		t.Fatalf("watermark passed at flush 499 < 500: %s", wm.Low())
	}
	flushed.Store(500)
	waitFor(30)
}
