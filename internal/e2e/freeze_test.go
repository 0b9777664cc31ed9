package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/syncbuf"
	"github.com/repstream/repstream/internal/testbin"
)

// catchUpLogged is catchUp with the run's log (info and above) in logs.
func (e *env) catchUpLogged(cfg config.Config, logs *syncbuf.Buffer) {
	e.t.Helper()
	cfg.UntilCaughtUp = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := engine.New(cfg, capturingLogger(logs), stats.NewRegistry()).Run(ctx); err != nil {
		e.t.Fatalf("run --until-caught-up: %v\n%s", err, logs.Tail(40))
	}
}

// killInCopy kills cmd (SIGKILL) as soon as the target runs a COPY whose
// text is LIKE like. Should none come within a minute, the test fails and
// cmd is killed then, its log shown.
func (e *env) killInCopy(cmd *exec.Cmd, stderr *bytes.Buffer, like string) {
	e.t.Helper()
	killed := false
	kill := func() {
		killed = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	e.t.Cleanup(func() {
		if !killed {
			kill()
			e.t.Logf("repstream's log:\n%s", tail(stderr.String(), 30))
		}
	})
	// Often: the COPY must be caught before it completes.
	pgtest.WaitForEvery(e.t, "a COPY like "+like+" on the target", time.Minute, 2*time.Millisecond, func() (bool, error) {
		var copying bool
		err := e.Tgt.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
			AND query LIKE $1 AND state = 'active')`, like).Scan(&copying)
		return copying, err
	})
	kill()
}

// copiedFrozen returns the "frozen" attribute of the log's "copied table"
// line for public.table ("" when there is none).
func copiedFrozen(log, table string) string {
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `msg="copied table"`) || !strings.Contains(line, " table=public."+table+" ") {
			continue
		}
		if _, after, ok := strings.Cut(line, " frozen="); ok {
			return strings.Fields(after)[0]
		}
	}
	return ""
}

// noFreezeReason returns the reason the log gives for copying public.table
// without FREEZE ("" when it does not).
func noFreezeReason(log, table string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, `msg="copying without FREEZE"`) && strings.Contains(line, " table=public."+table+" ") {
			if _, after, ok := strings.Cut(line, " reason="); ok {
				return strings.TrimSpace(after)
			}
			return "?"
		}
	}
	return ""
}

// frozenPages returns the target table's heap pages and how many of them
// the visibility map marks all-frozen (pg_visibility).
func (e *env) frozenPages(table string) (pages, frozen int64) {
	e.t.Helper()
	e.tgtExec(`CREATE EXTENSION IF NOT EXISTS pg_visibility`)
	err := e.Tgt.QueryRow(context.Background(), `SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint,
		(SELECT all_frozen FROM pg_visibility_map_summary($1::regclass))`, table).Scan(&pages, &frozen)
	if err != nil {
		e.t.Fatalf("visibility map of %s: %v", table, err)
	}
	return pages, frozen
}

// freezeRows rows of (int, text of freezePad bytes) make a table of about
// 10 MiB: above the size from which the copy uses COPY FREEZE (8 MiB).
const (
	freezeRows = 80000
	freezePad  = 100
)

// fillFreezable creates table (id int PRIMARY KEY, v text NOT NULL) on both
// sides and fills it on the source with freezeRows rows.
func (e *env) fillFreezable(table string) {
	e.t.Helper()
	e.both(fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table))
	e.srcExec(fmt.Sprintf(`INSERT INTO %s SELECT g, repeat(chr(97 + g %% 26), %d) FROM generate_series(1, %d) g`, table, freezePad, freezeRows))
}

// TestCopyFreeze: the initial copy writes a table copied in one piece with
// COPY FREEZE (after a TRUNCATE in its transaction): every page of it is
// all-frozen in the target's visibility map right after the copy, and no
// tuple of it needs freezing (pg_check_frozen). A table large enough to
// be copied in ranges is copied the plain way (its ranges are transactions
// of their own), and so is a tiny one (FREEZE's fixed cost is not worth
// it). All equal the source row for row, after streaming too.
func TestCopyFreeze(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.fillFreezable("small")
	e.both(`CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, pad text);
		CREATE TABLE tiny (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO big SELECT g, g % 97, repeat('b', 150) FROM generate_series(1, 120000) g`)
	e.srcExec(`INSERT INTO tiny SELECT g, 'tiny' FROM generate_series(1, 300) g`)
	cfg := e.config("public.small", "public.big", "public.tiny")
	cfg.SnapshotWorkers = 2
	cfg.SnapshotRangeSize = 16 << 20 // big (~22 MB) in ranges; small (~10 MB) in one piece

	var logs syncbuf.Buffer
	e.catchUpLogged(cfg, &logs)
	if !copiedInRanges(logs.String(), "big") || copiedInRanges(logs.String(), "small") {
		t.Fatalf("want big in ranges and small in one piece:\n%s", logs.Tail(40))
	}
	if f := copiedFrozen(logs.String(), "small"); f != "true" {
		t.Errorf("small copied with frozen=%q, want true:\n%s", f, logs.Tail(40))
	}
	if f := copiedFrozen(logs.String(), "big"); f != "false" {
		t.Errorf("big (in ranges) copied with frozen=%q, want false", f)
	}
	if f := copiedFrozen(logs.String(), "tiny"); f != "false" {
		t.Errorf("tiny copied with frozen=%q, want false", f)
	}
	pages, frozen := e.frozenPages("small")
	if pages < 1024 || frozen != pages {
		t.Errorf("small: %d of its %d pages all-frozen on the target after the copy, want all", frozen, pages)
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM pg_check_frozen('small')`); n != 0 {
		t.Errorf("small: %d tuples not frozen in pages marked all-frozen", n)
	}
	e.assertSame("small", "id")
	e.assertSame("big", "id")
	e.assertSame("tiny", "id")

	// Streaming goes on as usual into the frozen table.
	e.srcExec(`UPDATE small SET v = v || ' updated' WHERE id % 7 = 0`)
	e.srcExec(`DELETE FROM small WHERE id % 11 = 0`)
	e.srcExec(`INSERT INTO small SELECT g, 'new' FROM generate_series(100001, 100100) g`)
	e.catchUp(cfg)
	e.assertSame("small", "id")
}

// TestCopyFreezeFallback: a table whose TRUNCATE the target would refuse —
// one a foreign key of another target table references —, one whose
// TRUNCATE would have effects beyond it — a trigger ENABLE ALWAYS on
// TRUNCATE, a target publication that sends TRUNCATEs on — and one another
// target session holds a lock on (an open transaction that read it: the
// lock the TRUNCATE needs is not had within its timeout) are copied with a
// plain COPY, saying why; all arrive whole, and the trigger never fired.
func TestCopyFreezeFallback(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	for _, tb := range []string{"referenced", "busy", "triggered", "republished"} {
		e.fillFreezable(tb)
	}
	e.tgtExec(`CREATE TABLE referencing (id int PRIMARY KEY, ref int REFERENCES referenced)`)
	e.tgtExec(`CREATE TABLE truncated (n int);
		CREATE FUNCTION note_truncate() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO truncated VALUES (1); RETURN NULL; END$$;
		CREATE TRIGGER on_truncate AFTER TRUNCATE ON triggered FOR EACH STATEMENT EXECUTE FUNCTION note_truncate();
		ALTER TABLE triggered ENABLE ALWAYS TRIGGER on_truncate`)
	e.tgtExec(`CREATE PUBLICATION onward FOR TABLE republished`)

	// A target session reading busy, in a transaction it keeps open.
	reader, err := pgx.Connect(context.Background(), e.tgt.DSN(e.tgtDB))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(context.Background())
	if _, err := reader.Exec(context.Background(), `BEGIN; SELECT count(*) FROM busy`); err != nil {
		t.Fatal(err)
	}

	cfg := e.config("public.referenced", "public.busy", "public.triggered", "public.republished")
	// The tables as the user made them: set aside for the copy (issue 31),
	// referenced would lose the foreign key that keeps it from FREEZE.
	cfg.KeepIndexes = true
	var logs syncbuf.Buffer
	e.catchUpLogged(cfg, &logs)
	if _, err := reader.Exec(context.Background(), `COMMIT`); err != nil {
		t.Fatal(err)
	}
	if r := noFreezeReason(logs.String(), "referenced"); !strings.Contains(r, "foreign key of public.referencing") {
		t.Errorf("referenced: reason for no FREEZE %q:\n%s", r, logs.Tail(40))
	}
	if r := noFreezeReason(logs.String(), "busy"); !strings.Contains(r, "lock on the target table not had") {
		t.Errorf("busy: reason for no FREEZE %q:\n%s", r, logs.Tail(40))
	}
	if r := noFreezeReason(logs.String(), "triggered"); !strings.Contains(r, "trigger on_truncate") {
		t.Errorf("triggered: reason for no FREEZE %q", r)
	}
	if r := noFreezeReason(logs.String(), "republished"); !strings.Contains(r, "publication onward") {
		t.Errorf("republished: reason for no FREEZE %q", r)
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM truncated`); n != 0 {
		t.Errorf("the ENABLE ALWAYS trigger on TRUNCATE fired %d times", n)
	}
	for _, tb := range []string{"referenced", "busy", "triggered", "republished"} {
		if f := copiedFrozen(logs.String(), tb); f != "false" {
			t.Errorf("%s copied with frozen=%q, want false", tb, f)
		}
		e.assertSame(tb, "id")
	}
}

// TestCopyFreezeNoTruncatePrivilege: snapshot.Copy as a target role
// without the TRUNCATE privilege (which `run` itself asks for, so Copy is
// called directly) copies with a plain COPY; and a target table that has
// rows when Copy starts (no caller emptied it) keeps them: the TRUNCATE of
// COPY FREEZE never drops a row it did not write.
func TestCopyFreezeNoTruncatePrivilege(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.fillFreezable("notrunc")
	e.fillFreezable("hasrows")
	e.tgtExec(`INSERT INTO hasrows VALUES (-1, 'kept')`)
	r := newLPRoles(e)
	e.tgtParamACL(`GRANT SET ON PARAMETER session_replication_role TO ` + r.tgt)
	e.tgtExec(`GRANT SELECT, INSERT ON notrunc TO ` + r.tgt)
	e.tgtExec(`GRANT SELECT, INSERT, TRUNCATE ON hasrows TO ` + r.tgt)

	ctx := context.Background()
	snap := e.exportSnapshot(ctx)
	var logs syncbuf.Buffer
	res, err := snapshot.Copy(ctx, snapshot.Options{
		SourceDSN: e.src.DSN(e.srcDB), SnapshotName: snap, Workers: 2, Binary: true,
		TargetDSN: fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", e.tgt.Port(), r.tgt, e.tgtDB),
		Tables:    []schema.TableName{{Schema: "public", Name: "notrunc"}, {Schema: "public", Name: "hasrows"}},
		Logger:    capturingLogger(&logs),
	})
	if err != nil {
		t.Fatalf("copy: %v\n%s", err, logs.Tail(20))
	}
	if res.Rows != 2*freezeRows {
		t.Errorf("copied %d rows, want %d", res.Rows, 2*freezeRows)
	}
	if r := noFreezeReason(logs.String(), "notrunc"); !strings.Contains(r, "lacks the TRUNCATE privilege") {
		t.Errorf("notrunc: reason for no FREEZE %q:\n%s", r, logs.Tail(20))
	}
	if !strings.Contains(logs.String(), `msg="copying without FREEZE: the target table has rows`) || copiedFrozen(logs.String(), "hasrows") != "false" {
		t.Errorf("hasrows: not copied the plain way:\n%s", logs.Tail(20))
	}
	e.assertSame("notrunc", "id")
	if n := e.count(e.Tgt, `SELECT count(*) FROM hasrows WHERE id = -1 AND v = 'kept'`); n != 1 {
		t.Fatalf("the row hasrows had before the copy is gone")
	}
	e.tgtExec(`DELETE FROM hasrows WHERE id = -1`)
	e.assertSame("hasrows", "id")
}

// TestKillDuringFreezeCopy: the engine killed (SIGKILL) while it copies a
// table with COPY FREEZE leaves nothing of that transaction — neither its
// TRUNCATE nor a row — and the next run copies the table again, frozen,
// equal to the source row for row.
func TestKillDuringFreezeCopy(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE killed (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	e.srcExec(`INSERT INTO killed SELECT g, g % 13, repeat('k', 60) FROM generate_series(1, 250000) g`)
	cfg := e.config("public.killed")
	cmd := exec.Command(testbin.Repstream(t), args(cfg, "--snapshot-range-size", "1GB")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once the target runs the COPY FREEZE.
	ctx := context.Background()
	e.killInCopy(cmd, &stderr, "COPY %killed%FREEZE%")
	if strings.Contains(stderr.String(), `msg="copied table"`) {
		t.Fatalf("the copy completed before the kill: the test interrupts nothing (make the table larger)")
	}
	// The target's backend notices its client is gone and rolls back.
	pgtest.WaitFor(t, "the killed COPY to end on the target", time.Minute, func() (bool, error) {
		var n int64
		err := e.Tgt.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'COPY %killed%'`).Scan(&n)
		return n == 0, err
	})
	if n := e.count(e.Tgt, `SELECT count(*) FROM killed`); n != 0 {
		t.Fatalf("the killed COPY FREEZE left %d rows", n)
	}

	log, _, err := runBinary(t, 3*time.Minute, args(cfg, "--until-caught-up")...)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, tail(log, 30))
	}
	if f := copiedFrozen(log, "killed"); f != "true" {
		t.Errorf("the second run copied killed with frozen=%q, want true:\n%s", f, tail(log, 30))
	}
	if pages, frozen := e.frozenPages("killed"); frozen != pages {
		t.Errorf("killed: %d of %d pages all-frozen", frozen, pages)
	}
	e.assertSame("killed", "id")
}
