package apply

import (
	"context"
	"fmt"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// Data conflicts (--on-error).
//
// A group the target refuses for its data (a *target.ConflictError: a
// duplicate key that remains after the retry of Retryable, a missing row, a
// violated constraint, a refused value) is rolled back; once every earlier
// group has committed, its source transactions are applied one per target
// transaction (isolate). The one that fails again is known exactly: with
// --on-error stop the run stops with an error naming its table, key, kind
// and LSNs and the command that skips it; with park it is put into the
// error queue (target.Writer.Park: repstream.errors and repstream.applied
// in one target transaction) and the next ones go on. A later transaction
// that conflicts because an earlier one was parked is parked as well.
//
// A transaction whose commit or end LSN the user asked to skip (Options.
// SkipRequested, `repstream errors skip --lsn`) is a group of its own
// (group.skip) that the worker parks in state "skipped" without applying
// it.
//
// Nothing of this runs while no group fails: the fast path is unchanged.

// parker is what parking needs of a Writer (target.Writer).
type parker interface {
	Park(ctx context.Context, p target.Parked, applied []change.LSN) (int64, change.LSN, error)
}

var _ parker = (*target.Writer)(nil)

// isolate applies g's transactions one per target transaction after g
// failed with a data conflict (cause); see above. It returns a target WAL
// position at or after the last commit.
func (w *worker) isolate(ctx context.Context, g *group, cause error) (change.LSN, error) {
	first, last := g.txns[0].Info, g.txns[len(g.txns)-1].Info
	w.a.log.Info("data conflict: applying the group's source transactions one at a time after the earlier groups commit",
		"worker", w.id, "txns", len(g.txns), "first_end", first.EndLSN, "last_end", last.EndLSN, "err", cause)
	w.stats.SetState(stats.Waiting)
	if err := w.a.commits.wait(ctx, g.seq, nil, true); err != nil {
		return 0, err
	}
	w.stats.SetState(stats.Busy)
	var pos change.LSN
	for _, t := range g.txns {
		lsn, err := w.applyOne(ctx, t)
		for attempt := 1; err != nil && attempt <= maxLockRetries && ctx.Err() == nil && target.Retryable(err, false); attempt++ {
			w.rollback()
			w.retries.Add(1)
			lsn, err = w.applyOne(ctx, t)
		}
		if err != nil {
			w.rollback()
			ce, ok := target.AsConflict(err)
			if !ok {
				return 0, err
			}
			describeConflict(ce, t)
			w.a.conflicts().Counter(string(ce.Kind)).Add(1)
			if w.a.opts.OnError != config.OnErrorPark {
				return 0, fmt.Errorf("%w; the run stops (--on-error stop): mend the target and run again, run with --on-error park, "+
					"or skip this source transaction with: repstream errors skip --slot %s --lsn %s (and the run's --target)",
					ce, w.a.opts.Writer.Slot, ce.EndLSN)
			}
			if lsn, err = w.park(ctx, t, ce); err != nil {
				return 0, err
			}
		}
		pos = max(pos, lsn)
	}
	return pos, nil
}

// applyOne applies one source transaction in one target transaction (no
// folding: the failing change keeps its own LSN).
func (w *worker) applyOne(ctx context.Context, t *queue.Txn) (change.LSN, error) {
	if err := w.w.Begin(ctx); err != nil {
		return 0, fmt.Errorf("apply worker %d: begin: %w", w.id, err)
	}
	if err := w.writeAll(ctx, &group{txns: []*queue.Txn{t}}); err != nil {
		return 0, err
	}
	lsn, err := w.w.CommitLSN(ctx, []change.LSN{t.Info.EndLSN})
	if err != nil {
		return 0, fmt.Errorf("commit transaction %d (end %s): %w", t.Info.Xid, t.Info.EndLSN, err)
	}
	return lsn, nil
}

// describeConflict fills in ce what the Writer could not know: the source
// transaction, and the key from the change when the server's error did not
// name it.
func describeConflict(ce *target.ConflictError, t *queue.Txn) {
	ce.Xid, ce.CommitLSN, ce.EndLSN = t.Info.Xid, t.Info.CommitLSN, t.Info.EndLSN
	if ce.Key != "" || ce.LSN == 0 {
		return
	}
	for c, err := range t.Changes() {
		if err != nil {
			return
		}
		if c.LSN == ce.LSN && c.Op == ce.Op && c.Rel != nil && c.Rel.String() == ce.Table {
			ce.Key = errqueue.NewTexts().Key(c)
			return
		}
	}
}

// park puts t into the error queue for ce and records it as applied.
func (w *worker) park(ctx context.Context, t *queue.Txn, ce *target.ConflictError) (change.LSN, error) {
	p := target.Parked{Info: t.Info, Table: ce.Table, Key: ce.Key, Op: ce.Op, Kind: string(ce.Kind),
		SQLState: ce.SQLState, Message: ce.Message(), State: "parked"}
	id, lsn, err := w.parkTxn(ctx, t, p)
	if err != nil {
		return 0, fmt.Errorf("%w (while parking after: %w)", err, ce)
	}
	w.a.errorQueue().Counter("parked_txns").Add(1)
	w.a.log.Warn("source transaction parked in the error queue", "worker", w.id, "id", id, "table", ce.Table, "key", ce.Key,
		"kind", ce.Kind, "xid", t.Info.Xid, "commit_lsn", t.Info.CommitLSN, "end_lsn", t.Info.EndLSN, "err", ce.Message())
	return lsn, nil
}

// skipRequested parks g's one transaction as skipped, without applying it.
func (w *worker) skipRequested(ctx context.Context, g *group) (change.LSN, error) {
	t := g.txns[0]
	p := target.Parked{Info: t.Info, Kind: "skip_lsn", State: "skipped",
		Message: "skipped on request (repstream errors skip --lsn)"}
	id, lsn, err := w.parkTxn(ctx, t, p)
	if err != nil {
		return 0, err
	}
	w.a.errorQueue().Counter("skipped_on_request").Add(1)
	w.a.log.Warn("source transaction skipped on request", "worker", w.id, "id", id,
		"xid", t.Info.Xid, "commit_lsn", t.Info.CommitLSN, "end_lsn", t.Info.EndLSN)
	return lsn, nil
}

func (w *worker) parkTxn(ctx context.Context, t *queue.Txn, p target.Parked) (int64, change.LSN, error) {
	pw, ok := w.w.(parker)
	if !ok {
		return 0, 0, fmt.Errorf("apply worker %d cannot park source transaction %d (end %s)", w.id, t.Info.Xid, t.Info.EndLSN)
	}
	if t.Bytes() > maxParkBytes {
		if p.State != "skipped" {
			return 0, 0, fmt.Errorf("source transaction %d (end %s) is too large to park (%d bytes of changes, at most %d): "+
				"mend the target and run again, or skip it with repstream errors skip --slot %s --lsn %s",
				t.Info.Xid, t.Info.EndLSN, t.Bytes(), maxParkBytes, w.a.opts.Writer.Slot, t.Info.EndLSN)
		}
		p.Changes, p.Message = []byte(`{"version":1,"binary":false,"relations":[],"changes":[]}`), p.Message+"; its changes are not kept (too large)"
		return pw.Park(ctx, p, nil)
	}
	// Through writeAll, with a recorder for a writer: exactly the changes
	// apply would write are kept, whatever writeAll leaves out.
	rec := &recorder{enc: errqueue.NewEncoder(w.a.opts.Writer.Binary)}
	saved := w.w
	w.w = rec
	err := w.writeAll(ctx, &group{txns: []*queue.Txn{t}})
	w.w = saved
	if err == nil {
		p.Changes, err = rec.enc.Bytes()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("park source transaction %d (end %s): %w", t.Info.Xid, t.Info.EndLSN, err)
	}
	return pw.Park(ctx, p, nil)
}

// recorder is a Writer that encodes what it is given (parkTxn).
type recorder struct{ enc *errqueue.Encoder }

func (r *recorder) Begin(context.Context) error { return nil }
func (r *recorder) Write(_ context.Context, c *change.Change) error {
	r.enc.Add(c)
	return nil
}
func (r *recorder) CommitLSN(context.Context, []change.LSN) (change.LSN, error) { return 0, nil }
func (r *recorder) Rollback(context.Context) error                              { return nil }

// maxParkBytes bounds the changes of a parked transaction (accounted
// bytes): the encoding is built in memory, and a jsonb value holds at most
// 255 MB (base64 adds a third).
const maxParkBytes = 128 << 20

// expectChanges tells a Writer that plans by it (target.Writer.ExpectChanges)
// how many changes the transaction will have.
func expectChanges(w Writer, n int) {
	if e, ok := w.(interface{ ExpectChanges(int) }); ok {
		e.ExpectChanges(n)
	}
}

// changes counts g's source changes.
func (g *group) changes() int {
	n := 0
	for _, t := range g.txns {
		n += t.Len()
	}
	return n
}

// conflicts is the stats component counting data conflicts, one counter
// per kind (target.ConflictKind) and nothing else: monitoring exports its
// counters as conflicts by kind.
func (a *Applier) conflicts() *stats.Component { return a.opts.Stats.Component(stats.CompConflicts) }

// errorQueue is the stats component counting parked transactions and
// transactions skipped on request.
func (a *Applier) errorQueue() *stats.Component { return a.opts.Stats.Component("error_queue") }

func (a *Applier) skipRequested(txn *queue.Txn) bool {
	return a.opts.SkipRequested != nil && a.opts.SkipRequested(txn.Info)
}

// eagerConflictHint explains a data conflict of a transaction applied
// while in progress: its LSNs are not known yet, so it can be neither
// parked nor skipped by LSN; a run with --eager=false stops at its commit
// with them.
func eagerConflictHint(err error) error {
	if _, ok := target.AsConflict(err); !ok {
		return err
	}
	return fmt.Errorf("%w; a transaction applied while in progress (--eager) is not parked: run again with --eager=false "+
		"to stop at its commit with its LSN (or to park it with --on-error park)", err)
}
