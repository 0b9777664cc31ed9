package stats

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Commit latency stages: how long after a source transaction committed
// (its commit timestamp, which pgoutput sends with the Commit message) a
// process reached each step with it. Which steps a process has depends on
// what it is:
//
//	run, apply --kafka: received (decoded from the stream or the topic),
//	                    visible (committed on the target),
//	                    durable (the target's WAL flushed past that commit)
//	capture --kafka:    received (decoded from the walsender's stream),
//	                    acked (the brokers hold all of the transaction)
//
// The commit timestamp is the source's clock and the steps are this
// process's: across machines the figures include the clocks' offset.
const (
	StageReceived = "received"
	StageVisible  = "visible"
	StageDurable  = "durable"
	StageAcked    = "acked"
)

// CommitLatency keeps, for each stage, a histogram of commit → stage
// latencies since the process started (1 µs to 1 h, 2 significant
// digits; longer ones count as 1 h). Observe takes a mutex and reads the
// clock: one call per transaction and stage, no allocation once a
// stage's histogram exists. Safe for concurrent use.
type CommitLatency struct {
	now func() time.Time

	mu sync.Mutex
	h  map[string]*hdrhistogram.Histogram
}

func newCommitLatency(now func() time.Time) *CommitLatency {
	return &CommitLatency{now: now, h: map[string]*hdrhistogram.Histogram{}}
}

// maxLatencyMicros is the histograms' highest trackable value: an hour.
const maxLatencyMicros = int64(time.Hour / time.Microsecond)

// Observe records that the transaction committed at commit (Unix ns on
// the source's clock; 0: unknown, not recorded) reached stage now.
func (l *CommitLatency) Observe(stage string, commitNanos int64) {
	if l == nil || commitNanos == 0 {
		return
	}
	us := max((l.now().UnixNano()-commitNanos)/int64(time.Microsecond), 0)
	l.mu.Lock()
	h := l.h[stage]
	if h == nil {
		h = hdrhistogram.New(1, maxLatencyMicros, 2)
		l.h[stage] = h
	}
	_ = h.RecordValue(min(max(us, 1), maxLatencyMicros))
	l.mu.Unlock()
}

// StageLatency is one stage's commit → stage latencies (milliseconds).
type StageLatency struct {
	Stage string  `json:"stage"`
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Snapshot returns each stage's figures, by stage name.
func (l *CommitLatency) Snapshot() []StageLatency {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]StageLatency, 0, len(l.h))
	ms := func(us int64) float64 { return float64(us) / 1000 }
	for stage, h := range l.h {
		out = append(out, StageLatency{Stage: stage, Count: h.TotalCount(), Mean: h.Mean() / 1000,
			P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stage < out[j].Stage })
	return out
}

// OrderStages returns ls in pipeline order (received, acked, visible,
// durable, then any other by name).
func OrderStages(ls []StageLatency) []StageLatency {
	rank := func(s string) int {
		switch s {
		case StageReceived:
			return 0
		case StageAcked:
			return 1
		case StageVisible:
			return 2
		case StageDurable:
			return 3
		}
		return 4
	}
	out := slices.Clone(ls)
	slices.SortStableFunc(out, func(a, b StageLatency) int {
		if c := rank(a.Stage) - rank(b.Stage); c != 0 {
			return c
		}
		return strings.Compare(a.Stage, b.Stage)
	})
	return out
}

// CommitLatency returns the registry's commit latency histograms.
// (nil for a nil registry: nothing is recorded).
func (r *Registry) CommitLatency() *CommitLatency {
	if r == nil {
		return nil
	}
	return r.latency
}
