package e2e

// repstream top, advise and check (issue 16) against real clusters and the
// built binary.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// runCLI runs the built binary to completion and returns its stdout, its
// stderr and its exit error.
func runCLI(t *testing.T, timeout time.Duration, argv ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Repstream(t), argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestAdviseApplyBottleneck: a target trigger that sleeps 1 ms per row
// (ENABLE ALWAYS: apply sessions run with session_replication_role =
// replica) makes apply the bottleneck while a backlog drains; `advise` must
// say so, `top` must print its header and a line with the apply workers, and
// the target must end equal to the source.
func TestAdviseApplyBottleneck(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE slow (id int PRIMARY KEY, v text)`)
	e.tgtExec(`CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END $$`)
	e.tgtExec(`CREATE TRIGGER slow_row BEFORE INSERT OR UPDATE ON slow FOR EACH ROW EXECUTE FUNCTION slow_row()`)
	e.tgtExec(`ALTER TABLE slow ENABLE ALWAYS TRIGGER slow_row`)
	cfg := e.config("public.slow")
	// One worker: with two, the one that finished first waits for the
	// other's commit (source order) a good part of the time, close to the
	// flow-control threshold.
	cfg.ApplyParallelism = 1
	e.catchUp(cfg) // creates the publication and the slot: what follows is a backlog
	// 30,000 rows in 300 transactions: at least 30 s of trigger time, longer
	// than the binary's start plus advise's 5 s and top's 3 s.
	for i := 0; i < 300; i++ {
		e.srcExec(`INSERT INTO slow SELECT g, md5(g::text) FROM generate_series($1::int, $1::int + 99) g`, i*100)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := exec.CommandContext(ctx, testbin.Repstream(t), args(cfg, "--http", addr)...)
	var runLog bytes.Buffer
	run.Stderr = &runLog
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = run.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- run.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("repstream run: %v\n%s", err, tail(runLog.String(), 20))
			}
		case <-time.After(30 * time.Second):
			_ = run.Process.Kill()
			<-done
			t.Errorf("repstream run did not stop within 30s")
		}
	}
	defer stop()
	pgtest.WaitFor(t, "the engine's /status", 20*time.Second, func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/status")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})

	out, errOut, err := runCLI(t, time.Minute, "advise", "--http", addr, "--duration", "5s", "--target", cfg.Target)
	if err != nil {
		t.Fatalf("advise: %v\n%s%s", err, out, errOut)
	}
	t.Logf("advise:\n%s", out)
	if first := strings.SplitN(out, "\n", 2)[0]; first != "bottleneck: apply" {
		t.Fatalf("advise's first line is %q, want \"bottleneck: apply\":\n%s", first, out)
	}
	if !strings.Contains(out, "\ncommit → stage over the last 1 to 2 minutes (p50 / p99 ms): received ") {
		t.Errorf("advise does not print the run's commit → stage latencies:\n%s", out)
	}
	if !strings.Contains(out, "slow_row on public.slow (ENABLE ALWAYS)") {
		t.Errorf("advise --target does not name the slow trigger:\n%s", out)
	}

	out, errOut, err = runCLI(t, time.Minute, "top", "--http", addr, "--interval", "1s", "--count", "2")
	if err != nil {
		t.Fatalf("top: %v\n%s%s", err, out, errOut)
	}
	t.Logf("top:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "capture") || !strings.Contains(lines[0], "apply") || !strings.HasPrefix(lines[1], "TIME") ||
		!strings.Contains(lines[3], "| APL(1) ") || !strings.Contains(lines[3], "CAP ") {
		t.Fatalf("top printed %d lines, want a legend naming capture and apply, a header and 2 lines with CAP and APL(1):\n%s", len(lines), out)
	}
	out, errOut, err = runCLI(t, time.Minute, "top", "--http", addr, "--interval", "1s", "--count", "1", "--format", "json")
	if err != nil {
		t.Fatalf("top --format json: %v\n%s%s", err, out, errOut)
	}
	var iv struct {
		Seconds    float64 `json:"interval_seconds"`
		Slot       string  `json:"slot"`
		Components []struct {
			Name    string `json:"name"`
			Workers int    `json:"workers"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(out), &iv); err != nil || iv.Slot != cfg.Slot || iv.Seconds <= 0 {
		t.Fatalf("top --format json: %v: %s", err, out)
	}

	// Seen: the rest of the backlog need not take the trigger's time.
	e.tgtExec(`CREATE OR REPLACE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`)
	e.waitCaughtUp(cfg.Slot, 3*time.Minute)
	stop()
	e.assertSame("slow", "id")
}

