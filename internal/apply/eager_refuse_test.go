package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// savepointWriter is a target transaction with savepoints, as PostgreSQL
// keeps one: a refused change (refuse, by LSN) aborts the transaction until
// a rollback (to a savepoint); committed holds the LSNs of the changes the
// last commit made.
type savepointWriter struct {
	refuse    map[change.LSN]bool
	log       []string // "sp:<name>" and the LSNs of the changes written
	inTxn     bool
	failed    bool
	committed []string
}

func (w *savepointWriter) Begin(context.Context) error {
	w.log, w.inTxn, w.failed = nil, true, false
	return nil
}

func (w *savepointWriter) usable() error {
	switch {
	case !w.inTxn:
		return errors.New("no transaction")
	case w.failed:
		return errors.New("current transaction is aborted, commands ignored until end of transaction block")
	}
	return nil
}

func (w *savepointWriter) Write(_ context.Context, c *change.Change) error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.refuse[c.LSN] {
		w.failed = true
		return fmt.Errorf("apply change at %s: the target refused it", c.LSN)
	}
	w.log = append(w.log, c.LSN.String())
	return nil
}

func (w *savepointWriter) Savepoint(_ context.Context, name string) error {
	if err := w.usable(); err != nil {
		return err
	}
	w.log = append(w.log, "sp:"+name)
	return nil
}

func (w *savepointWriter) RollbackToSavepoint(_ context.Context, name string) error {
	i := slices.Index(w.log, "sp:"+name)
	if !w.inTxn || i < 0 {
		return fmt.Errorf("savepoint %q does not exist", name)
	}
	w.log, w.failed = w.log[:i+1], false
	return nil
}

func (w *savepointWriter) CommitLSN(context.Context, []change.LSN) (change.LSN, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	w.committed = slices.DeleteFunc(slices.Clone(w.log), func(s string) bool { return strings.HasPrefix(s, "sp:") })
	w.inTxn = false
	return 0, nil
}

func (w *savepointWriter) Rollback(context.Context) error {
	w.log, w.inTxn, w.failed = nil, false, false
	return nil
}

// eagerStep is one item capture hands Eager: a change of (sub)transaction
// xid at lsn, or an abort of subtransaction abort (the top-level xid: the
// whole transaction).
type eagerStep struct {
	xid   uint32
	lsn   change.LSN
	abort uint32
}

