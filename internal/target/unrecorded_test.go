package target

import (
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// TestWriterCopyUnrecorded: with CopyUnrecorded, a change of a table the
// slot does not record is not written; the table is recorded pending in
// the transaction and the engine told (Resync). A transaction or
// savepoint that does not commit undoes what it told; a recorded table is
// applied as before.
func TestWriterCopyUnrecorded(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.known (id int PRIMARY KEY, v text); CREATE TABLE public.added (id int PRIMARY KEY, v text);`)
	known := rel("public", "known", change.IdentityDefault, "*id", "v")
	added := rel("public", "added", change.IdentityDefault, "*id", "v")
	if err := SetTablesStreamed(e.ctx, e.conn, "s1", []schema.TableName{{Schema: "public", Name: "known"}}, 0x100, nil); err != nil {
		t.Fatal(err)
	}
	filtered := map[schema.TableName]bool{} // what the engine's filter holds back, as engine.resync keeps it
	w := e.writer(WriterOptions{CopyUnrecorded: true, Resync: func(tn schema.TableName) func() {
		prev := filtered[tn]
		filtered[tn] = true
		return func() { filtered[tn] = prev }
	}})
	addedName := schema.TableName{Schema: "public", Name: "added"}
	state := func() string {
		t.Helper()
		s, err := tableState(e.ctx, e.check, "s1", addedName)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Rolled back: nothing recorded, the filter given back.
	must(w.Begin(e.ctx))
	must(w.Write(e.ctx, e.ins(known, "1", "k")))
	must(w.Write(e.ctx, e.upd(added, 0, nil, "7", "missing on the target")))
	if !filtered[addedName] {
		t.Fatalf("Resync not called for the unrecorded table: %v", filtered)
	}
	must(w.Rollback(e.ctx))
	if filtered[addedName] || state() != "" {
		t.Fatalf("after the rollback: filter %v, state %q", filtered, state())
	}

	// Rolled back to a savepoint: the same.
	must(w.Begin(e.ctx))
	must(w.Savepoint(e.ctx, "sub"))
	must(w.Write(e.ctx, e.ins(added, "1", "a")))
	must(w.RollbackToSavepoint(e.ctx, "sub"))
	if filtered[addedName] {
		t.Fatalf("after the savepoint's rollback: filter %v", filtered)
	}
	// Committed: the UPDATE of a row the target lacks is not written (no
	// update_missing), the table is pending, the known one applied.
	must(w.Write(e.ctx, e.ins(known, "2", "k")))
	must(w.Write(e.ctx, e.upd(added, 0, nil, "7", "missing on the target")))
	must(w.Write(e.ctx, &change.Change{Op: change.OpTruncate, LSN: e.lsn(), TruncateRels: []*change.Relation{known, added}}))
	must(w.Write(e.ctx, e.ins(known, "3", "k")))
	must(w.Commit(e.ctx, nil))
	if !filtered[addedName] || state() != TablePending {
		t.Fatalf("after the commit: filter %v, state %q", filtered, state())
	}
	compareRows(t, "known", e.rows(`SELECT id, v FROM known ORDER BY id`), [][]string{{"3", "k"}})
	if n := e.count(`SELECT count(*) FROM added`); n != 0 {
		t.Errorf("added has %d rows: its changes were written before its copy", n)
	}

	// A later transaction (another worker's writer) finds it pending:
	// still not written, and nothing to undo.
	w2 := e.writer(WriterOptions{CopyUnrecorded: true, Resync: w.opts.Resync})
	filtered[addedName] = false // as a restarted engine, before tablesync's poll
	must(w2.Begin(e.ctx))
	must(w2.Write(e.ctx, e.ins(added, "8", "x")))
	must(w2.Rollback(e.ctx))
	if !filtered[addedName] || state() != TablePending {
		t.Fatalf("found pending: filter %v, state %q", filtered, state())
	}

	// Copied (ready): applied.
	added.ID = 16500
	must(SetTableReady(e.ctx, e.conn, "s1", "public", "added", 0x200, 0, 0, SourceInfo{Ident: "16500/16600/-"}))
	e.mustApply(w2, e.ins(added, "9", "after the copy"))
	compareRows(t, "added", e.rows(`SELECT id, v FROM added ORDER BY id`), [][]string{{"9", "after the copy"}})

	// Another source table under that name (dropped and made again, or
	// renamed in its place): taken up again, its change not written.
	filtered[addedName] = false
	remade := rel("public", "added", change.IdentityDefault, "*id", "v")
	remade.ID = 16700
	must(w2.Begin(e.ctx))
	must(w2.Write(e.ctx, e.ins(remade, "1", "remade")))
	must(w2.Commit(e.ctx, nil))
	if !filtered[addedName] || state() != TablePending {
		t.Fatalf("another table under the copied one's name: filter %v, state %q", filtered, state())
	}
	compareRows(t, "added", e.rows(`SELECT id, v FROM added ORDER BY id`), [][]string{{"9", "after the copy"}})
}