// TestCheck: `check` passes a good pair (and changes nothing on either
// server), and fails a source with wal_level=replica naming wal_level.
func TestCheck(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE chk (id int PRIMARY KEY, v text)`)
	cfg := e.config("public.chk")
	base := []string{"check", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot, "--tables", "public.chk", "--apply-parallelism", "2"}
	out, errOut, err := runCLI(t, time.Minute, base...)
	if err != nil {
		t.Fatalf("check of a good pair: %v\n%s%s", err, out, errOut)
	}
	t.Logf("check:\n%s", out)
	for _, want := range []string{"OK    source  wal_level: logical", "OK    source  table public.chk: replica identity key (id)",
		"OK    target  table public.chk: exists, columns compatible with the source", "OK    source  slot " + cfg.Slot + ": does not exist yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	// Read-only: no publication, no slot, no state schema.
	if n := e.count(e.Src, `SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`); n != 0 {
		t.Errorf("check created %d publication(s) or slot(s) on the source", n)
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'`); n != 0 {
		t.Errorf("check created the repstream schema on the target")
	}

	// After a run: the publication, the slot and the progress are reported.
	e.srcExec(`INSERT INTO chk SELECT g, md5(g::text) FROM generate_series(1, 500) g`)
	e.catchUp(cfg)
	out, errOut, err = runCLI(t, time.Minute, base...)
	if err != nil {
		t.Fatalf("check after a run: %v\n%s%s", err, out, errOut)
	}
	t.Logf("check after a run:\n%s", out)
	for _, want := range []string{"OK    source  publication " + cfg.Slot + ": exists with 1 table, every table of --tables among them",
		"OK    source  slot " + cfg.Slot + ": exists, not active, wal_status reserved, retains ", "OK    target  state schema repstream: slot " + cfg.Slot + " applied up to "} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	e.assertSame("chk", "id")

	// A publication that leaves out updates and deletes would let the
	// target diverge silently: FAIL.
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` SET (publish = 'insert')`)
	out, _, err = runCLI(t, time.Minute, base...)
	if want := "FAIL  source  publication " + cfg.Slot + ": does not publish update, delete: those changes would never reach the target"; err == nil || !strings.Contains(out, want) {
		t.Errorf("check with publish = 'insert': %v, want a FAIL line %q:\n%s", err, want, out)
	}
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` SET (publish = 'insert, update, delete, truncate')`)

	// A table without a key, and a missing target table, are FAIL lines.
	e.srcExec(`CREATE TABLE nokey (v text)`)
	out, _, err = runCLI(t, time.Minute, "check", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot, "--tables", "public.chk,public.nokey", "--format", "json")
	var rep struct {
		Items []struct{ Level, Side, Check, Detail, Fix string }
	}
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		t.Fatalf("check --format json: %v\n%s", jerr, out)
	}
	if err == nil {
		t.Fatalf("check with a keyless table exited 0:\n%s", out)
	}
	fails := map[string]string{}
	for _, it := range rep.Items {
		if it.Level == "FAIL" {
			fails[it.Side+" "+it.Check] = it.Detail
		}
	}
	if d := fails["source table public.nokey"]; !strings.Contains(d, "no primary key") {
		t.Errorf("source table public.nokey: %q, want a FAIL saying it has no primary key (all FAILs: %v)", d, fails)
	}
	if d, ok := fails["target table public.nokey"]; !ok || d != "missing" {
		t.Errorf("target table public.nokey: %q, want FAIL missing (all FAILs: %v)", d, fails)
	}
	if len(fails) != 2 {
		t.Errorf("want exactly 2 FAILs, got %v", fails)
	}

	c := pgtest.Cluster(t, pgcluster.Options{Name: "chkreplica", Fast: true, Settings: map[string]string{"wal_level": "replica"}})
	bad := newEnvOn(t, c, pgtest.Shared(t, "target"))
	bad.both(`CREATE TABLE chk (id int PRIMARY KEY, v text)`)
	bcfg := bad.config("public.chk")
	out, errOut, err = runCLI(t, time.Minute, "check", "--source", bcfg.Source, "--target", bcfg.Target, "--slot", bcfg.Slot, "--tables", "public.chk")
	t.Logf("check (wal_level=replica):\n%s", out)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("check of a wal_level=replica source: %v, want exit status 1\n%s%s", err, out, errOut)
	}
	const want = "FAIL  source  wal_level: wal_level=replica: logical decoding needs wal_level=logical (fix: set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart the source)"
	if !strings.Contains(out, want+"\n") {
		t.Fatalf("check output lacks\n%s\n:\n%s", want, out)
	}
	if !strings.Contains(errOut, "check: 1 item(s) FAIL") {
		t.Errorf("stderr: %q, want the FAIL count", errOut)
	}
}

