package apply

import (
	"context"
	"sync"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// durablePoll is how often durability reads the target's positions while a
// group waits: the slot is acknowledged (capture, within 100 ms of the
// watermark moving) and the progress persisted (once a second) no sooner,
// so polling more often would cost the target and the engine a query
// without making anything visible sooner.
const durablePoll = 20 * time.Millisecond

// durability turns "committed on the target" into "durable on the target".
//
// Apply sessions commit with synchronous_commit=off, as native logical
// replication's workers do: a commit returns without waiting for the WAL
// flush, so that many small transactions do not each wait for a disk sync.
// A committed group is visible at once (its dependants may start), but the
// slot may only be acknowledged past it once the target's WAL is flushed past
// its commit (invariant 1). Commit reports a target WAL position at or after
// the commit record; durability polls pg_current_wal_flush_lsn() and marks the
// group's source transactions Done in the watermark when the flush passes it.
// A target that crashes before flushing loses those transactions and their
// progress records together; the slot, not acknowledged, sends them again.
//
// A commit may also report target.UnreadPosition (the apply workers'
// writers do not read the position in the commit's pipeline, which would
// cost the target a statement per transaction): the poll reads the target's
// insert position with its flush position, and every group added before
// the poll was sent committed before it, so that insert position is at or
// after the group's commit.
//
// Goroutines: workers call add; run polls. Pending groups are few (they are
// flushed within wal_writer_delay), so a slice suffices.
type durability struct {
	wm *Watermark
	// flushed reads the target's pg_current_wal_insert_lsn() and
	// pg_current_wal_flush_lsn(), in one statement.
	flushed func(ctx context.Context) (insert, flush change.LSN, err error)
	every   time.Duration
	st      *stats.Component

	mu      sync.Mutex
	pending []durable
	wake    chan struct{}
}

type durable struct {
	lsn  change.LSN // target WAL position at or after the commit
	ends []change.LSN
}

func newDurability(wm *Watermark, flushed func(context.Context) (insert, flush change.LSN, err error), st *stats.Component) *durability {
	return &durability{wm: wm, flushed: flushed, every: durablePoll, st: st, wake: make(chan struct{}, 1)}
}

// add records a committed group. lsn 0 means the commit is durable already.
func (d *durability) add(lsn change.LSN, ends []change.LSN) {
	if lsn == 0 || d.flushed == nil {
		for _, e := range ends {
			d.wm.Done(e)
		}
		return
	}
	d.mu.Lock()
	d.pending = append(d.pending, durable{lsn: lsn, ends: append([]change.LSN(nil), ends...)})
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run polls the target's flush position while anything is pending.
func (d *durability) run(ctx context.Context) error {
	gauge := d.st.Gauge("awaiting_flush_txns")
	for {
		d.mu.Lock()
		n := len(d.pending)
		d.mu.Unlock()
		if n == 0 {
			gauge.Store(0)
			select {
			case <-ctx.Done():
				return nil
			case <-d.wake:
			}
			continue
		}
		// The n groups pending now committed before the positions are read.
		insert, flushed, err := d.flushed(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		d.mu.Lock()
		for i := range d.pending[:n] {
			if d.pending[i].lsn == target.UnreadPosition {
				d.pending[i].lsn = insert
			}
		}
		keep := d.pending[:0]
		waiting := 0
		for _, p := range d.pending {
			if p.lsn <= flushed {
				for _, e := range p.ends {
					d.wm.Done(e)
				}
				continue
			}
			keep = append(keep, p)
			waiting += len(p.ends)
		}
		d.pending = keep
		d.mu.Unlock()
		gauge.Store(int64(waiting))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d.every):
		}
	}
}
