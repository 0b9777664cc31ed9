package capture

import (
	"testing"
	"time"
)

// TestBehind: a stream that has been sending data for a while without a
// keepalive is catching up; a recent keepalive, a quiet stream or no data
// yet is not.
func TestBehind(t *testing.T) {
	c := &Capture{}
	now := time.Now().UnixNano()
	sec := int64(time.Second)
	cases := []struct {
		name                   string
		start, keepalive, data int64
		want                   bool
	}{
		{"no data yet", now - 10*sec, 0, 0, false},
		{"data for 2 s, no keepalive", now - 2*sec, 0, now, true},
		{"data for 2 s, keepalive 1 s ago", now - 2*sec, now - sec, now, true},
		{"keepalive just now", now - 2*sec, now - sec/100, now, false},
		{"just started", now - sec/10, 0, now, false},
		{"quiet for a second", now - 10*sec, 0, now - sec, false},
	}
	for _, tc := range cases {
		c.startNano.Store(tc.start)
		c.keepaliveNano.Store(tc.keepalive)
		c.dataNano.Store(tc.data)
		if got := c.Behind(); got != tc.want {
			t.Errorf("%s: Behind() = %v, want %v", tc.name, got, tc.want)
		}
		// While a transaction streams in progress, never.
		c.streamsOpen.Store(1)
		if c.Behind() {
			t.Errorf("%s, a stream open: Behind() = true", tc.name)
		}
		c.streamsOpen.Store(0)
	}
}
