package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/stats"
)

func TestBottleneckOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := func(sec float64, applyBusy, applyIdle float64) stats.Snapshot {
		return stats.Snapshot{Time: t0.Add(time.Duration(sec * float64(time.Second))), Uptime: sec, Components: []stats.ComponentSnapshot{
			{Name: "capture", IdleSeconds: sec},
			{Name: "apply.0", Items: int64(sec * 1000), BusySeconds: applyBusy, IdleSeconds: applyIdle},
		}}
	}
	// Before t0 apply was idle (the initial copy); during the measured
	// interval it was busy 90% of the time.
	snaps := []stats.Snapshot{snap(-10, 0, 0), snap(0, 0, 10), snap(10, 9, 11)}
	if b, w := bottleneckOf(snaps, t0); b != "apply" || w != "apply.0" {
		t.Errorf("bottleneckOf = %q, %q; want apply, apply.0", b, w)
	}
	// Over the whole run apply was idle more than half the time.
	if b, _ := bottleneckOf(snaps, time.Time{}); b != "none" {
		t.Errorf("bottleneckOf over the whole run = %q, want none", b)
	}
	if b, _ := bottleneckOf(snaps[:1], t0); b != "" {
		t.Errorf("bottleneckOf of one snapshot = %q, want empty", b)
	}
	var md strings.Builder
	writeBottlenecks(&md, []*RunResult{{Label: "repstream", Bottleneck: "apply", BottleneckWorker: "apply.0"}, {Label: "native"}})
	if want := "Bottleneck (the Streams advisor's rule over the measured interval, as `repstream advise`): repstream: **apply** (busiest apply.0).\n\n"; md.String() != want {
		t.Errorf("markdown:\n%q\nwant\n%q", md.String(), want)
	}
}
