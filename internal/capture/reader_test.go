package capture

import (
	"bytes"
	"io"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

// TestCoalescingReader: back-to-back small reads lead to naps; a quiet
// stream (reads that block) or large reads never nap.
func TestCoalescingReader(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	naps := 0
	r := newCoalescingReader(bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20)))
	r.now = clk.now
	r.sleep = func(d time.Duration) { naps++; clk.t = clk.t.Add(d) }
	buf := make([]byte, 100)
	for i := 0; i < 10; i++ {
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
		clk.t = clk.t.Add(10 * time.Microsecond)
	}
	// The first read has no predecessor; the next coalesceAfter count as
	// small; every read after them naps.
	if want := 10 - 1 - coalesceAfter; naps != want {
		t.Fatalf("busy stream: %d naps, want %d", naps, want)
	}
	// Quiet stream: each read comes long after the previous one.
	naps = 0
	r.small = 0
	for i := 0; i < 10; i++ {
		clk.t = clk.t.Add(50 * time.Millisecond)
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if naps != 0 {
		t.Fatalf("quiet stream: %d naps", naps)
	}
	// Large reads never count as small.
	naps = 0
	big := make([]byte, 64<<10)
	for i := 0; i < 8; i++ {
		if _, err := r.Read(big); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	}
	if naps != 0 {
		t.Fatalf("large reads: %d naps", naps)
	}
}
