package engine

import (
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/target"
)

func TestCheckRestoredTarget(t *testing.T) {
	cfg := config.Default()
	cfg.Slot = "s"
	for _, c := range []struct {
		name      string
		prog      target.Progress
		confirmed change.LSN
		adopt     bool
		refused   bool
	}{
		{"record ahead of the slot", target.Progress{Exists: true, Low: 200, Snapshot: target.SnapshotDone}, 100, false, false},
		{"record at the slot", target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotDone}, 100, false, false},
		{"record behind the slot", target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotDone}, 200, false, true},
		{"behind, adopted", target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotDone}, 200, true, false},
		{"interrupted copy", target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotRunning}, 200, false, false},
		{"no record", target.Progress{}, 200, false, false},
	} {
		cfg.AdoptSlot = c.adopt
		err := checkRestoredTarget(cfg, c.prog, c.confirmed)
		if (err != nil) != c.refused {
			t.Errorf("%s: %v, refused want %v", c.name, err, c.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "repstream drop --slot s") {
			t.Errorf("%s: the error does not say the way out: %v", c.name, err)
		}
	}
}

// TestRecordedAckerHoldsBack: the acknowledged position is the watermark's,
// at most what the target has recorded.
func TestRecordedAckerHoldsBack(t *testing.T) {
	wm := apply.NewWatermark(100)
	a := newRecordedAcker(wm, 100)
	wm.Register(150)
	wm.Done(150)
	if got := a.Flush(); got != 100 {
		t.Fatalf("Flush = %s before the target recorded 150, want 100", got)
	}
	a.recorded.Store(150)
	if got := a.Flush(); got != 150 {
		t.Fatalf("Flush = %s once recorded, want 150", got)
	}
	a.recorded.Store(300) // recorded ahead (an idle position persisted): the watermark bounds it
	if got := a.Flush(); got != 150 {
		t.Fatalf("Flush = %s, want the watermark's 150", got)
	}
}
