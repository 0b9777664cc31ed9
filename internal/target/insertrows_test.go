package target

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
)

// TestWriterMultiRowInserts: with MultiRowInserts a table's few rows go in
// one INSERT at commit; a bad value still names its row (by the parameter
// the server names); a duplicate key names the table and key, and applying
// the transaction again (as apply's conflict isolation does) names the row
// exactly.
func TestWriterMultiRowInserts(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.k (id int PRIMARY KEY, v text NOT NULL); CREATE TABLE public.o (id int PRIMARY KEY)`)
	r := rel("public", "k", change.IdentityDefault, "*id", "v")
	o := rel("public", "o", change.IdentityDefault, "*id")
	w := e.writer(WriterOptions{MultiRowInserts: true})

	stmts, copied := e.st.Counter("statements").Load(), e.st.Counter("copy_rows").Load()
	e.mustApply(w, e.ins(r, "1", "a\tb"), e.ins(o, "1"), e.ins(r, "2", `c\d`), e.ins(r, "3", "e"))
	// k: three rows in one INSERT; o: one row.
	if n, c := e.st.Counter("statements").Load()-stmts, e.st.Counter("copy_rows").Load()-copied; n != 2 || c != 0 {
		t.Errorf("statements = %d, copied rows = %d; want 2 and 0", n, c)
	}
	// More rows than InsertRowsMax, up to MultiRowsMax: still one INSERT, no COPY.
	var many []*change.Change
	for i := 100; i < 100+MultiRowsMax; i++ {
		many = append(many, e.ins(r, strconv.Itoa(i), "m"))
	}
	stmts, copied = e.st.Counter("statements").Load(), e.st.Counter("copy_rows").Load()
	e.mustApply(w, many...)
	if n, c := e.st.Counter("statements").Load()-stmts, e.st.Counter("copy_rows").Load()-copied; n != 1 || c != 0 {
		t.Errorf("%d rows: statements = %d, copied rows = %d; want 1 and 0", len(many), n, c)
	}
	var dels []*change.Change
	for i := 100; i < 100+MultiRowsMax; i++ {
		dels = append(dels, e.del(r, 'K', strconv.Itoa(i), null))
	}
	e.mustApply(w, dels...)
	if n := e.count(`SELECT count(*) FROM k WHERE id >= 100`); n != 0 {
		t.Fatalf("%d rows left after deleting them", n)
	}
	e.mustApply(w, e.upd(r, 0, nil, "3", "f"), e.ins(r, "4", "g"))
	compareRows(t, "after multi-row insert", e.rows(`SELECT id, v FROM k ORDER BY id`),
		[][]string{{"1", "a\tb"}, {"2", `c\d`}, {"3", "f"}, {"4", "g"}})

	cs := []*change.Change{e.ins(r, "5", "a"), e.ins(r, "x", "b"), e.ins(r, "7", "c")}
	err := e.apply(w, nil, cs...)
	if err == nil || !strings.Contains(err.Error(), "apply insert to public.k at "+cs[1].LSN.String()+", column id: ") ||
		!strings.Contains(err.Error(), "22P02") {
		t.Fatalf("bad value in a multi-row INSERT: error = %v", err)
	}

	w = e.writer(WriterOptions{MultiRowInserts: true})
	cs = []*change.Change{e.ins(r, "5", "a"), e.ins(r, "6", "b"), e.ins(r, "2", "dup"), e.ins(r, "8", "e")}
	err = e.apply(w, nil, cs...)
	ce, ok := AsConflict(err)
	var pgErr *pgconn.PgError
	if !ok || !errors.As(err, &pgErr) || pgErr.Code != "23505" || ce.Kind != InsertExists || ce.Table != "public.k" || ce.Key != "(id)=(2)" {
		t.Fatalf("duplicate key in a multi-row INSERT: error = %v (conflict %+v)", err, ce)
	}
	err = e.apply(w, nil, cs...)
	if want := "apply insert to public.k at " + cs[2].LSN.String() + ": insert_exists: duplicate key (id)=(2)"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("the same transaction again: error = %v, want prefix %q", err, want)
	}
	if n := e.count(`SELECT count(*) FROM k`); n != 4 {
		t.Fatalf("%d rows after failed transactions, want 4", n)
	}
}
