package monitor

import (
	"strconv"
	"strings"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// Apply is the name of the apply workers taken together.
const Apply = "apply"

// Load is what one component (or the apply workers together) did during an
// interval. Busy, Idle and Waiting are shares of the interval in [0, 1];
// Waiting is what Streams calls flow control: the component had work but
// was held back (by downstream, the memory budget, commit order, locks).
type Load struct {
	Name        string  `json:"name"`
	ItemsPerSec float64 `json:"items_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	TxnsPerSec  float64 `json:"txns_per_sec"`
	Busy        float64 `json:"busy"`
	Idle        float64 `json:"idle"`
	Waiting     float64 `json:"waiting"`
	State       string  `json:"state,omitempty"`
	// Workers, Busiest and BusiestBusy are set for "apply" only: how many
	// workers it sums and which one was busiest, how busy.
	Workers     int     `json:"workers,omitempty"`
	Busiest     string  `json:"busiest,omitempty"`
	BusiestBusy float64 `json:"busiest_busy,omitempty"`
}

// Interval is what the engine did between two samples.
type Interval struct {
	Time    time.Time `json:"time"`
	Seconds float64   `json:"interval_seconds"`
	Slot    string    `json:"slot,omitempty"`
	// Components are in the registry's order, the apply workers folded into
	// one "apply" at the place of the first worker.
	Components []Load `json:"components"`
	// ApplyWorkers are the workers one by one.
	ApplyWorkers []Load `json:"apply_workers,omitempty"`
	// QueueBytes and QueueTxns are the queue's memory and its committed
	// transactions waiting for apply at the end of the interval.
	QueueBytes int64 `json:"queue_memory_bytes"`
	QueueTxns  int64 `json:"queue_txns_pending"`
	// SpilledBytes were written to spill files during the interval.
	SpilledBytes int64 `json:"spilled_bytes"`
	// BehindBytes is how much WAL repstream received that is not yet durably
	// applied (received_lsn - applied_low); -1 when /status gave no positions.
	BehindBytes int64 `json:"behind_bytes"`
	// Role is "capture" or "apply" for the halves joined by Kafka ("" for
	// run). For a capture, BehindBytes is the WAL not yet acknowledged by
	// the brokers; for an apply, TopicLagRecords is how many records of
	// the topic it has not read yet (-1: not known).
	Role            string `json:"role,omitempty"`
	TopicLagRecords int64  `json:"topic_lag_records,omitempty"`
}

// Measure computes the interval prev→cur. A worker is an "apply.<n>"
// component. Counters that went backwards (the engine restarted) count from
// zero, as in stats.Rates.
func Measure(prev, cur Sample) Interval {
	iv := Interval{
		Time:        cur.Stats.Time,
		Seconds:     cur.Stats.Uptime - prev.Stats.Uptime,
		Slot:        cur.Status.Slot,
		BehindBytes: -1,
	}
	applyAt := -1
	for _, r := range stats.Rates(prev.Stats, cur.Stats) {
		l := Load{Name: r.Name, ItemsPerSec: r.ItemsPerSec, BytesPerSec: r.BytesPerSec, TxnsPerSec: r.TxnsPerSec,
			Busy: r.Busy, Idle: r.Idle, Waiting: r.Waiting, State: r.State}
		if !isWorker(r.Name) {
			iv.Components = append(iv.Components, l)
			continue
		}
		iv.ApplyWorkers = append(iv.ApplyWorkers, l)
		if applyAt < 0 {
			applyAt = len(iv.Components)
			iv.Components = append(iv.Components, Load{Name: Apply})
		}
	}
	if applyAt >= 0 {
		iv.Components[applyAt] = foldWorkers(iv.ApplyWorkers)
	}
	if q, ok := cur.Stats.Component("queue"); ok {
		iv.QueueBytes = q.Gauges["memory_bytes"]
		iv.QueueTxns = q.Gauges["txns_committed_pending"]
	}
	iv.SpilledBytes = counterDelta(prev.Stats, cur.Stats, "spill", "bytes")
	recv, err1 := change.ParseLSN(cur.Status.ReceivedLSN)
	low, err2 := change.ParseLSN(cur.Status.AppliedLow)
	if err1 == nil && err2 == nil && recv != 0 {
		iv.BehindBytes = max(int64(recv)-int64(low), 0)
	}
	iv.Role = cur.Status.Role
	if iv.Role == "apply" {
		iv.TopicLagRecords = -1
		if cur.Status.KafkaEnd > 0 {
			iv.TopicLagRecords = max(cur.Status.KafkaEnd-cur.Status.KafkaOffset, 0)
		}
	}
	return iv
}

// Component returns the load of the named component ("apply" for the
// workers together).
func (iv Interval) Component(name string) (Load, bool) {
	for _, l := range iv.Components {
		if l.Name == name {
			return l, true
		}
	}
	return Load{}, false
}

func isWorker(name string) bool {
	n, ok := strings.CutPrefix(name, Apply+".")
	if !ok {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

// foldWorkers sums the workers' rates and averages their state shares.
func foldWorkers(ws []Load) Load {
	a := Load{Name: Apply, Workers: len(ws)}
	for _, w := range ws {
		a.ItemsPerSec += w.ItemsPerSec
		a.BytesPerSec += w.BytesPerSec
		a.TxnsPerSec += w.TxnsPerSec
		a.Busy += w.Busy
		a.Idle += w.Idle
		a.Waiting += w.Waiting
		if a.Busiest == "" || w.Busy > a.BusiestBusy {
			a.Busiest, a.BusiestBusy = w.Name, w.Busy
		}
	}
	if n := float64(len(ws)); n > 0 {
		a.Busy /= n
		a.Idle /= n
		a.Waiting /= n
	}
	return a
}

// counterDelta is how much a component's named counter grew from prev to
// cur (its value in cur when it went backwards).
func counterDelta(prev, cur stats.Snapshot, component, counter string) int64 {
	c, _ := cur.Component(component)
	p, _ := prev.Component(component)
	d := c.Counters[counter] - p.Counters[counter]
	if d < 0 {
		return c.Counters[counter]
	}
	return d
}

// workersCounterDelta sums counterDelta over the apply workers of cur.
func workersCounterDelta(prev, cur stats.Snapshot, counter string) int64 {
	var n int64
	for _, c := range cur.Components {
		if isWorker(c.Name) {
			n += counterDelta(prev, cur, c.Name, counter)
		}
	}
	return n
}
