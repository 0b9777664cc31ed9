package apply

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/repstream/repstream/internal/change"
)

// keyHasher hashes (relation, replica-identity key values) — the write set a
// transaction's changes touch. Two transactions with a common hash are applied
// in commit order; hash collisions only add a needless dependency. It caches
// the last relation's hash and key columns (a stream mostly repeats one
// relation), so it is owned by one goroutine (the coordinator).
type keyHasher struct {
	seed    maphash.Seed
	rel     *change.Relation // relation of the cached values
	relHash uint64           // hash of rel's schema and name
	lastKey int              // index of rel's last key column

	// versions is the last relation version seen per source OID. A change
	// of a version not seen before makes its transaction a barrier: a new
	// version follows a schema change, and the worker may change the
	// target table for it (--ddl=relation, target/ddl.go), which must not
	// meet another worker's rows of that table.
	// With firstSight, the first version seen of a relation makes a
	// barrier too: the writer may change the target table for it.
	versions   map[uint32]*change.Relation
	firstSight bool
}

func newKeyHasher(firstSight bool) *keyHasher {
	return &keyHasher{seed: maphash.MakeSeed(), versions: map[uint32]*change.Relation{}, firstSight: firstSight}
}

// appendKeys appends the write-set hashes of c. It returns false when the
// change cannot be keyed (TRUNCATE, a table without a usable key): such a
// transaction is a barrier.
func (k *keyHasher) appendKeys(dst []uint64, c *change.Change) ([]uint64, bool) {
	if c.Op == change.OpTruncate || c.Rel == nil || !c.Rel.HasKey() {
		return dst, false // and a schema change (OpDDL, no Rel)
	}
	if v := k.versions[c.Rel.ID]; v != c.Rel {
		k.versions[c.Rel.ID] = c.Rel
		if v != nil || k.firstSight {
			return dst, false
		}
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

func (k *keyHasher) hash(rel *change.Relation, t change.Tuple) uint64 {
	if rel != k.rel {
		k.rel = rel
		k.relHash = maphash.String(k.seed, rel.Namespace+"\x00"+rel.Name)
		k.lastKey = -1
		for i, c := range rel.Columns {
			if c.Key {
				k.lastKey = i
			}
		}
	}
	h := k.relHash
	it := t.Iter()
	for it.Next() {
		i := it.Index()
		if i > k.lastKey {
			break
		}
		if !rel.Columns[i].Key {
			continue
		}
		// The value's hash (which covers its length) and its kind (null,
		// unchanged, text or binary), mixed in column order.
		h ^= maphash.Bytes(k.seed, it.Value()) ^ uint64(it.Kind())
		h *= 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h
}

// depTracker computes, for each group of transactions in commit order (its
// sequence number), the earlier groups it must wait for: the last writer of
// each key it touches, and the last barrier. It is owned by the coordinator
// goroutine.
//
// Invariant: if groups a < b write a common key (or either is a barrier), b
// depends on a directly or through a chain of dependencies — so b never runs
// before a commits.
//
// The last writers live in two generations, cur and prev: new writes go to
// cur; once cur is large and every group in prev has committed (prevMax ≤
// committed), prev is dropped (cleared and reused) and cur becomes prev.
// Entries of committed groups cannot order anything, so dropping them loses
// nothing, and no entry is ever deleted one by one (deletions would leave
// the map slower to probe).
type depTracker struct {
	cur, prev   map[uint64]uint64
	prevMax     uint64 // highest sequence number in prev
	lastBarrier uint64
	rotateAt    int // size of cur past which the generations turn over
}

func newDepTracker() *depTracker {
	return &depTracker{cur: map[uint64]uint64{}, prev: map[uint64]uint64{}, rotateAt: 1 << 14}
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
		clear(t.cur)
		clear(t.prev)
		t.prevMax = 0
		return nil, true, false
	}
	if t.lastBarrier > committedBelow {
		deps = append(deps, t.lastBarrier)
	}
	usePrev := t.prevMax > committedBelow
	for _, k := range keys {
		s, ok := t.cur[k]
		if !ok && usePrev {
			s, ok = t.prev[k]
		}
		switch {
		case !ok:
		case s == seq:
			repeats = true
		case s > committedBelow && (len(deps) == 0 || deps[len(deps)-1] != s):
			deps = append(deps, s)
		}
		t.cur[k] = seq
	}
	if len(t.cur) >= t.rotateAt && t.prevMax <= committedBelow {
		clear(t.prev)
		t.cur, t.prev = t.prev, t.cur
		t.prevMax = seq
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
