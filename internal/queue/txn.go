package queue

import (
	"fmt"
	"io"
	"iter"

	"github.com/repstream/repstream/internal/change"
)

// Txn is one source transaction held by the queue.
//
// Invariants: n and bytes count the live changes (after subtransaction
// aborts), in memory or in the spill file; memBytes is the part of bytes held
// in memory, and is either bytes (spill == nil) or 0. While open, a Txn
// belongs to the producer; once committed its changes, spill file and
// aborted set never change again, and released and memBytes change only
// under the queue's mu.
type Txn struct {
	// Info is the commit information given to Queue.Commit.
	Info change.TxnInfo

	q        *Queue
	xid      uint32
	changes  changeList // in memory, in order
	n        int
	bytes    int64
	memBytes int64
	spill    *spillWriter        // non-nil once spilled
	size     int64               // bytes of the spill file, set at commit
	aborted  map[uint32]struct{} // subtransactions aborted after the spill
	released bool
}

// Len returns the number of changes (after subtransaction aborts).
func (t *Txn) Len() int { return t.n }

// Bytes returns the accounted bytes of its changes (after subtransaction
// aborts), whether in memory or spilled.
func (t *Txn) Bytes() int64 { return t.bytes }

// Spilled reports whether the changes are in a spill file.
func (t *Txn) Spilled() bool { return t.spill != nil }

// Changes iterates over the changes in order; it may be called again to
// iterate again. An error (a spill file that cannot be read, a released
// transaction) is yielded once, with a nil change, and ends the iteration.
//
// For a transaction in memory, a yielded *Change stays valid until Release.
// For a spilled transaction, a yielded *Change, its tuples and its
// TruncateRels are valid only until the next iteration step: the reader
// reuses its buffers. Copy what must outlive the step. Relations (*Rel and
// the elements of TruncateRels) are the very pointers given to Add, and stay
// valid.
//
// Changes must not run concurrently with Release of the same transaction.
func (t *Txn) Changes() iter.Seq2[*change.Change, error] {
	return func(yield func(*change.Change, error) bool) {
		q := t.q
		if q == nil {
			return
		}
		q.mu.Lock()
		released := t.released
		q.mu.Unlock()
		if released {
			yield(nil, fmt.Errorf("read txn %d: %w", t.Info.Xid, ErrReleased))
			return
		}
		if t.spill == nil {
			t.changes.all(func(c *change.Change) bool { return yield(c, nil) })
			return
		}
		t.readSpill(yield)
	}
}

// readSpill reads the spill file back through the handle it was written
// with (never reopened by name: what is read is what was written), from
// offset 0 with ReadAt, so that iterations may run concurrently.
func (t *Txn) readSpill(yield func(*change.Change, error) bool) {
	q := t.q
	path := t.spill.path
	br := newBufReader(&q.readPool, io.NewSectionReader(t.spill.h, 0, t.size))
	defer func() { br.Reset(nil); q.readPool.Put(br) }()
	r := spillReader{name: path, r: br, remain: t.size, rels: q.rels.snapshot()}
	var read int64
	defer func() { q.spRead.Add(read) }()
	for {
		c, n, err := r.next()
		if err == io.EOF {
			return
		}
		if err != nil {
			yield(nil, fmt.Errorf("read txn %d: %w", t.Info.Xid, err))
			return
		}
		read += int64(n)
		if t.aborted != nil {
			if _, ok := t.aborted[c.Xid]; ok {
				continue
			}
		}
		if !yield(c, nil) {
			return
		}
	}
}

// Release tells the queue the consumer is done with the transaction: its
// memory returns to the budget and its spill file is deleted. Idempotent.
func (t *Txn) Release() {
	if t.q != nil {
		t.q.release(t)
	}
}
