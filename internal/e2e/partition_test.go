package e2e

import (
	"testing"
	"time"
)

// partitionedSQL is a source table partitioned by range with three leaves.
const partitionedSQL = `
CREATE TABLE m (id int NOT NULL, at date NOT NULL, v text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE m_2025 PARTITION OF m FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE m_2026 PARTITION OF m FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');`

// fillPartitions writes rows into every leaf: before the first run, they
// come through the initial copy.
func (e *env) fillPartitions() {
	e.t.Helper()
	e.srcExec(`INSERT INTO m SELECT g, date '2024-01-01' + (g % 1000), 'row ' || g FROM generate_series(1, 3000) g`)
}

// changePartitions changes rows in every leaf after the copy, a row moving
// across leaves among them.
func (e *env) changePartitions() {
	e.t.Helper()
	e.srcExec(`INSERT INTO m SELECT g, date '2026-06-01', 'late ' || g FROM generate_series(3001, 3100) g`)
	e.srcExec(`UPDATE m SET v = 'changed' WHERE id % 10 = 0`)
	e.srcExec(`DELETE FROM m WHERE id % 7 = 0`)
	e.srcExec(`UPDATE m SET at = date '2026-02-02' WHERE id = 1`)
}

// TestPartitionedRoot: a partitioned table replicated through its root
// (publish_via_partition_root) keeps every existing row of every leaf in the
// initial copy — the copy once read the root with ONLY, which holds no rows,
// and reported caught up with the table empty — and then every change.
func TestPartitionedRoot(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	t.Run("user publication via root, target partitioned", func(t *testing.T) {
		e := newEnv(t)
		e.both(partitionedSQL)
		e.fillPartitions()
		cfg := e.config()
		e.srcExec(`CREATE PUBLICATION ` + cfg.Slot + ` FOR TABLE m WITH (publish_via_partition_root = true)`)
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
		e.changePartitions()
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
		if n := e.count(e.Tgt, "SELECT count(*) FROM m_2025"); n == 0 {
			t.Errorf("the target's leaf m_2025 is empty")
		}
	})
	t.Run("tables names the root, target created ordinary", func(t *testing.T) {
		e := newEnv(t)
		e.srcExec(partitionedSQL)
		e.fillPartitions()
		cfg := e.config("public.m")
		cfg.CreateTables = true
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
		e.changePartitions()
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
		if n := e.count(e.Src, "SELECT count(*) FROM pg_publication WHERE pubname = '"+cfg.Slot+"' AND pubviaroot"); n != 1 {
			t.Errorf("the publication repstream made for a partitioned table does not publish via its root")
		}
	})
	t.Run("user publication of the leaves", func(t *testing.T) {
		e := newEnv(t)
		e.both(partitionedSQL)
		e.fillPartitions()
		cfg := e.config()
		e.srcExec(`CREATE PUBLICATION ` + cfg.Slot + ` FOR TABLE m`) // publishes the leaves
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
		e.changePartitions()
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
	})
	t.Run("non-empty partitioned target", func(t *testing.T) {
		e := newEnv(t)
		e.both(partitionedSQL)
		e.fillPartitions()
		e.tgtExec(`INSERT INTO m VALUES (99999, '2025-05-05', 'stale')`)
		cfg := e.config("public.m")
		if _, err := e.tryCatchUp(cfg); err == nil {
			t.Fatal("a partitioned target with rows in a leaf was taken as empty")
		}
		cfg.Truncate = true // checked before the slot exists: nothing to undo
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
	})
}

// TestPublishViaRootSwitched: the publication of a partitioned table
// switched from publishing through its root to publishing its leaves,
// and back, while the engine runs: pgoutput then sends the leaves' changes
// under their own names, then the root's again. With the event trigger
// they are applied to the target's leaves of the same names; without it,
// the poll sees the publication altered (its row's xmin in the tables'
// source identities) and the leaves published and not recorded, and
// copies them anew. Either way the target ends equal, the run going on.
func TestPublishViaRootSwitched(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, ddl := range []string{"true", "relation"} {
		t.Run("ddl="+ddl, func(t *testing.T) {
			t.Parallel() // own databases
			e := newEnv(t)
			e.both(partitionedSQL)
			e.fillPartitions()
			cfg := e.config("public.m")
			cfg.DDL = ddl
			cfg.AllowUntrackedPartitions = ddl != "true" // none of them here
			cfg.PublicationPoll = time.Second
			e.catchUp(cfg)
			e.assertSame("m", "id, at")
			done, cancel := e.runInBackground(cfg)
			defer cancel()
			e.waitStreaming(cfg.Slot)
			same := e.sameRows("m", "m")

			e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` SET (publish_via_partition_root = false)`)
			e.changePartitions()
			// pgoutput now sends a leaf's TRUNCATE too (the event
			// trigger's message says the same: done once or twice, the
			// rows after it stay).
			e.srcExec(`BEGIN; TRUNCATE m_2025; INSERT INTO m VALUES (5000, '2025-06-06', 'after the truncate'); COMMIT`)
			waitFor(t, "the leaves' changes", time.Minute, same)
			stillRunning(t, done)

			e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` SET (publish_via_partition_root = true)`)
			e.srcExec(`UPDATE m SET v = 'via the root again' WHERE id % 3 = 0; DELETE FROM m WHERE id % 11 = 0;
				INSERT INTO m SELECT g, date '2025-03-03', 'again ' || g FROM generate_series(4001, 4050) g`)
			waitFor(t, "the root's changes", time.Minute, same)
			stillRunning(t, done)
			cancel()
			<-done
			e.catchUp(cfg)
			e.assertSame("m", "id, at")
		})
	}
}
