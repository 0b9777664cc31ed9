package target

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
)

// TestConflictKinds: the SQLSTATE of a refused change and its operation
// give the conflict kind; errors that are not about data give none.
func TestConflictKinds(t *testing.T) {
	rel := &change.Relation{Namespace: "public", Name: "t"}
	tests := []struct {
		code pgerr.Code
		op   change.Op
		want ConflictKind
	}{
		{pgerr.UniqueViolation, change.OpInsert, InsertExists},
		{pgerr.UniqueViolation, change.OpUpdate, UpdateExists},
		{pgerr.ExclusionViolation, change.OpInsert, InsertExists},
		{pgerr.UniqueViolation, 0, InsertExists}, // at commit (deferred)
		{pgerr.RowMissing, change.OpUpdate, UpdateMissing},
		{pgerr.RowMissing, change.OpDelete, DeleteMissing},
		{pgerr.CheckViolation, change.OpUpdate, CheckViolation},
		{pgerr.ForeignKeyViolation, change.OpInsert, ForeignKeyViolation},
		{pgerr.NotNullViolation, change.OpInsert, NotNullViolation},
		{pgerr.InvalidTextRepresentation, change.OpInsert, DataError},
		{"22003", change.OpUpdate, DataError},
		{pgerr.DeadlockDetected, change.OpUpdate, ""},
		{pgerr.ConnectionFailure, change.OpUpdate, ""},
		{pgerr.UndefinedColumn, change.OpUpdate, ""},
	}
	for _, tt := range tests {
		err := fmt.Errorf("x: %w", &pgconn.PgError{Code: string(tt.code), Message: "m", Detail: "Key (id)=(5) already exists."})
		ce := asConflict(err, tt.op, rel, 0x10)
		switch {
		case tt.want == "" && ce != nil:
			t.Errorf("%s %s: conflict %s, want none", tt.code, tt.op, ce.Kind)
		case tt.want != "" && (ce == nil || ce.Kind != tt.want || ce.SQLState != string(tt.code) || ce.Table != "public.t"):
			t.Errorf("%s %s: conflict %+v, want %s", tt.code, tt.op, ce, tt.want)
		}
		if ce != nil && pgerr.CodeOf(ce) != tt.code {
			t.Errorf("%s: the server error is not in the chain", tt.code)
		}
	}
}

func TestConflictErrorMessage(t *testing.T) {
	ce := &ConflictError{Kind: UpdateMissing, Op: change.OpUpdate, Table: "public.t", Key: "(id)=(7)", LSN: 0x16B3F28,
		Xid: 733, CommitLSN: 0x16B4000, EndLSN: 0x16B4030, SQLState: string(pgerr.RowMissing),
		Err: &pgconn.PgError{Code: string(pgerr.RowMissing), Message: "no row to change on the target"}}
	want := "apply update to public.t at 0/16B3F28: update_missing: no row with key (id)=(7) on the target, source transaction 733 (commit LSN 0/16B4000, end LSN 0/16B4030)"
	if got := ce.Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
	dup := &ConflictError{Kind: InsertExists, Op: change.OpInsert, Table: "public.t", Key: "(id)=(1)", LSN: 1,
		Err: &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key value violates unique constraint \"t_pkey\""}}
	if got := dup.Error(); !strings.HasPrefix(got, "apply insert to public.t at 0/1: insert_exists: duplicate key (id)=(1): ERROR: duplicate key value") {
		t.Errorf("Error() = %s", got)
	}
}

// TestSkipRequestsTake: a request matches a transaction by end or commit
// LSN, once: the next transaction, committing where the skipped one ends,
// is not skipped too.
func TestSkipRequestsTake(t *testing.T) {
	s := SkipRequests{0x200: true, 0x500: true}
	if s.Take(change.TxnInfo{CommitLSN: 0x100, EndLSN: 0x180}) {
		t.Error("an unrequested transaction taken")
	}
	if !s.Take(change.TxnInfo{CommitLSN: 0x1D0, EndLSN: 0x200}) {
		t.Error("request by end LSN not taken")
	}
	if s.Take(change.TxnInfo{CommitLSN: 0x200, EndLSN: 0x230}) {
		t.Error("the next transaction (commit LSN = the skipped one's end) taken too")
	}
	if !s.Take(change.TxnInfo{CommitLSN: 0x500, EndLSN: 0x530}) || len(s) != 0 {
		t.Errorf("request by commit LSN not taken, left %v", s)
	}
}

// TestConflictKindsComplete: every kind conflictKind can return is listed
// in ConflictKinds (monitoring declares their counters at start).
func TestConflictKindsComplete(t *testing.T) {
	listed := map[ConflictKind]bool{}
	for _, k := range ConflictKinds() {
		listed[k] = true
	}
	classes := []pgerr.DataClass{pgerr.Unique, pgerr.RowNotFound, pgerr.Check, pgerr.ForeignKey, pgerr.NotNull, pgerr.ValueProblems}
	for _, class := range classes {
		for _, op := range []change.Op{change.OpInsert, change.OpUpdate, change.OpDelete, change.OpTruncate, 0} {
			if k, ok := conflictKind(class, op); ok && !listed[k] {
				t.Errorf("conflictKind(%s, %s) = %s, not in ConflictKinds", class, op, k)
			}
		}
	}
	if len(listed) != len(ConflictKinds()) {
		t.Errorf("ConflictKinds lists a kind twice: %v", ConflictKinds())
	}
}
