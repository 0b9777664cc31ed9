package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// Source is where committed transactions come from (the queue).
type Source interface {
	Next(ctx context.Context) (*queue.Txn, error)
	TryNext() (*queue.Txn, bool)
}

// Options configure the apply stage.
type Options struct {
	TargetDSN string
	// Writer is every worker's target.WriterOptions (the slot, binary
	// values, schema changes from Relation messages, ...); New sets the
	// per-worker Stats and Logger, DeferPosition and MultiRowInserts.
	// Apply itself reads its Slot (messages), Binary (the error queue's
	// encoding) and RelationDDL (the first change of every relation is a
	// barrier, deps.go).
	Writer      target.WriterOptions
	Parallelism int                // apply workers (connections to the target)
	CommitOrder config.CommitOrder // full: target commits in source commit order; dependent: only dependencies ordered

	GroupMaxTxns  int   // source transactions per target transaction at most
	GroupMaxBytes int64 // accounted bytes per target transaction at most (a larger single txn goes alone)

	// Behind reports whether the source is far ahead (a backlog being
	// caught up: capture.Capture.Behind); nil: never. While it is, the
	// coordinator waits up to CatchUpWait (0: never) for more transactions
	// to fill a group to CatchUpGroupBytes: one larger target transaction
	// costs the target less than many small ones (COPY set-up, commit,
	// applied record), and latency does not matter in a backlog.
	Behind            func() bool
	CatchUpWait       time.Duration
	CatchUpGroupBytes int64 // default GroupMaxBytes/4
	// GroupWait: while transactions come less than GroupWait apart, a
	// group waits up to GroupWait for more (linger.go); 0: never. Not
	// while Gathers (capture.Capture.Gathers; nil: never) reports that
	// capture already waits for them.
	GroupWait time.Duration
	Gathers   func() bool

	// Collapse folds repeated changes to one key within a group where the
	// target table allows it (see collapse.go).
	Collapse bool

	// Applied says whether a source transaction (by end LSN) is already on the
	// target — the record loaded at start; such transactions are skipped.
	Applied func(end change.LSN) bool

	Watermark *Watermark
	Stats     *stats.Registry
	Logger    *slog.Logger

	// OnError: a group the target refuses for its data is applied again one
	// source transaction at a time, and the one that fails stops the run
	// (stop) or is parked in the error queue (park); see conflict.go.
	OnError config.OnError
	// SkipRequested reports whether a source transaction is to be skipped
	// (parked as skipped, not applied): `repstream errors skip --lsn`. nil:
	// none. The coordinator calls it once per transaction not yet applied,
	// in commit order, on its goroutine; it may consume the request.
	SkipRequested func(change.TxnInfo) bool

	// Eager, if set, applies large streamed transactions before they commit
	// (*Eager); the coordinator commits them at their position in commit
	// order. Leave it nil (not a nil *Eager) when there is none.
	Eager EagerCommitter

	// NewWriter opens worker id's writer; nil means a target.Writer on a new
	// connection to TargetDSN. Tests inject fakes here.
	NewWriter func(ctx context.Context, id int, st *stats.Component) (Writer, func(), error)

	// Tables, if set, skips the changes of tables copied at their own
	// snapshot that the copy already holds (TableFilter).
	Tables *TableFilter
	// Quiesce enables Applier.Quiesce (pausing apply between transactions).
	Quiesce bool

	// FlushedLSN reads the target's pg_current_wal_insert_lsn() and
	// pg_current_wal_flush_lsn(); nil means a connection to TargetDSN.
	// Transactions become Done in the watermark only once the target's WAL
	// is flushed past their commit (durable.go).
	FlushedLSN func(ctx context.Context) (insert, flush change.LSN, err error)

	// LinkWatch, if set, watches the target connections apply opens for a
	// silent link (target.LinkWatch); the engine runs it.
	LinkWatch *target.LinkWatch
}

