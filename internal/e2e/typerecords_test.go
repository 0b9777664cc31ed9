package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestRestartStopsAtTargetTypeChanged: a composite type a replicated
// column holds, changed by hand on the target between two runs (an
// attribute dropped and another added, one retyped, one renamed). The
// restart (--ddl=true) took any difference for a schema change still in
// the stream and only warned, and the source's '(1,2)' landed as
// (x=1, z=2). The target records each type as repstream last made or saw
// it (repstream.types): the restart stops before anything is applied,
// naming the type, the column holding it, what was recorded and what the
// target has; once the type is as it was, the run goes on.
func TestRestartStopsAtTargetTypeChanged(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, c := range []struct{ name, change, back, has string }{
		{"drop-add", `ALTER TYPE pt DROP ATTRIBUTE y, ADD ATTRIBUTE z int`, `ALTER TYPE pt DROP ATTRIBUTE z, ADD ATTRIBUTE y int`, `"z" integer`},
		// PostgreSQL refuses ALTER ATTRIBUTE ... TYPE of a type a column
		// holds: dropped and added again, of another type, at the end.
		{"retype", `ALTER TYPE pt DROP ATTRIBUTE x, ADD ATTRIBUTE x text`, `ALTER TYPE pt DROP ATTRIBUTE x, DROP ATTRIBUTE y, ADD ATTRIBUTE x int, ADD ATTRIBUTE y int`, `"y" integer, "x" text`},
		{"rename", `ALTER TYPE pt RENAME ATTRIBUTE y TO z`, `ALTER TYPE pt RENAME ATTRIBUTE z TO y`, `"z" integer`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TYPE pt AS (x int, y int); CREATE TABLE tp (id int PRIMARY KEY, p pt)`)
			e.srcExec(`INSERT INTO tp VALUES (1, ROW(1, 2))`)
			cfg := e.config("public.tp")
			e.catchUp(cfg)
			e.tgtExec(c.change)
			e.srcExec(`INSERT INTO tp VALUES (2, ROW(3, 4))`)
			e.mustFail(cfg, `"public"."pt"`, `public.tp`, `"p"`, `"x" integer, "y" integer`, c.has, "tables add --truncate")
			if n := e.count(e.Tgt, `SELECT count(*) FROM tp WHERE id = 2`); n != 0 {
				t.Errorf("a row was applied into the changed type")
			}
			// As it was, with the values the hand change dropped.
			e.tgtExec(c.back)
			e.tgtExec(`UPDATE tp SET p = ROW(1, 2) WHERE id = 1`)
			e.catchUp(cfg)
			e.assertSame("(SELECT id, (p).x, (p).y FROM tp)", "id")
		})
	}
}

// TestTypeChangeStillInStream: a composite type changed on the source
// while no engine ran differs from the target's at the restart: that
// difference is the schema change still in the stream (the target's type
// is as repstream recorded it), and the run goes on and ends equal; so
// does the next, with the record following the change. An enum label
// renamed by hand on the target is refused (at the start: the record, and
// at the row: its label is not there).
func TestTypeChangeStillInStream(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TYPE pt AS (x int, y int); CREATE TYPE mood AS ENUM ('ok', 'sad');
		CREATE TABLE tp (id int PRIMARY KEY, p pt, m mood)`)
	e.srcExec(`INSERT INTO tp VALUES (1, ROW(1, 2), 'ok')`)
	cfg := e.config("public.tp")
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO tp VALUES (2, ROW(3, 4), 'sad')`)
	e.srcExec(`ALTER TYPE pt ADD ATTRIBUTE z int; ALTER TYPE mood ADD VALUE 'glad'`)
	e.srcExec(`INSERT INTO tp VALUES (3, ROW(5, 6, 7), 'glad')`)
	e.catchUp(cfg)
	e.assertSame("(SELECT id, (p).x, (p).y, (p).z, m FROM tp)", "id")
	e.srcExec(`INSERT INTO tp VALUES (4, ROW(8, 9, 10), 'ok')`)
	e.catchUp(cfg)
	e.assertSame("(SELECT id, (p).x, (p).y, (p).z, m FROM tp)", "id")

	e.tgtExec(`ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'`)
	e.srcExec(`INSERT INTO tp VALUES (5, ROW(1, 1, 1), 'sad')`)
	e.mustFail(cfg, `"public"."mood"`, `'sad'`, `'blue'`)
	e.tgtExec(`ALTER TYPE mood RENAME VALUE 'blue' TO 'sad'`)
	e.catchUp(cfg)
	e.assertSame("(SELECT id, (p).x, (p).y, (p).z, m FROM tp)", "id")
}

// TestTypeChangedMidRun: a composite type changed by hand on the target
// while the engine runs is not taken into the record by the next schema
// change of the type: the run stops at that change, naming the type.
func TestTypeChangedMidRun(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TYPE pt AS (x int, y int); CREATE TABLE tp (id int PRIMARY KEY, p pt)`)
	e.srcExec(`INSERT INTO tp VALUES (1, ROW(1, 2))`)
	cfg := e.config("public.tp")
	e.catchUp(cfg)
	stop := e.start(cfg)
	e.srcExec(`INSERT INTO tp VALUES (2, ROW(3, 4))`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	e.tgtExec(`ALTER TYPE pt DROP ATTRIBUTE y, ADD ATTRIBUTE z int`)
	e.srcExec(`ALTER TYPE pt ADD ATTRIBUTE w int`)
	// The run stops at the change (or, with nothing to stop it, applies
	// it): wait for the slot to pass it or for the stop, a few seconds.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if e.count(e.Tgt, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'pt'::regclass AND attname = 'w' AND NOT attisdropped`) > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	err := stop()
	if err == nil || !strings.Contains(err.Error(), `"public"."pt"`) {
		t.Fatalf("the run went on past a type changed by hand on the target (err %v)", err)
	}
	wantInError(t, err, `"x" integer, "y" integer`, `"z" integer`)
}
