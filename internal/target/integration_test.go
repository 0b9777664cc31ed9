package target

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type env struct {
	t      *testing.T
	ctx    context.Context
	dsn    string
	conn   *pgx.Conn // apply connection (Connect)
	check  *pgx.Conn // plain connection for verification, TimeZone UTC
	st     *stats.Component
	nextLS change.LSN
}

func newEnv(t *testing.T, setup string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test")
	}
	c := pgtest.Shared(t, "target")
	db := pgtest.NewDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, dsn: c.DSN(db), nextLS: 0x16B3700}
	var err error
	if e.conn, err = Connect(ctx, e.dsn, "repstream-test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close(context.Background()) })
	if e.check, err = pgx.Connect(ctx, e.dsn+" timezone=UTC"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.check.Close(context.Background()) })
	if _, err := e.check.Exec(ctx, setup); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if err := EnsureState(ctx, e.conn); err != nil {
		t.Fatal(err)
	}
	e.st = stats.NewRegistry().Component("target")
	return e
}

func (e *env) writer(opts WriterOptions) *Writer {
	if opts.Slot == "" {
		opts.Slot = "s1"
	}
	opts.Stats = e.st
	return NewWriter(e.conn, opts)
}

// rel builds a source relation; key columns are marked with a leading '*'.
func rel(schemaName, name string, identity byte, cols ...string) *change.Relation {
	r := &change.Relation{Namespace: schemaName, Name: name, ReplicaIdentity: identity}
	for _, c := range cols {
		key := strings.HasPrefix(c, "*")
		r.Columns = append(r.Columns, change.Column{Name: strings.TrimPrefix(c, "*"), Key: key})
	}
	return r
}

func (e *env) lsn() change.LSN { e.nextLS += 0x28; return e.nextLS }

func (e *env) ins(r *change.Relation, vals ...string) *change.Change {
	return &change.Change{Op: change.OpInsert, LSN: e.lsn(), Rel: r, New: tup(vals...)}
}

func (e *env) upd(r *change.Relation, oldKind byte, old change.Tuple, vals ...string) *change.Change {
	return &change.Change{Op: change.OpUpdate, LSN: e.lsn(), Rel: r, OldKind: oldKind, Old: old, New: tup(vals...)}
}

func (e *env) del(r *change.Relation, oldKind byte, old ...string) *change.Change {
	return &change.Change{Op: change.OpDelete, LSN: e.lsn(), Rel: r, OldKind: oldKind, Old: tup(old...)}
}

