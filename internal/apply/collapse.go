package apply

import (
	"context"
	"encoding/binary"

	"github.com/repstream/repstream/internal/change"
)

// Collapsing repeated changes to one key within a group.
//
// A group is one target transaction, so the states a row passes through
// between its first and last change in the group are never visible on the
// target. Where that is safe, the changes to one key are folded into at most
// one change, written at the position of the last of them:
//
//	insert + update  → insert of the updated row
//	update + update  → one update (unchanged TOAST columns of the later one
//	                   keep the earlier one's values)
//	update + delete  → the delete
//
// Any other pair (insert + delete, delete + insert, insert + insert,
// delete + update, …)
// closes the key's run: the earlier run is written as folded so far, and the
// later change starts a new one. An update that changes its key is never
// folded: it closes the runs of both keys and is written as it is.
//
// Safe means: the target table's only unique (or exclusion) index is the
// replica-identity key, it has no trigger or rule that fires in replica mode
// (ENABLE ALWAYS), and it is not partitioned — asked through Collapsible.
// Then changes to different keys commute (apply runs with
// session_replication_role = replica: no FK checks, no ordinary triggers),
// so moving a run's result later, past changes to other keys, changes
// nothing, while changes to one key keep their order: a run is written at its
// last change, before the next run of the same key starts.
//
// Outcomes differ from applying every change only where the target already
// disagrees with the source, and then only in how often it is counted: a
// run that finds no row is counted missing once rather than per change.
// An insert + delete is not folded into nothing: on a key the target
// already has (a row only the target has), the insert's duplicate key is
// what tells the user (--on-error), where nothing would have left that row
// in silence. So a key inserted, updated many times and deleted within a
// group is written as two changes, the insert of its last state and the
// delete.

// collapsibleWriter is implemented by writers that can say whether a
// relation's changes may be folded (target.Writer).
type collapsibleWriter interface {
	Collapsible(ctx context.Context, rel *change.Relation) (bool, error)
}

// folder folds the changes of groups (collapse), keeping its maps and
// buffers from one group to the next. Owned by one apply worker.
type folder struct {
	rels   map[*change.Relation]*relRuns
	in     []*change.Change // scratch for the caller's group (release clears it)
	out    []*change.Change
	keyBuf []byte
}

// relRuns is the open runs of one relation version in the current group,
// by key (kind, length, bytes of each key column).
type relRuns struct {
	foldable bool
	runs     map[string]run
}

// run is the folded state of one key's consecutive changes: c is the change
// to write at position last (nil: nothing to write); own says collapse
// allocated c, so it may change it in place.
type run struct {
	last int
	c    *change.Change
	own  bool
}

// fold folds the changes of one group (in order) and returns the changes to
// write, in order, and how many source changes it saved. ok(rel) says
// whether rel's changes may be folded. If a key column carries an unchanged
// TOAST value (its key is unknown) nothing in the group is folded. fold does
// not modify the input; folded changes are new allocations. The returned
// slice is valid until the next fold or release.
func (f *folder) fold(in []*change.Change, ok func(*change.Relation) (bool, error)) ([]*change.Change, int, error) {
	if f.rels == nil {
		f.rels = make(map[*change.Relation]*relRuns)
	}
	clear(f.rels)
	out := append(f.out[:0], in...)
	f.out = out
	for i, c := range in {
		if c.Op == change.OpTruncate || c.Rel == nil {
			// Not foldable; a truncate ends every run of its relations.
			for _, r := range c.TruncateRels {
				if rr := f.rels[r]; rr != nil {
					clear(rr.runs)
				}
			}
			continue
		}
		rr := f.rels[c.Rel]
		if rr == nil {
			foldable, err := ok(c.Rel)
			if err != nil {
				return nil, 0, err
			}
			rr = &relRuns{foldable: foldable && c.Rel.HasKey()}
			if rr.foldable {
				rr.runs = make(map[string]run)
			}
			f.rels[c.Rel] = rr
		}
		if !rr.foldable {
			continue
		}
		var known bool
		switch {
		case c.Op == change.OpUpdate && c.OldKind != 0:
			// The key changed (or the old row was sent whole): close both
			// keys' runs, write it as it is.
			if f.keyBuf, known = appendKey(f.keyBuf[:0], c.Rel, c.Old); !known {
				return in, 0, nil
			}
			delete(rr.runs, string(f.keyBuf))
			if f.keyBuf, known = appendKey(f.keyBuf[:0], c.Rel, c.New); !known {
				return in, 0, nil
			}
			delete(rr.runs, string(f.keyBuf))
			continue
		case c.Op == change.OpDelete:
			f.keyBuf, known = appendKey(f.keyBuf[:0], c.Rel, c.Old)
		default:
			f.keyBuf, known = appendKey(f.keyBuf[:0], c.Rel, c.New)
		}
		if !known {
			return in, 0, nil
		}
		r, open := rr.runs[string(f.keyBuf)]
		if !open {
			rr.runs[string(f.keyBuf)] = run{last: i, c: c}
			continue
		}
		folded, own, ok := foldPair(r, c)
		if !ok {
			rr.runs[string(f.keyBuf)] = run{last: i, c: c}
			continue
		}
		out[r.last] = nil
		out[i] = folded
		rr.runs[string(f.keyBuf)] = run{last: i, c: folded, own: own}
	}
	n := 0
	for _, c := range out {
		if c != nil {
			out[n] = c
			n++
		}
	}
	return out[:n], len(in) - n, nil
}

