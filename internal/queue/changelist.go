package queue

import (
	"sync"

	"github.com/repstream/repstream/internal/change"
)

// chunkLen is the capacity of the pooled chunks of a changeList.
const chunkLen = 128

// changeList holds the in-memory changes of a transaction in chunks, so that
// appending never copies earlier changes (a *change.Change handed out stays
// where it is) and large transactions reuse pooled chunks.
//
// Invariants: every chunk but the last is full; the first chunk grows by
// append up to chunkLen (small transactions stay small); later chunks have
// capacity chunkLen and come from, and return to, the pool.
type changeList struct {
	chunks [][]change.Change
	n      int
}

func (l *changeList) len() int { return l.n }

func (l *changeList) append(c *change.Change, pool *sync.Pool) {
	if k := len(l.chunks); k > 0 {
		last := &l.chunks[k-1]
		if len(*last) < cap(*last) || (k == 1 && cap(*last) < chunkLen) {
			*last = append(*last, *c)
			l.n++
			return
		}
	}
	var ch []change.Change
	if len(l.chunks) == 0 {
		ch = make([]change.Change, 0, 4)
	} else {
		ch = (*pool.Get().(*[]change.Change))[:0]
	}
	l.chunks = append(l.chunks, append(ch, *c))
	l.n++
}

// all iterates over the changes in order.
func (l *changeList) all(yield func(*change.Change) bool) {
	for _, ch := range l.chunks {
		for i := range ch {
			if !yield(&ch[i]) {
				return
			}
		}
	}
}

// removeXid drops the changes with Xid == xid, keeping the order, and returns
// how many and their accounted bytes.
func (l *changeList) removeXid(xid uint32, pool *sync.Pool) (removed int, freed int64) {
	var w struct{ ci, i int } // write position
	for ci := range l.chunks {
		ch := l.chunks[ci]
		for i := range ch {
			c := &ch[i]
			if c.Xid == xid {
				removed++
				freed += int64(c.Size())
				continue
			}
			if w.ci != ci || w.i != i {
				l.chunks[w.ci][w.i] = *c
			}
			if w.i++; w.i == len(l.chunks[w.ci]) {
				w.ci, w.i = w.ci+1, 0
			}
		}
	}
	if removed == 0 {
		return 0, 0
	}
	l.n -= removed
	// Cut the chunks after the write position.
	keep := w.ci
	if w.i > 0 {
		clear(l.chunks[w.ci][w.i:])
		l.chunks[w.ci] = l.chunks[w.ci][:w.i]
		keep++
	}
	for ci := keep; ci < len(l.chunks); ci++ {
		l.putChunk(ci, pool)
	}
	clear(l.chunks[keep:])
	l.chunks = l.chunks[:keep]
	return removed, freed
}

// reset drops every change, returning pooled chunks to the pool.
func (l *changeList) reset(pool *sync.Pool) {
	for ci := range l.chunks {
		l.putChunk(ci, pool)
	}
	l.chunks, l.n = nil, 0
}

func (l *changeList) putChunk(ci int, pool *sync.Pool) {
	ch := l.chunks[ci]
	clear(ch[:cap(ch)])
	if cap(ch) == chunkLen && ci > 0 {
		ch = ch[:0]
		pool.Put(&ch)
	}
	l.chunks[ci] = nil
}
