package capture

import (
	"bytes"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

// TestCoalescingReader: a large read is followed by a busyNap before the
// next read; small reads never nap.
func TestCoalescingReader(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	var slept []time.Duration
	r := newCoalescingReader(bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20)))
	r.now = clk.now
	r.sleep = func(d time.Duration) { slept = append(slept, d); clk.t = clk.t.Add(d) }
	small := make([]byte, 100)
	for i := 0; i < 10; i++ {
		if _, err := r.Read(small); err != nil {
			t.Fatal(err)
		}
	}
	if len(slept) != 0 {
		t.Fatalf("small reads napped %v", slept)
	}
	big := make([]byte, 64<<10)
	for i := 0; i < 4; i++ {
		if _, err := r.Read(big); err != nil {
			t.Fatal(err)
		}
	}
	if len(slept) != 3 || slept[0] != busyNap {
		t.Fatalf("large reads: naps %v, want 3 of %s (after each but the last)", slept, busyNap)
	}
	// A small read after a large one: napped once, then no more.
	slept = nil
	for i := 0; i < 3; i++ {
		if _, err := r.Read(small); err != nil {
			t.Fatal(err)
		}
	}
	if len(slept) != 1 {
		t.Fatalf("small reads after a large one: naps %v, want 1", slept)
	}
	if r.reads.Load() != 17 || r.lastNano.Load() != clk.t.UnixNano() {
		t.Fatalf("reads %d, last %d", r.reads.Load(), r.lastNano.Load())
	}
}
