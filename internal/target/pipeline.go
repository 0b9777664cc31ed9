package target

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
)

// itemKind says what a queued statement is.
type itemKind uint8

const (
	itemChange itemKind = iota // applies one change (op, lsn, plan, s)
	itemBegin                  // the transaction's BEGIN
)

// batchItem describes one queued statement.
type batchItem struct {
	kind itemKind
	op   change.Op
	lsn  change.LSN
	plan *relPlan
	s    *stmt
	// rowLSNs: the LSNs of the rows of a multi-row INSERT (queueInsertRows),
	// in parameter order; lsn is the first.
	rowLSNs []change.LSN
}

// pipeline is the unsent batch of prepared statements of the Writer's
// current transaction: updates, deletes, inserts that must keep their place
// behind them, and BEGIN, sent in one round trip (sendBatch).
//
// Invariants: items[i] describes the i-th statement of batch, so len(items)
// is the batch's statement count; a BEGIN item can only be items[0];
// tables lists each table with a queued statement once, and exactly those
// have tableBuf.inBatch set; bytes approximates the batch's size.
type pipeline struct {
	batch  *pgconn.Batch
	items  []batchItem
	tables []*tableBuf
	bytes  int
	tail   []pgconn.CommandTag // scratch for sendBatch
	lsns   []change.LSN        // backs items' rowLSNs

	checkTags bool // an item's stmt has checkTag: flush it before COMMIT
	missing   int  // sendBatch: the first checkTag item that changed no row or several (missingN), or -1
	missingN  int64
}

func newPipeline() pipeline { return pipeline{batch: &pgconn.Batch{}, missing: -1} }

// addBegin queues BEGIN (prepared as name); the batch must be empty.
func (p *pipeline) addBegin(name string) {
	p.batch.ExecPrepared(name, nil, nil, nil)
	p.items = append(p.items, batchItem{kind: itemBegin})
}

// add queues the prepared statement s with params (size bytes) for tb.
func (p *pipeline) add(s *stmt, params [][]byte, size int, it batchItem, tb *tableBuf) {
	p.batch.ExecPrepared(s.name, params, s.formats, nil)
	p.items = append(p.items, it)
	p.checkTags = p.checkTags || s.checkTag
	if !tb.inBatch {
		tb.inBatch = true
		p.tables = append(p.tables, tb)
	}
	p.bytes += size + 16
}

// changes counts the queued statements that apply changes (BEGIN aside).
func (p *pipeline) changes() int {
	if len(p.items) > 0 && p.items[0].kind == itemBegin {
		return len(p.items) - 1
	}
	return len(p.items)
}

// reset forgets the items once the batch was sent (or dropped).
func (p *pipeline) reset() {
	for _, tb := range p.tables {
		tb.inBatch = false
	}
	p.items, p.tables, p.bytes, p.lsns = p.items[:0], p.tables[:0], 0, p.lsns[:0]
	p.checkTags, p.missing = false, -1
}

// drop discards the unsent statements.
func (p *pipeline) drop() {
	if len(p.items) > 0 {
		p.batch = &pgconn.Batch{}
	}
	p.reset()
}

// prepare prepares s on the server once.
func (w *Writer) prepare(ctx context.Context, s *stmt) error {
	if s.name != "" {
		return nil
	}
	name := w.id + "_" + strconv.Itoa(w.nstmt)
	if _, err := w.conn.PgConn().Prepare(ctx, name, s.sql, s.oids); err != nil {
		return fmt.Errorf("prepare %q: %w", s.sql, err)
	}
	w.nstmt++
	s.name = name
	return nil
}

// queue appends prepared statement s with params (size bytes) to the batch,
// behind BEGIN if that has not reached the server.
func (w *Writer) queue(s *stmt, params [][]byte, size int, it batchItem, tb *tableBuf) {
	w.queueBegin()
	w.pipe.add(s, params, size, it, tb)
}

// batchFull sends the batch once it holds enough statements or bytes.
func (w *Writer) batchFull(ctx context.Context) error {
	if len(w.pipe.items) >= w.opts.BatchStatements || w.pipe.bytes >= w.opts.CopyFlushBytes {
		return w.flushBatch(ctx)
	}
	return nil
}

