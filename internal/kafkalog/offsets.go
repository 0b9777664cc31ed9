package kafkalog

import (
	"sync"

	"github.com/repstream/repstream/internal/change"
)

// resumePoints knows, for the records read so far, from which offset a
// consumer must read again to see every transaction not yet applied from
// its first record: the first offset of every transaction still open (its
// commit not read yet), and of every committed one that ends above the
// applied low watermark.
//
// Invariants: open holds the first offset of each transaction begun and
// neither committed nor aborted; committed holds (end LSN, first offset) of
// committed transactions in commit order, ends strictly increasing; next is
// the offset after the last record read. Safe for concurrent use (the
// reader adds, the watermark's persister asks).
type resumePoints struct {
	mu        sync.Mutex
	open      map[uint32]int64
	committed []endAt
	next      int64
}

type endAt struct {
	end   change.LSN
	first int64
}

func newResumePoints(next int64) *resumePoints {
	return &resumePoints{open: map[uint32]int64{}, next: next}
}

func (p *resumePoints) begin(xid uint32, offset int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.open[xid]; !ok {
		p.open[xid] = offset
	}
}

func (p *resumePoints) isOpen(xid uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.open[xid]
	return ok
}

func (p *resumePoints) commit(xid uint32, end change.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first, ok := p.open[xid]
	if !ok {
		return
	}
	delete(p.open, xid)
	if n := len(p.committed); n == 0 || p.committed[n-1].end < end {
		p.committed = append(p.committed, endAt{end, first})
	}
}

func (p *resumePoints) abort(xid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.open, xid)
}

// abortOpen forgets every open transaction (a new capture session: they
// are sent again from their start).
func (p *resumePoints) abortOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.open)
}

func (p *resumePoints) read(next int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = next
}

// resume returns the offset to read from again when every transaction
// ending at or below low is applied.
func (p *resumePoints) resume(low change.LSN) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	for i < len(p.committed) && p.committed[i].end <= low {
		i++
	}
	p.committed = p.committed[i:]
	r := p.next
	for _, c := range p.committed {
		r = min(r, c.first)
	}
	for _, o := range p.open {
		r = min(r, o)
	}
	return r
}
