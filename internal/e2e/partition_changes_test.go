package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
)

// Partition changes under a root publication (publish_via_partition_root,
// what repstream makes for a partitioned table): pgoutput sends a TRUNCATE
// of one leaf to nobody and nothing of an ATTACH or DETACH PARTITION, each
// of which changes the rows of the root. repstream's partition triggers on
// the source report them (--ddl=true, a PostgreSQL 14+ source).

// partitionEnv is an env with partitionedSQL on the source, filled, and on
// the target as well when partitioned (else --create-tables makes an
// ordinary m), replicated with --tables public.m and caught up.
func partitionEnv(t *testing.T, partitioned bool) (*env, func()) {
	e := newEnv(t)
	if e.srcMajor() < 14 {
		t.Skip("the event trigger needs a PostgreSQL 14+ source")
	}
	e.srcExec(partitionedSQL)
	if partitioned {
		e.tgtExec(partitionedSQL)
	}
	e.fillPartitions()
	cfg := e.config("public.m")
	cfg.CreateTables = !partitioned
	e.catchUp(cfg)
	return e, func() {
		t.Helper()
		e.catchUp(cfg)
		e.assertSame("m", "id, at")
	}
}

func TestPartitionTruncateLeaf(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, partitioned := range []bool{true, false} {
		name := map[bool]string{true: "target partitioned the same", false: "target ordinary"}[partitioned]
		t.Run(name, func(t *testing.T) {
			e, sync := partitionEnv(t, partitioned)
			e.srcExec(`TRUNCATE m_2025`)
			sync()
			if n := e.count(e.Tgt, "SELECT count(*) FROM m"); n == 0 {
				t.Fatal("the target's root is empty")
			}
			// The root's TRUNCATE (sent by pgoutput) and a leaf's in the same
			// transaction, rows written in between.
			e.srcExec(`BEGIN; INSERT INTO m VALUES (90001, '2024-03-03', 'x'), (90002, '2025-03-03', 'y');
				TRUNCATE m_2024; INSERT INTO m VALUES (90003, '2024-04-04', 'z'); COMMIT`)
			sync()
			e.srcExec(`TRUNCATE m`)
			sync()
			// A default partition.
			e.srcExec(`CREATE TABLE m_def PARTITION OF m DEFAULT`)
			if partitioned {
				e.tgtExec(`CREATE TABLE m_def PARTITION OF m DEFAULT`)
			}
			e.srcExec(`INSERT INTO m SELECT g, date '2020-01-01' + g, 'd' FROM generate_series(1, 50) g;
				INSERT INTO m SELECT g, date '2026-01-01' + g, 'k' FROM generate_series(51, 80) g`)
			sync()
			e.srcExec(`TRUNCATE m_def`)
			sync()
			if n := e.count(e.Tgt, "SELECT count(*) FROM m"); n != 30 {
				t.Fatalf("the target's root has %d rows, want the 30 outside the default partition", n)
			}
		})
	}
}

// TestPartitionTruncateHashStops: a hash partition's rows cannot be told
// apart on a target partitioned otherwise: the run stops, naming it.
func TestPartitionTruncateHashStops(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 14 {
		t.Skip("the event trigger needs a PostgreSQL 14+ source")
	}
	e.srcExec(`CREATE TABLE h (id int PRIMARY KEY, v text) PARTITION BY HASH (id);
		CREATE TABLE h_0 PARTITION OF h FOR VALUES WITH (MODULUS 2, REMAINDER 0);
		CREATE TABLE h_1 PARTITION OF h FOR VALUES WITH (MODULUS 2, REMAINDER 1);
		INSERT INTO h SELECT g, 'v' FROM generate_series(1, 100) g`)
	cfg := e.config("public.h")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`TRUNCATE h_0`)
	e.mustFail(cfg, "TRUNCATE PARTITION", "public.h_0", "public.h", "hash partition", "partition the target's table as the source's")
	// The way out: the target partitioned as the source.
	e.tgtExec(`ALTER TABLE h RENAME TO h_old;
		CREATE TABLE h (id int PRIMARY KEY, v text) PARTITION BY HASH (id);
		CREATE TABLE h_0 PARTITION OF h FOR VALUES WITH (MODULUS 2, REMAINDER 0);
		CREATE TABLE h_1 PARTITION OF h FOR VALUES WITH (MODULUS 2, REMAINDER 1);
		INSERT INTO h SELECT * FROM h_old; DROP TABLE h_old`)
	e.catchUp(cfg)
	e.assertSame("h", "id")
}

func TestPartitionAttachPopulated(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, partitioned := range []bool{true, false} {
		name := map[bool]string{true: "target partitioned the same", false: "target ordinary"}[partitioned]
		t.Run(name, func(t *testing.T) {
			e, sync := partitionEnv(t, partitioned)
			// Not published (the publication lists m): its rows never
			// travelled.
			e.srcExec(`CREATE TABLE m_2030 (id int NOT NULL, at date NOT NULL, v text, PRIMARY KEY (id, at));
				INSERT INTO m_2030 SELECT g, date '2030-02-02', 'old ' || g FROM generate_series(50001, 50100) g`)
			if partitioned {
				e.tgtExec(`CREATE TABLE m_2030 PARTITION OF m FOR VALUES FROM ('2030-01-01') TO ('2031-01-01')`)
			}
			e.srcExec(`ALTER TABLE m ATTACH PARTITION m_2030 FOR VALUES FROM ('2030-01-01') TO ('2031-01-01')`)
			e.srcExec(`UPDATE m SET v = 'after attach' WHERE id IN (50001, 1, 2)`)
			e.srcExec(`DELETE FROM m WHERE id = 50002`)
			sync()
			e.srcExec(`UPDATE m SET v = 'later' WHERE id = 50003`)
			sync()
			if partitioned && e.count(e.Tgt, "SELECT count(*) FROM m_2030") != 99 {
				t.Fatal("the target's partition m_2030 does not hold the attached rows")
			}
		})
	}
}

