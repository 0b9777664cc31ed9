package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
)

// Eager applies a large transaction while the source is still streaming it
// (pgoutput protocol v2+), in its own target transaction on its own
// connection, so that little is left to do when it commits.
//
// Ordering — why it is safe:
//   - Before each streamed chunk, Eager waits until every transaction whose
//     commit the source sent before that chunk is applied on the target (the
//     watermark). A row the big transaction touches in the chunk may have been
//     changed by such a transaction; nothing else can conflict, because on the
//     source the big transaction held its row locks from then on.
//   - At its commit position it is a barrier for the coordinator: every
//     earlier group commits first, then the eager transaction commits with its
//     progress record; every later group waits for it.
//   - Each subtransaction gets a savepoint at its first change; a
//     subtransaction abort rolls back to it, a stream abort rolls back all.
//   - A change the target refuses while the transaction is in progress is
//     no verdict yet (refuse): a walsender that finds a subtransaction
//     aborted on the source as it streams it (it lagged behind) discards
//     what it had not sent of the whole transaction, and then still sends
//     later changes of other subtransactions inside the aborted one (a
//     schema change made in the event trigger's exception block, rows of
//     an inner savepoint), without the changes they build on. Their
//     STREAM ABORT comes later (TestDDLStreamedConcurrentAbort). So the
//     target rolls back to the innermost savepoint and nothing more is
//     applied until a subtransaction abort rolls that savepoint back (the
//     refused change was the source's rolled-back work: apply goes on) or
//     the transaction's own abort; its commit fails with the refusal, and
//     the target transaction never commits without the change.
//
// Exactly once: the target transaction commits with the transaction's end LSN
// recorded, as any other. After a restart a streamed transaction may already
// be on the target and its end LSN is only known at commit, so Eager takes
// only transactions whose first change lies beyond everything the target had
// recorded as applied (SkipBelow): once the source reports having decoded WAL
// up to SkipBelow, any transaction it streams afterwards ends beyond it.
// Others go through the queue.
//
// One transaction at a time is applied eagerly; others are queued (and spill)
// as usual. Capture is the only producer (TryTake, Chunk, Add, Abort); the
// coordinator's worker calls Commit at the commit position; Run owns the
// connection and processes the items in order.
type Eager struct {
	opts EagerOptions
	log  *slog.Logger
	st   *stats.Component
	in   chan eagerItem

	// stopped is closed when Run returns: nothing reads in any more, and
	// the transaction Run had open is rolled back, so a send gives up
	// (errEagerStopped) instead of waiting for a reader that is gone.
	stopped chan struct{}

	mu    sync.Mutex
	owner uint32 // xid being applied eagerly; 0 when free
	held  bool   // Hold: take no transaction (a table is being copied)
	owned map[uint32]bool
}

// errEagerStopped: Run has returned (the run is ending, or eager apply
// failed and says why there).
var errEagerStopped = errors.New("eager apply has stopped")

// EagerOptions configure Eager.
type EagerOptions struct {
	Watermark *Watermark
	SkipBelow change.LSN // the highest end LSN the target recorded as applied at start
	NewWriter func(ctx context.Context, st *stats.Component) (EagerWriter, func(), error)
	Stats     *stats.Registry
	Logger    *slog.Logger
	Buffer    int // changes in flight between capture and the eager connection (default 4096)
	// Tables: changes of tables not ready are not written; a transaction
	// is taken only beyond every ready table's sync LSN (TableFilter).
	Tables *TableFilter
}

// EagerWriter is a Writer with savepoints (target.Writer).
type EagerWriter interface {
	Writer
	Savepoint(ctx context.Context, name string) error
	RollbackToSavepoint(ctx context.Context, name string) error
}

type eagerKind uint8

const (
	eagerBegin eagerKind = iota
	eagerChunk
	eagerChange
	eagerAbortSub
	eagerAbort
	eagerCommit
)

type eagerItem struct {
	kind    eagerKind
	xid     uint32
	subxid  uint32
	waitFor change.LSN
	c       *change.Change
	info    change.TxnInfo
	reply   chan eagerResult
}

