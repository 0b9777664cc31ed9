package apply

import (
	"context"
	"time"

	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
)

// Waiting for a group to fill at a steady rate (Options.GroupWait).
//
// At a steady rate of small source transactions (fly: 1,000 a second) each
// one is a target transaction of its own, and its fixed costs — a wake-up
// and a round trip for a worker and its backend, a commit, a
// repstream.applied row — are most of what applying it costs both sides.
// Native replication pays them per source transaction too. While
// transactions come less than GroupWait apart (the gap between the last
// two taken from the queue), a group that the queue cannot fill at once
// waits until GroupWait after its first transaction was taken for more:
// fewer, larger target transactions, for at most GroupWait of latency.
// A lone transaction (a gap longer than GroupWait) goes at once, as
// without it.
//
// When capture gathers the stream itself (a slow steady stream on TCP:
// capture/lowat.go, for the same GroupWait), the coordinator does not wait
// again. Both waiting cost twice the latency for no CPU (measured on
// `repstream bench fly --rate 1000 --repeat 3` with the probe that measures
// latency to the millisecond, medians of six rounds: both, p50 5.2 ms and
// total CPU 1.18× native's; capture alone, p50 2.5 ms and 1.14×): the
// next gathered read comes GroupWait after the last, so a group that
// waited for it rarely got it in time. Lingering is for a stream capture
// does not gather (a Unix socket, a fast stream).

// took notes that a transaction was taken from the source now.
func (c *coordinator) took() {
	now := time.Now()
	c.gap, c.lastTake = now.Sub(c.lastTake), now
}

// linger waits for the next transaction while transactions come less than
// GroupWait apart, until GroupWait after the group's first transaction was
// taken, while g is smaller than a catch-up group (CatchUpGroupBytes). ok
// is false when the group should go as it is.
func (c *coordinator) linger(ctx context.Context, g *group) (*queue.Txn, bool) {
	wait := c.a.opts.GroupWait
	if gathers := c.a.opts.Gathers; gathers != nil && gathers() {
		return nil, false // capture waited already (see above)
	}
	if wait <= 0 || c.gap > wait || c.groupAt.IsZero() || g.bytes >= c.a.opts.CatchUpGroupBytes {
		return nil, false
	}
	left := wait - time.Since(c.groupAt)
	if left <= 0 {
		return nil, false
	}
	wctx, cancel := context.WithTimeout(ctx, left)
	c.a.coord.SetState(stats.Idle) // waiting for capture, as in Next
	txn, err := c.src.Next(wctx)
	c.a.coord.SetState(stats.Busy)
	cancel()
	if err != nil {
		return nil, false // the wait is over, stopping, or the queue closed: send what we have
	}
	c.took()
	c.lingered.Add(1)
	return txn, true
}