func TestPartitionDetach(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, partitioned := range []bool{true, false} {
		name := map[bool]string{true: "target partitioned the same", false: "target ordinary"}[partitioned]
		t.Run(name, func(t *testing.T) {
			e, sync := partitionEnv(t, partitioned)
			e.srcExec(`ALTER TABLE m DETACH PARTITION m_2024`)
			e.srcExec(`INSERT INTO m_2024 VALUES (70000, '2024-05-05', 'not replicated')`)
			sync()
			if partitioned {
				if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'm_2024' AND NOT relispartition"); n != 1 {
					t.Fatal("m_2024 is not detached on the target")
				}
			}
			// DETACH ... CONCURRENTLY (two transactions).
			e.srcExec(`ALTER TABLE m DETACH PARTITION m_2025 CONCURRENTLY`)
			sync()
		})
	}
}

// TestPartitionSchemaPublication: with FOR TABLES IN SCHEMA (a table of its
// own published under its name until attached, and again once detached),
// an attached table's rows on the target move into the root, and a
// detached partition's rows out of it into a table of its own that is
// replicated from then on.
func TestPartitionSchemaPublication(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs a PostgreSQL 15+ source")
	}
	e.srcExec(partitionedSQL)
	e.srcExec(`CREATE TABLE m_2030 (id int NOT NULL, at date NOT NULL, v text, PRIMARY KEY (id, at));
		INSERT INTO m_2030 SELECT g, date '2030-02-02', 'old ' || g FROM generate_series(50001, 50100) g`)
	e.fillPartitions()
	cfg := e.config("public.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.assertSame("m_2030", "id, at")
	e.srcExec(`INSERT INTO m_2030 VALUES (50200, '2030-03-03', 'streamed')`)
	e.srcExec(`ALTER TABLE m ATTACH PARTITION m_2030 FOR VALUES FROM ('2030-01-01') TO ('2031-01-01')`)
	e.srcExec(`UPDATE m SET v = 'after attach' WHERE id IN (50001, 50200)`)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'm_2030'"); n != 0 {
		t.Errorf("the target keeps a stray m_2030 after the attach")
	}
	e.srcExec(`ALTER TABLE m DETACH PARTITION m_2025`)
	e.srcExec(`UPDATE m_2025 SET v = 'detached' WHERE id % 3 = 0`)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")
	e.assertSame("m_2025", "id, at")
	// Detached while no engine ran, the table is made and copied by the
	// next start (tablesync's CopyMade); the detach then deletes its rows
	// from the target's root.
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE slot = '"+cfg.Slot+"' AND table_name = 'm_2025' AND state = 'ready'"); n != 1 {
		t.Errorf("the detached m_2025 is not recorded ready (%d rows)", n)
	}
	// Detached while the engine runs, its rows move on the target into a
	// table of its own, recorded as streamed from the detach.
	stop := e.startOnce(cfg)
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER TABLE m DETACH PARTITION m_2024`)
	e.srcExec(`UPDATE m_2024 SET v = 'detached' WHERE id % 3 = 0`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	e.assertSame("m", "id, at")
	e.assertSame("m_2024", "id, at")
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE slot = '"+cfg.Slot+"' AND table_name = 'm_2024' AND state = 'ready' AND copied_at IS NULL"); n != 1 {
		t.Errorf("the detached m_2024 is not recorded as streamed (%d rows): it was copied anew", n)
	}
}

// TestPartitionCreatedAndFilled: a partition created and filled in one
// transaction, and a partitioned table attached as a partition (its rows in
// its own partitions).
func TestPartitionCreatedAndFilled(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e, sync := partitionEnv(t, false)
	e.srcExec(`BEGIN; CREATE TABLE m_2027 PARTITION OF m FOR VALUES FROM ('2027-01-01') TO ('2028-01-01');
		INSERT INTO m SELECT g, date '2027-02-02', 'new' FROM generate_series(80001, 80050) g; COMMIT`)
	sync()
	e.srcExec(`CREATE TABLE m_2028 (id int NOT NULL, at date NOT NULL, v text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
		CREATE TABLE m_2028_a PARTITION OF m_2028 FOR VALUES FROM ('2028-01-01') TO ('2028-07-01');
		CREATE TABLE m_2028_b PARTITION OF m_2028 FOR VALUES FROM ('2028-07-01') TO ('2029-01-01');
		INSERT INTO m_2028 SELECT g, date '2028-01-01' + g, 'sub' FROM generate_series(1, 300) g`)
	e.srcExec(`ALTER TABLE m ATTACH PARTITION m_2028 FOR VALUES FROM ('2028-01-01') TO ('2029-01-01')`)
	sync()
	e.srcExec(`TRUNCATE m_2028_b`)
	sync()
	e.srcExec(`TRUNCATE m_2028`)
	sync()
}

// TestPartitionAttachWhileRunning: the root copied again by a running
// engine (tablesync's Watch), its changes held until then; the attached
// table's later changes reach the root, and once detached none does. On
// a PostgreSQL 14 source the walsender's cache kept the attached table
// unpublished (its later UPDATE never reached the target): capture starts
// a new session after each ATTACH and DETACH.
func TestPartitionAttachWhileRunning(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e, sync := partitionEnv(t, false)
	cfg := e.config("public.m")
	cfg.CreateTables = true
	stop := e.start(cfg)
	e.waitStreaming(cfg.Slot)
	e.srcExec(`CREATE TABLE m_2030 (id int NOT NULL, at date NOT NULL, v text, PRIMARY KEY (id, at));
		INSERT INTO m_2030 SELECT g, date '2030-02-02', 'old ' || g FROM generate_series(50001, 50100) g`)
	e.srcExec(`ALTER TABLE m ATTACH PARTITION m_2030 FOR VALUES FROM ('2030-01-01') TO ('2031-01-01')`)
	e.srcExec(`UPDATE m SET v = 'after attach' WHERE id IN (50001, 1)`)
	waitFor(t, "the root copied again", time.Minute, func() bool {
		return e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE table_name = 'm' AND state = 'ready' AND copied_at IS NOT NULL AND sync_lsn IS NOT NULL") == 1 &&
			e.count(e.Tgt, "SELECT count(*) FROM m WHERE id >= 50001") == 100
	})
	e.srcExec(`UPDATE m SET v = 'later' WHERE id = 50002`)
	// Detached while running: the table's later writes are its own, none
	// reaches the target's root.
	e.srcExec(`ALTER TABLE m DETACH PARTITION m_2030`)
	e.srcExec(`INSERT INTO m_2030 VALUES (60001, '2030-03-03', 'detached'); UPDATE m_2030 SET v = 'detached later' WHERE id = 50003`)
	e.srcExec(`UPDATE m SET v = 'root later' WHERE id = 2`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	sync()
}

// TestDDLTriggersAlwaysOn: the source's event triggers fire in every
// session: a table added to the publication under session_replication_role
// = replica (another replication's apply, a restore) is copied; with the
// triggers made for the origin alone it was not, and the target lacked
// its rows. A trigger turned off while the engine runs (ALTER EVENT
// TRIGGER ... DISABLE) stops the run, naming it, with every published
// table recorded for a new copy: a table added to the publication
// meanwhile, which no message announced, is copied by the next start,
// which turns the triggers on again.
func TestDDLTriggersAlwaysOn(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(partitionedSQL + `; CREATE TABLE x (id int PRIMARY KEY, v text); CREATE TABLE y (id int PRIMARY KEY, v text)`)
	e.fillPartitions()
	e.srcExec(`INSERT INTO x SELECT g, 'x' FROM generate_series(1, 40) g; INSERT INTO y SELECT g, 'y' FROM generate_series(1, 30) g`)
	cfg := e.config("public.m")
	cfg.PublicationPoll = time.Second
	e.catchUp(cfg)
	// A source that is itself a subscriber (its apply runs as a replica
	// session) adds a table and truncates one partition: both reach the
	// target.
	e.srcExec(`SET session_replication_role = replica; ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE y; TRUNCATE m_2025; RESET session_replication_role`)
	e.catchUp(cfg)
	e.assertSame("y", "id")
	e.assertSame("m", "id, at")
	if n := e.count(e.Tgt, "SELECT count(*) FROM m_2025"); n != 0 {
		t.Fatalf("m_2025 on the target after its TRUNCATE in a replica session: %d rows, want 0", n)
	}

	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER EVENT TRIGGER repstream_ddl DISABLE`)
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE x`)
	stopsWith(t, done, "its event trigger's DISABLE", "schema-change triggers were turned off", "repstream_ddl disabled", "recorded for a new copy")
	e.waitSlotReleased(cfg.Slot)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")
	e.assertSame("x", "id")
	var enabled string
	if err := e.Src.QueryRow(t.Context(), `SELECT evtenabled::text FROM pg_event_trigger WHERE evtname = 'repstream_ddl'`).Scan(&enabled); err != nil || enabled != "A" {
		t.Fatalf("repstream_ddl after the next start: enabled %q (%v), want A (always)", enabled, err)
	}
}

// TestDDLTriggersOffWhileStopped: the event trigger turned off and on
// again while no engine of the replication ran, or between two looks of a
// running one, leaves it as it should be, but what it would have carried
// meanwhile (here a table added to the publication) never reached the
// stream. The next start, or the running engine, sees it touched and
// copies every table anew; a start after nothing happened copies nothing.
func TestDDLTriggersOffWhileStopped(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(partitionedSQL + `; CREATE TABLE x (id int PRIMARY KEY, v text); CREATE TABLE z (id int PRIMARY KEY, v text)`)
	e.fillPartitions()
	e.srcExec(`INSERT INTO x SELECT g, 'x' FROM generate_series(1, 40) g; INSERT INTO z SELECT g, 'z' FROM generate_series(1, 30) g`)
	cfg := e.config("public.m")
	cfg.PublicationPoll = time.Second
	e.catchUp(cfg)
	copied := func() string {
		t.Helper()
		var at string
		if err := e.Tgt.QueryRow(t.Context(), `SELECT max(copied_at)::text FROM repstream.tables WHERE slot = $1`, cfg.Slot).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	first := copied()
	e.catchUp(cfg)
	if again := copied(); again != first {
		t.Fatalf("a restart with the triggers untouched copied tables again (copied_at %s, then %s)", first, again)
	}

	e.srcExec(`ALTER EVENT TRIGGER repstream_ddl DISABLE`)
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE x`)
	e.srcExec(`ALTER EVENT TRIGGER repstream_ddl ENABLE ALWAYS`)
	e.catchUp(cfg)
	e.assertSame("x", "id")
	e.assertSame("m", "id, at")
	second := copied()
	if second == first {
		t.Fatal("the start after the triggers were off copied nothing")
	}
	// A leaf's TRUNCATE trigger, the same.
	e.srcExec(`ALTER TABLE m_2024 DISABLE TRIGGER repstream_truncate; TRUNCATE m_2024; ALTER TABLE m_2024 ENABLE ALWAYS TRIGGER repstream_truncate`)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")
	if copied() == second {
		t.Fatal("the start after a TRUNCATE trigger was off copied nothing")
	}

	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER EVENT TRIGGER repstream_ddl DISABLE; ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE z; ALTER EVENT TRIGGER repstream_ddl ENABLE ALWAYS`)
	stopsWith(t, done, "its event trigger's DISABLE and ENABLE", "schema-change triggers were turned off", "since this replication last saw them working", "recorded for a new copy")
	e.waitSlotReleased(cfg.Slot)
	e.catchUp(cfg)
	e.assertSame("z", "id")
	e.assertSame("x", "id")
	e.assertSame("m", "id, at")

	done, cancel = e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER TABLE m_2025 DISABLE TRIGGER repstream_truncate; TRUNCATE m_2025; ALTER TABLE m_2025 ENABLE ALWAYS TRIGGER repstream_truncate`)
	stopsWith(t, done, "a TRUNCATE trigger's DISABLE and ENABLE", "schema-change triggers were turned off", "repstream_truncate on public.m_2025 altered", "recorded for a new copy")
	e.waitSlotReleased(cfg.Slot)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")

	// The leaf's owner drops repstream's TRUNCATE trigger and makes one of
	// its own under that name (before, nothing looked at a trigger gone,
	// and the TRUNCATE never reached the target).
	done, cancel = e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`CREATE FUNCTION own_truncate() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
		DROP TRIGGER repstream_truncate ON m_2025;
		CREATE TRIGGER repstream_truncate AFTER TRUNCATE ON m_2025 FOR EACH STATEMENT EXECUTE FUNCTION own_truncate();
		TRUNCATE m_2025`)
	stopsWith(t, done, "a TRUNCATE trigger of the leaf's own under repstream's name", "partition public.m_2025 has no TRUNCATE trigger of repstream's",
		"its trigger repstream_truncate calls public.own_truncate()", "recorded for a new copy")
	e.waitSlotReleased(cfg.Slot)
	e.srcExec(`ALTER TRIGGER repstream_truncate ON m_2025 RENAME TO own_truncate`)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")
	e.srcExec(`TRUNCATE m_2025`)
	e.catchUp(cfg)
	e.assertSame("m", "id, at")
}

