package apply

import (
	"testing"
	"time"
)

func TestOldestUnapplied(t *testing.T) {
	t.Parallel()
	w := NewWatermark(100)
	if _, ok := w.OldestUnapplied(); ok {
		t.Fatal("empty watermark reports an unapplied transaction")
	}
	t1 := time.Unix(1000, 0)
	t2 := time.Unix(2000, 0)
	w.RegisterCommit(200, t1)
	w.RegisterCommit(300, t2)
	w.Register(400) // no commit time
	if at, ok := w.OldestUnapplied(); !ok || !at.Equal(t1) {
		t.Fatalf("OldestUnapplied = %v, %v; want %v", at, ok, t1)
	}
	w.Visible(300) // out of order: 200 is still the oldest
	if at, _ := w.OldestUnapplied(); !at.Equal(t1) {
		t.Fatalf("after Visible(300): %v, want %v", at, t1)
	}
	w.Visible(200)
	if _, ok := w.OldestUnapplied(); ok {
		t.Fatal("the oldest left (400) has no commit time: want ok=false")
	}
	w.RegisterCommit(500, t2)
	w.Done(200)
	w.Done(300)
	w.Done(400)
	if at, ok := w.OldestUnapplied(); !ok || !at.Equal(t2) {
		t.Fatalf("OldestUnapplied = %v, %v; want %v", at, ok, t2)
	}
	w.Done(500)
	if _, ok := w.OldestUnapplied(); ok {
		t.Fatal("all done: want ok=false")
	}
}
