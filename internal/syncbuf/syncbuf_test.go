package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestTail(t *testing.T) {
	var b Buffer
	if got := b.Tail(3); got != "" {
		t.Errorf("Tail of nothing: %q", got)
	}
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if got, want := b.Tail(2), "line 4\nline 5"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got := b.Tail(10); !strings.HasPrefix(got, "line 1\n") || !strings.HasSuffix(got, "line 5") {
		t.Errorf("Tail(10) = %q, want all five lines", got)
	}
}

func TestWritersAtOnce(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x\n"))
				_ = b.Tail(1)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "x\n"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}
