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

func TestWriteCommitLatency(t *testing.T) {
	snap := func(ls ...stats.StageLatency) *stats.Snapshot { return &stats.Snapshot{CommitLatency: ls} }
	runs := []*RunResult{
		{Label: "repstream", FinalStats: snap(stats.StageLatency{Stage: "visible", P50: 2.81, P99: 11.58}, stats.StageLatency{Stage: "received", P50: 1.91, P99: 5.25})},
		{Label: "kafka #2", Round: 2, FinalStats: snap(stats.StageLatency{Stage: "received", P50: 7.36, P99: 20.35}),
			CaptureFinalStats: snap(stats.StageLatency{Stage: "acked", P50: 6.85, P99: 19.45})},
		{Label: "native"},
	}
	var md strings.Builder
	writeCommitLatency(&md, runs)
	for _, want := range []string{"repstream: received 1.91 / 5.25, visible 2.81 / 11.58; ", "kafka #2: capture acked 6.85 / 19.45; apply received 7.36 / 20.35."} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown %q lacks %q", md.String(), want)
		}
	}
	if strings.Contains(md.String(), "native") {
		t.Errorf("markdown names a system without figures: %q", md.String())
	}
	md.Reset()
	writeCommitLatency(&md, runs[2:])
	if md.Len() != 0 {
		t.Errorf("markdown without figures: %q", md.String())
	}
}
