package monitor

import (
	"fmt"
	"io"
	"strings"

	"github.com/repstream/repstream/internal/stats"
)

// Thresholds are the advisor's limits, as shares of the interval in [0, 1].
type Thresholds struct {
	// Idle: a component idle at least this share of the interval waits for
	// input, it does not hold the pipeline back.
	Idle float64
	// Flow: a component waiting (flow control, commit order, locks) at
	// least this share is held back by something else.
	Flow float64
}

// DefaultThresholds are the Streams Performance Advisor's: 50% each.
func DefaultThresholds() Thresholds { return Thresholds{Idle: 0.5, Flow: 0.5} }

// TargetFacts are what `advise --target` read from the target's catalog:
// per-row costs of applying there.
type TargetFacts struct {
	// Triggers that fire for applied rows (ENABLE ALWAYS or ENABLE
	// REPLICA), as "schema.table trigger".
	Triggers []string
	// IndexHeavy are tables with many indexes, as "schema.table (N indexes)".
	IndexHeavy []string
}

// Inputs is what Advise needs besides the two snapshots.
type Inputs struct {
	Thresholds Thresholds
	// CPUs of the machine repstream runs on; 0 when unknown.
	CPUs int
	// Target is nil when the target was not read.
	Target *TargetFacts
}

// Verdict is the advisor's answer for one interval.
type Verdict struct {
	Seconds float64 `json:"interval_seconds"`
	// Bottleneck is the component that limits throughput, "" for none.
	Bottleneck string `json:"bottleneck"`
	// Worker is the busiest apply worker when Bottleneck is "apply".
	Worker          string   `json:"worker,omitempty"`
	Components      []Load   `json:"components"`
	Recommendations []string `json:"recommendations"`
	// Latency is the process's commit → stage latencies at the
	// interval's end (stats.CommitLatency), in pipeline order.
	Latency []stats.StageLatency `json:"commit_latency,omitempty"`
}

// Bottleneck applies the Streams advisor's rule to the loads of one
// interval: the bottleneck is the busiest component whose idle share is
// below th.Idle and whose waiting (flow-control) share is below th.Flow. A
// component that was never busy is not one. ok is false when no component
// qualifies (then the source, or nothing, is the limit).
func Bottleneck(loads []Load, th Thresholds) (b Load, ok bool) {
	for _, l := range loads {
		if l.Busy <= 0 || l.Idle >= th.Idle || l.Waiting >= th.Flow {
			continue
		}
		if !ok || l.Busy > b.Busy {
			b, ok = l, true
		}
	}
	return b, ok
}

