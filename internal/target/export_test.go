package target

import (
	"context"

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
	return w.flushThen(ctx, "release savepoint "+name, "RELEASE SAVEPOINT "+change.QuoteIdent(name))
}

// AppendCopyRow is appendCopyRow without the bad-column report.
func AppendCopyRow(dst []byte, t change.Tuple, cols []int) []byte {
	dst, _ = appendCopyRow(dst, t, cols)
	return dst
}
