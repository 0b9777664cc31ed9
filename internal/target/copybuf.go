package target

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// tableBuf is the pending work for one target table.
//
// Invariants: rows all follow the COPY header of plan (text or binary), and
// lsns[i] is the LSN of row i+1 (COPY line numbers start at 1); size is the
// accounted size (change.Change.Size) of the changes of rows, not yet
// counted in the Writer's stats (copyOut counts them as they are sent), and
// ends[i] is the offset in rows where row i+1 ends; dirty is
// set exactly when rows is not empty, and then the table is in
// copyBufs.dirty; inBatch is set exactly when a queued statement of the
// pipeline touches the table. A table never has both buffered rows and
// queued statements: an insert into a table with queued statements is
// queued as an INSERT behind them, and an update or delete sends the
// table's rows first.
type tableBuf struct {
	plan    *relPlan
	rows    []byte
	lsns    []change.LSN
	ends    []int
	size    int64
	dirty   bool
	inBatch bool
}

// copyBufs holds the inserts of the current transaction buffered as COPY
// rows, per target table.
//
// Invariants: dirty lists the tables with buffered rows, each once, in the
// order their first row came; bytes is the sum of len(rows) over dirty.
type copyBufs struct {
	tables map[schema.TableName]*tableBuf
	dirty  []*tableBuf
	bytes  int
}

func newCopyBufs() copyBufs { return copyBufs{tables: make(map[schema.TableName]*tableBuf)} }

// table returns p's table buffer.
func (b *copyBufs) table(p *relPlan) *tableBuf {
	tb := b.tables[p.name]
	if tb == nil {
		tb = &tableBuf{plan: p}
		b.tables[p.name] = tb
	}
	return tb
}

// added accounts n more bytes of rows in tb.
func (b *copyBufs) added(tb *tableBuf, n int) {
	if !tb.dirty {
		tb.dirty = true
		b.dirty = append(b.dirty, tb)
	}
	b.bytes += n
}

// take empties tb, which the caller has already removed from dirty, and
// returns its rows and LSNs (valid until tb's next row).
func (b *copyBufs) take(tb *tableBuf) (rows []byte, lsns []change.LSN) {
	rows, lsns = tb.rows, tb.lsns
	b.bytes -= len(rows)
	tb.rows, tb.lsns, tb.ends, tb.size, tb.dirty = tb.rows[:0], tb.lsns[:0], tb.ends[:0], 0, false
	return rows, lsns
}

// remove takes tb out of dirty.
func (b *copyBufs) remove(tb *tableBuf) {
	for i, d := range b.dirty {
		if d == tb {
			b.dirty = append(b.dirty[:i], b.dirty[i+1:]...)
			return
		}
	}
}

// pop removes and returns the first dirty table, or nil.
func (b *copyBufs) pop() *tableBuf {
	if len(b.dirty) == 0 {
		b.dirty = b.dirty[:0]
		return nil
	}
	tb := b.dirty[0]
	b.dirty = b.dirty[1:]
	return tb
}

// discard drops every buffered row.
func (b *copyBufs) discard() {
	for _, tb := range b.dirty {
		tb.rows, tb.lsns, tb.ends, tb.size, tb.dirty = tb.rows[:0], tb.lsns[:0], tb.ends[:0], 0, false
	}
	b.dirty = b.dirty[:0]
	b.bytes = 0
}

func (w *Writer) insert(ctx context.Context, c *change.Change) error {
	p, err := w.plan(ctx, c.Rel)
	if err != nil {
		return fmt.Errorf("apply insert to %s at %s: %w", c.Rel, c.LSN, err)
	}
	tb := w.copies.table(p)
	if tb.inBatch {
		// Behind the table's queued statements, as a statement too.
		if w.rowBuf, err = appendRow(w.rowBuf[:0], c, p); err != nil {
			return err
		}
		if _, err := w.queueInsertRow(ctx, p, w.rowBuf, c.LSN); err != nil {
			return err
		}
		w.st.Add(1, int64(c.Size())) // queued
		return w.batchFull(ctx)
	}
	if tb.dirty && tb.plan != p {
		if err := w.flushCopy(ctx, tb); err != nil {
			return err
		}
	}
	tb.plan = p
	before := len(tb.rows)
	rows, err := appendRow(tb.rows, c, p)
	if err != nil {
		tb.rows = rows[:before]
		return err
	}
	tb.rows = rows
	tb.lsns = append(tb.lsns, c.LSN)
	tb.ends = append(tb.ends, len(rows))
	tb.size += int64(c.Size()) // counted as its COPY completes (copyOut)
	w.copies.added(tb, len(rows)-before)
	switch {
	case len(tb.rows) >= w.opts.CopyFlushBytes:
		return w.flushCopy(ctx, tb)
	case w.copies.bytes >= 4*w.opts.CopyFlushBytes:
		return w.flushCopies(ctx)
	}
	return nil
}

