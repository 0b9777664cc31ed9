package apply

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/repstream/repstream/internal/change"
)

// keyHasher hashes (relation, replica-identity key values) — the write set a
// transaction's changes touch. Two transactions with a common hash are applied
// in commit order; hash collisions only add a needless dependency.
type keyHasher struct{ seed maphash.Seed }

func newKeyHasher() keyHasher { return keyHasher{seed: maphash.MakeSeed()} }

// appendKeys appends the write-set hashes of c. It returns false when the
// change cannot be keyed (TRUNCATE, a table without a usable key): such a
// transaction is a barrier.
func (k keyHasher) appendKeys(dst []uint64, c *change.Change) ([]uint64, bool) {
	if c.Op == change.OpTruncate || c.Rel == nil || !c.Rel.HasKey() {
		return dst, false
	}
	switch c.Op {
	case change.OpInsert:
		dst = append(dst, k.hash(c.Rel, c.New))
	case change.OpUpdate:
		dst = append(dst, k.hash(c.Rel, c.New))
		if c.OldKind != 0 {
			dst = append(dst, k.hash(c.Rel, c.Old))
		}
	case change.OpDelete:
		dst = append(dst, k.hash(c.Rel, c.Old))
	}
	return dst, true
}

func (k keyHasher) hash(rel *change.Relation, t change.Tuple) uint64 {
	var h maphash.Hash
	h.SetSeed(k.seed)
	h.WriteString(rel.Namespace)
	h.WriteByte(0)
	h.WriteString(rel.Name)
	h.WriteByte(0)
	it := t.Iter()
	for it.Next() {
		if !rel.Columns[it.Index()].Key {
			continue
		}
		h.WriteByte(it.Kind())
		v := it.Value()
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(v)>>24), byte(len(v)>>16), byte(len(v)>>8), byte(len(v))
		h.Write(n[:])
		h.Write(v)
	}
	return h.Sum64()
}

// depTracker computes, for each group of transactions in commit order (its
// sequence number), the earlier groups it must wait for: the last writer of
// each key it touches, and the last barrier. It is owned by the coordinator
// goroutine.
//
// Invariant: if groups a < b write a common key (or either is a barrier), b
// depends on a directly or through a chain of dependencies — so b never runs
// before a commits.
type depTracker struct {
	lastWriter  map[uint64]uint64
	lastBarrier uint64
	pruneAt     int // prune entries of committed groups when the map grows past this
}

const minPruneAt = 1 << 14

func newDepTracker() *depTracker {
	return &depTracker{lastWriter: map[uint64]uint64{}, pruneAt: minPruneAt}
}

// add records group seq's write set and returns the groups it depends on
// (possibly already committed; the waiter checks). allBefore is true for a
// barrier: it waits for every earlier group. repeats is true when a key hash
// occurs more than once in keys: the group may have changes to fold.
func (t *depTracker) add(seq uint64, keys []uint64, barrier bool, committedBelow uint64) (deps []uint64, allBefore, repeats bool) {
	if barrier {
		t.lastBarrier = seq
		// Every later group depends on the barrier, so earlier writers no
		// longer need to be remembered.
		clear(t.lastWriter)
		return nil, true, false
	}
	if t.lastBarrier > committedBelow {
		deps = append(deps, t.lastBarrier)
	}
	for _, k := range keys {
		if s, ok := t.lastWriter[k]; ok && s > committedBelow && s != seq {
			deps = append(deps, s)
		} else if ok && s == seq {
			repeats = true
		}
		t.lastWriter[k] = seq
	}
	if len(t.lastWriter) > t.pruneAt {
		// Keys last written by committed groups cannot order anything any
		// more. Pruning when the map doubles keeps the cost amortised O(1).
		for k, s := range t.lastWriter {
			if s <= committedBelow {
				delete(t.lastWriter, k)
			}
		}
		t.pruneAt = max(minPruneAt, 2*len(t.lastWriter))
	}
	return deps, false, repeats
}

// commitLog records which groups have committed on the target and lets
// workers wait for them. Goroutine-safe.
//
// Invariant: below is the highest sequence number such that every group at or
// below it has committed.
type commitLog struct {
	mu     sync.Mutex
	below  uint64
	done   map[uint64]bool // committed groups above below
	notify chan struct{}
}

func newCommitLog() *commitLog {
	return &commitLog{done: map[uint64]bool{}, notify: make(chan struct{})}
}

func (l *commitLog) markDone(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done[seq] = true
	for l.done[l.below+1] {
		delete(l.done, l.below+1)
		l.below++
	}
	close(l.notify)
	l.notify = make(chan struct{})
}

func (l *commitLog) committedBelow() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.below
}

func (l *commitLog) isDone(seq uint64) bool {
	return seq <= l.below || l.done[seq]
}

// wait blocks until every seq in deps has committed and, if allBefore, every
// group below seq has.
func (l *commitLog) wait(ctx context.Context, seq uint64, deps []uint64, allBefore bool) error {
	for {
		l.mu.Lock()
		ok := true
		if allBefore && l.below < seq-1 {
			ok = false
		}
		for _, d := range deps {
			if ok && !l.isDone(d) {
				ok = false
			}
		}
		ch := l.notify
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
