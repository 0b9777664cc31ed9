package apply

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
)

// group is one target transaction: consecutive source transactions.
type group struct {
	seq       uint64
	txns      []*queue.Txn
	bytes     int64
	deps      []uint64
	allBefore bool
	repeats   bool // a key occurs twice in the write set: worth folding (Options.Collapse)
	eager     bool // the transaction was applied by Eager: only its commit is left
	skip      bool // its one transaction is to be skipped on request (conflict.go)
}

// coordinator takes committed transactions from the source in commit order,
// groups consecutive small ones into target transactions, computes each
// group's dependencies and hands the groups to the workers in order.
//
// It runs on one goroutine (Applier.Run's) and owns every field; a group
// belongs to the coordinator until dispatch sends it, and to a worker after.
//
// Invariants:
//   - Groups are numbered 1, 2, … in dispatch order, which is commit order.
//   - keys is the write set of the group being built (hashes of relation and
//     replica-identity key of every change, old and new); nextKeys holds the
//     write set of a transaction that did not fit and starts the next group.
//     Every transaction's write set is hashed once.
//   - keyed is false for a barrier: a transaction without a usable write set
//     (TRUNCATE, a keyless table, more than keyedLimit changes, spilled),
//     which goes alone and orders everything around it.
//   - A group never spans a transaction skipped as already applied (its
//     progress record is the range of its first to last end LSN), nor an
//     eager one (always alone, a barrier).
type coordinator struct {
	a       *Applier
	src     Source
	work    chan<- *group
	hasher  *keyHasher
	tracker *depTracker

	seq       uint64
	keys      []uint64
	nextKeys  []uint64
	nextKeyed bool
	// carriedSkip: grow carried a transaction a skip request names. The
	// request was taken (Options.SkipRequested consumes it): asked again,
	// it says no, and the transaction would be applied.
	carriedSkip bool

	skipped, barriers, fills, inFlight *atomic.Int64

	// linger.go: when the latest transaction was taken from the source and
	// how long after the one before; when the group being built took its
	// first transaction (a carried one's take: carriedAt).
	lastTake, carriedAt, groupAt time.Time
	gap                          time.Duration
	lingered                     *atomic.Int64 // transactions a group waited for (GroupWait)
}

func (a *Applier) newCoordinator(src Source, work chan<- *group) *coordinator {
	return &coordinator{
		a: a, src: src, work: work, hasher: newKeyHasher(a.opts.Writer.RelationDDL), tracker: newDepTracker(),
		skipped:  a.coord.Counter("skipped_txns"),
		barriers: a.coord.Counter("barriers"),
		fills:    a.coord.Counter("catch_up_fills"),
		inFlight: a.coord.Gauge("groups_in_flight"),
		lingered: a.coord.Counter("group_wait_txns"),
	}
}

// run groups and dispatches until the source or ctx ends.
func (c *coordinator) run(ctx context.Context) error {
	var carried *queue.Txn // ended the previous group; starts the next (write set in nextKeys)
	for {
		if err := c.serveQuiesce(ctx); err != nil {
			return err
		}
		txn := carried
		if txn == nil {
			c.a.coord.SetState(stats.Idle)
			var err error
			if txn, err = c.next(ctx); err != nil {
				return err
			}
			c.a.coord.SetState(stats.Busy)
			c.took()
			c.carriedAt = c.lastTake
		}
		skipCarried := carried != nil && c.carriedSkip
		c.carriedSkip = false
		switch {
		case c.a.eagerOwns(txn):
			carried = nil
			if err := c.dispatch(ctx, c.start(txn), nil, true); err != nil {
				return err
			}
			continue
		case carried == nil && c.a.opts.Applied(txn.Info.EndLSN):
			c.a.skip(txn, c.skipped)
			continue
		case skipCarried || carried == nil && c.a.skipRequested(txn):
			carried = nil
			g := c.start(txn)
			g.skip = true
			if err := c.dispatch(ctx, g, nil, true); err != nil {
				return err
			}
			continue
		case carried == nil:
			var err error
			if c.nextKeys, c.nextKeyed, err = c.a.writeSet(c.hasher, txn, c.nextKeys[:0]); err != nil {
				return err
			}
		}
		g := c.start(txn)
		c.groupAt = c.carriedAt
		c.keys, c.nextKeys = c.nextKeys, c.keys[:0]
		keyed := c.nextKeyed
		var err error
		if keyed {
			if carried, err = c.grow(ctx, g); err != nil {
				return err
			}
		} else {
			carried = nil
		}
		if err := c.dispatch(ctx, g, c.keys, !keyed); err != nil {
			return err
		}
	}
}

// start opens the next group with txn.
func (c *coordinator) start(txn *queue.Txn) *group {
	c.seq++
	if c.a.eagerOwns(txn) {
		return &group{seq: c.seq, txns: []*queue.Txn{txn}, eager: true} // applied already: only its commit is left
	}
	return &group{seq: c.seq, txns: []*queue.Txn{txn}, bytes: txn.Bytes()}
}

