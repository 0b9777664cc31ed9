package target

import (
	"context"
	"fmt"

	"github.com/repstream/repstream/internal/change"
)

// Test-only API: what the tests drive the Writer with besides the engine's
// calls.

// Flush sends every buffered change to the server without committing.
func (w *Writer) Flush(ctx context.Context) error {
	if err := w.usable("flush"); err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.fail()
		return err
	}
	return nil
}

// ReleaseSavepoint flushes buffered changes and releases the savepoint.
func (w *Writer) ReleaseSavepoint(ctx context.Context, name string) error {
	if err := w.usable("release savepoint " + name); err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.fail()
		return err
	}
	if err := w.txExec(ctx, "RELEASE SAVEPOINT "+change.QuoteIdent(name)); err != nil {
		w.fail()
		return fmt.Errorf("release savepoint %s: %w", name, err)
	}
	return nil
}

// AppendCopyRow is appendCopyRow without the bad-column report.
func AppendCopyRow(dst []byte, t change.Tuple, cols []int) []byte {
	dst, _ = appendCopyRow(dst, t, cols)
	return dst
}