// NewEager validates options.
func NewEager(opts EagerOptions) *Eager {
	if opts.Buffer <= 0 {
		opts.Buffer = 4096
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = stats.NewRegistry()
	}
	return &Eager{opts: opts, log: opts.Logger.With("component", "eager"), st: opts.Stats.Component("eager"),
		in: make(chan eagerItem, opts.Buffer), stopped: make(chan struct{}), owned: map[uint32]bool{}}
}

// TryTake offers a streamed transaction at its first change. It returns true
// if Eager applies it (then every later item of xid goes to Eager).
// processed is a WAL position the source reported having decoded before this
// chunk (so the transaction ends beyond it); waitFor is the end LSN of the
// last transaction committed before this chunk.
func (e *Eager) TryTake(ctx context.Context, xid uint32, processed, waitFor change.LSN) (bool, error) {
	e.mu.Lock()
	free := e.owner == 0 && !e.held && processed >= e.skipBelow()
	e.mu.Unlock()
	if free {
		// The transactions before it are usually on their way (groups
		// being applied, the tail of a backlog): wait while apply makes
		// progress rather than send a large transaction to the queue.
		if err := e.visibleWhileProgressing(ctx, waitFor, takeStall, takeWaitMax); err != nil {
			return false, err
		}
	}
	e.mu.Lock()
	// Only when apply has caught up with everything committed before it:
	// then the transaction's first chunk can start at once (an eager
	// transaction that waits holds capture back), and after a restart only
	// beyond what the target may already have.
	if e.owner != 0 || e.held || processed < e.skipBelow() || e.opts.Watermark.VisibleLow() < waitFor {
		e.mu.Unlock()
		e.log.Debug("streamed transaction goes through the queue", "xid", xid, "processed", processed,
			"busy", e.owner != 0, "skip_below", e.opts.SkipBelow, "visible", e.opts.Watermark.VisibleLow(), "wait_for", waitFor)
		return false, nil
	}
	e.owner = xid
	e.owned[xid] = true
	e.mu.Unlock()
	return true, e.send(ctx, eagerItem{kind: eagerBegin, xid: xid, waitFor: waitFor})
}

// Owns reports whether xid is (or was, until its commit) applied eagerly.
func (e *Eager) Owns(xid uint32) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owned[xid]
}

// Chunk marks the start of a later streamed chunk of the owned transaction.
func (e *Eager) Chunk(ctx context.Context, xid uint32, waitFor change.LSN) error {
	return e.send(ctx, eagerItem{kind: eagerChunk, xid: xid, waitFor: waitFor})
}

// Add hands over one change (Eager owns it from now on). It blocks while the
// eager connection is behind; ctx bounds the wait (capture retries).
func (e *Eager) Add(ctx context.Context, xid uint32, c *change.Change) error {
	return e.send(ctx, eagerItem{kind: eagerChange, xid: xid, c: c})
}

// Abort undoes a subtransaction (subxid != xid) or the whole transaction.
// Once Run has returned there is nothing left to undo: the transaction it
// had open was rolled back on its way out.
func (e *Eager) Abort(ctx context.Context, xid, subxid uint32) error {
	if subxid != 0 && subxid != xid {
		return e.send(ctx, eagerItem{kind: eagerAbortSub, xid: xid, subxid: subxid})
	}
	if err := e.send(ctx, eagerItem{kind: eagerAbort, xid: xid}); err != nil && !errors.Is(err, errEagerStopped) {
		return err
	}
	e.release(xid)
	return nil
}

