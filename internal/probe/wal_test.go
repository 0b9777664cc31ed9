package probe

import (
	"context"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestWALLoop: WALLoop passes the source's WAL position on, following it
// as it moves, 0 for a source that does not answer, and returns when its
// context ends.
func TestWALLoop(t *testing.T) {
	c := pgtest.Cluster(t, pgcluster.Options{Fast: true})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan change.LSN, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		WALLoop(ctx, c.DSN("postgres"), func(l change.LSN) { got <- l })
	}()
	var first change.LSN
	select {
	case first = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no WAL position within 10 s")
	}
	if first == 0 {
		t.Fatal("WAL position 0 from a running source")
	}
	if err := c.Exec(ctx, "postgres", "CREATE TABLE t AS SELECT g FROM generate_series(1, 10000) g"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for moved := false; !moved; {
		select {
		case l := <-got:
			moved = l > first
		case <-deadline:
			t.Fatalf("the WAL position stayed at %s after a write", first)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("WALLoop did not return once its context ended")
	}

	// A source that does not answer: 0.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	got2 := make(chan change.LSN, 1)
	go WALLoop(ctx2, "host=127.0.0.1 port=1 dbname=postgres connect_timeout=1", func(l change.LSN) {
		select {
		case got2 <- l:
		default:
		}
	})
	select {
	case l := <-got2:
		if l != 0 {
			t.Fatalf("WAL position %s from a source that does not answer, want 0", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing passed on within 10 s for a source that does not answer")
	}
}
