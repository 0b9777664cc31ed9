package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/cli"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/slotstatus"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// errorsCLI runs `repstream errors args...` against cfg's target and slot
// in this process and returns its output; it fails the test unless the exit
// code is wantCode.
func (e *env) errorsCLI(cfg config.Config, wantCode int, args ...string) string {
	e.t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{"errors"}, args[0], "--target", cfg.Target, "--slot", cfg.Slot)
	full = append(full, args[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := cli.Run(ctx, full, &out, &errOut); code != wantCode {
		e.t.Fatalf("repstream %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, out.String(), errOut.String())
	}
	return out.String() + errOut.String()
}

// parked lists the slot's parked entries through `errors list --format json`.
func (e *env) parked(cfg config.Config) []errqueue.Entry {
	e.t.Helper()
	var entries []errqueue.Entry
	out := e.errorsCLI(cfg, 0, "list", "--format", "json")
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		e.t.Fatalf("errors list --format json: %v\n%s", err, out)
	}
	return entries
}

var skipCommand = regexp.MustCompile(`repstream errors skip --slot (\S+) --lsn ([0-9A-F]+/[0-9A-F]+)`)

// TestConflictStopAndSkipLSN: with --on-error stop (the default), an update
// of a row the target lacks stops the run with an error naming the table,
// the key, update_missing and the source transaction's LSNs, and printing
// the skip command; the transactions before it in its group are applied,
// none after it. After `errors skip --lsn` a rerun skips it (recorded in
// the error queue as skipped) and applies the rest.
func TestConflictStopAndSkipLSN(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	e.srcExec(`INSERT INTO t SELECT g, g FROM generate_series(1, 20) g`)
	cfg := e.config("public.t")
	cfg.ApplyParallelism = 4
	e.catchUp(cfg)
	e.tgtExec(`DELETE FROM t WHERE id = 7`) // the target diverged

	for i := 21; i <= 25; i++ { // before the bad one: grouped with it in the backlog
		e.srcExec(fmt.Sprintf(`INSERT INTO t VALUES (%d, %d)`, i, i))
	}
	after := e.srcLSN()
	e.srcExec(`UPDATE t SET v = v + 100 WHERE id = 7`)
	upto := e.srcLSN()
	for i := 30; i <= 34; i++ {
		e.srcExec(fmt.Sprintf(`INSERT INTO t VALUES (%d, %d)`, i, i))
	}

	err := e.mustFail(cfg, "update_missing", "apply update to public.t", "key (id)=(7)", "commit LSN", "end LSN", "repstream errors skip --slot "+cfg.Slot+" --lsn ")
	e.checkFailure(err, cfg.Slot, "public.t", failingTxn{after, upto})
	ce, ok := target.AsConflict(err)
	if !ok || ce.Kind != target.UpdateMissing || ce.Table != "public.t" || ce.Key != "(id)=(7)" || ce.EndLSN <= after || ce.EndLSN > upto || ce.CommitLSN >= ce.EndLSN {
		t.Fatalf("conflict = %+v, ok %v", ce, ok)
	}
	m := skipCommand.FindStringSubmatch(err.Error())
	if m == nil || m[2] != ce.EndLSN.String() {
		t.Fatalf("the error prints no skip command with the end LSN %s: %v", ce.EndLSN, err)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM t WHERE id BETWEEN 21 AND 25"); n != 5 {
		t.Errorf("%d of the 5 transactions before the conflict are on the target", n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM t WHERE id >= 30"); n != 0 {
		t.Errorf("%d transactions after the conflict are on the target (commit order full)", n)
	}

	out := e.errorsCLI(cfg, 0, "skip", "--lsn", m[2])
	if !strings.Contains(out, "skips the source transaction") {
		t.Errorf("errors skip --lsn: %s", out)
	}
	reg := e.catchUp(cfg)
	e.assertSame("(SELECT * FROM t WHERE id <> 7)", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM t WHERE id = 7"); n != 0 {
		t.Errorf("row 7 is on the target after its update was skipped")
	}
	all := e.errorsCLI(cfg, 0, "list", "--all")
	if !strings.Contains(all, "skip_lsn") || !strings.Contains(all, "skipped") || !strings.Contains(all, ce.EndLSN.String()) {
		t.Errorf("errors list --all does not show the skipped transaction:\n%s", all)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.skip_requests"); n != 0 {
		t.Errorf("%d skip requests left after the skip", n)
	}
	if n := counter(reg, "error_queue", "skipped_on_request"); n != 1 {
		t.Errorf("error_queue.skipped_on_request = %d, want 1", n)
	}
	e.catchUp(cfg) // and again: nothing to do, nothing fails
}

func counter(reg *stats.Registry, component, name string) int64 {
	c, ok := reg.Snapshot().Component(component)
	if !ok {
		return 0
	}
	return c.Counters[name]
}

// TestConflictPark: with --on-error park, under a stream of other
// transactions applied in parallel, an insert of a key the target already
// has (insert_exists), an update of a row the target lacks (update_missing)
// and a later update of that row (parked too: it conflicts because the
// first was parked) are parked; everything else is applied. `errors list`
// shows them with table, key and kind; once the target rows are mended,
// `errors retry --all` applies them, the queue is empty, and source and
// target are equal.
func TestConflictPark(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)`)
	e.srcExec(`INSERT INTO t SELECT g, g, 'n' || g FROM generate_series(1, 50) g`)
	cfg := e.config("public.t")
	cfg.ApplyParallelism, cfg.OnError = 4, config.OnErrorPark
	e.catchUp(cfg)
	e.tgtExec(`INSERT INTO t VALUES (1001, 0, 'only on the target')`)
	e.tgtExec(`DELETE FROM t WHERE id = 17`)

	reg := stats.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(t), reg).Run(ctx) }()
	var b strings.Builder
	for i := 0; i < 300; i++ {
		switch i {
		case 60:
			b.WriteString("INSERT INTO t VALUES (1001, 1, 'from the source'); COMMIT;\n")
		case 150:
			b.WriteString("UPDATE t SET v = v + 1000 WHERE id = 17; COMMIT;\n")
		case 220:
			b.WriteString("UPDATE t SET note = 'again' WHERE id = 17; COMMIT;\n")
		}
		id := 1 + i%50
		if id == 17 {
			id = 18
		}
		fmt.Fprintf(&b, "UPDATE t SET v = v + 1 WHERE id = %d; INSERT INTO t VALUES (%d, %d, 'stream'); COMMIT;\n", id, 2000+i, i)
	}
	e.srcExec("CREATE PROCEDURE stream() LANGUAGE plpgsql AS $$ BEGIN " + b.String() + " END $$")
	e.srcExec("CALL stream()")
	e.waitCaughtUp(cfg.Slot, 2*time.Minute)
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatalf("run: %v", err)
	}
	e.catchUp(cfg)

	entries := e.parked(cfg)
	if len(entries) != 3 {
		t.Fatalf("%d parked transactions, want 3: %+v", len(entries), entries)
	}
	want := []struct{ kind, key, op string }{
		{"insert_exists", "(id)=(1001)", "insert"},
		{"update_missing", "(id)=(17)", "update"},
		{"update_missing", "(id)=(17)", "update"},
	}
	for i, w := range want {
		got := entries[i]
		if got.Kind != w.kind || got.Key != w.key || got.Op != w.op || got.Table != "public.t" || got.State != "parked" || got.EndLSN == "" {
			t.Errorf("parked[%d] = %+v, want %s of %s", i, got, w.kind, w.key)
		}
	}
	text := e.errorsCLI(cfg, 0, "list")
	for _, s := range []string{"insert_exists", "update_missing", "public.t", "(id)=(1001)", "(id)=(17)"} {
		if !strings.Contains(text, s) {
			t.Errorf("errors list does not show %q:\n%s", s, text)
		}
	}
	show := e.errorsCLI(cfg, 0, "show", fmt.Sprint(entries[0].ID))
	if !strings.Contains(show, "from the source") || !strings.Contains(show, "insert public.t") {
		t.Errorf("errors show does not show the change's values:\n%s", show)
	}
	if n := counter(reg, "conflicts", "insert_exists"); n != 1 {
		t.Errorf("conflicts.insert_exists = %d, want 1", n)
	}
	if n := counter(reg, "conflicts", "update_missing"); n != 2 {
		t.Errorf("conflicts.update_missing = %d, want 2", n)
	}
	if n := counter(reg, "error_queue", "parked_txns"); n != 3 {
		t.Errorf("error_queue.parked_txns = %d, want 3", n)
	}
	// Everything else is applied: the table differs only in rows 17 and 1001.
	e.assertSame("(SELECT * FROM t WHERE id NOT IN (17, 1001))", "id")
	// status says so (it said ok, lag 0, nothing of the queue).
	st, err := slotstatus.Status(t.Context(), cfg.Source, cfg.Target, cfg.Slot)
	if err != nil {
		t.Fatal(err)
	}
	if v := st.Check(0); st.ParkedTxns != 3 || v.Health != "warn" || !strings.Contains(strings.Join(v.Warnings, " "), "3 source transactions") {
		t.Errorf("status with 3 parked: parked_txns %d, health %s %v", st.ParkedTxns, v.Health, v.Warnings)
	}
	var sb strings.Builder
	st.Format(&sb)
	if !strings.Contains(sb.String(), "parked             3 source transactions") {
		t.Errorf("status does not show the parked transactions:\n%s", sb.String())
	}

	// A retry before the target is mended fails again and keeps them parked.
	out := e.errorsCLI(cfg, 1, "retry", "--all")
	if !strings.Contains(out, "stays parked") || len(e.parked(cfg)) != 3 {
		t.Fatalf("retry before mending: %s", out)
	}

	e.tgtExec(`DELETE FROM t WHERE id = 1001`)
	e.tgtExec(`INSERT INTO t VALUES (17, 17, 'n17')`)
	out = e.errorsCLI(cfg, 0, "retry", "--all")
	if strings.Count(out, "retried: applied") != 3 {
		t.Errorf("errors retry --all: %s", out)
	}
	if n := len(e.parked(cfg)); n != 0 {
		t.Errorf("%d transactions still parked after retry", n)
	}
	if st, err := slotstatus.Status(t.Context(), cfg.Source, cfg.Target, cfg.Slot); err != nil || st.ParkedTxns != 0 {
		t.Errorf("status after retry: parked_txns %d, %v", st.ParkedTxns, err)
	}
	e.assertSame("t", "id")
	e.catchUp(cfg) // the retried transactions are not applied again
	e.assertSame("t", "id")
}

// TestConflictParkCheckViolation: a CHECK constraint only the target has
// refuses an update; with --on-error park the transaction is parked with
// kind check_violation, the SQLSTATE and the key, and the next
// transactions are applied. Skipping it (errors skip ID) gives it up.
func TestConflictParkCheckViolation(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL)`)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 10) g`)
	cfg := e.config("public.acct")
	cfg.OnError = config.OnErrorPark
	e.catchUp(cfg)
	e.tgtExec(`ALTER TABLE acct ADD CONSTRAINT small CHECK (n < 1000)`)
	e.srcExec(`UPDATE acct SET n = n + 1 WHERE id = 1`)
	e.srcExec(`UPDATE acct SET n = 5000 WHERE id = 4`)
	e.srcExec(`INSERT INTO acct VALUES (11, 11)`)
	e.catchUp(cfg)

	entries := e.parked(cfg)
	if len(entries) != 1 {
		t.Fatalf("%d parked, want 1: %+v", len(entries), entries)
	}
	p := entries[0]
	if p.Kind != "check_violation" || p.SQLState != "23514" || p.Key != "(id)=(4)" || p.Table != "public.acct" ||
		!strings.Contains(p.Message, `violates check constraint "small"`) {
		t.Errorf("parked = %+v", p)
	}
	e.assertSame("(SELECT * FROM acct WHERE id <> 4)", "id")

	e.errorsCLI(cfg, 0, "skip", fmt.Sprint(p.ID))
	if n := len(e.parked(cfg)); n != 0 {
		t.Errorf("%d parked after skip", n)
	}
	if all := e.errorsCLI(cfg, 0, "list", "--all"); !strings.Contains(all, "skipped") {
		t.Errorf("the skipped entry is not recorded:\n%s", all)
	}
	if n := e.count(e.Tgt, "SELECT n FROM acct WHERE id = 4"); n != 4 {
		t.Errorf("n = %d on the target for id 4, want 4 (the update was skipped)", n)
	}
}
