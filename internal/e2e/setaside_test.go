package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// Issue 31: the initial copy into tables the user made sets their keys and
// indexes (and the foreign keys that reference them) aside and makes them
// again after, as they were.

// userSchema is a target schema as pg_dump --schema-only would make it:
// a primary key, a deferrable unique constraint, an exclusion
// constraint, a partial and an expression index, a replica identity
// index, foreign keys into and out of the copied tables, a self-reference,
// and a foreign key of a table the copy does not write.
const userSchema = `CREATE SCHEMA app;
CREATE TABLE app.parent (id int PRIMARY KEY, code text NOT NULL, r int4range, n int,
	CONSTRAINT parent_code UNIQUE (code) DEFERRABLE INITIALLY DEFERRED,
	CONSTRAINT parent_r EXCLUDE USING gist (r WITH &&));
CREATE INDEX parent_n_part ON app.parent (n) WHERE n > 10;
CREATE INDEX parent_lower ON app.parent (lower(code)) WITH (fillfactor = 70);
CREATE TABLE app.child (id bigint NOT NULL, parent_id int REFERENCES app.parent ON DELETE CASCADE, up bigint, tag text NOT NULL,
	CONSTRAINT child_pk PRIMARY KEY (id) INCLUDE (tag));
ALTER TABLE app.child ADD CONSTRAINT child_up FOREIGN KEY (up) REFERENCES app.child (id) DEFERRABLE;
CREATE UNIQUE INDEX child_tag ON app.child (tag, id);
ALTER TABLE app.child REPLICA IDENTITY USING INDEX child_tag;
CREATE TABLE app.big (id bigint PRIMARY KEY, parent_id int NOT NULL REFERENCES app.parent (id), v int NOT NULL CHECK (v >= 0), pad text);
CREATE INDEX big_v ON app.big (v, id);`

// targetOnly is a table of the target's that the copy does not write,
// whose foreign key references a copied table.
const targetOnly = `CREATE TABLE app.local_note (id int PRIMARY KEY, big_id bigint REFERENCES app.big (id), note text);`

func loadUserSchema(e *env, bigRows int) {
	e.t.Helper()
	e.srcExec(userSchema)
	e.tgtExec(userSchema + targetOnly)
	e.srcExec(`INSERT INTO app.parent SELECT g, 'code' || g, int4range(g * 10, g * 10 + 5), g FROM generate_series(1, 50) g;
		INSERT INTO app.child SELECT g, 1 + g % 50, CASE WHEN g > 1 THEN g - 1 END, 't' || g FROM generate_series(1, 2000) g;
		INSERT INTO app.big SELECT g, 1 + g % 50, g % 97, repeat('p', 40) FROM generate_series(1, ` + strconv.Itoa(bigRows) + `) g`)
	e.tgtExec(`INSERT INTO app.local_note VALUES (1, NULL, 'a note')`)
}

// schemaDefs returns, one line each, every constraint (with whether it is
// validated), index (with its replica identity mark) and replica identity
// setting of the target's schema app: what must be the same before the
// copy and after.
func schemaDefs(t *testing.T, e *env) string {
	t.Helper()
	var s string
	err := e.Tgt.QueryRow(t.Context(), `
SELECT coalesce(string_agg(d, E'\n' ORDER BY d), '') FROM (
  SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) || ' validated=' || convalidated AS d
    FROM pg_constraint WHERE connamespace = 'app'::regnamespace
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(indexrelid) || ' replident=' || indisreplident || ' valid=' || indisvalid
    FROM pg_index WHERE indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'app'::regnamespace)
  UNION ALL
  SELECT 'table ' || oid::regclass::text || ' replident=' || relreplident::text FROM pg_class WHERE relnamespace = 'app'::regnamespace AND relkind = 'r'
) x`).Scan(&s)
	if err != nil {
		t.Fatalf("target definitions: %v", err)
	}
	return s
}

