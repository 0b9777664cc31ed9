package apply

import (
	"slices"
	"sync"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// Watermark tracks which source transactions are durably applied on the
// target and derives the position the slot may be acknowledged with.
//
// Capture registers every committed transaction, in commit order, before it
// hands it to the queue. Apply marks it Visible once the target transaction
// that contains it has committed, and Done once that commit is durable: the
// apply sessions commit with synchronous_commit = off, so a commit is durable
// only when the target's WAL is flushed past it, which durability
// (durable.go) learns by polling pg_current_wal_flush_lsn(). Capture also
// reports WAL positions it saw while it had no transaction open (keepalives).
//
// Invariants:
//   - Registered end LSNs strictly increase (commit order).
//   - Low is the end LSN of the newest registered transaction such that it and
//     every transaction registered before it are Done. Low never decreases and
//     never passes a transaction that is not Done.
//   - Flush is Low while anything registered is not Done; when nothing is
//     pending it is max(Low, the idle WAL position) — what lets an idle or
//     filtered source free WAL. Flush never decreases.
//   - VisibleLow is the same as Low for "committed on the target" (Visible)
//     instead of "durable" (Done); Done implies Visible, so VisibleLow >= Low.
//     Ordering decisions (eager apply) need visibility only.
//
// It is safe for concurrent use: capture and the apply workers share one.
type Watermark struct {
	mu      sync.Mutex
	pending []mark // registered, in commit order; a prefix of Done marks is popped into low
	head    int    // pending[head:] is live
	undone  int    // registered and not Done
	vhead   int    // pending[head:vhead] are visible (a prefix of the live marks)
	vlow    change.LSN
	low     change.LSN
	idle    change.LSN
	flushed change.LSN
	notify  chan struct{} // closed and replaced whenever Flush may have advanced

	// latency, when set (TraceLatency), gets each transaction's commit →
	// stage latency as it is registered (stats.StageReceived), made
	// visible (visibleStage) and done (doneStage); a stage named "" is
	// not recorded. Set before the watermark is shared, read without mu,
	// and recorded after mu is released (Observe reads the clock).
	latency                 *stats.CommitLatency
	visibleStage, doneStage string
}

type mark struct {
	end     change.LSN
	commit  int64 // the source commit time (Unix ns), 0 if not given
	done    bool
	visible bool
}

// NewWatermark starts the watermark at start: everything at or below start is
// already applied (the target's recorded low watermark, or the slot's
// confirmed position).
func NewWatermark(start change.LSN) *Watermark {
	return &Watermark{low: start, vlow: start, flushed: start, notify: make(chan struct{})}
}

// TraceLatency records each registered transaction's commit → stage
// latencies in l (nil: none): registered (stats.StageReceived), Visible
// (visible) and Done (done; a Done that was not Visible is both). A stage
// named "" is not recorded. Call it before the watermark is shared (the
// fields it sets are read without the lock).
func (w *Watermark) TraceLatency(l *stats.CommitLatency, visible, done string) {
	w.latency, w.visibleStage, w.doneStage = l, visible, done
}

// observe records a commit → stage latency (commit: Unix ns, 0 unknown),
// outside the lock: it reads the clock.
func (w *Watermark) observe(stage string, commit int64) {
	if w.latency != nil && stage != "" {
		w.latency.Observe(stage, commit)
	}
}

// Register records a committed source transaction, in commit order.
// Registering an end at or below the last registered one is ignored (it can
// only be a transaction the server re-sent that is already applied).
func (w *Watermark) Register(end change.LSN) { w.RegisterCommit(end, time.Time{}) }

// RegisterCommit is Register with the transaction's source commit time,
// which OldestUnapplied reports (watermark_lag.go).
func (w *Watermark) RegisterCommit(end change.LSN, commit time.Time) {
	m := mark{end: end}
	if !commit.IsZero() {
		m.commit = commit.UnixNano()
	}
	if w.register(m) {
		w.observe(stats.StageReceived, m.commit)
	}
}

// register appends m unless it is a replay (RegisterCommit).
func (w *Watermark) register(m mark) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.pending); n > w.head && m.end <= w.pending[n-1].end {
		return false
	}
	if m.end <= w.low {
		return false
	}
	w.pending = append(w.pending, m)
	w.undone++
	return true
}