// appendRow appends insert c's row in p's COPY format (text or binary) to
// dst; a value that format cannot carry is an error naming the column (dst
// then holds a partial row).
func appendRow(dst []byte, c *change.Change, p *relPlan) ([]byte, error) {
	var bad byteCol
	if p.binary {
		dst, bad = appendCopyRowBinary(dst, c.New, p.copyCols)
	} else {
		dst, bad = appendCopyRow(dst, c.New, p.copyCols)
	}
	if bad.kind != 0 {
		return dst, fmt.Errorf("apply insert to %s at %s: column %q: %s", c.Rel, c.LSN, c.Rel.Columns[bad.col].Name, kindProblem(bad.kind))
	}
	return dst, nil
}

func kindProblem(kind byte) string {
	switch kind {
	case change.KindUnchanged:
		return "unchanged TOAST value where a full value is needed"
	case change.KindBinary:
		return "binary value in a text-format stream"
	case change.KindText:
		return "text value in a binary-format stream (a type without a binary send function?): run with --binary=false"
	case 'm':
		return "missing from the tuple"
	}
	return fmt.Sprintf("unexpected value kind %q", kind)
}

// flushCopy sends a table's buffered rows with one COPY.
func (w *Writer) flushCopy(ctx context.Context, tb *tableBuf) error {
	if !tb.dirty {
		return nil
	}
	w.copies.remove(tb)
	return w.copyOut(ctx, tb)
}

// flushCopies sends every table's buffered rows.
func (w *Writer) flushCopies(ctx context.Context) error {
	for tb := w.copies.pop(); tb != nil; tb = w.copies.pop() {
		if err := w.copyOut(ctx, tb); err != nil {
			return err
		}
	}
	return nil
}

