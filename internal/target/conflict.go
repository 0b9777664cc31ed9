package target

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
)

// ConflictKind names what kind of data conflict stopped a change, with
// PostgreSQL 18's names for logical replication conflicts where they exist
// (insert_exists, update_exists, update_missing, delete_missing) and the
// constraint or value error otherwise.
type ConflictKind string

const (
	InsertExists        ConflictKind = "insert_exists"  // an insert hit a unique (or exclusion) index
	UpdateExists        ConflictKind = "update_exists"  // an update hit a unique (or exclusion) index
	UpdateMissing       ConflictKind = "update_missing" // the row to update is not on the target
	DeleteMissing       ConflictKind = "delete_missing" // the row to delete is not on the target
	CheckViolation      ConflictKind = "check_violation"
	ForeignKeyViolation ConflictKind = "foreign_key_violation"
	NotNullViolation    ConflictKind = "not_null_violation"
	DataError           ConflictKind = "data_error" // a value the target's type or column refuses (SQLSTATE class 22)
	// UpdateOriginDiffers, DeleteOriginDiffers (PostgreSQL 18's names):
	// the row to update or delete was written on the target by the
	// target's own transaction (no replication origin), committed after
	// the source transaction: both sides wrote it at once (--origin none
	// with track_commit_timestamp on the target: local_older).
	UpdateOriginDiffers ConflictKind = "update_origin_differs"
	DeleteOriginDiffers ConflictKind = "delete_origin_differs"
	// TruncateOriginDiffers: a table to truncate holds such a row.
	TruncateOriginDiffers ConflictKind = "truncate_origin_differs"
	// MultipleRows: an update or delete matched more than one target row
	// by its key (the target's key columns are not unique as the
	// source's are: no unique index, or another collation).
	MultipleRows ConflictKind = "multiple_rows"
)

// ConflictKinds are every kind a ConflictError can have: monitoring
// exports a conflict counter per kind from the start of a run, at 0 until
// a conflict of that kind is met (an alert on its increase then sees the
// first one).
func ConflictKinds() []ConflictKind {
	return []ConflictKind{InsertExists, UpdateExists, UpdateMissing, DeleteMissing,
		CheckViolation, ForeignKeyViolation, NotNullViolation, DataError, MultipleRows,
		UpdateOriginDiffers, DeleteOriginDiffers, TruncateOriginDiffers}
}

// ConflictError is a change the target refused because of its data — a
// duplicate key, a missing row, a violated constraint, a value the column
// refuses — as opposed to a lost connection or a lock conflict. Applying the
// same change again fails again until the target is mended; apply stops or
// parks the source transaction (--on-error).
//
// The Writer fills Kind, Op, Table, LSN (the change's), SQLState, Err and,
// when the server's error names it, Key; apply fills the rest (the source
// transaction, and Key from the change when the server did not name it).
type ConflictError struct {
	Kind     ConflictKind
	Op       change.Op  // 0 when the error came at commit (a deferred constraint)
	Table    string     // schema.table, "" when unknown
	Key      string     // the key values as text, "(id)=(5)"; "" when unknown
	LSN      change.LSN // the change's position
	Column   string     // the column the server named (a value error), or ""
	SQLState string
	Err      error // the server's error (for update_missing and delete_missing, repstream.expect_row's)

	Xid       uint32     // the source transaction, once apply knows it
	CommitLSN change.LSN // 0 until apply knows it
	EndLSN    change.LSN // 0 until apply knows it
}