// workerWriter is worker id's writer options: the template, with the
// worker's stats and logger, the position read by durability's poll
// (durable.go), and multi-row INSERTs.
func (opts *Options) workerWriter(id int, st *stats.Component) target.WriterOptions {
	w := opts.Writer
	w.Stats, w.Logger = st, opts.Logger.With("component", "apply", "worker", id)
	w.DeferPosition, w.MultiRowInserts = true, true
	return w
}

// EagerCommitter is what the coordinator and workers need of eager apply
// (*Eager): whether it owns a streamed transaction, and its commit once every
// earlier group has committed.
type EagerCommitter interface {
	Owns(xid uint32) bool
	Commit(ctx context.Context, info change.TxnInfo) (change.LSN, error)
}

// Compile-time pins: the implementations the engine wires in.
var (
	_ EagerCommitter = (*Eager)(nil)
	_ Writer         = (*target.Writer)(nil)
	_ EagerWriter    = (*target.Writer)(nil)
)

// Writer applies one target transaction at a time (target.Writer).
type Writer interface {
	Begin(ctx context.Context) error
	Write(ctx context.Context, c *change.Change) error
	// CommitLSN commits, recording the applied source transactions, and
	// returns a target WAL position at or after the commit (0: durable now).
	CommitLSN(ctx context.Context, applied []change.LSN) (change.LSN, error)
	Rollback(ctx context.Context) error
}

// SourceCommitter is a Writer told the commit time of the source
// transaction whose changes it is given next (target.Writer: its
// CheckLocalWrites compares it with the target row's own).
type SourceCommitter interface {
	SourceCommit(t time.Time)
}

// LockHolder is a Writer whose session can tell whether it holds a lock
// that another session waits for (target.Writer). A worker that waits for
// earlier groups before it commits asks so (waitEarlier): an earlier group
// held up by its uncommitted rows would wait for it for ever, a deadlock
// PostgreSQL cannot see (it knows nothing of apply's commit order).
type LockHolder interface {
	// BackendPID is the session's server process (0: not connected).
	BackendPID() uint32
	// Blocks reports whether the session holds a lock one of pids waits for.
	Blocks(ctx context.Context, pids []uint32) (bool, error)
}

// errYield: a group gave way to an earlier one its uncommitted rows held
// up (waitEarlier); it is rolled back and applied again once every
// earlier group has committed.
var errYield = errors.New("an earlier group waits for a lock this group holds")

// yieldCheck is how long a worker waits for the earlier groups before it
// asks whether its own locks hold one of them up, and how often again
// (PostgreSQL's deadlock_timeout is a second by default too).
const yieldCheck = time.Second

// keyedLimit is the size above which a transaction is not scanned for its
// write set and is applied as a barrier instead (large and spilled
// transactions would be read twice).
const keyedLimit = 10000

// Applier runs the coordinator and the workers.
//
// Goroutines: one coordinator takes transactions from the source in commit
// order, groups them and computes dependencies; Parallelism workers each own
// one target connection and apply groups. A worker waits for a group's
// dependencies to commit before it starts it, and with commit order "full"
// also for every earlier group before it commits. Workers take groups in
// sequence order from one channel, so the oldest group in flight never waits
// on a younger one: the pipeline cannot deadlock on its own waits. A
// younger group whose row locks hold up an older one gives way while it
// waits to commit (waitEarlier).
type Applier struct {
	opts    Options
	log     *slog.Logger
	commits *commitLog
	coord   *stats.Component
	durable *durability
	quiesce chan quiesceReq // Quiesce requests; nil without Options.Quiesce
}