// queueSmallCopies sends the buffered rows of tables with more than
// InsertRowsMax rows by COPY and queues the others as INSERT statements;
// with MultiRowInserts, a table's rows up to MultiRowsMax go as one INSERT
// (insertrows.go).
func (w *Writer) queueSmallCopies(ctx context.Context) error {
	for tb := w.copies.pop(); tb != nil; tb = w.copies.pop() {
		multi := w.multiRow(tb.plan, len(tb.lsns))
		if len(tb.lsns) > w.opts.InsertRowsMax && !multi {
			if err := w.copyOut(ctx, tb); err != nil {
				return err
			}
			continue
		}
		// tb is emptied first, so that an error leaves no rows behind for
		// the next transaction; nothing appends to it while rows is read.
		// The rows count as sent once queued, as statements do.
		w.st.Add(int64(len(tb.lsns)), tb.size)
		rows, lsns := w.copies.take(tb)
		if multi {
			if err := w.queueInsertRows(ctx, tb.plan, rows, lsns); err != nil {
				return err
			}
			continue
		}
		for _, lsn := range lsns {
			var err error
			if rows, err = w.queueInsertRow(ctx, tb.plan, rows, lsn); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyOut runs the COPY of tb's rows and empties tb (tb is already removed
// from the dirty list).
//
// The rows go in COPY statements of at most w.copyChunk bytes each (whole
// rows; at least one), counted in the stats as each completes: a target
// that takes long over a COPY (triggers, indexes, a lock, a slow link)
// would otherwise show no rows for as long as one COPY of CopyFlushBytes
// takes it — 10 s and more — and then all of them at once, so that a busy
// apply looked like a stalled one (nothing counts in a COPY that does not
// complete; the kernel's socket buffers take megabytes of rows at once, so
// counting them as sent would not show the target's pace). adaptChunk
// keeps each COPY near copyChunkTime.
func (w *Writer) copyOut(ctx context.Context, tb *tableBuf) error {
	if len(tb.plan.copyCols) == 0 {
		return w.insertEmptyRows(ctx, tb)
	}
	sql := tb.plan.copyHeader
	if w.state == txnPending {
		// BEGIN travels in the COPY's query string: one round trip.
		sql = "BEGIN; " + sql
		w.state = txnOpen
	} else if err := w.ensureBegun(ctx); err != nil {
		w.copies.take(tb)
		return err
	}
	n := len(tb.lsns)
	size, ends := tb.size, tb.ends
	rows, lsns := w.copies.take(tb)
	var err error
	from, start := 0, 0
	for from < n {
		// Rows [from, to): as many as fit in the chunk, at least one.
		to := from + 1
		if limit := start + w.copyChunk; ends[from] < limit {
			to, _ = slices.BinarySearch(ends[from:n], limit+1)
			to += from
		}
		end := ends[to-1]
		w.reader.Reset(rows[start:end])
		var data io.Reader = &w.reader
		if tb.plan.binary {
			data = io.MultiReader(bytes.NewReader(binaryCopyHeader), &w.reader, bytes.NewReader(binaryCopyTrailer))
		}
		began := time.Now()
		if _, err = w.conn.PgConn().CopyFrom(ctx, data, sql); err != nil {
			break
		}
		w.adaptChunk(end-start, time.Since(began))
		w.st.Add(int64(to-from), size*int64(to)/int64(n)-size*int64(from)/int64(n))
		w.copyRows.Add(int64(to - from))
		w.flushes.Add(1)
		sql = tb.plan.copyHeader
		from, start = to, end
	}
	if cap(tb.rows) > 2*w.opts.CopyFlushBytes {
		tb.rows = nil // a huge row: do not keep its buffer
	}
	if err != nil {
		lsns := lsns[from:n] // the failed COPY's rows: its line numbers count from 1
		if ce := copyConflict(err, tb.plan.rel, lsns); ce != nil {
			return ce
		}
		lsn := lsns[0]
		if line := copyErrorLine(err); line >= 1 && line <= len(lsns) {
			lsn = lsns[line-1]
		}
		return fmt.Errorf("apply insert to %s at %s%s: %w", tb.plan.rel, lsn, columnSuffix(err), w.explainDenied(tb.plan.rel.Namespace, tb.plan.rel.Name, err))
	}
	return nil
}

// copyChunkTime is what one COPY of a large flush should take the target at
// most: long enough that a round trip per COPY costs little even on a
// distant target, short enough that the rows' count moves every second
// or so while a slow target works (copyOut).
const copyChunkTime = time.Second

// minCopyChunk bounds copyChunk from below.
const minCopyChunk = 4 << 10

// adaptChunk sets the next COPY's size from the last one's: a COPY of b
// bytes that took longer than copyChunkTime shrinks the chunk to what the
// target takes in copyChunkTime; a full one that took less than a quarter
// of it doubles the chunk, up to CopyFlushBytes.
func (w *Writer) adaptChunk(b int, d time.Duration) {
	switch {
	case d > copyChunkTime:
		w.copyChunk = max(int(int64(b)*int64(copyChunkTime)/int64(d)), minCopyChunk)
	case d < copyChunkTime/4 && 2*b >= w.copyChunk:
		w.copyChunk = min(2*w.copyChunk, w.opts.CopyFlushBytes)
	}
}

// FlushBuffered sends the rows buffered for COPY and the queued statements
// of the open transaction, without committing; nothing to send (or no
// usable transaction) is a no-op. Eager apply calls it every second while
// a slow source feeds it, so that its rows reach the target, and count as
// applied, without waiting for CopyFlushBytes of them. After an error the
// transaction is failed.
func (w *Writer) FlushBuffered(ctx context.Context) error {
	if w.usable("flush") != nil || w.copies.bytes == 0 && w.pipe.changes() == 0 {
		return nil
	}
	if err := w.flushAll(ctx); err != nil {
		w.fail()
		return err
	}
	return nil
}

// insertEmptyRows writes tb's rows of a table without columns (CREATE
// TABLE t (): its rows are all alike), which COPY cannot name, as one
// INSERT of that many rows (any columns the target adds get defaults),
// and empties tb.
func (w *Writer) insertEmptyRows(ctx context.Context, tb *tableBuf) error {
	if err := w.ensureBegun(ctx); err != nil {
		w.copies.take(tb)
		return err
	}
	size := tb.size
	_, lsns := w.copies.take(tb)
	if len(lsns) == 0 {
		return nil
	}
	if err := w.exec(ctx, "INSERT INTO "+tb.plan.quotedTable+" SELECT FROM pg_catalog.generate_series(1, "+strconv.Itoa(len(lsns))+")"); err != nil {
		return fmt.Errorf("apply insert to %s at %s: %w", tb.plan.rel, lsns[0], w.explainDenied(tb.plan.rel.Namespace, tb.plan.rel.Name, err))
	}
	w.st.Add(int64(len(lsns)), size)
	w.copyRows.Add(int64(len(lsns)))
	return nil
}
