package bench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/repstream/repstream/internal/monitor"
	"github.com/repstream/repstream/internal/stats"
)

// bottleneckOf applies the advisor's rule (monitor.Advise, default
// thresholds) to a repstream run's snapshots, from the first one taken at
// or after t0 (the measured interval's start; the first snapshot when none
// is) to the last. It returns the bottleneck ("none" when no component
// qualifies, "" when there are fewer than two snapshots) and, for apply, the
// busiest worker.
func bottleneckOf(snaps []stats.Snapshot, t0 time.Time) (string, string) {
	if len(snaps) < 2 {
		return "", ""
	}
	first := 0
	for i, s := range snaps {
		if !t0.IsZero() && !s.Time.Before(t0) {
			first = i
			break
		}
	}
	if first == len(snaps)-1 {
		first = 0
	}
	v := monitor.Advise(snaps[first], snaps[len(snaps)-1], monitor.Inputs{Thresholds: monitor.DefaultThresholds()})
	if v.Bottleneck == "" {
		return "none", ""
	}
	return v.Bottleneck, v.Worker
}

// writeBottlenecks prints one line naming each repstream run's bottleneck
// (the kafka system's: the apply's, then the capture's).
func writeBottlenecks(w io.Writer, runs []*RunResult) {
	started := false
	for _, r := range runs {
		if r.Bottleneck == "" {
			continue
		}
		if !started {
			fmt.Fprintf(w, "Bottleneck (the Streams advisor's rule over the measured interval, as `repstream advise`): ")
			started = true
		} else {
			fmt.Fprintf(w, "; ")
		}
		fmt.Fprintf(w, "%s: **%s**", r.Label, r.Bottleneck)
		if r.BottleneckWorker != "" {
			fmt.Fprintf(w, " (busiest %s)", r.BottleneckWorker)
		}
		if r.CaptureBottleneck != "" {
			fmt.Fprintf(w, " in the apply, **%s** in the capture", r.CaptureBottleneck)
		}
	}
	if started {
		fmt.Fprintf(w, ".\n\n")
	}
}

// writeCommitLatency prints one line with each repstream run's commit →
// stage latencies, as its processes measured them (stats.CommitLatency:
// the kafka system's capture, then its apply): where the probe's commit
// → visible time goes.
func writeCommitLatency(w io.Writer, runs []*RunResult) {
	stages := func(s *stats.Snapshot) string {
		if s == nil || len(s.CommitLatency) == 0 {
			return ""
		}
		var parts []string
		for _, l := range stats.OrderStages(s.CommitLatency) {
			parts = append(parts, fmt.Sprintf("%s %s / %s", l.Stage, fmtFig(l.P50), fmtFig(l.P99)))
		}
		return strings.Join(parts, ", ")
	}
	var lines []string
	for _, r := range runs {
		label := r.Label // with --repeat: "kafka #2"
		app := stages(r.FinalStats)
		if capt := stages(r.CaptureFinalStats); capt != "" {
			lines = append(lines, fmt.Sprintf("%s: capture %s; apply %s", label, capt, app))
		} else if app != "" {
			lines = append(lines, label+": "+app)
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "Commit → stage latency, p50 / p99 ms (each process's own figures, from the source commit timestamp, over its whole run: "+
		"received from the stream or topic, visible on the target, durable there, acked by the brokers): %s.\n\n", strings.Join(lines, "; "))
}