// New validates options.
func New(opts Options) (*Applier, error) {
	if opts.Watermark == nil || opts.TargetDSN == "" && opts.NewWriter == nil {
		return nil, errors.New("apply: watermark and target DSN are required")
	}
	if opts.NewWriter == nil {
		opts.NewWriter = func(ctx context.Context, id int, st *stats.Component) (Writer, func(), error) {
			return target.OpenSession(ctx, target.SessionOptions{
				DSN: opts.TargetDSN, AppName: "repstream-apply." + strconv.Itoa(id), Watch: opts.LinkWatch,
				Writer: opts.workerWriter(id, st),
			})
		}
	}
	if opts.Parallelism < 1 {
		opts.Parallelism = 1
	}
	if opts.GroupMaxTxns < 1 {
		opts.GroupMaxTxns = 1
	}
	if opts.GroupMaxBytes < 1 {
		opts.GroupMaxBytes = 1
	}
	if opts.CatchUpGroupBytes <= 0 {
		opts.CatchUpGroupBytes = max(opts.GroupMaxBytes/4, 1)
	}
	if opts.Applied == nil {
		opts.Applied = func(change.LSN) bool { return false }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = stats.NewRegistry()
	}
	a := &Applier{
		opts:    opts,
		log:     opts.Logger.With("component", "apply"),
		commits: newCommitLog(),
		coord:   opts.Stats.Component("coordinator"),
	}
	a.durable = newDurability(opts.Watermark, opts.FlushedLSN, a.coord)
	if opts.Quiesce {
		a.quiesce = make(chan quiesceReq)
	}
	return a, nil
}

// Run applies until ctx ends or an error occurs.
func (a *Applier) Run(ctx context.Context, src Source) error {
	g, ctx := errgroup.WithContext(ctx)
	if a.durable.flushed == nil && a.opts.TargetDSN != "" {
		conn, err := target.ConnectWatched(ctx, a.opts.TargetDSN, "repstream-flush", a.opts.LinkWatch)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		a.durable.flushed = func(ctx context.Context) (insert, flush change.LSN, err error) {
			var i, f string
			if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text").Scan(&i, &f); err != nil {
				return 0, 0, fmt.Errorf("read the target's flushed WAL position: %w", err)
			}
			if insert, err = change.ParseLSN(i); err == nil {
				flush, err = change.ParseLSN(f)
			}
			return insert, flush, err
		}
	}
	g.Go(func() error { return a.durable.run(ctx) })
	work := make(chan *group, a.opts.Parallelism)
	workers := make([]*worker, 0, a.opts.Parallelism)
	for i := 0; i < a.opts.Parallelism; i++ {
		w, err := a.newWorker(ctx, i)
		if err != nil {
			for _, w := range workers {
				w.close()
			}
			close(work)
			_ = g.Wait()
			return err
		}
		workers = append(workers, w)
	}
	for _, w := range workers {
		w.peers = workers
		g.Go(func() error {
			defer w.close()
			return w.run(ctx, work)
		})
	}
	g.Go(func() error {
		defer close(work)
		return a.newCoordinator(src, work).run(ctx)
	})
	return g.Wait()
}

type worker struct {
	a         *Applier
	id        int
	w         Writer
	closer    func()
	stats     *stats.Component
	retries   *atomic.Int64 // groups applied again after a deadlock
	collapsed *atomic.Int64 // source changes saved by folding
	folder    folder
	// peers are every worker of the Applier (this one too), set before
	// they run; pid is this worker's session process as of its current
	// group (LockHolder; 0: none) and seq that group's number, read by the
	// others' waitEarlier.
	peers []*worker
	pid   atomic.Uint32
	seq   atomic.Uint64
}

func (a *Applier) newWorker(ctx context.Context, id int) (*worker, error) {
	st := a.opts.Stats.Component("apply." + strconv.Itoa(id))
	w, closer, err := a.opts.NewWriter(ctx, id, st)
	if err != nil {
		return nil, err
	}
	return &worker{a: a, id: id, w: w, stats: st, closer: closer, retries: st.Counter("lock_retries"), collapsed: st.Counter("collapsed_changes")}, nil
}

func (w *worker) close() { w.closer() }

