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

// LatencyWindow: CommitLatency's recent figures cover the last one to
// two of these.
const LatencyWindow = time.Minute

// CommitLatency keeps, for each stage, histograms of commit → stage
// latencies (1 µs to 1 h, 2 significant digits; longer ones count as
// 1 h): one since the process started, and the recent ones, over the
// last one to two LatencyWindows. Observe takes a mutex and reads the
// clock: one call per transaction and stage, no allocation once a
// stage's histograms exist. Safe for concurrent use.
//
// Invariant (under mu): every stage's cur holds what was observed since
// rotated, its prev what was observed in the LatencyWindow before
// (empty when nothing was observed then), and rotated is at most a
// LatencyWindow before the last Observe or Snapshot.
type CommitLatency struct {
	now func() time.Time

	mu      sync.Mutex
	h       map[string]*stageHists
	rotated time.Time
}

// stageHists are one stage's histograms.
type stageHists struct {
	total, cur, prev *hdrhistogram.Histogram
}

func newCommitLatency(now func() time.Time) *CommitLatency {
	return &CommitLatency{now: now, h: map[string]*stageHists{}, rotated: now()}
}

// maxLatencyMicros is the histograms' highest trackable value: an hour.
const maxLatencyMicros = int64(time.Hour / time.Microsecond)

func newLatencyHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, maxLatencyMicros, 2) }

// rotate starts a new recent window when the current one is over (mu
// held).
func (l *CommitLatency) rotate(now time.Time) {
	switch d := now.Sub(l.rotated); {
	case d < LatencyWindow:
		return
	case d < 2*LatencyWindow:
		for _, s := range l.h {
			s.prev, s.cur = s.cur, s.prev
			s.cur.Reset()
		}
		l.rotated = l.rotated.Add(LatencyWindow)
	default: // nothing observed for a whole window
		for _, s := range l.h {
			s.prev.Reset()
			s.cur.Reset()
		}
		l.rotated = now
	}
}

// Observe records that the transaction committed at commit (Unix ns on
// the source's clock; 0: unknown, not recorded) reached stage now.
func (l *CommitLatency) Observe(stage string, commitNanos int64) {
	if l == nil || commitNanos == 0 {
		return
	}
	now := l.now()
	us := min(max((now.UnixNano()-commitNanos)/int64(time.Microsecond), 1), maxLatencyMicros)
	l.mu.Lock()
	l.rotate(now)
	s := l.h[stage]
	if s == nil {
		s = &stageHists{total: newLatencyHist(), cur: newLatencyHist(), prev: newLatencyHist()}
		l.h[stage] = s
	}
	_ = s.total.RecordValue(us)
	_ = s.cur.RecordValue(us)
	l.mu.Unlock()
}

// StageLatency is one stage's commit → stage latencies (milliseconds):
// since the process started, and Recent* over the last one to two
// LatencyWindows (RecentCount 0: none then; its percentiles are 0).
type StageLatency struct {
	Stage       string  `json:"stage"`
	Count       int64   `json:"count"`
	Mean        float64 `json:"mean_ms"`
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	Max         float64 `json:"max_ms"`
	RecentCount int64   `json:"recent_count"`
	RecentP50   float64 `json:"recent_p50_ms"`
	RecentP90   float64 `json:"recent_p90_ms"`
	RecentP99   float64 `json:"recent_p99_ms"`
}

// Snapshot returns each stage's figures, by stage name.
func (l *CommitLatency) Snapshot() []StageLatency {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(l.now())
	out := make([]StageLatency, 0, len(l.h))
	ms := func(us int64) float64 { return float64(us) / 1000 }
	for stage, s := range l.h {
		h := s.total
		sl := StageLatency{Stage: stage, Count: h.TotalCount(), Mean: h.Mean() / 1000,
			P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
		recent := hdrhistogram.Import(s.prev.Export())
		recent.Merge(s.cur)
		if n := recent.TotalCount(); n > 0 {
			sl.RecentCount = n
			sl.RecentP50, sl.RecentP90, sl.RecentP99 = ms(recent.ValueAtQuantile(50)), ms(recent.ValueAtQuantile(90)), ms(recent.ValueAtQuantile(99))
		}
		out = append(out, sl)
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