// Error reads "apply update to public.t at 0/16B3F28: update_missing: no
// row with key (id)=(5) on the target, source transaction 731 (commit LSN
// 0/16B4000, end LSN 0/16B4030)" — the parts the error knows — followed by
// the server's error for the other kinds.
func (e *ConflictError) Error() string {
	var b strings.Builder
	if e.Op != 0 {
		fmt.Fprintf(&b, "apply %s to %s at %s", e.Op, e.tableOrUnknown(), e.LSN)
		if e.Column != "" {
			b.WriteString(", column ")
			b.WriteString(e.Column)
		}
		b.WriteString(": ")
	}
	b.WriteString(string(e.Kind))
	switch e.Kind {
	case UpdateMissing, DeleteMissing:
		b.WriteString(": no row")
		if e.Key != "" {
			b.WriteString(" with key ")
			b.WriteString(e.Key)
		}
		b.WriteString(" on the target")
	case MultipleRows:
		b.WriteString(": ")
		if e.Key != "" {
			b.WriteString("key ")
			b.WriteString(e.Key)
			b.WriteString(" ")
		}
		b.WriteString("matches more than one row on the target (the target's key columns are not unique as the source's are: an index missing, or another collation)")
	case InsertExists, UpdateExists:
		b.WriteString(": duplicate key")
		if e.Key != "" {
			b.WriteString(" ")
			b.WriteString(e.Key)
		}
	default:
		if e.Key != "" {
			b.WriteString(", key ")
			b.WriteString(e.Key)
		}
	}
	if e.EndLSN != 0 {
		fmt.Fprintf(&b, ", source transaction %d (commit LSN %s, end LSN %s)", e.Xid, e.CommitLSN, e.EndLSN)
	}
	if e.Err != nil && e.Kind != UpdateMissing && e.Kind != DeleteMissing && e.Kind != MultipleRows {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *ConflictError) Unwrap() error { return e.Err }

// Message is the server's message for the conflict, one line.
func (e *ConflictError) Message() string {
	switch {
	case e.Kind == UpdateMissing || e.Kind == DeleteMissing:
		return "the row to " + e.Op.String() + " is not on the target"
	case e.Kind == MultipleRows:
		return "the key of the row to " + e.Op.String() + " matches more than one row on the target"
	case e.Err != nil:
		return strings.ReplaceAll(pgerr.Message(e.Err), "\n", " ")
	}
	return string(e.Kind)
}

func (e *ConflictError) tableOrUnknown() string {
	if e.Table == "" {
		return "a table"
	}
	return e.Table
}

// AsConflict returns the ConflictError in err's chain, if any.
func AsConflict(err error) (*ConflictError, bool) {
	var ce *ConflictError
	ok := errors.As(err, &ce)
	return ce, ok
}

// conflictKind maps a data class and the operation to a kind; ok is false
// for an error that is not about data.
func conflictKind(class pgerr.DataClass, op change.Op) (ConflictKind, bool) {
	switch class {
	case pgerr.Unique:
		if op == change.OpUpdate {
			return UpdateExists, true
		}
		return InsertExists, true
	case pgerr.RowNotFound:
		if op == change.OpDelete {
			return DeleteMissing, true
		}
		return UpdateMissing, true
	case pgerr.KeyNotUnique:
		return MultipleRows, true
	case pgerr.OriginDiffers:
		switch op {
		case change.OpDelete:
			return DeleteOriginDiffers, true
		case change.OpTruncate:
			return TruncateOriginDiffers, true
		}
		return UpdateOriginDiffers, true
	case pgerr.Check:
		return CheckViolation, true
	case pgerr.ForeignKey:
		return ForeignKeyViolation, true
	case pgerr.NotNull:
		return NotNullViolation, true
	case pgerr.ValueProblems:
		return DataError, true
	}
	return "", false
}

// asConflict returns err as a *ConflictError when the server refused the
// change for its data, or nil.
func asConflict(err error, op change.Op, rel *change.Relation, lsn change.LSN) *ConflictError {
	kind, ok := conflictKind(pgerr.ClassifyData(err), op)
	if !ok {
		return nil
	}
	ce := &ConflictError{Kind: kind, Op: op, LSN: lsn, SQLState: string(pgerr.CodeOf(err)), Err: err, Key: pgerr.DetailKey(err)}
	if rel != nil {
		ce.Table = rel.String()
	}
	return ce
}

// copyConflict is asConflict for a COPY of rows whose LSNs are lsns: the
// change is the row the error's context line names (else the first).
func copyConflict(err error, rel *change.Relation, lsns []change.LSN) *ConflictError {
	lsn := lsns[0]
	if line := copyErrorLine(err); line >= 1 && line <= len(lsns) {
		lsn = lsns[line-1]
	}
	ce := asConflict(err, change.OpInsert, rel, lsn)
	if ce != nil {
		ce.Column = CopyErrorColumn(err)
	}
	return ce
}

// errRowMissing stands for the server's error when a plain statement's
// command tag says it changed no row (a table with rules, relPlan.rules).
var errRowMissing = errors.New("no row to change on the target")

// missingRow is the conflict of queued statement it, which changed n rows
// (0, or more than 1) by its command tag.
func (w *Writer) missingRow(it batchItem, n int64) error {
	if n > 1 {
		return &ConflictError{Kind: MultipleRows, Op: it.op, Table: it.plan.rel.String(), LSN: it.lsn, SQLState: string(pgerr.RowsMany),
			Err: fmt.Errorf("the key matched %d rows on the target, not one", n)}
	}
	kind := UpdateMissing
	if it.op == change.OpDelete {
		kind = DeleteMissing
	}
	return &ConflictError{Kind: kind, Op: it.op, Table: it.plan.rel.String(), LSN: it.lsn, SQLState: string(pgerr.RowMissing), Err: errRowMissing}
}

// replicaRules reports whether a rule fires on UPDATE or DELETE of p's table
// in replica mode (ENABLE ALWAYS or ENABLE REPLICA): PostgreSQL refuses such
// statements inside WITH, so they are sent plain (relPlan.rules).
func (w *Writer) replicaRules(ctx context.Context, p *relPlan) (bool, error) {
	var n int64
	if err := w.conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_rewrite
WHERE ev_class = $1 AND ev_enabled IN ('A', 'R') AND ev_type IN ('2', '4')`, p.tableOID).Scan(&n); err != nil {
		return false, fmt.Errorf("read the rules of %s on target: %w", p.name, err)
	}
	return n > 0, nil
}

// TagCheckMin is the number of changes from which ExpectChanges switches a
// transaction to plain statements.
const TagCheckMin = 256

// ExpectChanges tells the Writer, after Begin, how many changes the
// transaction will have (about). From TagCheckMin on, its UPDATEs and
// DELETEs are sent plain and a missing row is read from the command tag —
// the statements cost the target less than repstream.expect_row's form —
// and the pipeline holding the last of them is sent before COMMIT: one more
// round trip, for a large transaction only. A small transaction keeps the
// one round trip and lets the server find the missing row.
func (w *Writer) ExpectChanges(n int) {
	if w.state.inTxn() {
		w.tagCheck = n >= TagCheckMin
	}
}

// plainVariant returns s's checkTag form (s itself when it is one).
func (s *stmt) plainVariant() *stmt {
	if s.checkTag || s.inner == "" {
		return s
	}
	if s.plain == nil {
		s.plain = &stmt{sql: s.inner, params: s.params, noop: s.noop, checkTag: true, inner: s.inner, oids: s.oids, formats: s.formats}
	}
	return s.plain
}
