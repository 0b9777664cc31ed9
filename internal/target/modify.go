package target

import (
	"context"
	"errors"
	"fmt"

	"github.com/repstream/repstream/internal/change"
)

// Row modification: updates and deletes become prepared statements (one per
// relation, operation and shape of the tuples: which columns are unchanged
// TOAST, which WHERE clause), queued in the pipeline with the change's
// values as parameters, never decoded; TRUNCATE is one statement for every
// listed table.

// splitTuple fills kinds and vals from t (vals[i] nil for NULL and 'u', never
// nil for text).
func (w *Writer) splitTuple(t change.Tuple, kinds []byte, vals [][]byte) ([]byte, [][]byte) {
	kinds, vals = kinds[:0], vals[:0]
	it := t.Iter()
	for it.Next() {
		kinds = append(kinds, it.Kind())
		v := it.Value()
		if (it.Kind() == change.KindText || it.Kind() == change.KindBinary) && v == nil {
			v = w.empty
		}
		vals = append(vals, v)
	}
	return kinds, vals
}

// modify queues an UPDATE or DELETE.
func (w *Writer) modify(ctx context.Context, c *change.Change) error {
	p, err := w.plan(ctx, c.Rel)
	if err != nil {
		return fmt.Errorf("apply %s to %s at %s: %w", c.Op, c.Rel, c.LSN, err)
	}
	tb := w.copies.table(p)
	if tb.dirty {
		if err := w.flushCopy(ctx, tb); err != nil {
			return err
		}
	}
	ncols := len(c.Rel.Columns)
	w.newKinds, w.newVals = w.splitTuple(c.New, w.newKinds, w.newVals)
	w.oldKinds, w.oldVals = w.splitTuple(c.Old, w.oldKinds, w.oldVals)
	var mode whereMode
	switch c.OldKind {
	case 'K':
		mode = whereOldKey
	case 'O':
		mode = whereFull
	case 0:
		mode = whereNewKey
	default:
		return fmt.Errorf("apply %s to %s at %s: unknown old tuple kind %q", c.Op, c.Rel, c.LSN, c.OldKind)
	}
	if err := w.checkShape(c, p, mode, ncols); err != nil {
		return fmt.Errorf("apply %s to %s at %s: %w", c.Op, c.Rel, c.LSN, err)
	}

	w.keyBuf = p.stmtKey(w.keyBuf, c.Op, mode, w.newKinds, w.oldKinds)
	s := p.stmts[string(w.keyBuf)]
	if s == nil {
		s = p.buildStmt(c.Op, mode, w.newKinds, w.oldKinds)
		p.stmts[string(w.keyBuf)] = s
	}
	if s.noop {
		return nil
	}
	if err := w.prepare(ctx, s); err != nil {
		return fmt.Errorf("apply %s to %s at %s: %w", c.Op, c.Rel, c.LSN, err)
	}
	params := w.params[:0]
	size := 0
	for _, r := range s.params {
		var v []byte
		if r.old {
			v = w.oldVals[r.col]
		} else {
			v = w.newVals[r.col]
		}
		params = append(params, v)
		size += len(v)
	}
	w.params = params
	w.queue(s, params, size, batchItem{op: c.Op, lsn: c.LSN, plan: p, s: s}, tb)
	return w.batchFull(ctx)
}

// queueInsertRow queues the first row of rows (COPY format of p) as an
// INSERT and returns the rest.
func (w *Writer) queueInsertRow(ctx context.Context, p *relPlan, rows []byte, lsn change.LSN) ([]byte, error) {
	s := p.insert
	if s == nil {
		s = p.buildInsert()
		p.insert = s
	}
	if err := w.prepare(ctx, s); err != nil {
		return nil, fmt.Errorf("apply insert to %s at %s: %w", p.rel, lsn, err)
	}
	var err error
	before := len(rows)
	if p.binary {
		w.insertVals, rows, err = splitCopyRowBinary(rows, w.insertVals[:0])
	} else {
		w.insertVals, rows, w.unescaped, err = splitCopyRow(rows, w.insertVals[:0], w.unescaped[:0])
	}
	if err != nil {
		return nil, fmt.Errorf("apply insert to %s at %s: %w", p.rel, lsn, err)
	}
	w.queue(s, w.insertVals, before-len(rows), batchItem{op: change.OpInsert, lsn: lsn, plan: p, s: s}, w.copies.table(p))
	return rows, nil
}

// checkShape verifies the tuples carry what the statement needs.
func (w *Writer) checkShape(c *change.Change, p *relPlan, mode whereMode, ncols int) error {
	if c.Op == change.OpUpdate && len(w.newKinds) != ncols {
		return fmt.Errorf("new tuple has %d columns, relation has %d", len(w.newKinds), ncols)
	}
	if mode != whereNewKey && len(w.oldKinds) != ncols {
		return fmt.Errorf("old tuple has %d columns, relation has %d", len(w.oldKinds), ncols)
	}
	switch mode {
	case whereNewKey:
		if c.Op == change.OpDelete {
			return errors.New("delete without old tuple")
		}
		if len(p.keyCols) == 0 {
			return errors.New("no replica identity key and no old tuple to find the row")
		}
		for _, k := range p.keyCols {
			if w.newKinds[k] != p.valueKind {
				return fmt.Errorf("key column %q: %s", c.Rel.Columns[k].Name, keyProblem(w.newKinds[k]))
			}
		}
	case whereFull:
		n := 0
		for i := range w.oldKinds {
			if p.inFullWhere(i, w.oldKinds) {
				n++
			}
		}
		if n == 0 {
			return errors.New("old tuple has no column to match the row by (all unchanged TOAST or generated on the target)")
		}
	case whereOldKey:
		if len(p.keyCols) == 0 {
			return errors.New("old key tuple but the relation has no key columns")
		}
		for _, k := range p.keyCols {
			if w.oldKinds[k] != p.valueKind {
				return fmt.Errorf("key column %q: %s", c.Rel.Columns[k].Name, keyProblem(w.oldKinds[k]))
			}
		}
	}
	for _, kinds := range [2][]byte{w.newKinds, w.oldKinds} {
		for i, k := range kinds {
			if (k == change.KindBinary || k == change.KindText) && k != p.valueKind {
				return fmt.Errorf("column %q: %s", c.Rel.Columns[i].Name, kindProblem(k))
			}
		}
	}
	return nil
}

func keyProblem(kind byte) string {
	if kind == change.KindNull {
		return "NULL key value"
	}
	return kindProblem(kind)
}

// truncate flushes everything and truncates every listed table in one statement.
func (w *Writer) truncate(ctx context.Context, c *change.Change) error {
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(c.TruncateRels))
	desc := ""
	for i, rel := range c.TruncateRels {
		if i > 0 {
			desc += ", "
		}
		desc += rel.String()
	}
	for _, rel := range c.TruncateRels {
		p, err := w.plan(ctx, rel)
		if err != nil {
			return fmt.Errorf("apply truncate to %s at %s: %w", desc, c.LSN, err)
		}
		names = append(names, p.quotedTable)
	}
	if len(names) == 0 {
		return nil
	}
	if err := w.txExec(ctx, truncateSQL(names, c.TruncateOpts)); err != nil {
		return fmt.Errorf("apply truncate to %s at %s: %w", desc, c.LSN, err)
	}
	w.statements.Add(1)
	w.flushes.Add(1)
	return nil
}