// flushBatch sends the queued statements in one pipeline and checks each
// result: an error names the failing statement's change. An update or
// delete that finds no row fails on the server (repstream.expect_row, see
// buildStmt), so that a COMMIT queued behind it in the same pipeline is
// skipped: itemError turns that into a ConflictError.
func (w *Writer) flushBatch(ctx context.Context) error {
	n := len(w.pipe.items)
	if n == 0 {
		return nil
	}
	stmts := w.pipe.changes()
	done, _, _, err := w.sendBatch(ctx)
	if err != nil {
		err = w.itemError(min(done, n-1), err)
	} else if w.pipe.missing >= 0 {
		err = w.missingRow(w.pipe.items[w.pipe.missing], w.pipe.missingN)
	}
	w.pipe.reset()
	if err != nil {
		return err
	}
	w.statements.Add(int64(stmts))
	w.flushes.Add(1)
	return nil
}

// sendBatch sends the batch in one pipeline and reads every result. The
// first len(items) results are the queued statements'; the command tags of
// those after them are returned in tail, and val is the first value of the
// last row any statement returned. done counts the statements that
// completed before err. The caller resets the pipeline.
func (w *Writer) sendBatch(ctx context.Context) (done int, tail []pgconn.CommandTag, val []byte, err error) {
	if w.state == txnQueued {
		w.state = txnOpen
	}
	p := &w.pipe
	tail = p.tail[:0]
	mrr := w.conn.PgConn().ExecBatch(ctx, p.batch)
	p.batch = &pgconn.Batch{} // the sent one may hold more than the items
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			if v := rr.Values(); len(v) > 0 {
				val = append(val[:0], v[0]...)
			}
		}
		tag, err := rr.Close()
		if err != nil {
			break
		}
		if done >= len(p.items) {
			tail = append(tail, tag)
		} else if it := p.items[done]; it.s != nil && it.s.checkTag && p.missing < 0 && wrongCount(it, tag.RowsAffected()) {
			p.missing, p.missingN = done, tag.RowsAffected()
		}
		done++
	}
	p.tail = tail
	return done, tail, val, mrr.Close()
}

// itemError names the queued statement i in err; a data error is a
// *ConflictError in the chain.
func (w *Writer) itemError(i int, err error) error {
	it := w.pipe.items[i]
	if it.kind == itemBegin {
		return fmt.Errorf("begin target transaction: %w", err)
	}
	lsn := it.lsn
	if len(it.rowLSNs) > 1 {
		w.singleRows = singleRowsAfterFailure // the next attempt names the row
	}
	if n := pgerr.Param(err); n >= 1 && len(it.rowLSNs) > 1 && len(it.plan.copyCols) > 0 {
		if r := (n - 1) / len(it.plan.copyCols); r < len(it.rowLSNs) {
			lsn = it.rowLSNs[r] // the row whose value the server names
		}
	}
	if ce := asConflict(err, it.op, it.plan.rel, lsn); ce != nil {
		if r, ok := paramOf(err, it.s); ok {
			ce.Column = it.plan.rel.Columns[r.col].Name
		}
		return ce
	}
	col := ""
	if r, ok := paramOf(err, it.s); ok {
		col = ", column " + it.plan.rel.Columns[r.col].Name
	}
	return fmt.Errorf("apply %s to %s at %s%s: %w", it.op, it.plan.rel, lsn, col, w.explainDenied(it.plan.rel.Namespace, it.plan.rel.Name, err))
}

// paramOf returns the parameter of s that err's context names: the server
// says which parameter it could not read ("unnamed portal parameter $2 =
// ..."), as COPY says which column.
func paramOf(err error, s *stmt) (paramRef, bool) {
	n := pgerr.Param(err)
	if s == nil || n < 1 || n > len(s.params) {
		return paramRef{}, false
	}
	return s.params[n-1], true
}

// wrongCount says whether n rows changed by checkTag item it is a conflict:
// none, or (a table without rules, whose count is the statement's own)
// more than one.
func wrongCount(it batchItem, n int64) bool {
	return n == 0 || n > 1 && !it.plan.rules
}
