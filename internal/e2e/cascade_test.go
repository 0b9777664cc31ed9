package e2e

import (
	"context"
	"slices"
	"testing"

	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/target"
)

// TestCascadeWithTriggers: A -> B -> C, each following schema changes
// with the event trigger (the default). B, a target of A -> B, held the
// target's registry of replications (repstream.replications, without the
// source's publication column), and B -> C's start failed: column
// "publication" of relation "replications" does not exist. Now the source
// adds its columns (as a database that was a source first, then a target,
// already worked); B's admin commands as a target see A -> B only, and
// dropping B -> C removes its trigger on B while A -> B goes on, its
// registration on B kept (the drop removed the shared table).
func TestCascadeWithTriggers(t *testing.T) {
	t.Parallel() // own databases and slots; no server restarts
	ctx := context.Background()
	a := newEnv(t)                                                // A (the source cluster) -> B (the target cluster)
	bc := envOn(t, a.tgt, a.tgtDB, a.src, pgtest.NewDB(t, a.src)) // B -> C (a database of the source cluster)
	a.srcExec(`CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, 'a' FROM generate_series(1, 20) g`)
	cfgAB := a.config("public.t")
	cfgAB.CreateTables = true
	a.catchUp(cfgAB)
	cfgBC := bc.config("public.t")
	cfgBC.Slot = "c_" + cfgBC.Slot[:min(len(cfgBC.Slot), 60)]
	cfgBC.Publication = cfgBC.Slot
	cfgBC.CreateTables = true
	bc.catchUp(cfgBC)

	a.srcExec(`INSERT INTO t VALUES (21, 'b'); ALTER TABLE t ADD COLUMN w int DEFAULT 5; INSERT INTO t VALUES (22, 'c', 6); UPDATE t SET v = 'u' WHERE id = 3`)
	a.catchUp(cfgAB)
	bc.catchUp(cfgBC)
	a.assertSame("t", "id")
	bc.assertSame("t", "id")

	slots, err := target.Replications(ctx, a.Tgt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slots, []string{cfgAB.Slot}) {
		t.Errorf("B's replications as a target: %v, want only %s", slots, cfgAB.Slot)
	}
	if err := install.Drop(ctx, cfgBC.Source, cfgBC.Target, cfgBC.Slot, cfgBC.Publication, cfgBC.SpillDir, false, testLogger(t)); err != nil {
		t.Fatalf("drop B -> C: %v", err)
	}
	if n := a.count(a.Tgt, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%'"); n != 0 {
		t.Errorf("B keeps %d event triggers of repstream after B -> C was dropped", n)
	}
	// The registry's table is shared with A -> B's (its row as a target:
	// its source's identity, what it saw of A's triggers): kept.
	if n := a.count(a.Tgt, "SELECT count(*) FROM pg_class WHERE oid = to_regclass('repstream.replications')"); n != 1 {
		t.Fatalf("B's registry (repstream.replications) went with B -> C's drop: A -> B's row as a target with it")
	}
	if n := a.count(a.Tgt, "SELECT count(*) FROM repstream.replications WHERE slot = '"+cfgAB.Slot+"' AND source_system_id IS NOT NULL"); n != 1 {
		t.Errorf("A -> B's registration on B after B -> C was dropped: %d rows, want 1 (with its source)", n)
	}
	a.srcExec(`INSERT INTO t VALUES (23, 'd', 7)`)
	a.catchUp(cfgAB)
	a.assertSame("t", "id")
}