// Done marks the transaction ending at end as durably applied (or as skipped
// because the target had it already). Done implies Visible.
func (w *Watermark) Done(end change.LSN) {
	if commit, wasVisible, ok := w.done(end); ok {
		if !wasVisible {
			w.observe(w.visibleStage, commit)
		}
		w.observe(w.doneStage, commit)
	}
}

// done is Done under the lock: the transaction's commit time, whether it
// was visible before, and whether it was registered and not done yet.
func (w *Watermark) done(end change.LSN) (commit int64, wasVisible, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.find(end)
	if !ok || w.pending[i].done {
		return 0, false, false
	}
	commit, wasVisible = w.pending[i].commit, w.pending[i].visible
	w.pending[i].done = true
	w.pending[i].visible = true
	w.undone--
	advanced := w.advanceVisible()
	for w.head < len(w.pending) && w.pending[w.head].done {
		w.low = w.pending[w.head].end
		w.head++
		advanced = true
	}
	w.vhead = max(w.vhead, w.head)
	if w.head == len(w.pending) {
		w.pending, w.head, w.vhead = w.pending[:0], 0, 0
	} else if w.head > 1024 && w.head > len(w.pending)/2 {
		n := copy(w.pending, w.pending[w.head:])
		w.vhead -= w.head
		w.pending, w.head = w.pending[:n], 0
	}
	if advanced {
		w.signal()
	}
	return commit, wasVisible, true
}

// Visible marks the transaction ending at end as committed on the target
// (not necessarily durable yet).
func (w *Watermark) Visible(end change.LSN) {
	if commit, ok := w.visible(end); ok {
		w.observe(w.visibleStage, commit)
	}
}

// visible is Visible under the lock: the transaction's commit time, and
// whether it was registered and not visible yet.
func (w *Watermark) visible(end change.LSN) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.find(end)
	if !ok || w.pending[i].visible {
		return 0, false
	}
	w.pending[i].visible = true
	commit := w.pending[i].commit
	if w.advanceVisible() {
		w.signal()
	}
	return commit, true
}

// VisibleLow returns the newest end LSN such that it and every transaction
// registered before it are committed on the target.
func (w *Watermark) VisibleLow() change.LSN {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.vlow, w.low)
}

func (w *Watermark) advanceVisible() bool {
	advanced := false
	w.vhead = max(w.vhead, w.head)
	for w.vhead < len(w.pending) && w.pending[w.vhead].visible {
		w.vlow = w.pending[w.vhead].end
		w.vhead++
		advanced = true
	}
	return advanced
}

func (w *Watermark) find(end change.LSN) (int, bool) {
	live := w.pending[w.head:]
	i, found := slices.BinarySearchFunc(live, end, func(m mark, e change.LSN) int {
		switch {
		case m.end < e:
			return -1
		case m.end > e:
			return 1
		}
		return 0
	})
	return w.head + i, found
}

// Observe records a WAL position the source has sent everything committed
// before, seen by capture between transactions (a streamed transaction may
// be open: it commits later).
func (w *Watermark) Observe(walEnd change.LSN) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if walEnd > w.idle {
		w.idle = walEnd
		if w.head == len(w.pending) {
			w.signal()
		}
	}
}

// Low returns the low watermark: every registered transaction ending at or
// below it is applied.
func (w *Watermark) Low() change.LSN {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.low
}

// Pending returns how many registered transactions are not yet Done.
func (w *Watermark) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.undone
}

// Flush returns the position the slot may be acknowledged with.
func (w *Watermark) Flush() change.LSN {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.low
	if w.head == len(w.pending) && w.idle > f {
		f = w.idle
	}
	if f > w.flushed {
		w.flushed = f
	}
	return w.flushed
}

// Changed returns a channel closed the next time Flush may have advanced.
func (w *Watermark) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notify
}

func (w *Watermark) signal() {
	close(w.notify)
	w.notify = make(chan struct{})
}
