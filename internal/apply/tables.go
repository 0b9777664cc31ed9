package apply

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
)

// TableState is what apply needs to know of a table's initial copy.
type TableState struct {
	// Ready: the table's rows were copied from a snapshot at SyncLSN. Not
	// ready: the copy has not happened (pending) or is under way.
	Ready   bool
	SyncLSN change.LSN
}

// TableFilter says which changes of tables copied at their own snapshot
// apply skips.
//
// The rule (the sync LSN invariant): a table whose rows were copied from a
// snapshot taken at LSN L contains the effects of every source transaction
// whose end LSN is <= L and of none ending after L. Apply skips the table's
// changes in transactions ending at or below L and applies those after. A
// table that is not ready (pending or being copied) gets none of its changes
// written: the copy that makes it ready empties it and takes a snapshot
// later than every transaction apply has taken so far (the engine pauses
// apply around the copy, Applier.Quiesce), so those changes are in the copy.
// A table the filter does not know is applied in full.
//
// Safe for concurrent use: the states are an immutable map swapped whole
// (compare-and-swap, so concurrent Puts and Drops all count); readers
// (workers, eager) never lock.
type TableFilter struct {
	m atomic.Pointer[map[schema.TableName]TableState]
}

// NewTableFilter returns a filter knowing states (nil: none).
func NewTableFilter(states map[schema.TableName]TableState) *TableFilter {
	f := &TableFilter{}
	f.Set(states)
	return f
}

// Set replaces every state.
func (f *TableFilter) Set(states map[schema.TableName]TableState) {
	m := make(map[schema.TableName]TableState, len(states))
	for k, v := range states {
		m[k] = v
	}
	f.m.Store(&m)
}

// Put sets one table's state.
func (f *TableFilter) Put(t schema.TableName, s TableState) {
	f.swap(func(m map[schema.TableName]TableState) { m[t] = s })
}

// Drop forgets a table's state: its changes are applied in full.
func (f *TableFilter) Drop(t schema.TableName) {
	f.swap(func(m map[schema.TableName]TableState) { delete(m, t) })
}

// swap replaces the states with a copy that edit changed, again when
// another writer (two apply workers each taking a table up) swapped them
// meanwhile: no change of one is lost to the other's.
func (f *TableFilter) swap(edit func(map[schema.TableName]TableState)) {
	for {
		old := f.m.Load()
		m := make(map[schema.TableName]TableState, 1)
		if old != nil {
			m = make(map[schema.TableName]TableState, len(*old)+1)
			for k, v := range *old {
				m[k] = v
			}
		}
		edit(m)
		if f.m.CompareAndSwap(old, &m) {
			return
		}
	}
}

func (f *TableFilter) states() map[schema.TableName]TableState {
	if f == nil {
		return nil
	}
	if p := f.m.Load(); p != nil {
		return *p
	}
	return nil
}

// State returns a table's state and whether the filter knows it.
func (f *TableFilter) State(t schema.TableName) (TableState, bool) {
	s, ok := f.states()[t]
	return s, ok
}

// MaxSyncLSN is the highest sync LSN of a ready table (0: none). A
// transaction ending after it has no change to skip but those of tables not
// ready.
func (f *TableFilter) MaxSyncLSN() change.LSN {
	var m change.LSN
	for _, s := range f.states() {
		if s.Ready {
			m = max(m, s.SyncLSN)
		}
	}
	return m
}

// skipRel reports whether rel's changes in a transaction ending at end are
// skipped; end 0 means not known yet (a transaction in progress: only tables
// not ready are skipped).
func skipRel(m map[schema.TableName]TableState, rel *change.Relation, end change.LSN) bool {
	if rel == nil {
		return false
	}
	s, ok := m[schema.TableName{Schema: rel.Namespace, Name: rel.Name}]
	if !ok {
		return false
	}
	return !s.Ready || end != 0 && end <= s.SyncLSN
}

// skipDDL reports whether the schema change c, in a transaction ending at
// end, is skipped: its table — under its name after the change, or before
// it if the filter does not know that one — is ready and was copied at or
// after end, so the copy has the change already. Replayed, a change is
// diffed against a table that has it: most are no-ops, but not all (a
// column dropped and added again would lose the copied values). A change to
// a table not ready is applied: the table is made before its copy
// (`tables add`) and must follow the source until then.
//
// "The copy has it" holds because the copy checks, at its snapshot, that
// the target table can take the source's columns as they are then
// (snapshot.planTable): a change that ended between the target table's
// making and the copy's snapshot and that the target lacks stops the copy
// instead of being skipped here. A message the event trigger could not
// describe, or one saying a table was set UNLOGGED, is never skipped: the
// writer stops on it.
func skipDDL(m map[schema.TableName]TableState, c *change.Change, end change.LSN) bool {
	if end == 0 {
		return false
	}
	msg := c.DDL
	if msg == nil || msg.Check() != nil || msg.Error != "" || msg.Unlogged {
		return false // the writer reports it
	}
	s, ok := m[schema.TableName{Schema: msg.Schema, Name: msg.Name}]
	if !ok && msg.Old != nil {
		s, ok = m[schema.TableName{Schema: msg.Old.Schema, Name: msg.Old.Name}]
	}
	return ok && s.Ready && end <= s.SyncLSN
}