func (w *worker) run(ctx context.Context, work <-chan *group) error {
	full := w.a.opts.CommitOrder != config.CommitDependent
	ends := make([]change.LSN, 0, 64)
	for {
		w.stats.SetState(stats.Idle)
		var g *group
		select {
		case <-ctx.Done():
			return ctx.Err()
		case g = <-work:
			if g == nil {
				return nil
			}
		}
		w.stats.SetState(stats.Waiting)
		if err := w.a.commits.wait(ctx, g.seq, g.deps, g.allBefore); err != nil {
			return err
		}
		w.stats.SetState(stats.Busy)
		ends = ends[:0]
		for _, t := range g.txns {
			ends = append(ends, t.Info.EndLSN)
		}
		if lh, ok := w.w.(LockHolder); ok {
			w.pid.Store(lh.BackendPID()) // a reconnected session has another
		}
		w.seq.Store(g.seq)
		lsn, err := w.apply(ctx, g, full, ends)
		// Dependencies are computed from replica-identity keys only: two
		// groups in flight can still collide on another unique index — a
		// value freed by an earlier group that has not committed yet (a
		// unique violation), or locks taken in crossing order (a deadlock).
		// Roll the group back and apply it again once every earlier group
		// has committed; it then waits for nothing but later groups, which
		// wait for it before they commit (full order) or retry too.
		for attempt := 1; err != nil && !g.eager && attempt <= maxLockRetries && ctx.Err() == nil &&
			(target.Retryable(err, attempt == 1) || errors.Is(err, errYield)); attempt++ {
			w.rollback()
			if errors.Is(err, errYield) {
				w.a.log.Info("group rolled back: an earlier group waits for a lock it holds (a row both write, such as a table's record in repstream.tables); applying it again after the earlier groups commit",
					"worker", w.id, "first_end", ends[0], "last_end", ends[len(ends)-1])
			} else {
				w.a.log.Warn("group rolled back by a lock conflict or a duplicate key an earlier group may free: applying it again after the earlier groups commit",
					"worker", w.id, "first_end", ends[0], "last_end", ends[len(ends)-1], "attempt", attempt, "err", err)
			}
			w.retries.Add(1)
			w.stats.SetState(stats.Waiting)
			if err := w.a.commits.wait(ctx, g.seq, nil, true); err != nil {
				return err
			}
			w.stats.SetState(stats.Busy)
			lsn, err = w.apply(ctx, g, full, ends)
		}
		if _, conflict := target.AsConflict(err); conflict && !g.eager && !g.skip && ctx.Err() == nil {
			w.rollback()
			lsn, err = w.isolate(ctx, g, err)
		}
		if err != nil {
			w.rollback()
			return err
		}
		// Visible now: dependants may start. Durable (and so acknowledged)
		// once the target's WAL is flushed past lsn.
		w.a.log.Debug("group committed", "worker", w.id, "seq", g.seq, "txns", len(g.txns),
			"first_end", ends[0], "last_end", ends[len(ends)-1], "eager", g.eager, "target_lsn", lsn)
		w.a.commits.markDone(g.seq)
		for _, e := range ends {
			w.a.opts.Watermark.Visible(e)
		}
		w.a.durable.add(lsn, ends)
		for _, t := range g.txns {
			t.Release()
		}
	}
}

// maxLockRetries bounds how often a group is applied again after the
// target aborted it for a deadlock or serialization failure.
const maxLockRetries = 5

func (w *worker) rollback() {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = w.w.Rollback(rctx)
	cancel()
}

func (w *worker) apply(ctx context.Context, g *group, full bool, ends []change.LSN) (change.LSN, error) {
	if g.eager {
		// Every earlier group has committed (the group is a barrier).
		return w.a.opts.Eager.Commit(ctx, g.txns[0].Info)
	}
	if g.skip {
		return w.skipRequested(ctx, g)
	}
	if err := w.w.Begin(ctx); err != nil {
		return 0, fmt.Errorf("apply worker %d: begin: %w", w.id, err)
	}
	expectChanges(w.w, g.changes())
	if cw, ok := w.w.(collapsibleWriter); ok && g.repeats && w.a.opts.Collapse {
		if err := w.writeFolded(ctx, g, cw); err != nil {
			return 0, err
		}
	} else if err := w.writeAll(ctx, g); err != nil {
		return 0, err
	}
	if full && g.seq > 1 {
		w.stats.SetState(stats.Waiting)
		if err := w.waitEarlier(ctx, g.seq); err != nil {
			return 0, err
		}
		w.stats.SetState(stats.Busy)
	}
	lsn, err := w.w.CommitLSN(ctx, ends)
	if err != nil {
		first := g.txns[0].Info
		return 0, fmt.Errorf("commit %d transaction(s) from end %s: %w", len(g.txns), first.EndLSN, err)
	}
	return lsn, nil
}

