package target

import (
	"context"
	"fmt"

	"github.com/repstream/repstream/internal/change"
)

// maxInsertParams bounds a multi-row INSERT's parameters (the protocol
// counts them in 16 bits).
const maxInsertParams = 65535

// singleRowsAfterFailure is how many commits the writer sends one INSERT
// per row after a multi-row INSERT failed: enough for apply to isolate the
// failing source transaction (its group's transactions one by one).
const singleRowsAfterFailure = 1000

// MultiRowsMax is the most rows of one table a multi-row INSERT carries
// at commit (WriterOptions.MultiRowInserts); more go by COPY. Up to it, one
// INSERT costs the server no more than a COPY per row
// (BenchmarkWriterInsertRows: 5.3 µs per row at 32 rows, 4.1 against 3.9
// at 64) and spares the COPY's round trip; a few source transactions
// grouped into one target transaction stay one round trip.
const MultiRowsMax = 64

// multiRow reports whether p's n buffered rows go as one INSERT at
// commit: each statement costs the server a portal and an executor set-up
// (BenchmarkWriterSmallTxn), a COPY a round trip besides.
func (w *Writer) multiRow(p *relPlan, n int) bool {
	return w.opts.MultiRowInserts && w.opts.InsertRowsMax >= 0 && w.singleRows == 0 && n > 1 && n <= MultiRowsMax &&
		len(p.copyCols) > 0 && n*len(p.copyCols) <= maxInsertParams
}

// insertRowsStmt returns p's INSERT of n rows (n ≥ 2), built once.
func (p *relPlan) insertRowsStmt(n int) *stmt {
	if n >= len(p.inserts) {
		p.inserts = append(p.inserts, make([]*stmt, n+1-len(p.inserts))...)
	}
	s := p.inserts[n]
	if s == nil {
		s = p.buildInsertRows(n)
		p.inserts[n] = s
	}
	return s
}

// queueInsertRows queues every row of rows (COPY format of p; lsns[i] is
// row i's LSN, len(lsns) ≥ 2) as one INSERT of len(lsns) rows. A value the
// server refuses is named by its parameter, and so is its row's LSN
// (itemError); a duplicate key names the first row's LSN, as a COPY does
// without a line.
func (w *Writer) queueInsertRows(ctx context.Context, p *relPlan, rows []byte, lsns []change.LSN) error {
	s := p.insertRowsStmt(len(lsns))
	if err := w.prepare(ctx, s); err != nil {
		return fmt.Errorf("apply insert to %s at %s: %w", p.rel, lsns[0], w.explainDenied(p.name.Schema, p.name.Name, err))
	}
	size := len(rows)
	vals, buf := w.insertVals[:0], w.unescaped[:0]
	for range lsns {
		var err error
		if p.binary {
			vals, rows, err = splitCopyRowBinary(rows, vals)
		} else {
			vals, rows, buf, err = splitCopyRow(rows, vals, buf) // only appends: earlier rows' values stay valid
		}
		if err != nil {
			return fmt.Errorf("apply insert to %s at %s: %w", p.rel, lsns[0], err)
		}
	}
	w.insertVals, w.unescaped = vals, buf
	at := len(w.pipe.lsns)
	w.pipe.lsns = append(w.pipe.lsns, lsns...)
	it := batchItem{op: change.OpInsert, lsn: lsns[0], plan: p, s: s, rowLSNs: w.pipe.lsns[at:len(w.pipe.lsns):len(w.pipe.lsns)]}
	w.queue(s, vals, size, it, w.copies.table(p))
	return nil
}