// Keep returns the part of c to write in a transaction ending at end (end 0:
// in progress), and false when nothing of it is. A TRUNCATE keeps the
// relations that are not skipped.
func (f *TableFilter) Keep(c *change.Change, end change.LSN) (*change.Change, bool) {
	m := f.states()
	if len(m) == 0 {
		return c, true
	}
	if c.Op == change.OpDDL {
		return c, !skipDDL(m, c, end)
	}
	if c.Op != change.OpTruncate {
		return c, !skipRel(m, c.Rel, end)
	}
	var rels []*change.Relation
	for _, r := range c.TruncateRels {
		if !skipRel(m, r, end) {
			rels = append(rels, r)
		}
	}
	switch {
	case len(rels) == 0:
		return nil, false
	case len(rels) == len(c.TruncateRels):
		return c, true
	}
	cc := *c
	cc.TruncateRels = rels
	return &cc, true
}

// quiesceReq asks the coordinator to run fn once every dispatched group has
// committed, and to dispatch nothing until it returns.
type quiesceReq struct {
	fn   func(ctx context.Context) error
	done chan error
}

// Quiesce runs fn while apply is paused between transactions: the
// coordinator stops dispatching, waits until every group it dispatched has
// committed, runs fn and goes on. Capture keeps filling the queue meanwhile.
// It needs Options.Quiesce; fn's error stops the run as well.
func (a *Applier) Quiesce(ctx context.Context, fn func(ctx context.Context) error) error {
	if a.quiesce == nil {
		return fmt.Errorf("apply: Quiesce without Options.Quiesce")
	}
	req := quiesceReq{fn: fn, done: make(chan error, 1)}
	select {
	case a.quiesce <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// quiescePoll bounds how long an idle coordinator takes to notice a
// Quiesce request.
const quiescePoll = 100 * time.Millisecond

// serveQuiesce runs a pending Quiesce request, if any, once every group
// dispatched so far has committed. The coordinator calls it between groups.
func (c *coordinator) serveQuiesce(ctx context.Context) error {
	if c.a.quiesce == nil {
		return nil
	}
	select {
	case req := <-c.a.quiesce:
		c.a.coord.SetState(stats.Waiting)
		err := c.a.commits.wait(ctx, c.seq+1, nil, true)
		if err == nil {
			err = req.fn(ctx)
		}
		req.done <- err
		c.a.coord.SetState(stats.Busy)
		return err
	default:
		return nil
	}
}

// next takes the next committed transaction, serving Quiesce requests while
// there is none.
func (c *coordinator) next(ctx context.Context) (*queue.Txn, error) {
	if c.a.quiesce == nil {
		return c.src.Next(ctx)
	}
	if txn, ok := c.src.TryNext(); ok {
		return txn, nil // no timer while transactions keep coming
	}
	for {
		if err := c.serveQuiesce(ctx); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, quiescePoll)
		txn, err := c.src.Next(wctx)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return txn, err
		}
	}
}

// skipBelow is the position a streamed transaction must start beyond to be
// taken: what the target had applied at start, and every ready table's
// sync LSN (a transaction ending at or below one would need that table's
// changes skipped, which only the queue path can decide).
func (e *Eager) skipBelow() change.LSN {
	return max(e.opts.SkipBelow, e.opts.Tables.MaxSyncLSN())
}

// Hold makes Eager take no new transaction and waits until the one it
// applies (if any) has committed or aborted; Release undoes it. The engine
// holds Eager while it copies a table, before it quiesces apply (an eager
// transaction commits through the coordinator).
func (e *Eager) Hold(ctx context.Context) error {
	e.mu.Lock()
	e.held = true
	e.mu.Unlock()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		e.mu.Lock()
		free := e.owner == 0
		e.mu.Unlock()
		if free {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Release ends Hold.
func (e *Eager) Release() {
	e.mu.Lock()
	e.held = false
	e.mu.Unlock()
}
