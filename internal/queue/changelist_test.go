package queue

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

func TestChangeList(t *testing.T) {
	pool := &sync.Pool{New: func() any { c := make([]change.Change, 0, chunkLen); return &c }}
	for _, n := range []int{0, 1, 5, chunkLen - 1, chunkLen, chunkLen + 1, 3*chunkLen + 17, 1000} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		var l changeList
		var model []change.Change
		for i := 0; i < n; i++ {
			c := change.Change{Op: change.OpInsert, Xid: uint32(rng.IntN(4)), LSN: change.LSN(i)}
			l.append(&c, pool)
			model = append(model, c)
		}
		check := func(what string) {
			t.Helper()
			var got []change.LSN
			l.all(func(c *change.Change) bool { got = append(got, c.LSN); return true })
			var want []change.LSN
			for _, c := range model {
				want = append(want, c.LSN)
			}
			if l.len() != len(model) || !slices.Equal(got, want) {
				t.Fatalf("n=%d %s: list has %d (len %d), want %d", n, what, len(got), l.len(), len(model))
			}
			for i, ch := range l.chunks {
				if i < len(l.chunks)-1 && len(ch) != cap(ch) {
					t.Fatalf("n=%d %s: chunk %d of %d not full (%d/%d)", n, what, i, len(l.chunks), len(ch), cap(ch))
				}
			}
		}
		check("append")
		for _, xid := range []uint32{2, 9, 0} {
			removed, freed := l.removeXid(xid, pool)
			before := len(model)
			model = slices.DeleteFunc(model, func(c change.Change) bool { return c.Xid == xid })
			if removed != before-len(model) || freed != int64(removed*change.ChangeOverhead) {
				t.Fatalf("n=%d: removeXid(%d) = %d, %d; want %d", n, xid, removed, freed, before-len(model))
			}
			check("remove")
			// Appending after a removal continues in order.
			c := change.Change{Op: change.OpDelete, Xid: 1, LSN: change.LSN(10_000 + n)}
			l.append(&c, pool)
			model = append(model, c)
			check("append after remove")
		}
		l.reset(pool)
		model = nil
		check("reset")
	}
}