// Advise measures the interval prev→cur of one engine's registry, names its
// bottleneck and says what to change, from what it measured only.
func Advise(prev, cur stats.Snapshot, in Inputs) Verdict {
	iv := Measure(Sample{Stats: prev}, Sample{Stats: cur})
	th := in.Thresholds
	v := Verdict{Seconds: iv.Seconds, Components: iv.Components, Recommendations: []string{}, Latency: stats.OrderStages(cur.CommitLatency)}
	if iv.Seconds <= 0 {
		v.Recommendations = append(v.Recommendations, "the two samples are the same moment: measure over a longer interval")
		return v
	}
	capt, _ := iv.Component("capture")
	apply, hasApply := iv.Component(Apply)
	queue, _ := iv.Component("queue")
	rec := func(format string, args ...any) {
		v.Recommendations = append(v.Recommendations, fmt.Sprintf(format, args...))
	}

	b, ok := Bottleneck(iv.Components, th)
	if ok {
		v.Bottleneck = b.Name
	}
	switch {
	case !ok && capt.Idle >= th.Idle && (!hasApply || apply.Idle >= th.Idle):
		rec("capture and apply were idle most of the interval (capture %d%%, apply %d%%): repstream keeps up with what the source sends, the source is the limit", pct(capt.Idle), pct(apply.Idle))
		rec("if the slot is nonetheless far behind the source (`repstream status`: retained WAL), the walsender's decoding or the network is the limit: raise --decoding-work-mem (the walsender spills less), check the network between the source and repstream")
	case !ok:
		rec("no component was busy most of the interval without waiting; look at the waiting shares below (flow control, commit order)")
	case b.Name == Apply:
		v.Worker = b.Busiest
		adviseApply(b, iv, prev, cur, in, rec)
	case b.Name == "capture":
		rec("capture is busy decoding: the walsender and the network feed it faster than it decodes; raise --decoding-work-mem so large transactions stream instead of spilling on the source, and keep repstream near the source")
	case b.Name == "coordinator":
		rec("the coordinator (dependency tracking, grouping) is the limit: larger target transactions cost it less per change: raise --group-max-txns and --group-max-bytes, or --commit-order dependent")
	case b.Name == "eager":
		rec("eager apply of a large in-progress transaction is the limit: it runs on one connection, one at a time; the target's per-row cost (triggers, indexes) decides its rate")
		if in.Target != nil {
			targetFacts(in.Target, rec)
		}
	case b.Name == "snapshot":
		rec("the initial copy is running: more tables at once with --snapshot-workers if the target has idle CPUs")
	default:
		rec("%s is busy %d%% of the interval and holds the pipeline back", b.Name, pct(b.Busy))
	}

	adviseKafka(prev, cur, iv, th, rec)

	flowNs := counterDelta(prev, cur, "capture", "flow_control_ns")
	flow := max(queue.Waiting, float64(flowNs)/1e9/iv.Seconds)
	if flow >= th.Flow {
		rec("flow control: capture waited %d%% of the interval for queue memory (the --memory budget is full of committed transactions waiting for apply): a larger --memory lets capture read further ahead of apply; it does not make apply faster", pct(min(flow, 1)))
	}
	if iv.SpilledBytes > 0 {
		rec("%s of transactions spilled to disk: they did not fit in the queue's free memory; raise --memory above the largest transaction (with --eager, large transactions the source streams apply before they commit instead)", size(float64(iv.SpilledBytes)))
	}
	return v
}

// adviseKafka adds what the halves joined by Kafka measure: a capture
// waiting for the brokers' acknowledgements, an apply retrying its reads
// or far behind the topic.
func adviseKafka(prev, cur stats.Snapshot, iv Interval, th Thresholds, rec func(string, ...any)) {
	k, ok := cur.Component(stats.CompKafka)
	if !ok {
		return
	}
	if _, capture := k.Gauges["unacked_bytes"]; capture {
		if wait := float64(counterDelta(prev, cur, stats.CompKafka, "waits_ns")) / 1e9 / iv.Seconds; wait >= th.Flow {
			rec("the brokers are the limit: capture waited %d%% of the interval for their acknowledgements (at most 64 MiB unacknowledged): check the brokers' disks and network, and the topic's min.insync.replicas against its in-sync replicas; the slot waits meanwhile", pct(min(wait, 1)))
		}
	}
	if n := counterDelta(prev, cur, stats.CompKafka, "fetch_errors"); n > 0 {
		rec("apply retried reading the topic %d time(s) in the interval: the brokers were unreachable or the partition's leader moved (repstream_connection_up{side=\"kafka\"})", n)
	}
	if lag, apply := k.Gauges["lag_records"]; apply && lag > 0 {
		rec("this target is %d records behind the topic's end: what it has not read yet waits in the topic, not on the source (the slot does not wait for a target)", lag)
	}
}