// TestCheckPrivileges: `check` as roles without privileges names each
// missing one with its GRANT: the source role's REPLICATION and SELECT, the
// target role's SET on session_replication_role and its table privileges.
func TestCheckPrivileges(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE chk (id int PRIMARY KEY, v text)`)
	role := "rs_chk_" + strings.TrimPrefix(e.srcDB, "t_")
	ctx := context.Background()
	for _, conn := range []struct {
		exec func(string, ...any)
		drop func()
	}{
		{e.srcExec, func() { _, _ = e.Src.Exec(ctx, `DROP ROLE IF EXISTS `+role) }},
		{e.tgtExec, func() { _, _ = e.Tgt.Exec(ctx, `DROP ROLE IF EXISTS `+role) }},
	} {
		conn.exec(`CREATE ROLE ` + role + ` LOGIN`)
		t.Cleanup(conn.drop)
	}
	cfg := e.config("public.chk")
	withUser := func(dsn string) string { return strings.Replace(dsn, "user=postgres", "user="+role, 1) }
	out, errOut, err := runCLI(t, time.Minute, "check", "--source", withUser(cfg.Source), "--target", withUser(cfg.Target),
		"--slot", cfg.Slot, "--tables", "public.chk", "--format", "json")
	if err == nil {
		t.Fatalf("check as an unprivileged role exited 0:\n%s", out)
	}
	var rep struct {
		Items []struct{ Level, Side, Check, Detail, Fix string }
	}
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		t.Fatalf("check --format json: %v\n%s%s", jerr, out, errOut)
	}
	fails := map[string]string{}
	for _, it := range rep.Items {
		if it.Level == "FAIL" {
			fails[it.Side+" "+it.Check] = it.Fix
		}
	}
	want := map[string]string{
		"source role " + role:           "ALTER ROLE " + role + " REPLICATION",
		"source table public.chk":       `GRANT SELECT ON "public"."chk" TO ` + role,
		"target role " + role:           "GRANT SET ON PARAMETER session_replication_role TO " + role + " (or make it a superuser)",
		"target table public.chk":       `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON "public"."chk" TO ` + role,
		"target state schema repstream": "GRANT CREATE ON DATABASE " + e.tgtDB + " TO " + role + " (or CREATE SCHEMA repstream AUTHORIZATION " + role + ")",
	}
	for k, fix := range want {
		if got, ok := fails[k]; !ok || got != fix {
			t.Errorf("%s: FAIL with fix %q, want %q", k, got, fix)
		}
	}
	if len(fails) != len(want) {
		t.Errorf("FAILs: %v, want exactly %d", fails, len(want))
	}
}