// TestDDLTriggersFirstUse: a replication that followed schema changes
// from the Relation messages (--ddl=relation) and then starts with the
// event trigger installs it without copying anything anew: triggers that
// never existed were never off. A table added to the publication between
// its last run without the trigger and that start is copied.
func TestDDLTriggersFirstUse(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE x (id int PRIMARY KEY, v text); CREATE TABLE z (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO x SELECT g, 'x' FROM generate_series(1, 40) g; INSERT INTO z SELECT g, 'z' FROM generate_series(1, 30) g`)
	cfg := e.config("public.x")
	cfg.DDL = "relation"
	e.catchUp(cfg)
	var first, again string
	q := `SELECT max(copied_at)::text FROM repstream.tables WHERE slot = $1 AND table_name = 'x'`
	if err := e.Tgt.QueryRow(t.Context(), q, cfg.Slot).Scan(&first); err != nil {
		t.Fatal(err)
	}
	cfg.DDL = "true"
	e.srcExec(`UPDATE x SET v = 'y' WHERE id <= 10`)
	// Added to the publication since the last look without the trigger:
	// no message describes it.
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE z`)
	e.catchUp(cfg)
	e.assertSame("x", "id")
	e.assertSame("z", "id")
	if err := e.Tgt.QueryRow(t.Context(), q, cfg.Slot).Scan(&again); err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("the first start with the event trigger copied the tables again (copied_at %s, then %s)", first, again)
	}
}