func adviseApply(a Load, iv Interval, prev, cur stats.Snapshot, in Inputs, rec func(string, ...any)) {
	if a.Workers == 1 {
		rec("the apply worker %s was busy %d%% of the interval", a.Busiest, pct(a.Busy))
	} else {
		rec("the %d apply workers were busy %d%% of the interval on average (busiest %s: %d%%)", a.Workers, pct(a.Busy), a.Busiest, pct(a.BusiestBusy))
	}
	switch {
	case in.CPUs == 0:
		rec("raise --apply-parallelism (now %d) if repstream's machine and the target have idle CPUs: independent transactions apply in parallel", a.Workers)
	case a.Workers < in.CPUs:
		rec("raise --apply-parallelism (now %d; %d CPUs here): independent transactions apply in parallel", a.Workers, in.CPUs)
	default:
		rec("--apply-parallelism is %d on %d CPUs: more workers would compete for CPUs; make each applied row cheaper on the target instead", a.Workers, in.CPUs)
	}
	if a.Waiting >= 0.2 {
		rec("the workers also waited %d%% of the interval for earlier transactions (commit order, dependencies): --commit-order dependent lets independent transactions commit out of source order", pct(a.Waiting))
	}
	if in.Target != nil {
		targetFacts(in.Target, rec)
	} else {
		rec("the target's per-row cost decides apply's rate: triggers that fire for replicated rows (ENABLE ALWAYS or ENABLE REPLICA), many indexes, foreign keys; run advise with --target DSN to list them")
	}
	if a.TxnsPerSec > 0 {
		if per := a.ItemsPerSec / a.TxnsPerSec; per < 5 {
			collapsed := workersCounterDelta(prev, cur, "collapsed_changes")
			rec("source transactions are small (%.1f changes each): many are grouped into one target transaction (--group-max-txns, --catch-up-wait) and repeated changes to a key folded (--collapse; %d folded in the interval); raise --group-max-txns if the target commits are the cost", per, collapsed)
		}
	}
}

func targetFacts(t *TargetFacts, rec func(string, ...any)) {
	for _, tr := range t.Triggers {
		rec("target trigger %s fires for every applied row: make it cheaper, or disable it for replica sessions if the source already did its work", tr)
	}
	for _, ix := range t.IndexHeavy {
		rec("target table %s: every applied row maintains all of them; drop the ones only the source's workload needs", ix)
	}
	if len(t.Triggers) == 0 && len(t.IndexHeavy) == 0 {
		rec("the target has no trigger that fires for replicated rows and no table with many indexes: its CPUs or disks are the limit")
	}
}

// WriteVerdict prints v for a person: "bottleneck: <component>" or
// "no bottleneck" first, then what each component did, the recent commit
// → stage latencies (when any), then the recommendations.
func WriteVerdict(w io.Writer, v Verdict) error {
	var b strings.Builder
	if v.Bottleneck == "" {
		b.WriteString("no bottleneck\n")
	} else {
		fmt.Fprintf(&b, "bottleneck: %s\n", v.Bottleneck)
		if v.Worker != "" {
			fmt.Fprintf(&b, "busiest worker: %s\n", v.Worker)
		}
	}
	fmt.Fprintf(&b, "\nmeasured over %.1fs (busy / idle / waiting = flow control, %% of the interval):\n", v.Seconds)
	for _, l := range v.Components {
		name := l.Name
		if l.Workers > 0 {
			name = fmt.Sprintf("%s(%d)", l.Name, l.Workers)
		}
		fmt.Fprintf(&b, "  %-12s %6s chg/s %7s/s  B%3d I%3d F%3d\n", name, count(l.ItemsPerSec), size(l.BytesPerSec), pct(l.Busy), pct(l.Idle), pct(l.Waiting))
	}
	var lat []string
	for _, l := range v.Latency {
		if l.RecentCount > 0 {
			lat = append(lat, fmt.Sprintf("%s %s / %s", l.Stage, trim(l.RecentP50), trim(l.RecentP99)))
		}
	}
	if len(lat) > 0 {
		fmt.Fprintf(&b, "\ncommit → stage over the last 1 to 2 minutes (p50 / p99 ms): %s\n", strings.Join(lat, ", "))
	}
	if len(v.Recommendations) > 0 {
		b.WriteString("\nrecommendations:\n")
		for _, r := range v.Recommendations {
			fmt.Fprintf(&b, "- %s\n", r)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
