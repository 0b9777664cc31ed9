package sequences

import "testing"

func TestAheadOf(t *testing.T) {
	tests := []struct {
		target, source Position
		inc            int64
		want           bool
	}{
		{Position{1, false}, Position{42, true}, 1, false},  // fresh target
		{Position{42, true}, Position{42, true}, 1, false},  // equal
		{Position{43, false}, Position{42, true}, 1, false}, // same next value
		{Position{100, true}, Position{42, true}, 1, true},
		{Position{44, false}, Position{42, true}, 1, true},
		{Position{-1, false}, Position{-5, true}, -1, false}, // descending: fresh target
		{Position{-9, true}, Position{-5, true}, -1, true},
		{Position{10, true}, Position{30, true}, 10, false},
	}
	for _, tt := range tests {
		if got := aheadOf(tt.target, tt.source, tt.inc); got != tt.want {
			t.Errorf("aheadOf(%+v, %+v, %d) = %v, want %v", tt.target, tt.source, tt.inc, got, tt.want)
		}
	}
}