// indexOIDs returns the OIDs of the indexes of a target table, by name.
func indexOIDs(t *testing.T, e *env, table string) string {
	t.Helper()
	var s string
	if err := e.Tgt.QueryRow(t.Context(), `SELECT coalesce(string_agg(indexrelid::regclass::text || '=' || indexrelid::text, ',' ORDER BY 1), '')
		FROM pg_index WHERE indrelid = $1::regclass`, table).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func sameDefs(t *testing.T, what, before, after string) {
	t.Helper()
	if before != after {
		t.Fatalf("%s: the target's definitions differ from the user's:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
}

// TestSetAsideUserTables: the copy into the user's empty tables makes
// their keys and indexes again after the rows (new index OIDs: without
// the fix the copy maintains the original ones), under the same names and
// definitions, foreign keys into and out of them included; --keep-indexes
// leaves them in place; the copied rows then replicate.
func TestSetAsideUserTables(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	loadUserSchema(e, 5000)
	before := schemaDefs(t, e)
	oids := map[string]string{}
	for _, tb := range []string{"app.parent", "app.child", "app.big", "app.local_note"} {
		oids[tb] = indexOIDs(t, e, tb)
	}
	cfg := e.config("app.parent", "app.child", "app.big")
	e.catchUp(cfg)
	sameDefs(t, "after the copy", before, schemaDefs(t, e))
	for _, tb := range []string{"app.parent", "app.child", "app.big"} {
		if indexOIDs(t, e, tb) == oids[tb] {
			t.Errorf("%s: its indexes are the ones it had (%s): not set aside for the copy", tb, oids[tb])
		}
	}
	if got := indexOIDs(t, e, "app.local_note"); got != oids["app.local_note"] {
		t.Errorf("app.local_note, not copied, had its indexes made again: %s, was %s", got, oids["app.local_note"])
	}
	var left int
	if err := e.Tgt.QueryRow(t.Context(), `SELECT count(*) FROM repstream.deferred_ddl`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("deferred_ddl after the run: %d rows (%v)", left, err)
	}
	e.srcExec(`UPDATE app.child SET tag = tag || 'x' WHERE id < 10; DELETE FROM app.big WHERE id < 100; INSERT INTO app.parent VALUES (51, 'code51', NULL, 3)`)
	e.catchUp(cfg)
	e.assertSame("app.parent", "id")
	e.assertSame("app.child", "id")
	e.assertSame("app.big", "id")

	t.Run("keep-indexes", func(t *testing.T) {
		e := newEnv(t)
		loadUserSchema(e, 100)
		oids := indexOIDs(t, e, "app.big")
		cfg := e.config("app.parent", "app.child", "app.big")
		cfg.KeepIndexes = true
		e.catchUp(cfg)
		if got := indexOIDs(t, e, "app.big"); got != oids {
			t.Errorf("--keep-indexes: app.big's indexes were made again: %s, were %s", got, oids)
		}
		e.assertSame("app.big", "id")
	})

	// A target table that a publication of the target publishes (the
	// target is a source too, as in two replications in opposite
	// directions) keeps its key: without it its UPDATEs and DELETEs there
	// would fail during the copy.
	t.Run("published on the target", func(t *testing.T) {
		e := newEnv(t)
		loadUserSchema(e, 100)
		e.tgtExec(`CREATE PUBLICATION target_pub FOR TABLE app.big`)
		big, child := indexOIDs(t, e, "app.big"), indexOIDs(t, e, "app.child")
		e.catchUp(e.config("app.parent", "app.child", "app.big"))
		if got := indexOIDs(t, e, "app.big"); got != big {
			t.Errorf("app.big, published on the target, had its keys and indexes set aside: %s, were %s", got, big)
		}
		if got := indexOIDs(t, e, "app.child"); got == child {
			t.Errorf("app.child, not published on the target, kept its indexes (%s): not set aside", got)
		}
		e.assertSame("app.big", "id")
	})
}

// startKilledInCopy starts the binary and kills it (SIGKILL) while the
// target runs the COPY of table, and checks that table's primary key was
// set aside then.
func startKilledInCopy(t *testing.T, e *env, argv []string, table string) {
	t.Helper()
	cmd := exec.Command(testbin.Repstream(t), argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.killInCopy(cmd, &stderr, "COPY %"+table+"%")
	if strings.Contains(stderr.String(), `msg="copied table" table=app.big`) {
		t.Fatalf("the copy of app.big completed before the kill: the test interrupts nothing")
	}
	pgtest.WaitFor(t, "the killed COPY to end on the target", time.Minute, func() (bool, error) {
		var n int64
		err := e.Tgt.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'COPY %big%'`).Scan(&n)
		return n == 0, err
	})
	var pk bool
	if err := e.Tgt.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'app.big'::regclass AND contype = 'p')`).Scan(&pk); err != nil {
		t.Fatal(err)
	}
	if pk {
		t.Fatalf("app.big kept its primary key during its copy: not set aside\n%s", tail(stderr.String(), 30))
	}
}

// TestSetAsideKilledMidCopy: kill -9 in the middle of the copy leaves the
// user's table without its keys (they are recorded on the target); the
// next run completes the copy and makes them again as they were, and so
// does `repstream drop` instead (emptying the part-copied table).
func TestSetAsideKilledMidCopy(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, then := range []string{"run", "drop"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel() // own databases
			e := newEnv(t)
			loadUserSchema(e, 300000)
			before := schemaDefs(t, e)
			cfg := e.config("app.parent", "app.child", "app.big")
			// One worker: app.big, first by name, copies alone, in one piece.
			startKilledInCopy(t, e, args(cfg, "--snapshot-workers=1", "--snapshot-range-size", "1GB"), "big")
			if then == "run" {
				log, _, err := runBinary(t, 3*time.Minute, args(cfg, "--until-caught-up")...)
				if err != nil {
					t.Fatalf("second run: %v\n%s", err, tail(log, 30))
				}
				sameDefs(t, "after a kill -9 in the copy and a second run", before, schemaDefs(t, e))
				e.assertSame("app.big", "id")
				e.assertSame("app.child", "id")
				return
			}
			if err := engine.Drop(t.Context(), cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t)); err != nil {
				t.Fatalf("drop: %v", err)
			}
			sameDefs(t, "after a kill -9 in the copy and drop", before, schemaDefs(t, e))
			if n := e.count(e.Tgt, `SELECT count(*) FROM app.big`); n != 0 {
				t.Errorf("drop left %d rows of the part-copied app.big", n)
			}
		})
	}
}

// TestSetAsideFailedBuild: a key the copied rows break cannot be made
// again: the run fails, and leaves the table as the user defined it
// (emptied: the rows were the copy's); the next run, the rows fixed on
// the source, copies it and makes it. An index the rows break is recorded
// as not built (repstream.unbuilt_indexes) and the run goes on.
func TestSetAsideFailedBuild(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE dup (id int NOT NULL, v text, w int); ALTER TABLE dup REPLICA IDENTITY FULL;
		INSERT INTO dup SELECT g % 1000, 'v' || g, g % 10 FROM generate_series(1, 1500) g;`)
	e.tgtExec(`CREATE TABLE dup (id int PRIMARY KEY, v text NOT NULL, w int);
		CREATE UNIQUE INDEX dup_w ON dup (w);
		CREATE INDEX dup_v ON dup (v)`)
	before := schemaDefs2(t, e, "dup")
	cfg := e.config("public.dup")
	if _, err := e.tryCatchUp(cfg); err == nil || !strings.Contains(err.Error(), "dup_pkey") {
		t.Fatalf("a primary key the rows break: the run did not fail on it: %v", err)
	}
	sameDefs(t, "after a failed build", before, schemaDefs2(t, e, "dup"))
	if n := e.count(e.Tgt, `SELECT count(*) FROM dup`); n != 0 {
		t.Errorf("the failed build left %d rows", n)
	}
	e.srcExec(`DELETE FROM dup WHERE ctid IN (SELECT ctid FROM (SELECT ctid, row_number() OVER (PARTITION BY id) AS n FROM dup) x WHERE n > 1)`)
	e.catchUp(cfg)
	e.assertSame("dup", "id")
	var unbuilt string
	if err := e.Tgt.QueryRow(t.Context(), `SELECT coalesce(string_agg(index_name, ','), '') FROM repstream.unbuilt_indexes WHERE slot = $1`, cfg.Slot).Scan(&unbuilt); err != nil {
		t.Fatal(err)
	}
	if unbuilt != "dup_w" {
		t.Errorf("indexes recorded as not built: %q, want dup_w", unbuilt)
	}
	after := schemaDefs2(t, e, "dup")
	var want []string
	for _, l := range strings.Split(before, "\n") {
		if l != "index CREATE UNIQUE INDEX dup_w ON public.dup USING btree (w) replident=false valid=true" {
			want = append(want, l)
		}
	}
	if after != strings.Join(want, "\n") {
		t.Errorf("after the second run:\n%s\nwant (the user's, less dup_w):\n%s", after, strings.Join(want, "\n"))
	}
}

// schemaDefs2 is schemaDefs for one table of schema public.
func schemaDefs2(t *testing.T, e *env, table string) string {
	t.Helper()
	var s string
	err := e.Tgt.QueryRow(t.Context(), `
SELECT coalesce(string_agg(d, E'\n' ORDER BY d), '') FROM (
  SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) || ' validated=' || convalidated AS d FROM pg_constraint WHERE conrelid = $1::regclass
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(indexrelid) || ' replident=' || indisreplident || ' valid=' || indisvalid FROM pg_index WHERE indrelid = $1::regclass
) x`, table).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSetAsideFailedFirstStart: a first start whose copy fails (a row the
// target's CHECK constraint refuses) leaves the user's tables as they
// were defined, at once; so does `repstream drop` after it.
func TestSetAsideFailedFirstStart(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	loadUserSchema(e, 2000)
	e.tgtExec(`ALTER TABLE app.big DROP CONSTRAINT big_v_check; ALTER TABLE app.big ADD CONSTRAINT big_v_check CHECK (v < 90)`)
	before := schemaDefs(t, e)
	cfg := e.config("app.parent", "app.child", "app.big")
	cfg.SnapshotWorkers = 1 // app.big first: the copy fails before the others start
	if _, err := e.tryCatchUp(cfg); err == nil || !strings.Contains(err.Error(), "big_v_check") {
		t.Fatalf("the copy did not fail on the CHECK constraint: %v", err)
	}
	sameDefs(t, "after a failed first start", before, schemaDefs(t, e))
	if err := engine.Drop(t.Context(), cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t)); err != nil {
		t.Fatalf("drop: %v", err)
	}
	sameDefs(t, "after drop", before, schemaDefs(t, e))
}