// Commit commits the eager transaction with its progress record; the caller
// (an apply worker at the transaction's commit position) has waited for
// every earlier group.
func (e *Eager) Commit(ctx context.Context, info change.TxnInfo) (change.LSN, error) {
	reply := make(chan eagerResult, 1)
	if err := e.send(ctx, eagerItem{kind: eagerCommit, xid: info.Xid, info: info, reply: reply}); err != nil {
		return 0, err
	}
	select {
	case r := <-reply:
		e.release(info.Xid)
		return r.lsn, r.err
	case <-e.stopped:
		return 0, errEagerStopped
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

type eagerResult struct {
	lsn change.LSN
	err error
}

func (e *Eager) release(xid uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.owned, xid)
	if e.owner == xid {
		e.owner = 0
	}
}

func (e *Eager) send(ctx context.Context, it eagerItem) error {
	select {
	case e.in <- it:
		return nil
	default:
	}
	e.st.Counter("producer_waits").Add(1)
	select {
	case e.in <- it:
		return nil
	case <-e.stopped:
		return errEagerStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run owns the eager connection and applies items in order until ctx ends.
// It is called once.
func (e *Eager) Run(ctx context.Context) error {
	defer close(e.stopped)
	w, closer, err := e.opts.NewWriter(ctx, e.st)
	if err != nil {
		return err
	}
	defer closer()
	r := &eagerRun{e: e, w: w}
	// Every eagerFlushEvery, rows buffered for a while are sent: a source
	// that streams slowly would otherwise keep them (up to the writer's
	// COPY flush size) out of the target and out of the counts.
	flushTick := time.NewTicker(eagerFlushEvery)
	defer flushTick.Stop()
	r.flusher, _ = w.(interface{ FlushBuffered(context.Context) error })
	for {
		e.st.SetState(stats.Idle)
		var it eagerItem
		select {
		case <-ctx.Done():
			return r.fail(ctx.Err())
		case <-flushTick.C:
			if err := r.flush(ctx); err != nil {
				return err
			}
			continue
		case it = <-e.in:
		}
		e.st.SetState(stats.Busy)
		if err := r.apply(ctx, it); err != nil {
			return err
		}
	}
}

// eagerRun is Run's state: its writer, and the transaction open on it
// (active), if any. Items come in the order capture sent them, one
// transaction at a time: Begin, then chunks, changes and subtransaction
// aborts, then its Abort or Commit.
type eagerRun struct {
	e       *Eager
	w       EagerWriter
	flusher interface{ FlushBuffered(context.Context) error } // nil if w buffers nothing

	xid       uint32
	active    bool
	savepoint []uint32 // subtransactions with a savepoint, oldest first
	started   time.Time
	n         int64

	// refused is a change the target refused while the transaction was in
	// progress, awaiting the source's verdict (refuse); nil if none. The
	// target rolled back to savepoint[refusedAt] (-1: the whole
	// transaction), and nothing is applied until that is rolled back on
	// the source too.
	refused   error
	refusedAt int
}

// fail rolls back the open transaction, if any, and returns err, with a
// hint for a conflict.
func (r *eagerRun) fail(err error) error {
	if r.active {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.w.Rollback(rctx)
		cancel()
	}
	return eagerConflictHint(err)
}

// flush sends the rows the writer has buffered of the open transaction.
func (r *eagerRun) flush(ctx context.Context) error {
	if r.active && r.flusher != nil && r.refused == nil {
		r.e.st.SetState(stats.Busy)
		if err := r.flusher.FlushBuffered(ctx); err != nil {
			return r.refuse(ctx, err)
		}
	}
	return nil
}

// refuse takes err, the target's refusal of a change of the transaction in
// progress (surfacing at the change or at a later flush), as no verdict
// yet: the source may have rolled the change back already, its STREAM
// ABORT still to come (see Eager). The target rolls back to the innermost
// savepoint (taken before the first change of the innermost subtransaction;
// the refused change came after it), or the whole transaction without one,
// and records err; nothing is applied until the source rolls that
// savepoint back too (apply, eagerAbortSub), and the commit fails with err.
// It returns nil, or an error that ends Run: the run is ending, the
// rollback failed too (the connection is gone), or err is eager apply's
// own limit (schema.ErrAddedColumnGone: with --ddl=relation, what the rows
// got at a column added in progress is not in the source's catalog before
// the commit; the run stops at once, as documented, to be restarted after
// it).
func (r *eagerRun) refuse(ctx context.Context, err error) error {
	err = fmt.Errorf("eager apply of transaction %d (in progress): %w", r.xid, err)
	if ctx.Err() != nil || errors.Is(err, schema.ErrAddedColumnGone) {
		return r.fail(err)
	}
	if n := len(r.savepoint); n > 0 {
		if rerr := r.w.RollbackToSavepoint(ctx, savepointName(r.savepoint[n-1])); rerr != nil {
			return r.fail(fmt.Errorf("%w (and then: %w)", err, rerr))
		}
		r.refusedAt = n - 1
	} else {
		r.active = false
		if rerr := r.w.Rollback(ctx); rerr != nil {
			return eagerConflictHint(fmt.Errorf("%w (and then: %w)", err, rerr))
		}
		r.savepoint, r.refusedAt = r.savepoint[:0], -1
	}
	r.refused = err
	r.e.st.Counter("refused_in_progress").Add(1)
	r.e.log.Info("the target refused a change of a transaction still in progress on the source: nothing more of it is applied until the source rolls the change back (a subtransaction aborted on the source before the walsender streamed it), else its commit fails",
		"xid", r.xid, "err", err)
	return nil
}

// apply applies one item. An error ends Run: the transaction is rolled
// back (but for a failed rollback or commit, which end it anyway).
func (r *eagerRun) apply(ctx context.Context, it eagerItem) error {
	e, w := r.e, r.w
	switch it.kind {
	case eagerBegin:
		if err := e.waitApplied(ctx, it.waitFor); err != nil {
			return r.fail(err)
		}
		if err := w.Begin(ctx); err != nil {
			return r.fail(fmt.Errorf("eager apply of transaction %d: %w", it.xid, err))
		}
		expectChanges(w, math.MaxInt) // large by definition
		r.xid, r.active, r.savepoint, r.started, r.n = it.xid, true, r.savepoint[:0], time.Now(), 0
		r.refused = nil
		e.log.Debug("eager apply started", "xid", r.xid)
	case eagerChunk:
		if err := e.waitApplied(ctx, it.waitFor); err != nil {
			return r.fail(err)
		}
	case eagerChange:
		if r.refused != nil {
			return nil // awaiting the source's verdict on a refused change (refuse)
		}
		return r.write(ctx, it.c)
	case eagerAbortSub:
		if i := slices.Index(r.savepoint, it.subxid); i >= 0 {
			if err := w.RollbackToSavepoint(ctx, savepointName(it.subxid)); err != nil {
				return r.fail(fmt.Errorf("eager apply of transaction %d: abort subtransaction %d: %w", r.xid, it.subxid, err))
			}
			r.savepoint = r.savepoint[:i] // its descendants went with it
			if r.refused != nil && i <= r.refusedAt {
				// Everything after this savepoint's first change,
				// the refused change with it, was rolled back on
				// the source: the refusal was no error.
				e.log.Info("the change the target refused was rolled back on the source: apply goes on", "xid", r.xid, "subxid", it.subxid)
				r.refused = nil
			}
		}
	case eagerAbort:
		if err := w.Rollback(ctx); err != nil {
			return fmt.Errorf("eager apply of transaction %d: roll back: %w", r.xid, err)
		}
		r.active, r.refused = false, nil
		e.st.Counter("aborted_txns").Add(1)
		e.log.Debug("eager transaction aborted on the source", "xid", r.xid, "changes", r.n)
	case eagerCommit:
		return r.commit(ctx, it)
	}
	return nil
}

// write writes change c of the open transaction, under a savepoint of its
// subtransaction taken at the subtransaction's first change; a change of a
// table not ready is left out.
func (r *eagerRun) write(ctx context.Context, c *change.Change) error {
	c, keep := r.e.opts.Tables.Keep(c, 0)
	if !keep {
		return nil // a table not ready: its copy comes later (TableFilter)
	}
	if c.Xid != 0 && c.Xid != r.xid && !slices.Contains(r.savepoint, c.Xid) {
		// (Sending what is buffered first: an error may be an earlier
		// change's.)
		if err := r.w.Savepoint(ctx, savepointName(c.Xid)); err != nil {
			return r.refuse(ctx, err)
		}
		r.savepoint = append(r.savepoint, c.Xid)
	}
	if err := r.w.Write(ctx, c); err != nil {
		return r.refuse(ctx, err)
	}
	r.n++ // the writer counts items and bytes on the same component
	return nil
}

// commit commits the open transaction with its progress record (it.info's
// end LSN) and replies to Commit; a failed commit ends Run too.
func (r *eagerRun) commit(ctx context.Context, it eagerItem) error {
	e := r.e
	if r.refused != nil {
		// Committed on the source: the refusal stands.
		err := r.fail(fmt.Errorf("commit eagerly applied transaction %d (end %s): %w", r.xid, it.info.EndLSN, r.refused))
		r.active = false
		it.reply <- eagerResult{err: err}
		return err
	}
	lsn, err := r.w.CommitLSN(ctx, []change.LSN{it.info.EndLSN})
	r.active = false
	if err != nil {
		err = eagerConflictHint(fmt.Errorf("commit eagerly applied transaction %d (end %s): %w", r.xid, it.info.EndLSN, err))
		it.reply <- eagerResult{err: err}
		return err
	}
	e.st.Counter("eager_txns").Add(1)
	e.log.Debug("eager transaction committed", "xid", r.xid, "changes", r.n, "elapsed", time.Since(r.started).Round(time.Millisecond))
	it.reply <- eagerResult{lsn: lsn}
	return nil
}

// eagerFlushEvery: how often Run sends what the writer has buffered of the
// open transaction.
const eagerFlushEvery = time.Second

// TryTake waits for the transactions before a streamed one to be applied
// while apply makes progress towards them: it gives up once the visible
// watermark has not moved for takeStall, or after takeWaitMax in all. A
// fixed wait was too short on a loaded machine, where apply can be seconds
// behind capture at the end of a backlog yet steadily catching up; a wait
// with no progress at all means something else holds apply (a group waiting
// to fill, a lock), and then the transaction goes through the queue. A
// stall is a second: on a busy machine apply's first group (its workers
// reading the tables' catalog) or one slow commit held the watermark for
// over 200 ms while apply was about to catch up, and the large
// transaction went through the queue; waiting a second more where apply
// is really held costs little beside the transaction's size.
const (
	takeStall   = time.Second
	takeWaitMax = 10 * time.Second
)

// visibleWhileProgressing waits until every transaction ending at or before
// end is visible on the target, as long as the visible watermark advances at
// least every stall and for at most max in all; it returns nil also when it
// gives up (the caller looks at the watermark again).
func (e *Eager) visibleWhileProgressing(ctx context.Context, end change.LSN, stall, max time.Duration) error {
	wm := e.opts.Watermark
	if wm.VisibleLow() >= end {
		return nil
	}
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	idle := time.NewTimer(stall)
	defer idle.Stop()
	last := wm.VisibleLow()
	for {
		ch := wm.Changed()
		low := wm.VisibleLow()
		if low >= end {
			return nil
		}
		if low != last {
			last = low
			idle.Reset(stall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			e.log.Debug("stopped waiting for the transactions before a streamed one", "reason", "wait limit", "limit", max, "visible", low, "wait_for", end)
			return nil
		case <-idle.C:
			e.log.Debug("stopped waiting for the transactions before a streamed one", "reason", "apply made no progress", "stall", stall, "visible", low, "wait_for", end)
			return nil
		case <-ch:
		}
	}
}

// waitApplied waits until every transaction ending at or before end is
// committed (visible) on the target; durability does not matter for order.
func (e *Eager) waitApplied(ctx context.Context, end change.LSN) error {
	if end == 0 {
		return nil
	}
	e.st.SetState(stats.Waiting)
	for e.opts.Watermark.VisibleLow() < end {
		ch := e.opts.Watermark.Changed()
		if e.opts.Watermark.VisibleLow() >= end {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
	e.st.SetState(stats.Busy)
	return nil
}

func savepointName(subxid uint32) string { return "rs_sub_" + strconv.FormatUint(uint64(subxid), 10) }
