package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
)

// TestCopyRefusesSchemaDrift: a copy whose snapshot sees a source table
// changed after the target's was made or checked — here a numeric column
// widened to four decimals, which the target's two would round away — stops
// before writing a row of it, naming the table and the column, instead of
// copying rounded values (apply skips the change for a table copied after
// it: nothing would ever put the digits back). A column dropped and added
// again with its type, in the same window, is copied as it is.
func TestCopyRefusesSchemaDrift(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE drift (id int PRIMARY KEY, amount numeric(12,2), note text)`)
	e.both(`CREATE TABLE readded (id int PRIMARY KEY, note text)`)
	e.srcExec(`INSERT INTO drift SELECT g, g / 100.0, 'n' || g FROM generate_series(1, 1000) g`)
	e.srcExec(`INSERT INTO readded SELECT g, 'old' FROM generate_series(1, 1000) g`)
	// After the target tables were made, before the snapshot.
	e.srcExec(`ALTER TABLE drift ALTER COLUMN amount TYPE numeric(12,4)`)
	e.srcExec(`UPDATE drift SET amount = amount + 0.0001`)
	e.srcExec(`ALTER TABLE readded DROP COLUMN note`)
	e.srcExec(`ALTER TABLE readded ADD COLUMN note text`)
	e.srcExec(`UPDATE readded SET note = 'new ' || id`)

	ctx := context.Background()
	copyAt := func(table string) error {
		_, err := snapshot.Copy(ctx, snapshot.Options{
			SourceDSN: e.src.DSN(e.srcDB), TargetDSN: e.tgt.DSN(e.tgtDB), SnapshotName: e.exportSnapshot(ctx), Workers: 2, Binary: true,
			Tables: []schema.TableName{{Schema: "public", Name: table}}, Logger: testLogger(t),
		})
		return err
	}
	err := copyAt("drift")
	if err == nil {
		t.Fatal("the copy of a table whose source column was widened after the target's was made succeeded (its values rounded)")
	}
	for _, want := range []string{"public.drift", `"amount"`, "numeric(12,4)", "rounded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the copy's error does not name %s: %v", want, err)
		}
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM drift`); n != 0 {
		t.Errorf("the refused copy wrote %d rows of drift", n)
	}
	if err := copyAt("readded"); err != nil {
		t.Fatalf("copy of a table with a column dropped and added again: %v", err)
	}
	e.assertSame("readded", "id")
}

// exportSnapshot exports a snapshot of the source from a transaction kept
// open until the test ends, and returns its name (for snapshot.Copy).
func (e *env) exportSnapshot(ctx context.Context) string {
	e.t.Helper()
	src, err := e.srcConn(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { src.Close(context.Background()) })
	var snap string
	if _, err := src.Exec(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ`); err != nil {
		e.t.Fatal(err)
	}
	if err := src.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snap); err != nil {
		e.t.Fatal(err)
	}
	return snap
}

// TestRestartStopsWhereTargetWouldRound: a restart takes a target table that
// differs from the source for a schema change still in the stream (a
// warning, with --ddl on). When none comes — here the target's column was
// narrowed by hand between the runs — the first row the stream describes
// with the source's type stops the run, naming the column and both types,
// instead of rounding its digits away; nothing of it is applied.
func TestRestartStopsWhereTargetWouldRound(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE money (id int PRIMARY KEY, amount numeric(12,4))`)
	e.srcExec(`INSERT INTO money VALUES (1, 1.2345)`)
	cfg := e.config("public.money")
	e.catchUp(cfg)
	e.assertSame("money", "id")

	e.tgtExec(`ALTER TABLE money ALTER COLUMN amount TYPE numeric(12,2)`)
	e.srcExec(`INSERT INTO money VALUES (2, 2.3456)`)
	_, err := e.tryCatchUp(cfg)
	if err == nil {
		t.Fatal("the run applied rows of numeric(12,4) into a numeric(12,2) column (rounded)")
	}
	for _, want := range []string{`"amount"`, "numeric(12,4)", "numeric(12,2)", "rounded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM money WHERE id = 2`); n != 0 {
		t.Errorf("the row the run stopped at was applied")
	}
}
