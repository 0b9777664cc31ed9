package target

import (
	"context"
	"fmt"

	"github.com/repstream/repstream/internal/change"
)

// Savepoints are eager apply's subtransactions: one per source
// subtransaction at its first change, rolled back to when the source
// aborts the subtransaction. Setting one sends everything buffered first, so
// that the savepoint sits exactly between the changes before and after it.

// Savepoint flushes buffered changes and sets a savepoint.
func (w *Writer) Savepoint(ctx context.Context, name string) error {
	if err := w.flushThen(ctx, "savepoint "+name, "SAVEPOINT "+change.QuoteIdent(name)); err != nil {
		return err
	}
	w.ahead.savepoint(name)
	return nil
}

// flushThen sends everything buffered, then sql inside the transaction;
// what names the step in errors. A failure fails the transaction.
func (w *Writer) flushThen(ctx context.Context, what, sql string) error {
	if err := w.usable(what); err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.fail()
		return err
	}
	if err := w.txExec(ctx, sql); err != nil {
		w.fail()
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// RollbackToSavepoint discards the changes written since the savepoint
// (buffered or not) and makes a failed transaction usable again.
func (w *Writer) RollbackToSavepoint(ctx context.Context, name string) error {
	if !w.state.inTxn() {
		return fmt.Errorf("roll back to savepoint %s: no transaction", name)
	}
	w.discard()
	if err := w.exec(ctx, "ROLLBACK TO SAVEPOINT "+change.QuoteIdent(name)); err != nil {
		w.fail()
		return fmt.Errorf("roll back to savepoint %s: %w", name, err)
	}
	w.state = txnOpen
	w.ahead.rollbackTo(name)
	// Pending records may have gone with the savepoint: the next change
	// of those tables looks again (unrecorded.go).
	w.undoResyncs()
	return nil
}
