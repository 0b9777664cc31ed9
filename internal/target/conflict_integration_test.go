package target

import (
	"testing"

	"github.com/repstream/repstream/internal/change"
)

// TestWriterMissingRowsWithRules: a table with a rule that fires in replica
// mode takes plain UPDATE and DELETE statements (PostgreSQL refuses a
// rule-rewritten statement inside WITH); a missing row is then found from
// the command tag before COMMIT — also when the statement would have
// shared the commit's pipeline — and nothing of the transaction commits.
// A table without rules gets the same conflict from repstream.expect_row.
func TestWriterMissingRowsWithRules(t *testing.T) {
	e := newEnv(t, `
CREATE TABLE public.r (id int PRIMARY KEY, v text NOT NULL);
CREATE TABLE public.audit (id int, v text);
CREATE RULE r_audit AS ON UPDATE TO public.r DO ALSO INSERT INTO public.audit VALUES (new.id, new.v);
ALTER TABLE public.r ENABLE ALWAYS RULE r_audit;
CREATE TABLE public.plain (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO public.r VALUES (1, 'a'), (2, 'b');
INSERT INTO public.plain VALUES (1, 'a');`)
	w := e.writer(WriterOptions{})
	r := rel("public", "r", change.IdentityDefault, "*id", "v")
	plain := rel("public", "plain", change.IdentityDefault, "*id", "v")

	e.mustApply(w, e.upd(r, 0, nil, "1", "a2"))
	if n := e.count(`SELECT count(*) FROM audit WHERE id = 1 AND v = 'a2'`); n != 1 {
		t.Fatalf("the ALWAYS rule did not fire (%d audit rows)", n)
	}
	for _, tc := range []struct {
		name string
		cs   []*change.Change
		kind ConflictKind
	}{
		{"update with rules", []*change.Change{e.ins(plain, "7", "x"), e.upd(r, 0, nil, "2", "b2"), e.upd(r, 0, nil, "42", "z")}, UpdateMissing},
		{"delete with rules", []*change.Change{e.del(r, 'K', "43", "")}, DeleteMissing},
		{"update without rules", []*change.Change{e.upd(r, 0, nil, "2", "b3"), e.upd(plain, 0, nil, "44", "z")}, UpdateMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.cs[len(tc.cs)-1]
			err := e.apply(w, []change.LSN{0x4343}, tc.cs...)
			ce, ok := AsConflict(err)
			if !ok || ce.Kind != tc.kind || ce.LSN != bad.LSN || ce.Table != bad.Rel.String() {
				t.Fatalf("err = %v (conflict %+v)", err, ce)
			}
			_ = w.Rollback(e.ctx)
			if n := e.count(`SELECT count(*) FROM repstream.applied WHERE end_lsn = '0/4343'`); n != 0 {
				t.Errorf("the failed transaction is recorded as applied")
			}
			if n := e.count(`SELECT count(*) FROM r WHERE v LIKE 'b%' AND v <> 'b'`) + e.count(`SELECT count(*) FROM plain WHERE id = 7`); n != 0 {
				t.Errorf("%d changes of the failed transaction committed", n)
			}
		})
	}
	e.mustApply(w, e.upd(r, 0, nil, "2", "b4"), e.del(r, 'K', "1", ""))
	compareRows(t, "after", e.rows(`SELECT id, v FROM r ORDER BY id`), [][]string{{"2", "b4"}})
}

// TestWriterMissingRowLargeTransaction: a transaction announced as large
// (ExpectChanges) sends plain statements; a missing row among them — in an
// earlier batch or in the last one, which would share the COMMIT's
// pipeline — fails the transaction before COMMIT, and nothing commits.
func TestWriterMissingRowLargeTransaction(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.k (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO public.k SELECT g, 'v' FROM generate_series(1, 100) g;`)
	r := rel("public", "k", change.IdentityDefault, "*id", "v")
	run := func(w *Writer, cs ...*change.Change) error {
		if err := w.Begin(e.ctx); err != nil {
			t.Fatal(err)
		}
		w.ExpectChanges(TagCheckMin)
		for _, c := range cs {
			if err := w.Write(e.ctx, c); err != nil {
				_ = w.Rollback(e.ctx)
				return err
			}
		}
		return w.Commit(e.ctx, []change.LSN{0x4444})
	}
	for _, where := range []string{"last batch", "earlier batch"} {
		t.Run(where, func(t *testing.T) {
			w := e.writer(WriterOptions{BatchStatements: 3})
			var cs []*change.Change
			for i := 1; i <= 6; i++ { // BEGIN + 6 + 1: the last batch holds the delete at commit
				cs = append(cs, e.upd(r, 0, nil, itoa(i), "changed"))
			}
			bad := e.del(r, 'K', "4242", "")
			if where == "last batch" {
				cs = append(cs, bad)
			} else {
				cs = append([]*change.Change{cs[0], bad}, cs[1:]...)
			}
			err := run(w, cs...)
			ce, ok := AsConflict(err)
			if !ok || ce.Kind != DeleteMissing || ce.LSN != bad.LSN || ce.Table != "public.k" {
				t.Fatalf("err = %v (conflict %+v)", err, ce)
			}
			if n := e.count(`SELECT count(*) FROM k WHERE v = 'changed'`) + e.count(`SELECT count(*) FROM repstream.applied`); n != 0 {
				t.Errorf("%d changes or applied records of the failed transaction committed", n)
			}
		})
	}
	w := e.writer(WriterOptions{BatchStatements: 3})
	if err := run(w, e.upd(r, 0, nil, "1", "ok"), e.upd(r, 0, nil, "2", "ok"), e.del(r, 'K', "3", "")); err != nil {
		t.Fatal(err)
	}
	compareRows(t, "after", e.rows(`SELECT id, v FROM k WHERE id <= 3 ORDER BY id`), [][]string{{"1", "ok"}, {"2", "ok"}})
}
