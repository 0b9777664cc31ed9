package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
)

// TestDDLRelationTypeAltered: without the event trigger (--ddl=relation)
// nothing in the stream says that an enum or a composite type a table
// holds was altered on the source, and the target's rows silently
// differed: a composite's attributes dropped and added again (values
// travel as text by position) filled the other fields, and a renamed enum
// label stayed the old one in the target's rows. The publication poll now
// compares the source's enums and composites between polls (and with the
// target's at the first poll and at the end of a run that caught up): the
// run stops naming the type and the table, which it records for a new
// copy; once the target's type is the source's, the next start copies
// it anew. Labels only added to an enum stop nothing; a label renamed and
// its old name added back is told from them by its pg_enum oid.
func TestDDLRelationTypeAltered(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TYPE mood AS ENUM ('a', 'b'); CREATE TYPE pt AS (x int, y int)`)
	e.srcExec(`CREATE TABLE ty (id int PRIMARY KEY, m mood, p pt, ps pt[]); INSERT INTO ty VALUES (1, 'a', '(1,2)', NULL), (2, 'b', '(3,4)', '{"(5,6)"}');
		CREATE TABLE other (id int PRIMARY KEY, v text); INSERT INTO other VALUES (1, 'x')`)
	cfg := e.config("public.ty", "public.other")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	cfg.PublicationPoll = 200 * time.Millisecond
	e.catchUp(cfg)

	runInBackground := func() (chan error, context.CancelFunc) {
		e.waitSlotReleased(cfg.Slot)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- engine.New(cfg, testLogger(t), nil).Run(ctx) }()
		e.waitStreaming(cfg.Slot)
		return done, cancel
	}
	stopsNaming := func(done chan error, what ...string) {
		t.Helper()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("the run ended without an error; want one naming %q", what)
			}
			for _, w := range what {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("the run's error does not name %q: %v", w, err)
				}
			}
			t.Logf("stopped: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatalf("the run went on after the type was altered on the source (want a stop naming %q)", what)
		}
		if st := e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE table_name = 'ty' AND state <> 'ready'"); st != 1 {
			t.Errorf("ty is not recorded for a new copy after the stop")
		}
	}

	// Labels added (on the target too): the run goes on.
	done, cancel := runInBackground()
	e.tgtExec(`ALTER TYPE mood ADD VALUE 'c'`)
	e.srcExec(`ALTER TYPE mood ADD VALUE 'c'`)
	e.srcExec(`INSERT INTO ty VALUES (3, 'c', '(7,8)', NULL)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	time.Sleep(3 * time.Second) // two polls at least since the start (tablesync polls every 2 s), so that the next change is one between polls
	select {
	case err := <-done:
		t.Fatalf("the run stopped after labels were added to an enum: %v", err)
	default:
	}

	// A composite's attribute dropped and added again: (y, x) now.
	e.srcExec(`ALTER TYPE pt DROP ATTRIBUTE x; ALTER TYPE pt ADD ATTRIBUTE x int`)
	e.srcExec(`INSERT INTO ty VALUES (4, 'a', ROW(10, 11), ARRAY[ROW(12, 13)::pt]); UPDATE other SET v = 'y'`)
	stopsNaming(done, "public.pt", "public.ty", "(y integer, x integer)")
	cancel()
	e.tgtExec(`ALTER TYPE pt DROP ATTRIBUTE x; ALTER TYPE pt ADD ATTRIBUTE x int`)
	e.catchUp(cfg)
	e.assertSame("ty", "id")
	e.assertSame("other", "id")

	// An enum label renamed while a run streams, and its old name added
	// back: the labels' names alone look as if one was only added.
	done, cancel = runInBackground()
	time.Sleep(3 * time.Second) // a poll has looked
	e.srcExec(`ALTER TYPE mood RENAME VALUE 'a' TO 'a2'; ALTER TYPE mood ADD VALUE 'a' BEFORE 'b'`)
	e.srcExec(`INSERT INTO ty VALUES (5, 'b', NULL, NULL)`)
	stopsNaming(done, "public.mood", "public.ty", "(a2, a, b, c)")
	cancel()
	e.tgtExec(`ALTER TYPE mood RENAME VALUE 'a' TO 'a2'; ALTER TYPE mood ADD VALUE 'a' BEFORE 'b'`)
	e.catchUp(cfg)
	e.assertSame("ty", "id")

	// Renamed just before a run that ends caught up (its poll never
	// looks): the end compares the target's type.
	e.srcExec(`ALTER TYPE mood RENAME VALUE 'b' TO 'b2'; INSERT INTO other VALUES (2, 'z')`)
	if _, err := e.tryCatchUp(cfg); err == nil || !strings.Contains(err.Error(), "public.mood") {
		t.Fatalf("a run that caught up after an enum label was renamed: %v", err)
	}
	e.tgtExec(`ALTER TYPE mood RENAME VALUE 'b' TO 'b2'`)
	e.catchUp(cfg)
	e.assertSame("ty", "id")
	e.assertSame("other", "id")
}