// grow appends to g the committed transactions at hand while g has room —
// never waiting for one, except in a backlog (fill). It returns a
// transaction that must start the next group (its write set in nextKeys,
// nextKeyed), or nil.
func (c *coordinator) grow(ctx context.Context, g *group) (*queue.Txn, error) {
	var fillBy time.Time
	for len(g.txns) < c.a.opts.GroupMaxTxns && g.bytes < c.a.opts.GroupMaxBytes {
		next, ok := c.src.TryNext()
		if ok {
			c.took()
		} else {
			if next, ok = c.a.fill(ctx, c.src, g, &fillBy); ok {
				c.took()
				c.fills.Add(1)
			} else if next, ok = c.linger(ctx, g); !ok {
				return nil, nil
			}
		}
		c.carriedAt = c.lastTake // next may start the next group
		if c.a.eagerOwns(next) {
			return next, nil
		}
		if c.a.opts.Applied(next.Info.EndLSN) {
			c.a.skip(next, c.skipped)
			return nil, nil
		}
		if c.a.skipRequested(next) {
			c.carriedSkip = true
			return next, nil // a group of its own
		}
		var err error
		if c.nextKeys, c.nextKeyed, err = c.a.writeSet(c.hasher, next, c.nextKeys[:0]); err != nil {
			return nil, err
		}
		if !c.nextKeyed || g.bytes+next.Bytes() > c.a.opts.GroupMaxBytes {
			return next, nil // starts the next group (possibly a barrier of its own)
		}
		c.keys = append(c.keys, c.nextKeys...)
		g.txns = append(g.txns, next)
		g.bytes += next.Bytes()
	}
	return nil, nil
}

// dispatch computes g's dependencies from its write set and hands it to the
// workers.
func (c *coordinator) dispatch(ctx context.Context, g *group, keys []uint64, barrier bool) error {
	g.deps, g.allBefore, g.repeats = c.tracker.add(g.seq, keys, barrier, c.a.commits.committedBelow())
	if barrier {
		c.barriers.Add(1)
	}
	c.a.coord.AddTxns(int64(len(g.txns)))
	c.a.coord.Add(1, g.bytes)
	c.a.coord.SetState(stats.Waiting)
	select {
	case c.work <- g:
		c.inFlight.Store(int64(g.seq - c.a.commits.committedBelow()))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// catchUpSlice is how often fill looks at Behind again while it waits.
const catchUpSlice = 5 * time.Millisecond

// fill waits for the next committed transaction while the source is far
// ahead (Options.Behind) and g is below CatchUpGroupBytes, CatchUpWait per
// group at most (*by is the group's deadline, set on the first wait). It
// looks at Behind every catchUpSlice, so the end of a backlog is noticed at
// once. ok is false when g should go as it is.
func (a *Applier) fill(ctx context.Context, src Source, g *group, by *time.Time) (*queue.Txn, bool) {
	if a.opts.Behind == nil || a.opts.CatchUpWait <= 0 || g.bytes >= a.opts.CatchUpGroupBytes {
		return nil, false
	}
	for a.opts.Behind() {
		now := time.Now()
		if by.IsZero() {
			*by = now.Add(a.opts.CatchUpWait)
		}
		left := by.Sub(now)
		if left <= 0 {
			return nil, false
		}
		wctx, cancel := context.WithTimeout(ctx, min(left, catchUpSlice))
		a.coord.SetState(stats.Idle) // waiting for capture, as in Next
		txn, err := src.Next(wctx)
		a.coord.SetState(stats.Busy)
		cancel()
		if err == nil {
			return txn, true
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, false // stopping, or the queue closed: send what we have
		}
	}
	return nil, false
}

func (a *Applier) eagerOwns(txn *queue.Txn) bool {
	return a.opts.Eager != nil && txn.Info.Streamed && a.opts.Eager.Owns(txn.Info.Xid)
}

func (a *Applier) skip(txn *queue.Txn, skipped *atomic.Int64) {
	a.log.Debug("skipping transaction already applied", "end", txn.Info.EndLSN)
	a.opts.Watermark.Done(txn.Info.EndLSN)
	txn.Release()
	skipped.Add(1)
}

// writeSet appends the key hashes of txn; keyed is false for a barrier.
func (a *Applier) writeSet(h *keyHasher, txn *queue.Txn, keys []uint64) ([]uint64, bool, error) {
	if a.opts.Parallelism == 1 && !a.opts.Collapse {
		return keys, true, nil // one worker: order is total anyway
	}
	if txn.Spilled() || txn.Len() > keyedLimit {
		return keys, false, nil
	}
	for c, err := range txn.Changes() {
		if err != nil {
			return keys, false, fmt.Errorf("read transaction %d (end %s): %w", txn.Info.Xid, txn.Info.EndLSN, err)
		}
		var ok bool
		if keys, ok = h.appendKeys(keys, c); !ok {
			return keys, false, nil
		}
	}
	return keys, true, nil
}
