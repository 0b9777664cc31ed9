package e2e

import "testing"

// TestTableWithoutColumns: a table with no columns (001_rep_changes.pl's
// tab_no_col), published, holds rows all alike: the initial copy, streamed
// inserts and a DELETE of one (its replica identity FULL, which the
// trigger gives a keyless table), then a column added. Its copy stopped
// the run ("COPY t () FROM STDIN": a syntax error), and so did the DELETE.
func TestTableWithoutColumns(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE keep (id int PRIMARY KEY);
		CREATE TABLE tab_no_col (); ALTER TABLE tab_no_col REPLICA IDENTITY FULL;
		INSERT INTO tab_no_col DEFAULT VALUES; INSERT INTO tab_no_col DEFAULT VALUES; INSERT INTO tab_no_col DEFAULT VALUES`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	same := func(what string) {
		t.Helper()
		if a, b := e.count(e.Src, "SELECT count(*) FROM tab_no_col"), e.count(e.Tgt, "SELECT count(*) FROM tab_no_col"); a != b {
			t.Fatalf("%s: tab_no_col has %d rows on the source, %d on the target", what, a, b)
		}
	}
	same("copied")
	e.srcExec(`INSERT INTO tab_no_col DEFAULT VALUES; INSERT INTO tab_no_col DEFAULT VALUES`)
	e.srcExec(`DELETE FROM tab_no_col WHERE ctid = (SELECT min(ctid) FROM tab_no_col)`)
	e.srcExec(`INSERT INTO keep VALUES (1)`)
	e.catchUp(cfg)
	same("streamed")
	e.assertSame("keep", "id")
	e.srcExec(`ALTER TABLE tab_no_col ADD COLUMN z int`)
	e.srcExec(`INSERT INTO tab_no_col VALUES (5); DELETE FROM tab_no_col WHERE ctid = (SELECT min(ctid) FROM tab_no_col WHERE z IS NULL)`)
	e.catchUp(cfg)
	e.assertSameTable("tab_no_col", "z")
}