// TestTargetTableDroppedIsCopied: a published table dropped on the target
// between two runs is made again by the next start (--create-tables)
// and copied, not left to take only the changes from then on. With the
// event trigger and without it.
func TestTargetTableDroppedIsCopied(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, ddl := range []string{"true", "relation"} {
		t.Run("ddl="+ddl, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TABLE x (id int PRIMARY KEY, v text); CREATE TABLE y (id int PRIMARY KEY)`)
			e.srcExec(`INSERT INTO x SELECT g, 'x' FROM generate_series(1, 40) g; INSERT INTO y SELECT generate_series(1, 5)`)
			cfg := e.config("public.x", "public.y")
			cfg.DDL = ddl
			cfg.AllowUntrackedPartitions = ddl == "relation" // nothing here truncates, attaches or detaches
			cfg.CreateTables = true
			e.catchUp(cfg)
			e.tgtExec(`DROP TABLE x`)
			e.srcExec(`INSERT INTO x SELECT g, 'new' FROM generate_series(41, 50) g`)
			e.catchUp(cfg)
			e.assertSame("x", "id")
			e.assertSame("y", "id")
		})
	}
}

// TestPartitionMidLevel: the replicated table is a partitioned table that
// is itself a partition of a table the publication leaves out
// (src/test/subscription/t/013_partition.pl, pub_lower_level). It is the
// topmost published ancestor of its leaves, whose rows go out under its
// name: a TRUNCATE of one of its leaves, an ATTACH and a DETACH beneath
// it reach the target (they were lost: the trigger looked for the
// publication at the tree's top, which it does not publish).
func TestPartitionMidLevel(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE tab4 (a int PRIMARY KEY) PARTITION BY LIST (a);
		CREATE TABLE tab4_1 PARTITION OF tab4 FOR VALUES IN (-1, 0, 1, 2, 3, 4) PARTITION BY LIST (a);
		CREATE TABLE tab4_1_1 PARTITION OF tab4_1 FOR VALUES IN (-1, 0, 1);
		CREATE TABLE tab4_1_2 PARTITION OF tab4_1 FOR VALUES IN (2);
		CREATE TABLE tab4_2 PARTITION OF tab4 FOR VALUES IN (5, 6);
		INSERT INTO tab4 VALUES (-1), (2), (5)`)
	cfg := e.config("public.tab4_1")
	cfg.CreateTables = true
	e.catchUp(cfg)
	steps := []string{
		`INSERT INTO tab4 VALUES (0), (6); UPDATE tab4 SET a = 1 WHERE a = 0`,
		`TRUNCATE tab4_1_2`,
		`INSERT INTO tab4 VALUES (2); CREATE TABLE x (a int PRIMARY KEY); INSERT INTO x VALUES (3); ALTER TABLE tab4_1 ATTACH PARTITION x FOR VALUES IN (3)`,
		`ALTER TABLE tab4_1 DETACH PARTITION tab4_1_1; DELETE FROM tab4 WHERE a = 3`,
		`TRUNCATE tab4`,
	}
	stop := e.startOnce(cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	e.waitStreaming(cfg.Slot)
	for _, step := range steps {
		e.srcExec(step)
		e.waitCaughtUp(cfg.Slot, time.Minute)
		e.assertSame("tab4_1", "a")
	}
}

// TestPartitionedAddColumnDefault: a column added with a constant default
// to a partitioned table holding rows (013_partition.pl: ALTER TABLE tab2
// DROP b, ADD COLUMN c text DEFAULT ..., ADD b). The value the existing
// rows got is on the leaves (a partitioned table has no rows of its own):
// the target's rows get it too. It stopped the run ("added with a default
// the target cannot reproduce").
func TestPartitionedAddColumnDefault(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, ddl := range []string{"true", "relation"} {
		// With the trigger, and without it (--ddl=relation: the source's
		// catalog, read when the new description comes).
		t.Run(ddl, func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE p (a int PRIMARY KEY, b text) PARTITION BY RANGE (a);
				CREATE TABLE p_1 PARTITION OF p FOR VALUES FROM (0) TO (10);
				CREATE TABLE p_2 PARTITION OF p FOR VALUES FROM (10) TO (100) PARTITION BY LIST (a);
				CREATE TABLE p_2_1 PARTITION OF p_2 DEFAULT;
				INSERT INTO p VALUES (1, 'one'), (11, 'eleven')`)
			cfg := e.config("public.p")
			cfg.CreateTables = true
			cfg.DDL = ddl
			cfg.AllowUntrackedPartitions = ddl == "relation" // nothing here truncates, attaches or detaches
			e.catchUp(cfg)
			if ddl == "true" {
				e.srcExec(`ALTER TABLE p DROP b, ADD COLUMN c text DEFAULT 'pub', ADD b text, ADD COLUMN d date DEFAULT '2026-01-02'`)
			} else {
				e.srcExec(`ALTER TABLE p ADD COLUMN c text DEFAULT 'pub'`)
			}
			e.srcExec(`INSERT INTO p (a, b) VALUES (2, 'x'), (13, 'y'); INSERT INTO p (a, b, c) VALUES (7, 'z', 'own')`)
			e.catchUp(cfg)
			e.assertSame("p", "a")
		})
	}
}

// TestDDLKeylessPartitionedFull: a partitioned table without a key made in
// a published schema, and the primary key of one dropped. The source
// refused the application's UPDATEs and DELETEs of their partitions
// ("does not have a replica identity and publishes updates"): the trigger
// made only ordinary tables FULL. Now the table and its keyless partitions
// are, and the changes replicate.
func TestDDLKeylessPartitionedFull(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
	}
	e.srcExec(`CREATE SCHEMA app; CREATE TABLE app.m (id int, k int, v text, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		CREATE TABLE app.m1 PARTITION OF app.m FOR VALUES IN (1)`)
	cfg := e.config("app.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`CREATE TABLE app.log (a int, k int) PARTITION BY LIST (k); CREATE TABLE app.log1 PARTITION OF app.log FOR VALUES IN (1)`)
	e.srcExec(`INSERT INTO app.log VALUES (1, 1), (2, 1), (3, 1)`)
	e.srcExec(`UPDATE app.log SET a = 20 WHERE a = 2`)
	e.srcExec(`DELETE FROM app.log WHERE a = 3`)
	e.srcExec(`INSERT INTO app.m VALUES (1, 1, 'a'), (2, 1, 'b')`)
	e.srcExec(`ALTER TABLE app.m DROP CONSTRAINT m_pkey`)
	e.srcExec(`UPDATE app.m SET v = 'c' WHERE id = 2`)
	e.srcExec(`DELETE FROM app.m WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("app.log", "a")
	e.assertSame("app.m", "id")
}

// TestFirstStartDoesNotHoldWritesUp: the first start installs a TRUNCATE
// trigger on every leaf partition, in one transaction. An application
// transaction open on one leaf made it wait, with no bound, and every
// write to the leaves it had already locked (and to that one) queued
// behind it for as long as the application's transaction lasted. Now each
// wait for a lock is bounded (2 s) and the install tried again: an insert
// into another leaf waits no longer than that, and the start completes
// once the transaction is over.
func TestFirstStartDoesNotHoldWritesUp(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1); CREATE TABLE p2 PARTITION OF p FOR VALUES IN (2)`)
	holder, err := e.srcConn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(t.Context(), `BEGIN; INSERT INTO p2 VALUES (1, 2)`); err != nil {
		t.Fatal(err)
	}
	const held = 6 * time.Second
	released := time.AfterFunc(held, func() { _, _ = holder.Exec(context.Background(), "COMMIT") })
	defer released.Stop()
	cfg := e.config("public.p")
	cfg.UntilCaughtUp = true
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	time.Sleep(500 * time.Millisecond) // the install waits for p2
	app, err := e.srcConn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	start := time.Now()
	if _, err := app.Exec(t.Context(), `INSERT INTO p1 VALUES (5, 1)`); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("an insert into p1 waited %s behind repstream's install (the application's transaction on p2 lasted %s)", took.Round(time.Millisecond), held)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the start did not complete once the transaction was over: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the start did not end")
	}
	e.assertSame("p", "id, k")
}

// TestDropDoesNotHoldQueriesUp: `repstream drop` of a source's last
// replication removes the TRUNCATE trigger of every leaf partition. It did
// so in one transaction with no bound on its waits: an application
// transaction that had merely read one leaf made it wait for as long as
// that transaction lasted, and meanwhile every query of the leaves it had
// locked already, and of the one it waited for, queued behind it. Now each
// leaf's trigger goes in a short transaction of its own, each wait is
// bounded (2 s) and tried again a few times; then drop fails naming the
// table and the session that holds it, and run again once that is over it
// removes the rest.
func TestDropDoesNotHoldQueriesUp(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 14 {
		t.Skip("the event trigger needs a PostgreSQL 14+ source")
	}
	e.both(`CREATE TABLE p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1); CREATE TABLE p2 PARTITION OF p FOR VALUES IN (2);
		CREATE TABLE p3 PARTITION OF p FOR VALUES IN (3)`)
	cfg := e.config("public.p")
	e.catchUp(cfg)
	e.waitSlotReleased(cfg.Slot)
	if n := e.count(e.Src, "SELECT count(*) FROM pg_trigger WHERE tgname = 'repstream_truncate'"); n != 3 {
		t.Fatalf("%d TRUNCATE triggers on the leaves, want 3", n)
	}

	holder, err := e.srcConn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	var holderPID int
	if err := holder.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(t.Context(), `BEGIN; SELECT count(*) FROM p2`); err != nil {
		t.Fatal(err)
	}
	// Ended when drop returns (or, without a bound on drop's waits, later).
	released := make(chan struct{})
	release := sync.OnceFunc(func() {
		_, _ = holder.Exec(context.Background(), "COMMIT")
		close(released)
	})
	releaseLate := time.AfterFunc(40*time.Second, release)
	defer releaseLate.Stop()

	// The application's queries of every leaf while drop runs, each timed.
	app, err := e.srcConn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	probeDone := make(chan struct{})
	var slowest time.Duration
	var slowestQuery string
	go func() {
		defer close(probeDone)
		for i := 0; ; i++ {
			select {
			case <-released:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, q := range []string{"SELECT count(*) FROM p1", "SELECT count(*) FROM p2", "SELECT count(*) FROM p3",
				fmt.Sprintf("INSERT INTO p VALUES (%d, 3)", i)} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				_, err := app.Exec(ctx, q)
				cancel()
				if took := time.Since(start); took > slowest {
					slowest, slowestQuery = took, q
				}
				if err != nil {
					t.Errorf("%s: %v", q, err)
					return
				}
			}
		}
	}()

	start := time.Now()
	err = engine.Drop(t.Context(), cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t))
	took := time.Since(start)
	release()
	<-probeDone
	t.Logf("drop took %s: %v", took.Round(time.Millisecond), err)
	t.Logf("the slowest query of the application while drop ran: %q, %s", slowestQuery, slowest.Round(time.Millisecond))
	if slowest > 3*time.Second {
		t.Errorf("%q waited %s behind drop (bound: 2 s)", slowestQuery, slowest.Round(time.Millisecond))
	}
	if err == nil {
		t.Fatalf("drop succeeded while a transaction held partition p2 (after %s)", took.Round(time.Millisecond))
	}
	wantInError(t, err, "table public.p2", fmt.Sprintf("backend pid %d", holderPID), "run drop again")
	if took > 30*time.Second {
		t.Errorf("drop took %s to give up", took.Round(time.Millisecond))
	}
	// The transaction over, drop run again removes the rest.
	if err := engine.Drop(t.Context(), cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t)); err != nil {
		t.Fatalf("drop run again: %v", err)
	}
	if n := e.count(e.Src, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = 'repstream_truncate')
		+ (SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%')
		+ (SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream')`); n != 0 {
		t.Errorf("%d of repstream's triggers and schema left on the source after drop", n)
	}
}

// TestPartitionTruncateRootLinear: a TRUNCATE of a root fires the TRUNCATE
// trigger of each of its N leaves, and each describes the root. That
// description walked the whole tree (the filenodes digest of every leaf,
// and once per column the leaves' missing values), so the TRUNCATE cost
// N² tree reads on the source, all under ACCESS EXCLUSIVE on the whole
// tree: 200 leaves took seconds instead of a fraction of one. A TRUNCATE
// PARTITION message now carries the root without what takes a walk of its
// leaves (the apply of one reads neither): counted in the TRUNCATE's own
// reads of pg_inherits (each walk reads every leaf's row there), a few per
// leaf. The target's leaves are still truncated as the source's.
func TestPartitionTruncateRootLinear(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 14 {
		t.Skip("the event trigger needs a PostgreSQL 14+ source")
	}
	const leaves = 200
	e.both(fmt.Sprintf(`CREATE TABLE p (id int, k int, v text, w date, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		DO $$BEGIN FOR i IN 1..%d LOOP EXECUTE format('CREATE TABLE p_%%s PARTITION OF p FOR VALUES IN (%%s)', i, i); END LOOP; END$$`, leaves))
	fill := fmt.Sprintf(`INSERT INTO p SELECT g, g %% %d + 1, 'v' || g, date '2026-01-01' + g FROM generate_series(1, %d) g`, leaves, 5*leaves)
	e.srcExec(fill)
	cfg := e.config("public.p")
	e.catchUp(cfg)
	if n := e.count(e.Src, "SELECT count(*) FROM pg_trigger WHERE tgname = 'repstream_truncate'"); n != leaves {
		t.Fatalf("%d TRUNCATE triggers on the leaves, want %d", n, leaves)
	}

	// The TRUNCATE's reads of pg_inherits through its index, in its
	// transaction's own statistics: a walk of the tree reads each
	// leaf's row so (find_all_inheritors). The triggers' lookups of one
	// leaf's row may scan the table instead, as the planner deems
	// cheaper for a small pg_inherits: those are not counted.
	const inheritsIndexReads = `SELECT COALESCE((SELECT idx_tup_fetch FROM pg_stat_xact_sys_tables WHERE relid = 'pg_inherits'::regclass), 0)`
	reads, took := e.statementReads("TRUNCATE p", inheritsIndexReads)
	t.Logf("TRUNCATE of the root with %d leaves: %d index reads of pg_inherits, %s", leaves, reads, took.Round(time.Millisecond))
	if reads > 10*leaves {
		t.Errorf("TRUNCATE of the root with %d leaves read pg_inherits through its index %d times: more than %d a leaf, the tree walked per leaf", leaves, reads, 10)
	}

	e.catchUp(cfg)
	if n := e.count(e.Tgt, "SELECT count(*) FROM p"); n != 0 {
		t.Fatalf("the target's root has %d rows after the source's TRUNCATE", n)
	}
	// A leaf alone, and one in a query that also changes the root's
	// columns between two truncates.
	e.srcExec(fill)
	e.catchUp(cfg)
	e.srcExec(`TRUNCATE p_7`)
	e.srcExec(`TRUNCATE p_8; ALTER TABLE p ADD COLUMN z int DEFAULT 7; TRUNCATE p_9`)
	e.catchUp(cfg)
	e.assertSame("p", "id, k")
	if n := e.count(e.Tgt, "SELECT count(*) FROM p WHERE k IN (7, 8, 9)"); n != 0 {
		t.Fatalf("the target's leaves p_7, p_8, p_9 hold %d rows, truncated on the source", n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM p WHERE z = 7"); n != 5*leaves-15 {
		t.Fatalf("%d rows of the target's root have z = 7, want %d", n, 5*leaves-15)
	}
}

// statementReads runs stmt on the source in a transaction of its own and
// returns how much the count query (read from that transaction's own
// statistics, pg_stat_xact_*) grew over it, and how long stmt took.
func (e *env) statementReads(stmt, count string) (int64, time.Duration) {
	t := e.t
	conn, err := e.srcConn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var before, after int64
	if err := tx.QueryRow(t.Context(), count).Scan(&before); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := tx.Exec(t.Context(), stmt); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := tx.QueryRow(t.Context(), count).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	return after - before, took
}

// inheritsReads is a transaction's reads of pg_inherits so far, through its
// indexes and by scans, from its own statistics.
const inheritsReads = `SELECT COALESCE((SELECT COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0) FROM pg_stat_xact_sys_tables WHERE relid = 'pg_inherits'::regclass), 0)`

// TestPartitionCreateLinear: the event triggers follow each CREATE TABLE
// ... PARTITION OF. They refreshed the whole tree of the root in every one
// (each partition's state, the TRUNCATE trigger of each leaf), so creating
// N partitions one by one cost N² reads of the tree on top of
// PostgreSQL's own. Now a CREATE refreshes the new partition and its
// parent's DEFAULT partition, whose partition constraint it changes: counted
// in the CREATE's reads of pg_inherits, which PostgreSQL itself reads once
// (the parent's partitions), repstream adds a few. The partitions made
// one by one, in one transaction, and around a DEFAULT partition detached
// after, reach the target as on the source.
func TestPartitionCreateLinear(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 14 {
		t.Skip("the event trigger needs a PostgreSQL 14+ source")
	}
	const leaves = 200
	e.srcExec(fmt.Sprintf(`CREATE TABLE p (id int, k int, v text, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		DO $$BEGIN FOR i IN 1..%d LOOP EXECUTE format('CREATE TABLE p_%%s PARTITION OF p FOR VALUES IN (%%s)', i, i); END LOOP; END$$`, leaves))
	e.srcExec(fmt.Sprintf(`INSERT INTO p SELECT g, g %% %d + 1, 'v' || g FROM generate_series(1, %d) g`, leaves, 2*leaves))
	cfg := e.config("public.p")
	cfg.CreateTables = true // an ordinary p: a DETACH removes the rows in the partition's constraint
	e.catchUp(cfg)

	// A catalog cache reset in the middle of the statement (the shared
	// invalidation queue overrun by the other tests' DDL, under load)
	// reads pg_inherits again: 608 reads were seen once under make test.
	// So the fewest of up to three CREATEs counts; the tree walked again
	// is in every one.
	reads := int64(-1)
	for i := 1; i <= 3 && (reads < 0 || reads > 2*leaves); i++ {
		n, took := e.statementReads(fmt.Sprintf("CREATE TABLE p_new%d PARTITION OF p FOR VALUES IN (-%d)", i, i), inheritsReads)
		t.Logf("CREATE TABLE ... PARTITION OF a root with %d leaves: %d reads of pg_inherits, %s", leaves, n, took.Round(time.Millisecond))
		if reads < 0 || n < reads {
			reads = n
		}
	}
	if reads > 2*leaves {
		t.Errorf("CREATE TABLE ... PARTITION OF a root with %d leaves read pg_inherits %d times: more than PostgreSQL's own walk of the partitions and a few, the tree walked again", leaves, reads)
	}

	// More, one by one, in one transaction, with rows; a DEFAULT
	// partition, a partition created beside it (which narrows its
	// constraint), then the DEFAULT detached: the target removes the rows
	// in its constraint as it is then, not those of the partition made
	// after it.
	e.srcExec(`DO $$BEGIN FOR i IN 1001..1020 LOOP EXECUTE format('CREATE TABLE p_%s PARTITION OF p FOR VALUES IN (%s)', i, i); END LOOP; END$$`)
	e.srcExec(`BEGIN; CREATE TABLE p_2001 PARTITION OF p FOR VALUES IN (2001); CREATE TABLE p_2002 PARTITION OF p FOR VALUES IN (2002); COMMIT`)
	e.srcExec(`CREATE TABLE p_def PARTITION OF p DEFAULT`)
	e.srcExec(`CREATE TABLE p_3003 PARTITION OF p FOR VALUES IN (3003)`)
	e.srcExec(`INSERT INTO p SELECT g, k, 'w' || g FROM generate_series(100001, 100010) g, (VALUES (-1), (1001), (1020), (2002), (3002), (3003)) v(k)`)
	e.catchUp(cfg)
	e.assertSame("p", "id, k")
	e.srcExec(`ALTER TABLE p DETACH PARTITION p_def`)
	e.catchUp(cfg)
	e.assertSame("p", "id, k")
	if n := e.count(e.Tgt, "SELECT count(*) FROM p WHERE k = 3002"); n != 0 {
		t.Fatalf("the target's p holds %d rows of the DEFAULT partition detached on the source", n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM p WHERE k = 3003"); n != 10 {
		t.Fatalf("the target's p holds %d rows of partition p_3003, made after the DEFAULT partition detached, want 10", n)
	}
}

// TestPartitionDropAfterTruncateRoot: a TRUNCATE of a root runs the
// TRUNCATE trigger of each of its N leaves, and PL/pgSQL compiles a
// trigger function once per trigger, keeping each of its statements'
// plans until the session ends; every catalog change the session makes
// after walks them all, once per object changed: a DROP TABLE of the root
// in that session (N leaves, each several objects) then took N² walks
// (1000 leaves: seconds more than without repstream). The trigger is one
// statement now, the work done in a function compiled once: counted in
// the session's cached plans, 2 a leaf (5 before). The DROP
// still reaches the target: the root and its leaves dropped there too.
func TestPartitionDropAfterTruncateRoot(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 14 {
		t.Skip("the event trigger needs a PostgreSQL 14+ source")
	}
	const leaves = 200
	e.both(fmt.Sprintf(`CREATE TABLE p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		DO $$BEGIN FOR i IN 1..%d LOOP EXECUTE format('CREATE TABLE p_%%s PARTITION OF p FOR VALUES IN (%%s)', i, i); END LOOP; END$$;
		CREATE TABLE other (id int PRIMARY KEY)`, leaves))
	e.srcExec(fmt.Sprintf(`INSERT INTO p SELECT g, g %% %d + 1 FROM generate_series(1, %d) g`, leaves, 2*leaves))
	cfg := e.config("public.*")
	e.catchUp(cfg)

	conn, err := e.srcConn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const plans = `SELECT count(*) FROM pg_backend_memory_contexts WHERE name = 'CachedPlanSource'`
	var before, after int64
	if err := conn.QueryRow(t.Context(), plans).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "TRUNCATE p"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(t.Context(), plans).Scan(&after); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := conn.Exec(t.Context(), "DROP TABLE p"); err != nil {
		t.Fatal(err)
	}
	t.Logf("TRUNCATE of the root with %d leaves: %d plans cached in its session after, DROP TABLE of the root %s", leaves, after-before, time.Since(start).Round(time.Millisecond))
	if after-before > 3*leaves {
		t.Errorf("a TRUNCATE of the root with %d leaves left %d cached plans in its session: more than 3 a leaf", leaves, after-before)
	}
	e.srcExec(`INSERT INTO other VALUES (1), (2)`)
	e.catchUp(cfg)
	e.assertSame("other", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'p' OR relname LIKE 'p\\_%'"); n != 0 {
		t.Fatalf("the target has %d of the tables of p after the source's DROP TABLE p", n)
	}
}
