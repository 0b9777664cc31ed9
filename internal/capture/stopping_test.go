package capture

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
)

// TestStoppingSource: keepalives asking for a reply as a shutting-down
// walsender sends them (one after each answer) end the connection while
// the confirmed position is behind the WAL sent; as a running one sends
// them (at most every wal_sender_timeout/2), or with everything confirmed,
// they do not.
func TestStoppingSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Capture{opts: Options{Slot: "s"}, sentFlush: 100}
		for i := 1; i < stopAsks; i++ {
			if err := c.stoppingSource(200); err != nil {
				t.Fatalf("ask %d: %v", i, err)
			}
		}
		if err := c.stoppingSource(100); err != nil {
			t.Fatalf("everything confirmed: %v", err)
		}
		if err := c.stoppingSource(200); !errors.Is(err, pgerr.ErrSourceStopping) || !pgerr.Transient(err) {
			t.Fatalf("ask %d, behind: %v, want a transient ErrSourceStopping", stopAsks+1, err)
		}

		// A running walsender: asks spread out.
		c = &Capture{opts: Options{Slot: "s"}, sentFlush: change.LSN(100)}
		for i := 0; i < 3*stopAsks; i++ {
			if err := c.stoppingSource(200); err != nil {
				t.Fatalf("ask %d, %s apart: %v", i, stopAsksIn/10, err)
			}
			time.Sleep(stopAsksIn / 10)
		}
	})
}
