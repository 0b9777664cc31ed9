package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/engine"
)

// TestDDLRelationFallbackEager: with --ddl=relation, an ADD COLUMN in a
// large transaction that eager apply takes before its commit: the source's
// catalog does not show the column to another session yet, so what the
// existing rows got cannot be known then. The run stops with an error that
// says so (table, column, LSN, what to do) instead of guessing; restarted
// after the commit, it applies the transaction with the source's values.
func TestDDLRelationFallbackEager(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE ge2 (id int PRIMARY KEY, a text); INSERT INTO ge2 SELECT i, 'a' || i FROM generate_series(1, 50) i`)
	cfg := e.config("public.ge2")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	cfg.Eager = true
	cfg.DecodingWorkMem = "64kB" // the transaction below is streamed
	e.catchUp(cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	e.waitSlotReleased(cfg.Slot)
	go func() { done <- engine.New(cfg, testLogger(t), nil).Run(ctx) }()
	e.waitStreaming(cfg.Slot)
	big, err := pgx.Connect(ctx, e.src.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close(context.Background())
	for _, sql := range []string{"BEGIN", "ALTER TABLE ge2 ADD COLUMN x int DEFAULT 3",
		"INSERT INTO ge2 SELECT i, repeat('b', 200) FROM generate_series(51, 5000) i"} {
		if _, err := big.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err = <-done:
	case <-time.After(failFast):
		t.Fatalf("the engine did not stop at the column added by the transaction in progress within %s", failFast)
	}
	if err == nil {
		t.Fatal("the engine stopped without an error, want one about column x")
	}
	t.Logf("error (as the user sees it): %v", err)
	wantInError(t, err, "public.ge2", `column "x"`, "at 0/", "before its commit (--eager)", "restart once the transaction has committed")
	if _, err := big.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	e.catchUp(cfg)
	e.assertSameTable("public.ge2", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM ge2 WHERE x = 3"); n != 5000 {
		t.Errorf("%d target rows with x = 3, want 5000", n)
	}
}
