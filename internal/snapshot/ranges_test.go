package snapshot

import (
	"testing"
)

func TestSplitRangesCoverEveryBlockOnce(t *testing.T) {
	const bs = 8192
	for _, tc := range []struct {
		size, rangeSize int64
		want            int
	}{
		{0, 1 << 20, 1},
		{bs, 1, 1},
		{10 * bs, 100 * bs, 1},
		{10 * bs, 10 * bs, 1},
		{11 * bs, 10 * bs, 2},
		{1000 * bs, 100 * bs, 10},
		{1001 * bs, 100 * bs, 11},
		{3 * bs, 1, 3}, // never more ranges than blocks
		{420 << 20, 79 << 20, 6},
	} {
		rs := splitRanges(tc.size, bs, tc.rangeSize)
		if len(rs) != tc.want {
			t.Errorf("splitRanges(%d, %d): %d ranges %v, want %d", tc.size, tc.rangeSize, len(rs), rs, tc.want)
			continue
		}
		if rs[0].from != 0 || rs[len(rs)-1].to != 0 {
			t.Errorf("splitRanges(%d, %d) = %v: must start at block 0 and end open", tc.size, tc.rangeSize, rs)
		}
		for i := 1; i < len(rs); i++ {
			if rs[i].from != rs[i-1].to || rs[i].from <= rs[i-1].from {
				t.Errorf("splitRanges(%d, %d) = %v: ranges %d and %d are not contiguous", tc.size, tc.rangeSize, rs, i-1, i)
			}
		}
		if len(rs) > 1 {
			for i, r := range rs[:len(rs)-1] {
				got := (r.to - r.from) * bs
				if got > tc.rangeSize+bs || got < tc.rangeSize/2 {
					t.Errorf("splitRanges(%d, %d): range %d is %d bytes", tc.size, tc.rangeSize, i, got)
				}
			}
		}
	}
}

func TestTIDRangeCondition(t *testing.T) {
	for _, tc := range []struct {
		r    tidRange
		want string
	}{
		{tidRange{}, ""},
		{tidRange{0, 5}, "ctid < '(5,0)'::tid"},
		{tidRange{5, 0}, "ctid >= '(5,0)'::tid"},
		{tidRange{5, 9}, "ctid >= '(5,0)'::tid AND ctid < '(9,0)'::tid"},
	} {
		if got := tc.r.cond(); got != tc.want {
			t.Errorf("%v.cond() = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestRangeSize(t *testing.T) {
	if got := rangeSize(1<<20, 1<<40, 4); got != 1<<20 {
		t.Errorf("an explicit size is kept: %d", got)
	}
	if got := rangeSize(0, 800<<20, 4); got != 100<<20 {
		t.Errorf("auto: total / (2 × workers): %d", got)
	}
	if got := rangeSize(0, 10<<20, 4); got != minAutoRange {
		t.Errorf("auto: at least minAutoRange: %d", got)
	}
}
