package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/healthcheck"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

// TestBidirectionalOrigins: A -> B and B -> A at once, both with --origin
// none. Apply marks its target transactions with a replication origin
// (repstream_<n>), and each capture leaves out the transactions
// that carry one (pgoutput's origin option on PostgreSQL 16+, capture's
// own filter before, reading whole transactions): rows written on either
// side, also a large transaction (which would stream), reach the other
// once and both end equal; each side applies each of the other's changes
// exactly once (an ENABLE ALWAYS trigger counts the rows apply writes:
// before, each change went back and forth for ever, or stopped on a
// duplicate key), and each slot confirms past what it left out. Then a
// start with --origin any of either direction is refused, naming the
// loop. (A cascade A -> B -> C with --origin any: TestCascadeWithTriggers.)
func TestBidirectionalOrigins(t *testing.T) {
	t.Parallel() // own databases and slots; no server restarts
	// A cluster of its own, holding A and B: the shared ones' tests use up
	// their origin state (its sessions would write without an origin).
	// track_commit_timestamp: the two directions are refused without it
	// (TestBidirectionalNeedsCommitTimestamps), and with it each apply
	// finds a row the other side wrote later ("written on both sides").
	c := pgtest.Cluster(t, pgcluster.Options{Name: "origins", Fast: true, BinDir: pgtest.SharedBinDir("source"),
		Settings: map[string]string{"track_commit_timestamp": "on"}})
	ab := envOn(t, c, pgtest.NewDB(t, c), c, pgtest.NewDB(t, c))
	ba := envOn(t, c, ab.tgtDB, c, ab.srcDB)
	// applied counts the rows apply wrote on this side (replica sessions).
	ab.both(`CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE applied (n bigint NOT NULL);
INSERT INTO applied VALUES (0);
CREATE FUNCTION count_applied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('session_replication_role') = 'replica' THEN
    UPDATE public.applied SET n = n + 1;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER count_applied AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION count_applied();
ALTER TABLE t ENABLE ALWAYS TRIGGER count_applied;`)
	cfgAB, cfgBA := ab.config("public.t"), ba.config("public.t")
	for _, c := range []*config.Config{&cfgAB, &cfgBA} {
		c.DecodingWorkMem = "64kB" // the large transaction streams (16+)
	}
	cfgBA.Slot = "b_" + cfgBA.Slot[:min(len(cfgBA.Slot), 60)]
	cfgBA.Publication = cfgBA.Slot

	t.Run("none both ways", func(t *testing.T) {
		cfgAB.Origin, cfgBA.Origin = config.OriginNone, config.OriginNone
		// One after the other, as the README says: while A -> B copies
		// into B, B's t is without its key (set aside for the copy), and
		// B -> A started then refuses it (and its failed start's cleanup
		// raced A -> B's rebuild of that key).
		stopAB := ab.start(cfgAB)
		ab.waitStreaming(cfgAB.Slot)
		stopBA := ba.start(cfgBA)
		defer func() {
			if err := stopAB(); err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("A -> B: %v", err)
			}
			if err := stopBA(); err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("B -> A: %v", err)
			}
		}()
		// Streaming, after the initial copies (of empty tables): a slot
		// is active while it is made, before its consistent point.
		ab.waitStreaming(cfgAB.Slot)
		ba.waitStreaming(cfgBA.Slot)
		ab.waitCaughtUp(cfgAB.Slot, time.Minute)
		ba.waitCaughtUp(cfgBA.Slot, time.Minute)
		ab.srcExec(`INSERT INTO t SELECT g, 'a' FROM generate_series(1, 3) g`)
		ab.tgtExec(`INSERT INTO t SELECT g, 'b' FROM generate_series(11, 13) g`)
		ab.srcExec(`UPDATE t SET v = 'a2' WHERE id = 1`)
		ab.tgtExec(`UPDATE t SET v = 'b2' WHERE id = 11`)
		ab.srcExec(`INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1000, 2999) g`)
		ab.tgtExec(`DELETE FROM t WHERE id = 12`)
		// A's changes: 3 + 1 + 2000 rows; B's: 3 + 1 + 1.
		const fromA, fromB = 2004, 5
		pgtest.WaitFor(t, "both sides to apply the other's changes", time.Minute, func() (bool, error) {
			return ab.count(ab.Tgt, "SELECT n FROM applied") >= fromA && ab.count(ab.Src, "SELECT n FROM applied") >= fromB, nil
		})
		ab.waitCaughtUp(cfgAB.Slot, time.Minute)
		ba.waitCaughtUp(cfgBA.Slot, time.Minute)
		time.Sleep(time.Second) // a loop would go on applying
		ab.assertSame("t", "id")
		if a, b := ab.count(ab.Src, "SELECT n FROM applied"), ab.count(ab.Tgt, "SELECT n FROM applied"); a != fromB || b != fromA {
			t.Errorf("rows applied: on A %d, on B %d; want %d and %d (each change once)", a, b, fromB, fromA)
		}
		// A schema change on A reaches B once: B's capture leaves out the
		// apply's transaction, its schema-change message with it.
		ab.srcExec(`ALTER TABLE t ADD COLUMN w int`)
		ab.srcExec(`INSERT INTO t VALUES (5000, 'a', 1)`)
		pgtest.WaitFor(t, "A's new column and row on B", time.Minute, func() (bool, error) {
			return ab.count(ab.Tgt, "SELECT count(*) FROM t WHERE id = 5000") == 1, nil
		})
		ab.tgtExec(`INSERT INTO t VALUES (5001, 'b', 2)`)
		pgtest.WaitFor(t, "B's row on A", time.Minute, func() (bool, error) {
			return ab.count(ab.Src, "SELECT count(*) FROM t WHERE id = 5001 AND w = 2") == 1, nil
		})
		ab.waitCaughtUp(cfgAB.Slot, time.Minute)
		ba.waitCaughtUp(cfgBA.Slot, time.Minute)
		ab.assertSame("t", "id")
		if a, b := ab.count(ab.Src, "SELECT n FROM applied"), ab.count(ab.Tgt, "SELECT n FROM applied"); a != fromB+1 || b != fromA+1 {
			t.Errorf("rows applied after the schema change: on A %d, on B %d; want %d and %d", a, b, fromB+1, fromA+1)
		}
		if n := ab.count(ab.Tgt, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'repstream\\_%'"); n == 0 {
			t.Error("no replication origin repstream_<n> on the server")
		}
	})

	// A row written on both sides at once (A -> B stopped meanwhile), the
	// later write on B: on B, A's older update and delete of it are
	// conflicts (update_origin_differs, delete_origin_differs), parked,
	// not applied over B's; on A, B's update is applied over A's older
	// update, and is a conflict where A deleted the row (update_missing).
	// So row 7000 ends as B wrote it on both sides, and every change not
	// applied is in an error queue: nothing differs unsaid. Without the
	// check, B would keep A's older 'a' and A B's 'b'.
	t.Run("written on both sides", func(t *testing.T) {
		cfgAB.Origin, cfgBA.Origin = config.OriginNone, config.OriginNone
		cfgAB.OnError, cfgBA.OnError = config.OnErrorPark, config.OnErrorPark
		stopBA := ba.start(cfgBA)
		defer func() {
			if err := stopBA(); err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("B -> A: %v", err)
			}
		}()
		stopAB := ab.start(cfgAB)
		ab.srcExec(`INSERT INTO t (id, v) VALUES (7000, 'x'), (7001, 'x')`)
		pgtest.WaitFor(t, "A's rows on B", time.Minute, func() (bool, error) {
			return ab.count(ab.Tgt, "SELECT count(*) FROM t WHERE id IN (7000, 7001)") == 2, nil
		})
		if err := stopAB(); err != nil && !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("A -> B: %v", err)
		}
		ab.srcExec(`UPDATE t SET v = 'a' WHERE id = 7000`)
		ab.srcExec(`DELETE FROM t WHERE id = 7001`)
		ab.tgtExec(`UPDATE t SET v = 'b' WHERE id = 7000`)
		ab.tgtExec(`UPDATE t SET v = 'b' WHERE id = 7001`)
		stopAB = ab.start(cfgAB)
		ab.waitCaughtUp(cfgAB.Slot, time.Minute)
		ba.waitCaughtUp(cfgBA.Slot, time.Minute)
		pgtest.WaitFor(t, "row 7000 as B wrote it on both sides", time.Minute, func() (bool, error) {
			return ab.count(ab.Src, "SELECT count(*) FROM t WHERE id = 7000 AND v = 'b'") == 1 && ab.count(ab.Tgt, "SELECT count(*) FROM t WHERE id = 7000 AND v = 'b'") == 1, nil
		})
		parked := func(conn *pgx.Conn, slot, kind string) int64 {
			return ab.count(conn, "SELECT count(*) FROM repstream.errors WHERE slot = '"+slot+"' AND kind = '"+kind+"' AND state = 'parked'")
		}
		if n := parked(ab.Tgt, cfgAB.Slot, "update_origin_differs"); n != 1 {
			t.Errorf("on B, %d parked update_origin_differs, want 1 (A's update of 7000, older than B's)", n)
		}
		if n := parked(ab.Tgt, cfgAB.Slot, "delete_origin_differs"); n != 1 {
			t.Errorf("on B, %d parked delete_origin_differs, want 1 (A's delete of 7001, older than B's update)", n)
		}
		if n := parked(ab.Src, cfgBA.Slot, "update_missing"); n != 1 {
			t.Errorf("on A, %d parked update_missing, want 1 (B's update of 7001, which A deleted)", n)
		}
		if n := ab.count(ab.Tgt, "SELECT count(*) FROM t WHERE id = 7001 AND v = 'b'"); n != 1 {
			t.Errorf("on B, row 7001 is not as B wrote it")
		}

		// A TRUNCATE on A, and a row B wrote after it: on B the truncate
		// would take that row away on B only (A gets it after its
		// truncate): a conflict, truncate_origin_differs, parked.
		if err := stopAB(); err != nil && !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("A -> B: %v", err)
		}
		ab.srcExec(`TRUNCATE t`)
		ab.tgtExec(`INSERT INTO t (id, v) VALUES (7100, 'b')`)
		stopAB = ab.start(cfgAB)
		defer func() {
			if err := stopAB(); err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("A -> B: %v", err)
			}
		}()
		ab.waitCaughtUp(cfgAB.Slot, time.Minute)
		ba.waitCaughtUp(cfgBA.Slot, time.Minute)
		pgtest.WaitFor(t, "B's row on A", time.Minute, func() (bool, error) {
			return ab.count(ab.Src, "SELECT count(*) FROM t WHERE id = 7100") == 1, nil
		})
		if n := parked(ab.Tgt, cfgAB.Slot, "truncate_origin_differs"); n != 1 {
			t.Errorf("on B, %d parked truncate_origin_differs, want 1 (A's truncate, older than B's row 7100)", n)
		}
		if n := ab.count(ab.Tgt, "SELECT count(*) FROM t WHERE id IN (7000, 7100)"); n != 2 {
			t.Errorf("on B, %d of rows 7000 and 7100, want both (the truncate parked)", n)
		}
	})

	t.Run("check", func(t *testing.T) {
		origins := func(target string) (healthcheck.Level, string) {
			return checkItem(t, healthcheck.Options{Source: cfgAB.Source, Target: target, Slot: cfgAB.Slot, Tables: cfgAB.Tables, ApplyParallelism: 2}, "replication origins")
		}
		if l, d := origins(cfgAB.Target); l != healthcheck.OK {
			t.Errorf("check, a superuser target role: replication origins %s %s, want OK", l, d)
		}
		if l, d := checkItem(t, healthcheck.Options{Source: cfgBA.Source, Target: cfgBA.Target, Slot: cfgBA.Slot, Tables: cfgBA.Tables}, "both directions"); l != healthcheck.OK || !strings.Contains(d, cfgAB.Slot) {
			t.Errorf("check of B -> A: both directions %s %s, want OK naming A -> B's slot", l, d)
		}
		role := ab.uniqueName("no_origins_", 63)
		ab.tgtExec("CREATE ROLE " + role + " LOGIN")
		t.Cleanup(func() { _, _ = ab.Tgt.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
		dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", c.Port(), role, ab.tgtDB)
		if l, d := origins(dsn); l != healthcheck.Warn || !strings.Contains(d, "GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text)") {
			t.Errorf("check, a target role without the grants: replication origins %s %s, want WARN naming the GRANT", l, d)
		}
	})

	t.Run("any refused", func(t *testing.T) {
		cfgAB.Origin, cfgBA.Origin = config.OriginNone, config.OriginNone
		for _, x := range []struct {
			e         *env
			cfg       config.Config
			otherSlot string
		}{{ab, cfgAB, cfgBA.Slot}, {ba, cfgBA, cfgAB.Slot}} {
			x.cfg.Origin = config.OriginAny
			_, err := x.e.tryCatchUp(x.cfg)
			if err == nil || !strings.Contains(err.Error(), "replication loop") || !strings.Contains(err.Error(), x.otherSlot) ||
				!strings.Contains(err.Error(), "--origin none") || !strings.Contains(err.Error(), x.e.srcDB) || !strings.Contains(err.Error(), x.e.tgtDB) {
				t.Errorf("slot %s with --origin any: %v; want the loop refused, naming both databases, slot %s and --origin none", x.cfg.Slot, err, x.otherSlot)
			}
		}
		// B -> A recorded as started with --origin any (before A -> B
		// existed, its start saw no loop): A -> B with none is refused
		// too, since B -> A would send A's changes back once, over
		// what A wrote since.
		ab.srcExec(`UPDATE repstream.replications SET origin = 'any' WHERE slot = '` + cfgBA.Slot + `'`)
		_, err := ab.tryCatchUp(cfgAB)
		if err == nil || !strings.Contains(err.Error(), "replication loop") || !strings.Contains(err.Error(), cfgBA.Slot+`" with --origin any`) {
			t.Errorf("A -> B with --origin none, B -> A recorded with --origin any: %v; want the loop refused, naming B -> A's slot", err)
		}
		ab.srcExec(`UPDATE repstream.replications SET origin = 'none' WHERE slot = '` + cfgBA.Slot + `'`)
	})
}

// TestBidirectionalNeedsCommitTimestamps: the second of two replications
// in opposite directions (both --origin none) is refused before it makes
// anything when a server keeps no commit timestamps: apply could not tell
// a row written on both sides at once, and the sides would differ unsaid.
func TestBidirectionalNeedsCommitTimestamps(t *testing.T) {
	t.Parallel()    // own databases and slots; no server restarts
	ab := newEnv(t) // the shared clusters: track_commit_timestamp off
	ba := envOn(t, ab.tgt, ab.tgtDB, ab.src, ab.srcDB)
	ab.both(`CREATE TABLE t (id int PRIMARY KEY, v text)`)
	cfgAB, cfgBA := ab.config("public.t"), ba.config("public.t")
	cfgAB.Origin, cfgBA.Origin = config.OriginNone, config.OriginNone
	cfgBA.Slot = "b_" + cfgBA.Slot[:min(len(cfgBA.Slot), 60)]
	cfgBA.Publication = cfgBA.Slot
	ab.catchUp(cfgAB)
	_, err := ba.tryCatchUp(cfgBA)
	if err == nil || !strings.Contains(err.Error(), "track_commit_timestamp = on on both servers") || !strings.Contains(err.Error(), "off on the source and the target") ||
		!strings.Contains(err.Error(), cfgAB.Slot) {
		t.Fatalf("B -> A without commit timestamps: %v; want it refused, naming the setting, both servers and A -> B's slot", err)
	}
	if l, d := checkItem(t, healthcheck.Options{Source: cfgBA.Source, Target: cfgBA.Target, Slot: cfgBA.Slot, Tables: cfgBA.Tables}, "both directions"); l != healthcheck.Fail ||
		!strings.Contains(d, "track_commit_timestamp = on on the source and the target") {
		t.Errorf("check of B -> A: both directions %s %s, want FAIL naming the setting on both servers", l, d)
	}
	if n := ba.count(ba.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfgBA.Slot+"'"); n != 0 {
		t.Errorf("the refused start left its slot on B")
	}
	if n := ba.count(ba.Src, "SELECT count(*) FROM pg_publication WHERE pubname = '"+cfgBA.Slot+"'"); n != 0 {
		t.Errorf("the refused start left its publication on B")
	}
}

// checkItem runs repstream check with opts and returns the level of the
// item named check, and its detail and fix ("no item" when it is missing).
func checkItem(t *testing.T, opts healthcheck.Options, check string) (healthcheck.Level, string) {
	t.Helper()
	rep, err := healthcheck.Run(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rep.Items {
		if it.Check == check {
			return it.Level, it.Detail + " " + it.Fix
		}
	}
	return "", "no item"
}