// waitEarlier waits, with g (number seq) written and not committed, for
// every earlier group to commit. Dependencies come from replica-identity
// keys, so an earlier group may still need a row this one wrote: the
// same table's record when both take a table up for a copy
// (target.Writer's checkRecorded), a unique value of another index. It
// would wait for this group's commit, and this group for its own. So
// after each yieldCheck of waiting, the worker asks whether its session
// blocks another worker's (LockHolder); if so it returns errYield, and
// run rolls g back and applies it again after the earlier groups.
func (w *worker) waitEarlier(ctx context.Context, seq uint64) error {
	lh, ok := w.w.(LockHolder)
	if !ok || len(w.peers) < 2 {
		return w.a.commits.wait(ctx, seq, nil, true)
	}
	var pids []uint32
	for {
		wctx, cancel := context.WithTimeout(ctx, yieldCheck)
		err := w.a.commits.wait(wctx, seq, nil, true)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		// The workers applying earlier groups: a later one waiting for
		// this group's rows waits for its commit anyway.
		pids = pids[:0]
		for _, p := range w.peers {
			if pid := p.pid.Load(); p != w && pid != 0 && p.seq.Load() < seq {
				pids = append(pids, pid)
			}
		}
		blocks, err := lh.Blocks(ctx, pids)
		if err != nil {
			return fmt.Errorf("apply worker %d: look up whether an earlier group waits for this one's locks: %w", w.id, err)
		}
		if blocks {
			return errYield
		}
	}
}

// eachChange calls fn with every change of g in order, naming the
// transaction in fn's errors; a writer that checks the target's own writes
// against the source's commit time (SourceCommitter) is told each
// transaction's before its changes.
func eachChange(g *group, tables *TableFilter, wr Writer, fn func(c *change.Change) error) error {
	sc, _ := wr.(SourceCommitter)
	for _, t := range g.txns {
		if sc != nil {
			sc.SourceCommit(t.Info.CommitTime)
		}
		for c, err := range t.Changes() {
			if err != nil {
				return fmt.Errorf("read transaction %d (end %s) from the queue: %w", t.Info.Xid, t.Info.EndLSN, err)
			}
			var keep bool
			if c, keep = tables.Keep(c, t.Info.EndLSN); !keep {
				continue // in the table's copy (TableFilter)
			}
			if err := fn(c); err != nil {
				return fmt.Errorf("apply transaction %d (commit %s, end %s): %w", t.Info.Xid, t.Info.CommitLSN, t.Info.EndLSN, err)
			}
		}
	}
	return nil
}

// writeAll writes every change of g in order.
func (w *worker) writeAll(ctx context.Context, g *group) error {
	return eachChange(g, w.a.opts.Tables, w.w, func(c *change.Change) error { return w.w.Write(ctx, c) })
}

// writeFolded writes g's changes with repeated changes to one key folded
// (collapse). Groups with repeats are never spilled (spilled transactions
// are barriers), so the changes stay in memory while they are folded.
func (w *worker) writeFolded(ctx context.Context, g *group, cw collapsibleWriter) error {
	defer w.folder.release()
	all := w.folder.in[:0]
	if err := eachChange(g, w.a.opts.Tables, nil, func(c *change.Change) error { all = append(all, c); return nil }); err != nil {
		return err
	}
	w.folder.in = all
	first, last := g.txns[0].Info, g.txns[len(g.txns)-1].Info
	out, saved, err := w.folder.fold(all, func(rel *change.Relation) (bool, error) { return cw.Collapsible(ctx, rel) })
	if err != nil {
		return fmt.Errorf("apply transactions from end %s to %s: %w", first.EndLSN, last.EndLSN, err)
	}
	w.collapsed.Add(int64(saved))
	for _, c := range out {
		if err := w.w.Write(ctx, c); err != nil {
			return fmt.Errorf("apply transactions from end %s to %s (change at %s): %w", first.EndLSN, last.EndLSN, c.LSN, err)
		}
	}
	return nil
}