// release drops the folder's references to the last group's changes.
func (f *folder) release() {
	clear(f.in[:cap(f.in)])
	clear(f.out[:cap(f.out)])
	f.in, f.out = f.in[:0], f.out[:0]
	clear(f.rels)
}

// foldPair returns the one change equivalent to r's change then b on the
// same key (nil: no change at all) and whether collapse owns it, or false if
// they do not fold. A change collapse owns is reused.
func foldPair(r run, b *change.Change) (*change.Change, bool, bool) {
	a := r.c
	var op change.Op
	switch {
	case a.Op == change.OpInsert && b.Op == change.OpUpdate:
		op = change.OpInsert
	case a.Op == change.OpUpdate && b.Op == change.OpUpdate:
		op = change.OpUpdate
	case a.Op == change.OpUpdate && b.Op == change.OpDelete:
		return b, false, true
	default:
		return nil, false, false
	}
	c := a
	if !r.own {
		c = &change.Change{}
	}
	*c = change.Change{Op: op, Xid: b.Xid, LSN: b.LSN, Rel: b.Rel, New: overlay(b.New, a.New)}
	return c, true, true
}

// overlay returns newer with its unchanged-TOAST columns taken from older.
// Both are tuples of the same relation version.
func overlay(newer, older change.Tuple) change.Tuple {
	hasUnchanged := false
	it := newer.Iter()
	for it.Next() {
		if it.Kind() == change.KindUnchanged {
			hasUnchanged = true
			break
		}
	}
	if !hasUnchanged {
		return newer
	}
	dst := make(change.Tuple, 0, len(newer)+len(older))
	dst = binary.BigEndian.AppendUint16(dst, uint16(newer.NumColumns()))
	ot := older.Iter()
	it = newer.Iter()
	for it.Next() {
		ot.Next()
		kind, val := it.Kind(), it.Value()
		if kind == change.KindUnchanged && ot.Index() == it.Index() {
			kind, val = ot.Kind(), ot.Value()
		}
		dst = append(dst, kind)
		if kind == change.KindText || kind == change.KindBinary {
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(val)))
			dst = append(dst, val...)
		}
	}
	return dst
}

// appendKey appends the key columns of t (kind, length, value) to dst. It
// returns false if a key column's value is not in the tuple (unchanged
// TOAST).
func appendKey(dst []byte, rel *change.Relation, t change.Tuple) ([]byte, bool) {
	it := t.Iter()
	for it.Next() {
		if it.Index() >= len(rel.Columns) || !rel.Columns[it.Index()].Key {
			continue
		}
		if it.Kind() == change.KindUnchanged {
			return dst, false
		}
		v := it.Value()
		dst = append(dst, it.Kind())
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return dst, true
}
