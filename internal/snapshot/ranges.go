package snapshot

import (
	"fmt"
	"strconv"
)

// A tidRange is a range of a table's heap blocks, [from, to) — to 0 for no
// upper bound: the last range of a table is open, so that the ranges cover
// every block whatever size the table has in the snapshot. A TID Range Scan
// (PostgreSQL 14+) reads just those blocks.
type tidRange struct {
	from, to int64 // blocks; to == 0: to the end
}

// cond is the range's SQL condition on ctid ("" for the whole table).
func (r tidRange) cond() string {
	switch {
	case r.from == 0 && r.to == 0:
		return ""
	case r.from == 0:
		return "ctid < '(" + strconv.FormatInt(r.to, 10) + ",0)'::tid"
	case r.to == 0:
		return "ctid >= '(" + strconv.FormatInt(r.from, 10) + ",0)'::tid"
	}
	return "ctid >= '(" + strconv.FormatInt(r.from, 10) + ",0)'::tid AND ctid < '(" + strconv.FormatInt(r.to, 10) + ",0)'::tid"
}

func (r tidRange) String() string {
	if r.to == 0 {
		return fmt.Sprintf("blocks %d-", r.from)
	}
	return fmt.Sprintf("blocks %d-%d", r.from, r.to-1)
}

// minAutoRange is the smallest range the automatic split makes: below it a
// range's fixed cost (a COPY on each side, a target commit) starts to show.
const minAutoRange = 32 << 20

// rangeSize is the size of the ranges tables are split into: want if set,
// else the total divided into twice as many pieces as there are workers,
// no smaller than minAutoRange.
func rangeSize(want, total int64, workers int) int64 {
	if want > 0 {
		return want
	}
	return max(total/int64(2*max(workers, 1)), minAutoRange)
}

// splitRanges splits a table of size bytes in blocks of blockSize into
// ranges of about rangeSize bytes: contiguous, in order, the first from
// block 0, the last open. A table no larger than rangeSize (or of unknown
// size) is one range, the whole table.
func splitRanges(size, blockSize, rangeSize int64) []tidRange {
	if size <= rangeSize || rangeSize <= 0 || blockSize <= 0 {
		return []tidRange{{}}
	}
	blocks := size / blockSize
	n := (size + rangeSize - 1) / rangeSize
	n = min(n, blocks)
	if n < 2 {
		return []tidRange{{}}
	}
	out := make([]tidRange, n)
	for i := range n {
		out[i] = tidRange{from: blocks * i / n, to: blocks * (i + 1) / n}
	}
	out[n-1].to = 0
	return out
}