// apply writes the changes in one transaction and commits with applied.
func (e *env) apply(w *Writer, applied []change.LSN, cs ...*change.Change) error {
	e.t.Helper()
	if err := w.Begin(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cs {
		if err := w.Write(e.ctx, c); err != nil {
			if rbErr := w.Rollback(e.ctx); rbErr != nil {
				e.t.Fatalf("rollback after %v: %v", err, rbErr)
			}
			return err
		}
	}
	return w.Commit(e.ctx, applied)
}

func (e *env) mustApply(w *Writer, cs ...*change.Change) {
	e.t.Helper()
	if err := e.apply(w, nil, cs...); err != nil {
		e.t.Fatal(err)
	}
}

// rows returns the query's rows as text (NULL as "\x00n"), one string slice per row.
func (e *env) rows(sql string, args ...any) [][]string {
	e.t.Helper()
	rs, err := e.check.Query(e.ctx, sql, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	defer rs.Close()
	var out [][]string
	for rs.Next() {
		raw := rs.RawValues()
		row := make([]string, len(raw))
		for i, v := range raw {
			if v == nil {
				row[i] = null
			} else {
				row[i] = string(v)
			}
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func (e *env) count(sql string) int {
	e.t.Helper()
	var n int
	if err := e.check.QueryRow(e.ctx, sql).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

const allTypes = `
CREATE TYPE color AS ENUM ('red', 'green', 'blue');
CREATE TABLE public.t (
	id int PRIMARY KEY,
	big bigint,
	num numeric(20,5),
	f float8,
	txt text,
	vc varchar(10),
	j jsonb,
	ia int[],
	ta text[],
	b bytea,
	ts timestamptz,
	d date,
	u uuid,
	flag bool,
	c color,
	total bigint GENERATED ALWAYS AS (big * 2) STORED,
	target_only text DEFAULT 'dflt'
);`

var allCols = []string{"*id", "big", "num", "f", "txt", "vc", "j", "ia", "ta", "b", "ts", "d", "u", "flag", "c", "total"}

const selectAll = `SELECT id, big, num, f, txt, vc, j, ia, ta, b, ts, d, u, flag, c, total, target_only FROM public.t ORDER BY id`

// TestWriterAllTypes runs with rows sent as INSERT statements where there
// are few (the default) and with every row sent by COPY.
func TestWriterAllTypes(t *testing.T) {
	t.Run("inserts", func(t *testing.T) { testWriterAllTypes(t, 0, false) })
	t.Run("multi-row inserts", func(t *testing.T) { testWriterAllTypes(t, 0, true) })
	t.Run("copy", func(t *testing.T) { testWriterAllTypes(t, -1, false) })
}

func testWriterAllTypes(t *testing.T, insertRowsMax int, multiRow bool) {
	e := newEnv(t, allTypes)
	r := rel("public", "t", change.IdentityDefault, allCols...)
	huge := strings.Repeat("0123456789abcdef\\\t\n", 60000) // > 1 MB, TOASTed

	row1 := []string{"1", "9000000000", "12345.67890", "1.0000000000000002", huge, "näive", `{"a": [1, "x\ty"], "b": null}`,
		"{1,NULL,3}", `{"a b","c\"d",NULL,""}`, `\x00ff5c0a`, "2024-01-02 03:04:05.123456+00", "2024-02-29",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "t", "green", "999"}
	row2 := []string{"2", "-1", "NaN", "-Infinity", "", "", "[]", "{}", "{}", `\x`, "infinity", "0001-01-01 BC", "00000000-0000-0000-0000-000000000000", "f", "red", null}
	row3 := []string{"3", null, null, "NaN", null, null, null, null, null, null, null, null, null, null, null, null}
	w := e.writer(WriterOptions{CopyFlushBytes: 64 << 10, BatchStatements: 2, InsertRowsMax: insertRowsMax, MultiRowInserts: multiRow})
	e.mustApply(w, e.ins(r, row1...), e.ins(r, row2...), e.ins(r, row3...))

	want := func(vals []string, total, targetOnly string) []string {
		out := append([]string(nil), vals[:15]...)
		return append(out, total, targetOnly)
	}
	got := e.rows(selectAll)
	exp := [][]string{want(row1, "18000000000", "dflt"), want(row2, "-2", "dflt"), want(row3, null, "dflt")}
	compareRows(t, "after insert", got, exp)

	// Update keeping the key, with the huge txt unchanged ('u'): it keeps its value.
	row1u := append([]string(nil), row1...)
	row1u[1], row1u[4], row1u[6] = "7", unch, `{"new": true}`
	// Key-changing update 2 -> 20 ('K' old tuple: key only, rest null).
	oldKey2 := tup(append([]string{"2"}, nulls(len(allCols)-1)...)...)
	row20 := append([]string{"20"}, row2[1:]...)
	row20[5] = "changed"
	e.mustApply(w,
		e.upd(r, 0, nil, row1u...),
		e.upd(r, 'K', oldKey2, row20...),
		e.del(r, 'K', append([]string{"3"}, nulls(len(allCols)-1)...)...),
	)
	row1u[4] = huge
	got = e.rows(selectAll)
	compareRows(t, "after update/delete", got, [][]string{want(row1u, "14", "dflt"), want(row20, "-2", "dflt")})

	// Update of a missing row and delete of a missing row are conflicts:
	// each fails its target transaction (the COMMIT behind it in the
	// pipeline never happens), typed with kind, table and LSN.
	for _, m := range []struct {
		c    *change.Change
		kind ConflictKind
	}{
		{e.upd(r, 0, nil, append([]string{"42"}, nulls(len(allCols)-1)...)...), UpdateMissing},
		{e.del(r, 'K', append([]string{"43"}, nulls(len(allCols)-1)...)...), DeleteMissing},
	} {
		err := e.apply(w, []change.LSN{0x4242}, m.c)
		ce, ok := AsConflict(err)
		if !ok || ce.Kind != m.kind || ce.Table != r.String() || ce.LSN != m.c.LSN || ce.SQLState != "RS001" {
			t.Errorf("%s of a missing row: err = %v (conflict %+v)", m.c.Op, err, ce)
		}
		_ = w.Rollback(e.ctx)
		var n int
		if err := e.conn.QueryRow(e.ctx, `SELECT count(*) FROM repstream.applied WHERE end_lsn = '0/4242'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s of a missing row: the transaction was recorded as applied", m.c.Op)
		}
	}
	// row1 is over CopyFlushBytes: a COPY of its own; rows 2 and 3 are
	// few enough to travel as INSERTs in the commit's pipeline (by default).
	copied, stmts := int64(1), int64(5)
	if insertRowsMax < 0 {
		copied, stmts = 3, 3
	} else if multiRow {
		stmts = 4 // rows 2 and 3 in one INSERT
	}
	if n := e.st.Counter("copy_rows").Load(); n != copied {
		t.Errorf("copy_rows = %d, want %d", n, copied)
	}
	if n := e.st.Counter("statements").Load(); n != stmts {
		t.Errorf("statements = %d, want %d (inserts, 3 + 2 updates and deletes; the failed ones are not counted)", n, stmts)
	}

	// Truncate.
	other := rel("public", "t2", change.IdentityDefault, "*id")
	if _, err := e.check.Exec(e.ctx, `CREATE TABLE public.t2 (id serial PRIMARY KEY); INSERT INTO t2 DEFAULT VALUES;`); err != nil {
		t.Fatal(err)
	}
	e.mustApply(w,
		e.ins(r, row3...),
		&change.Change{Op: change.OpTruncate, LSN: e.lsn(), TruncateRels: []*change.Relation{r, other},
			TruncateOpts: change.TruncateRestartIdentity},
		e.ins(r, row2...),
	)
	compareRows(t, "after truncate", e.rows(selectAll), [][]string{want(row2, "-2", "dflt")})
	if n := e.count(`SELECT nextval('t2_id_seq')`); n != 1 {
		t.Errorf("RESTART IDENTITY not applied: nextval = %d", n)
	}
}

func nulls(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = null
	}
	return s
}

func compareRows(t *testing.T, what string, got, want [][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d: %q", what, len(got), len(want), short(got))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: row %d has %d columns, want %d", what, i, len(got[i]), len(want[i]))
		}
		for j := range got[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("%s: row %d column %d = %q, want %q", what, i, j, trunc(got[i][j]), trunc(want[i][j]))
			}
		}
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func short(rows [][]string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		for _, v := range r {
			out[i] = append(out[i], trunc(v))
		}
	}
	return out
}

func TestWriterFullIdentity(t *testing.T) {
	e := newEnv(t, `
CREATE TABLE public.f (a int, j json, p point, t text);
ALTER TABLE public.f REPLICA IDENTITY FULL;`)
	r := rel("public", "f", change.IdentityFull, "a", "j", "p", "t")
	w := e.writer(WriterOptions{})
	dup := []string{"1", `{"k": 1}`, "(1,2)", "same"}
	e.mustApply(w, e.ins(r, dup...), e.ins(r, dup...), e.ins(r, "2", null, null, "two"))

	// Delete one of two identical rows: exactly one goes.
	e.mustApply(w, e.del(r, 'O', dup...))
	if n := e.count(`SELECT count(*) FROM f WHERE a = 1`); n != 1 {
		t.Fatalf("after FULL delete: %d rows with a=1, want 1", n)
	}
	// Update matching NULLs (IS NOT DISTINCT FROM) and a json/point by text.
	e.mustApply(w,
		e.upd(r, 'O', tup("2", null, null, "two"), "2", `{"k": 2}`, "(3,4)", "deux"),
		e.upd(r, 'O', tup(dup...), "1", `{"k": 1}`, "(1,2)", "changed"),
	)
	compareRows(t, "after FULL updates", e.rows(`SELECT a, j, p, t FROM f ORDER BY a`), [][]string{
		{"1", `{"k": 1}`, "(1,2)", "changed"},
		{"2", `{"k": 2}`, "(3,4)", "deux"},
	})
	// Unchanged TOAST in the old FULL tuple is skipped in the match.
	e.mustApply(w, e.upd(r, 'O', tup("2", `{"k": 2}`, "(3,4)", unch), "2", `{"k": 2}`, "(3,4)", unch))
	// An old tuple with nothing to match by is refused, not applied to an arbitrary row.
	err := e.apply(w, nil, e.del(r, 'O', unch, unch, unch, unch))
	if err == nil || !strings.Contains(err.Error(), "no column to match the row by") {
		t.Fatalf("delete with an all-unchanged old tuple: %v", err)
	}
}

func TestWriterErrors(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.k (id int PRIMARY KEY, v text NOT NULL);`)
	ctx := e.ctx
	w := e.writer(WriterOptions{})
	r := rel("public", "k", change.IdentityDefault, "*id", "v")

	t.Run("missing table", func(t *testing.T) {
		// Created from the description (CREATE TABLE AS, ctas.go), which
		// this one's unknown type (OID 0) prevents.
		c := e.ins(rel("public", "nope", change.IdentityDefault, "*id"), "1")
		err := e.apply(w, nil, c)
		if err == nil || !strings.Contains(err.Error(), `rows of public.nope, which the target lacks`) ||
			!strings.Contains(err.Error(), "apply insert to public.nope at "+c.LSN.String()) {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("missing column", func(t *testing.T) {
		err := e.apply(w, nil, e.ins(rel("public", "k", change.IdentityDefault, "*id", "v", "extra"), "1", "a", "b"))
		if err == nil || !strings.Contains(err.Error(), `column "extra" of source table public.k is missing on the target table public.k`) {
			t.Fatalf("error = %v", err)
		}
	})
	// A few rows travel as INSERT statements at commit, more by COPY (or
	// every row, with InsertRowsMax -1): both name the failing row.
	for _, how := range []struct {
		name string
		w    *Writer
	}{{"COPY", e.writer(WriterOptions{InsertRowsMax: -1})}, {"INSERT", w}} {
		t.Run("duplicate key in "+how.name+" names the row", func(t *testing.T) {
			cs := []*change.Change{e.ins(r, "1", "a"), e.ins(r, "2", "b"), e.ins(r, "3", "c"), e.ins(r, "2", "dup"), e.ins(r, "5", "e")}
			err := e.apply(how.w, nil, cs...)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
				t.Fatalf("error = %v, want a 23505 PgError", err)
			}
			if want := "apply insert to public.k at " + cs[3].LSN.String() + ": insert_exists: duplicate key (id)=(2): ERROR: duplicate key"; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error = %v, want prefix %q", err, want)
			}
			if n := e.count(`SELECT count(*) FROM k`); n != 0 {
				t.Fatalf("%d rows after failed transaction", n)
			}
		})
		t.Run("bad value in "+how.name+" names the row", func(t *testing.T) {
			cs := []*change.Change{e.ins(r, "1", "a"), e.ins(r, "x", "b")}
			err := e.apply(how.w, nil, cs...)
			if err == nil || !strings.Contains(err.Error(), "apply insert to public.k at "+cs[1].LSN.String()+", column id: ") ||
				!strings.Contains(err.Error(), "22P02") {
				t.Fatalf("error = %v", err)
			}
		})
	}
	t.Run("insert behind an update of its table keeps the order", func(t *testing.T) {
		// The delete is queued; the insert of the same key must follow it
		// (as a statement in the same pipeline), not overtake it.
		// The long row is copied at once, so BEGIN has been sent when the
		// delete is queued; the COPY writer would copy a buffered 7 before
		// the queued delete.
		long := strings.Repeat("x", 200)
		for _, w := range []*Writer{w, e.writer(WriterOptions{InsertRowsMax: -1, CopyFlushBytes: 100})} {
			e.mustApply(w, e.ins(r, "7", "old"))
			e.mustApply(w, e.ins(r, "8", long), e.del(r, 'K', "7", null), e.ins(r, "7", "new"))
			compareRows(t, "re-inserted", e.rows(`SELECT id, v FROM k WHERE id IN (7, 8) ORDER BY id`), [][]string{{"7", "new"}, {"8", long}})
			e.mustApply(w, e.del(r, 'K', "7", null), e.del(r, 'K', "8", null))
		}
	})
	t.Run("violation in a batch names the statement", func(t *testing.T) {
		e.mustApply(w, e.ins(r, "1", "a"), e.ins(r, "2", "b"))
		cs := []*change.Change{
			e.upd(r, 0, nil, "1", "a2"),
			e.upd(r, 'K', tup("1", null), "2", "clash"),
			e.upd(r, 0, nil, "2", "b2"),
		}
		err := e.apply(w, nil, cs...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" ||
			!strings.HasPrefix(err.Error(), "apply update to public.k at "+cs[1].LSN.String()+": update_exists: duplicate key (id)=(2): ERROR: duplicate key") {
			t.Fatalf("error = %v", err)
		}
		compareRows(t, "after failed batch", e.rows(`SELECT id, v FROM k ORDER BY id`), [][]string{{"1", "a"}, {"2", "b"}})
		// NOT NULL violation through an update.
		err = e.apply(w, nil, e.upd(r, 0, nil, "1", null))
		if !errors.As(err, &pgErr) || pgErr.Code != "23502" {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("a COPY that carried BEGIN is rolled back with its transaction", func(t *testing.T) {
		// The first insert is copied at once (its row is over
		// CopyFlushBytes), BEGIN in the COPY's query; the update after it
		// fails: the copied row must go too.
		wc := e.writer(WriterOptions{CopyFlushBytes: 8, InsertRowsMax: -1})
		err := e.apply(wc, nil, e.ins(r, "60", "copied first"), e.upd(r, 0, nil, "60", null))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23502" {
			t.Fatalf("error = %v, want a NOT NULL violation", err)
		}
		if n := e.count(`SELECT count(*) FROM k WHERE id = 60`); n != 0 {
			t.Fatalf("the copied row outlived its failed transaction")
		}
		e.mustApply(wc, e.ins(r, "61", "x"))
		e.mustApply(wc, e.del(r, 'K', "61", null))
	})
	t.Run("writer usable after errors", func(t *testing.T) {
		e.mustApply(w, e.ins(r, "10", "ten"))
		if n := e.count(`SELECT count(*) FROM k WHERE id = 10`); n != 1 {
			t.Fatal("row 10 not written")
		}
	})
	t.Run("misuse", func(t *testing.T) {
		if err := w.Write(ctx, e.ins(r, "11", "x")); err == nil {
			t.Fatal("Write outside a transaction accepted")
		}
		if err := w.Commit(ctx, nil); err == nil {
			t.Fatal("Commit outside a transaction accepted")
		}
		if err := w.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Begin(ctx); err == nil {
			t.Fatal("nested Begin accepted")
		}
		if err := w.Write(ctx, e.upd(r, 0, nil, "10", unch)); err != nil {
			t.Fatalf("no-op update: %v", err)
		}
		if err := w.Write(ctx, e.del(r, 0)); err == nil || !strings.Contains(err.Error(), "delete without old tuple") {
			t.Fatalf("delete without old tuple: %v", err)
		}
		if err := w.Commit(ctx, nil); err == nil {
			t.Fatal("Commit after a failed Write accepted")
		}
		if err := w.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWriterCommitAtomicity(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.k (id int PRIMARY KEY, v text);`)
	r := rel("public", "k", change.IdentityDefault, "*id", "v")
	w := e.writer(WriterOptions{Slot: "s1"})
	if err := InitProgress(e.ctx, e.conn, "s1", 0x1000, "snap", true); err != nil {
		t.Fatal(err)
	}

	// Success: data and LSNs together.
	if err := e.apply(w, []change.LSN{0x2000, 0x3000}, e.ins(r, "1", "a")); err != nil {
		t.Fatal(err)
	}
	// Failure at Commit (a range ending at 0x3000 is already recorded):
	// neither data nor LSNs.
	err := e.apply(w, []change.LSN{0x2800, 0x3000}, e.ins(r, "2", "b"), e.upd(r, 0, nil, "1", "changed"))
	if err == nil || !strings.Contains(err.Error(), "record 2 applied transactions") {
		t.Fatalf("Commit error = %v", err)
	}
	compareRows(t, "after failed commit", e.rows(`SELECT id, v FROM k ORDER BY id`), [][]string{{"1", "a"}})
	p, err := LoadProgress(e.ctx, e.conn, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Applied) != 1 || p.AppliedFrom[0] != 0x2000 || p.Applied[0] != 0x3000 {
		t.Fatalf("applied = %v..%v, want the one range 0/2000..0/3000", p.AppliedFrom, p.Applied)
	}
	// The writer works after a failed Commit.
	if err := e.apply(w, []change.LSN{0x4000}, e.ins(r, "2", "b")); err != nil {
		t.Fatal(err)
	}
	if e.st.Counter("applied_txns").Load() != 3 {
		t.Errorf("applied_txns = %d, want 3", e.st.Counter("applied_txns").Load())
	}
}

func TestWriterSavepoints(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.k (id int PRIMARY KEY, v text);`)
	r := rel("public", "k", change.IdentityDefault, "*id", "v")
	w := e.writer(WriterOptions{})
	ctx := e.ctx
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Begin(ctx))
	must(w.Write(ctx, e.ins(r, "1", "a")))
	must(w.Savepoint(ctx, "sub 1"))
	must(w.Write(ctx, e.ins(r, "2", "b")))
	must(w.Write(ctx, e.upd(r, 0, nil, "1", "changed")))
	must(w.RollbackToSavepoint(ctx, "sub 1"))
	must(w.Savepoint(ctx, "sub 2"))
	must(w.Write(ctx, e.ins(r, "3", "c")))
	must(w.ReleaseSavepoint(ctx, "sub 2"))
	// A failure inside a savepoint is recoverable.
	must(w.Savepoint(ctx, "sub 3"))
	must(w.Write(ctx, e.ins(r, "1", "dup")))
	if err := w.Flush(ctx); err == nil {
		t.Fatal("duplicate insert did not fail")
	}
	must(w.RollbackToSavepoint(ctx, "sub 3"))
	must(w.Write(ctx, e.ins(r, "4", "d")))
	must(w.Commit(ctx, nil))
	compareRows(t, "savepoints", e.rows(`SELECT id, v FROM k ORDER BY id`), [][]string{{"1", "a"}, {"3", "c"}, {"4", "d"}})
}

func TestWriterOrderingAcrossFlushes(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, n int); CREATE TABLE public.b (id int PRIMARY KEY, n int);`)
	ra := rel("public", "a", change.IdentityDefault, "*id", "n")
	rb := rel("public", "b", change.IdentityDefault, "*id", "n")
	w := e.writer(WriterOptions{CopyFlushBytes: 64, BatchStatements: 3})
	var cs []*change.Change
	for i := 0; i < 200; i++ {
		id := itoa(i % 20)
		for _, r := range []*change.Relation{ra, rb} {
			switch {
			case i < 20:
				cs = append(cs, e.ins(r, id, itoa(i)))
			case i%3 == 0:
				cs = append(cs, e.del(r, 'K', id, null))
				cs = append(cs, e.ins(r, id, itoa(i)))
			default:
				cs = append(cs, e.upd(r, 0, nil, id, itoa(i)))
			}
		}
	}
	e.mustApply(w, cs...)
	for _, tab := range []string{"a", "b"} {
		got := e.rows(`SELECT id, n FROM ` + tab + ` ORDER BY id`)
		if len(got) != 20 {
			t.Fatalf("%s: %d rows", tab, len(got))
		}
		for id, row := range got {
			if want := itoa(180 + id); row[1] != want {
				t.Errorf("%s id %d: n = %s, want %s", tab, id, row[1], want)
			}
		}
	}
	if f := e.st.Counter("flushes").Load(); f < 50 {
		t.Errorf("flushes = %d: small limits should force many flushes", f)
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

func TestProgressRoundTrip(t *testing.T) {
	e := newEnv(t, ``)
	ctx, conn := e.ctx, e.conn
	if err := EnsureState(ctx, conn); err != nil { // idempotent
		t.Fatal(err)
	}
	p, err := LoadProgress(ctx, conn, "s1")
	if err != nil || p.Exists {
		t.Fatalf("before init: %+v %v", p, err)
	}
	if err := SetSnapshot(ctx, conn, "s1", "x"); err == nil {
		t.Fatal("SetSnapshot without progress row accepted")
	}
	if err := InitProgress(ctx, conn, "s1", 0x100, "00000003-00000002-1", true); err != nil {
		t.Fatal(err)
	}
	if err := InitProgress(ctx, conn, "other", 0x5, "", false); err != nil {
		t.Fatal(err)
	}
	w := e.writer(WriterOptions{Slot: "s1"})
	for _, batch := range [][]change.LSN{{0x300, 0x200}, {0x500}, {0x400}} {
		if err := e.apply(w, batch); err != nil {
			t.Fatal(err)
		}
	}
	p, err = LoadProgress(ctx, conn, "s1")
	if err != nil {
		t.Fatal(err)
	}
	// One range per commit: {0x300, 0x200} is the run 0x200..0x300.
	want := Progress{Exists: true, Low: 0x100, Applied: []change.LSN{0x300, 0x400, 0x500},
		AppliedFrom: []change.LSN{0x200, 0x400, 0x500}, Snapshot: "00000003-00000002-1", CreatedPublication: true}
	if !equalProgress(p, want) {
		t.Fatalf("progress = %+v, want %+v", p, want)
	}
	if !p.IsApplied(0x300) || !p.IsApplied(0x200) || !p.IsApplied(0x250) || p.IsApplied(0x350) || p.IsApplied(0x600) || !p.IsApplied(0x80) {
		t.Fatal("IsApplied wrong")
	}

	if err := AdvanceLow(ctx, conn, "s1", 0x300); err != nil {
		t.Fatal(err)
	}
	if err := AdvanceLow(ctx, conn, "s1", 0x250); err != nil { // never goes back
		t.Fatal(err)
	}
	if err := SetSnapshot(ctx, conn, "s1", ""); err != nil {
		t.Fatal(err)
	}
	p, err = LoadProgress(ctx, conn, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want = Progress{Exists: true, Low: 0x300, Applied: []change.LSN{0x400, 0x500}, AppliedFrom: []change.LSN{0x400, 0x500}, CreatedPublication: true}
	if !equalProgress(p, want) {
		t.Fatalf("after AdvanceLow: %+v, want %+v", p, want)
	}
	if n := e.count(`SELECT count(*) FROM repstream.applied WHERE slot = 's1'`); n != 2 {
		t.Fatalf("applied rows at or below low not pruned: %d rows", n)
	}

	if err := DropState(ctx, conn, "s1", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if p, err = LoadProgress(ctx, conn, "s1"); err != nil || p.Exists {
		t.Fatalf("after DropState: %+v %v", p, err)
	}
	if p, err = LoadProgress(ctx, conn, "other"); err != nil || !p.Exists || p.Low != 5 {
		t.Fatalf("other slot damaged: %+v %v", p, err)
	}
}

func equalProgress(a, b Progress) bool {
	if a.Exists != b.Exists || a.Low != b.Low || a.Snapshot != b.Snapshot || a.CreatedPublication != b.CreatedPublication || len(a.Applied) != len(b.Applied) {
		return false
	}
	for i := range a.Applied {
		if a.Applied[i] != b.Applied[i] {
			return false
		}
	}
	return slices.Equal(a.AppliedFrom, b.AppliedFrom)
}

func TestConnect(t *testing.T) {
	e := newEnv(t, `CREATE ROLE plain LOGIN;`)
	var role, ds, is, efd, app string
	err := e.conn.QueryRow(e.ctx, `SELECT current_setting('session_replication_role'), current_setting('DateStyle'),
		current_setting('IntervalStyle'), current_setting('extra_float_digits'), current_setting('application_name')`).
		Scan(&role, &ds, &is, &efd, &app)
	if err != nil {
		t.Fatal(err)
	}
	if role != "replica" || !strings.HasPrefix(ds, "ISO") || is != "postgres" || efd != "3" || app != "repstream-test" {
		t.Fatalf("settings: %s %s %s %s %s", role, ds, is, efd, app)
	}

	_, err = Connect(e.ctx, e.dsn+" user=plain", "x")
	if err == nil || !strings.Contains(err.Error(), "run: GRANT SET ON PARAMETER session_replication_role TO plain") || !strings.Contains(err.Error(), "host=127.0.0.1") {
		t.Fatalf("non-superuser: %v", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("non-superuser error lost the PgError: %v", err)
	}

	_, err = Connect(e.ctx, "host=127.0.0.1 port=1 dbname=nowhere user=u password=s3cret connect_timeout=2", "x")
	if err == nil || !strings.HasPrefix(err.Error(), "connect to target host=127.0.0.1 port=1 dbname=nowhere user=u: ") ||
		strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unreachable: %v", err)
	}
	_, err = Connect(e.ctx, "postgres://u:s3cret@127.0.0.1:bad/db", "x")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad DSN: %v", err)
	}
}

// TestWriterCollapsible checks which target tables allow folding repeated
// changes to one key: only those whose one unique index is the source's key.
func TestWriterCollapsible(t *testing.T) {
	e := newEnv(t, `
CREATE TABLE pk_only (id int PRIMARY KEY, v text);
CREATE TABLE pk2 (a int, b int, v text, PRIMARY KEY (b, a));
CREATE TABLE pk_include (id int, v text, PRIMARY KEY (id) INCLUDE (v));
CREATE TABLE extra_unique (id int PRIMARY KEY, code int UNIQUE);
CREATE TABLE partial_unique (id int PRIMARY KEY, code int);
CREATE UNIQUE INDEX ON partial_unique (code) WHERE code > 0;
CREATE TABLE plain_index (id int PRIMARY KEY, code int);
CREATE INDEX ON plain_index (code);
CREATE TABLE other_key (id int, code int PRIMARY KEY);
CREATE TABLE no_key (id int, v text);
CREATE TABLE always_trigger (id int PRIMARY KEY, v text);
CREATE FUNCTION nothing() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER t BEFORE INSERT ON always_trigger FOR EACH ROW EXECUTE FUNCTION nothing();
ALTER TABLE always_trigger ENABLE ALWAYS TRIGGER t;
CREATE TABLE origin_trigger (id int PRIMARY KEY, v text);
CREATE TRIGGER t BEFORE INSERT ON origin_trigger FOR EACH ROW EXECUTE FUNCTION nothing();
CREATE TABLE fk_child (id int PRIMARY KEY, parent int REFERENCES pk_only);
CREATE TABLE parted (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100);`)
	w := e.writer(WriterOptions{})
	for _, tc := range []struct {
		rel  *change.Relation
		want bool
	}{
		{rel("public", "pk_only", 'd', "*id", "v"), true},
		{rel("public", "pk2", 'd', "*a", "*b", "v"), true},
		{rel("public", "pk_include", 'd', "*id", "v"), true},
		{rel("public", "extra_unique", 'd', "*id", "code"), false},
		{rel("public", "partial_unique", 'd', "*id", "code"), false},
		{rel("public", "plain_index", 'd', "*id", "code"), true},
		{rel("public", "other_key", 'd', "*id", "code"), false},
		{rel("public", "no_key", 'f', "id", "v"), false},
		{rel("public", "always_trigger", 'd', "*id", "v"), false},
		{rel("public", "origin_trigger", 'd', "*id", "v"), true},
		{rel("public", "fk_child", 'd', "*id", "parent"), true},
		{rel("public", "parted", 'd', "*id", "v"), false},
	} {
		got, err := w.Collapsible(e.ctx, tc.rel)
		if err != nil {
			t.Fatalf("%s: %v", tc.rel, err)
		}
		if got != tc.want {
			t.Errorf("Collapsible(%s) = %v, want %v", tc.rel, got, tc.want)
		}
	}
	if _, err := w.Collapsible(e.ctx, rel("public", "missing", 'd', "*id")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing table: err = %v", err)
	}
}

// TestWriterBlocks: a writer whose open transaction holds a row another
// session waits to write says it blocks that session, and no other
// (apply's workers give way on it: apply.waitEarlier).
func TestWriterBlocks(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.kv (k int PRIMARY KEY, v text);`)
	r := rel("public", "kv", change.IdentityDefault, "*k", "v")
	w := e.writer(WriterOptions{})
	if blocks, err := w.Blocks(e.ctx, []uint32{1}); err != nil || blocks {
		t.Fatalf("outside a transaction: Blocks %v, %v; want false", blocks, err)
	}
	if err := w.Begin(e.ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Rollback(e.ctx) }()
	if err := w.Write(e.ctx, e.ins(r, "1", "mine")); err != nil {
		t.Fatal(err)
	}
	if err := w.flushAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(e.ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	pid := other.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := other.Exec(e.ctx, `INSERT INTO public.kv VALUES (1, 'theirs') ON CONFLICT (k) DO NOTHING`)
		done <- err
	}()
	pgtest.WaitForEvery(t, "the other session to wait for the row", 30*time.Second, 10*time.Millisecond, func() (bool, error) {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE pid = `+itoa(int(pid))+` AND wait_event_type = 'Lock'`) == 1, nil
	})
	if blocks, err := w.Blocks(e.ctx, []uint32{w.BackendPID() + 100000, pid}); err != nil || !blocks {
		t.Fatalf("holding the row session %d waits for: Blocks %v, %v; want true", pid, blocks, err)
	}
	if blocks, err := w.Blocks(e.ctx, []uint32{w.BackendPID() + 100000}); err != nil || blocks {
		t.Fatalf("a session that waits for nothing: Blocks %v, %v; want false", blocks, err)
	}
	if err := w.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the other session's insert: %v", err)
	}
}