// TestEagerRefusedInProgress: a change the target refuses while its
// transaction is in progress waits for the source's verdict. A walsender
// that finds a subtransaction already aborted as it streams it discards
// what it had not sent of the whole transaction — there the schema change
// adding column d of subtransaction 103 — yet sends the next schema change,
// of subtransaction 105 (made inside the aborted one, in the event
// trigger's exception block), which needs d: the target refuses it. Its
// STREAM ABORT comes later. Eager apply stopped at the refusal ("the
// source had the column before this change, the target lacks it"); now
// the target rolls back to the innermost savepoint, applies nothing more
// until the source's abort covers it, and then goes on. A refusal that no
// abort covers fails the commit, and the target commits nothing of it.
func TestEagerRefusedInProgress(t *testing.T) {
	const top = 100
	cases := []struct {
		name      string
		refuse    change.LSN
		steps     []eagerStep
		commitErr bool     // the commit fails with the refusal
		committed []string // else what the target commits
	}{{
		// The stream of the flaky TestDDLStreamedSubxactAbort/eager:
		// 101 is the exception block of ADD COLUMN c, 102 savepoint s1
		// (its rows and 103's ADD COLUMN d discarded unsent), 104 s2,
		// 105 ADD COLUMN e (refused), 106 s3, 107 s1 again.
		name:   "orphan rolled back",
		refuse: 5,
		steps: []eagerStep{
			{xid: top, lsn: 1}, {xid: 101, lsn: 2}, {xid: 105, lsn: 5}, {xid: 106, lsn: 6},
			{abort: 106}, {abort: 105}, {abort: 104}, {abort: 103}, {abort: 102},
			{xid: 107, lsn: 10}, {xid: top, lsn: 11},
		},
		committed: []string{"0/1", "0/2", "0/A", "0/B"},
	}, {
		// The abort of an outer savepoint covers the refusal too.
		name:   "outer savepoint rolled back",
		refuse: 5,
		steps: []eagerStep{
			{xid: top, lsn: 1}, {xid: 102, lsn: 2}, {xid: 105, lsn: 5}, {xid: 105, lsn: 6},
			{abort: 105 + 1}, {abort: 102}, {xid: top, lsn: 7},
		},
		committed: []string{"0/1", "0/7"},
	}, {
		// A refusal the source never rolls back fails the commit, also
		// when a subtransaction after it (never applied) is rolled back.
		name:   "committed",
		refuse: 5,
		steps: []eagerStep{
			{xid: top, lsn: 1}, {xid: 102, lsn: 2}, {xid: 105, lsn: 5}, {xid: 106, lsn: 6},
			{abort: 106}, {xid: top, lsn: 7},
		},
		commitErr: true,
	}, {
		// Refused outside any savepoint: the whole target transaction
		// is rolled back, and the commit fails.
		name:      "top level committed",
		refuse:    2,
		steps:     []eagerStep{{xid: top, lsn: 1}, {xid: top, lsn: 2}, {xid: 102, lsn: 3}, {abort: 102}, {xid: top, lsn: 4}},
		commitErr: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &savepointWriter{refuse: map[change.LSN]bool{tc.refuse: true}}
			e, stop := runEager(t, w)
			ctx := context.Background()
			feed(t, e, top, tc.steps)
			_, err := e.Commit(ctx, change.TxnInfo{Xid: top, EndLSN: 100})
			runErr := stop()
			if tc.commitErr {
				if err == nil || !strings.Contains(err.Error(), "the target refused it") {
					t.Fatalf("commit: %v, want the refusal", err)
				}
				if runErr == nil || w.committed != nil {
					t.Fatalf("Run: %v, target committed %v; want the refusal and nothing", runErr, w.committed)
				}
				return
			}
			if err != nil || runErr != nil {
				t.Fatalf("commit: %v, Run: %v", err, runErr)
			}
			if !slices.Equal(w.committed, tc.committed) {
				t.Errorf("target committed %v, want %v", w.committed, tc.committed)
			}
		})
	}
	t.Run("top level aborted", func(t *testing.T) {
		// Refused outside any savepoint, then the whole transaction
		// aborts: no error, and the next transaction applies as usual.
		w := &savepointWriter{refuse: map[change.LSN]bool{2: true}}
		e, stop := runEager(t, w)
		feed(t, e, top, []eagerStep{{xid: top, lsn: 1}, {xid: top, lsn: 2}, {xid: top, lsn: 3}, {abort: top}})
		feed(t, e, 200, []eagerStep{{xid: 200, lsn: 10}, {xid: 201, lsn: 11}})
		if _, err := e.Commit(context.Background(), change.TxnInfo{Xid: 200, EndLSN: 100}); err != nil {
			t.Fatalf("commit of the next transaction: %v", err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if want := []string{"0/A", "0/B"}; !slices.Equal(w.committed, want) {
			t.Errorf("target committed %v, want %v", w.committed, want)
		}
	})
}

// runEager runs an Eager on w; stop ends Run and returns its error.
func runEager(t *testing.T, w *savepointWriter) (*Eager, func() error) {
	t.Helper()
	e := NewEager(EagerOptions{Watermark: NewWatermark(0), NewWriter: func(context.Context, *stats.Component) (EagerWriter, func(), error) {
		return w, func() {}, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return e, func() error {
		// Run ends with a failed commit's error, or at cancel.
		select {
		case err := <-done:
			cancel()
			return err
		case <-time.After(100 * time.Millisecond):
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// feed hands Eager transaction xid's steps, as capture does.
func feed(t *testing.T, e *Eager, xid uint32, steps []eagerStep) {
	t.Helper()
	ctx := context.Background()
	if ok, err := e.TryTake(ctx, xid, 0, 0); !ok || err != nil {
		t.Fatalf("TryTake: %v %v", ok, err)
	}
	for _, s := range steps {
		var err error
		if s.abort != 0 {
			err = e.Abort(ctx, xid, s.abort)
		} else {
			err = e.Add(ctx, xid, &change.Change{Op: change.OpInsert, LSN: s.lsn, Xid: s.xid})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
