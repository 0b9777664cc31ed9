package target

import (
	"context"
	"fmt"
)

// txnState is where a Writer's target transaction stands. It is one value,
// so that impossible combinations (a failed transaction that is not open, a
// queued BEGIN outside a transaction) cannot be written down.
//
// Transitions:
//
//	txnNone ──Begin──▶ txnPending ──queueBegin──▶ txnQueued ──batch sent──▶ txnOpen
//	                        │  ▲                      │
//	                        │  └──discard (unsent)────┘
//	                        └──BEGIN sent alone, or in a COPY's query──▶ txnOpen
//	txnPending, txnQueued ──a change fails──▶ txnFailedUnsent
//	txnOpen ──a change fails──▶ txnFailed ──RollbackToSavepoint──▶ txnOpen
//	any ──Rollback, or Commit's end──▶ txnNone
//
// Nothing reaches the server inside the transaction before BEGIN: a
// statement queued in txnPending first queues BEGIN (txnQueued); a COPY or a
// statement sent alone first sends it.
type txnState uint8

const (
	txnNone         txnState = iota // no transaction: Begin next
	txnPending                      // Begin called; BEGIN neither sent nor queued
	txnQueued                       // BEGIN is the first statement of the unsent batch
	txnOpen                         // BEGIN has reached the server
	txnFailed                       // a change failed; the server has the transaction (aborted): roll back
	txnFailedUnsent                 // a change failed before BEGIN reached the server: roll back (nothing to send)
)

func (s txnState) String() string {
	switch s {
	case txnNone:
		return "none"
	case txnPending:
		return "pending"
	case txnQueued:
		return "begin-queued"
	case txnOpen:
		return "open"
	case txnFailed:
		return "failed"
	case txnFailedUnsent:
		return "failed-unsent"
	}
	return fmt.Sprintf("txnState(%d)", uint8(s))
}

// inTxn reports whether Begin was called and neither Commit nor Rollback
// has ended the transaction since.
func (s txnState) inTxn() bool { return s != txnNone }

// failed reports whether a change of the transaction failed.
func (s txnState) failed() bool { return s == txnFailed || s == txnFailedUnsent }

// sent reports whether the server has seen the transaction's BEGIN.
func (s txnState) sent() bool { return s == txnOpen || s == txnFailed }

// fail marks the transaction failed: only Rollback or RollbackToSavepoint
// may follow.
func (w *Writer) fail() {
	switch w.state {
	case txnOpen:
		w.state = txnFailed
	case txnPending, txnQueued:
		w.state = txnFailedUnsent
	}
}

// usable returns an error unless a transaction is open and has not failed.
func (w *Writer) usable(what string) error {
	if !w.state.inTxn() {
		return fmt.Errorf("%s: no target transaction", what)
	}
	if w.state.failed() {
		return fmt.Errorf("%s: target transaction failed earlier, roll back first", what)
	}
	return nil
}

// queueBegin queues BEGIN as the batch's first statement if it has not
// reached the server; call it before queueing any statement.
func (w *Writer) queueBegin() {
	if w.state != txnPending {
		return
	}
	w.pipe.addBegin(w.ctl[ctlBegin])
	w.state = txnQueued
}

// ensureBegun makes sure BEGIN has reached the server: before a COPY or a
// statement outside the batch.
func (w *Writer) ensureBegun(ctx context.Context) error {
	switch w.state {
	case txnQueued:
		return w.flushBatch(ctx)
	case txnPending:
		if err := w.exec(ctx, "BEGIN"); err != nil {
			return fmt.Errorf("begin target transaction: %w", err)
		}
		w.state = txnOpen
	}
	return nil
}

// exec sends sql on its own and reads its result.
func (w *Writer) exec(ctx context.Context, sql string) error {
	_, err := w.conn.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

// txExec runs sql inside the transaction (after BEGIN).
func (w *Writer) txExec(ctx context.Context, sql string) error {
	if err := w.ensureBegun(ctx); err != nil {
		return err
	}
	return w.exec(ctx, sql)
}
