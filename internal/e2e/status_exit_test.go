package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// runStatusBinary runs the repstream binary and returns its exit code, stdout and
// stderr.
func runStatusBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(testbin.Repstream(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("run repstream %s: %v", args[0], err)
	return 0, "", ""
}

// TestStatusExitCodes: `repstream status` exits 0 for a healthy slot (also
// while it is inactive for less than --max-inactive), 2 with one line on
// stderr for a slot inactive for longer (on PostgreSQL 15, measured by the
// target's progress record) and for a missing slot; --format json carries
// the verdict.
func TestStatusExitCodes(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE sx (id int PRIMARY KEY)`)
	cfg := e.config("public.sx")
	e.srcExec(`INSERT INTO sx SELECT generate_series(1, 10)`)
	e.catchUp(cfg)
	conn := []string{"--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot}

	code, out, stderr := runStatusBinary(t, append([]string{"status", "--max-inactive", "1h"}, conn...)...)
	if code != 0 || !strings.Contains(out, "inactive for") || stderr != "" {
		t.Fatalf("status of a healthy slot: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	code, out, stderr = runStatusBinary(t, append([]string{"status", "--format", "json", "--max-inactive", "1h"}, conn...)...)
	var v struct {
		Slot            string   `json:"slot"`
		Health          string   `json:"health"`
		Problem         string   `json:"problem"`
		InactiveSeconds *float64 `json:"inactive_seconds"`
		Applied         string   `json:"applied_position"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 {
		t.Fatalf("status --format json: exit %d, %v\n%s\n%s", code, err, out, stderr)
	}
	if v.Slot != cfg.Slot || v.Health != "ok" || v.Problem != "" || v.InactiveSeconds == nil || *v.InactiveSeconds < 0 || v.Applied == "0/0" {
		t.Fatalf("status --format json of a healthy slot:\n%s", out)
	}

	// Inactive for longer than --max-inactive: once status itself reports
	// more than a second of inactivity.
	pgtest.WaitFor(t, "status to report the slot inactive for over 1.2 s", time.Minute, func() (bool, error) {
		code, out, stderr := runStatusBinary(t, append([]string{"status", "--format", "json", "--max-inactive", "1h"}, conn...)...)
		v.InactiveSeconds = nil
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.InactiveSeconds == nil {
			return false, fmt.Errorf("status --format json: exit %d, %v\n%s\n%s", code, err, out, stderr)
		}
		return *v.InactiveSeconds > 1.2, nil
	})
	code, _, stderr = runStatusBinary(t, append([]string{"status", "--max-inactive", "1s"}, conn...)...)
	if code != 2 || !strings.Contains(stderr, "has been inactive for") || !strings.Contains(stderr, "--max-inactive 1s") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("status of a slot inactive for longer than --max-inactive: exit %d, stderr:\n%s", code, stderr)
	}

	// A missing slot.
	e.srcExec(`SELECT pg_drop_replication_slot($1)`, cfg.Slot)
	code, out, stderr = runStatusBinary(t, append([]string{"status"}, conn...)...)
	want := `repstream: replication slot "` + cfg.Slot + `" does not exist on the source`
	if code != 2 || strings.TrimSpace(stderr) != want || out != "" {
		t.Fatalf("status of a missing slot: exit %d, want 2 and %q on stderr\nstdout:\n%s\nstderr:\n%s", code, want, out, stderr)
	}
	code, out, _ = runStatusBinary(t, append([]string{"status", "--json"}, conn...)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 2 || v.Health != "fail" || !strings.Contains(v.Problem, "does not exist") {
		t.Fatalf("status --json of a missing slot: exit %d, %v\n%s", code, err, out)
	}

	// Any other error is exit code 1 (here: an unknown DSN key).
	code, _, stderr = runStatusBinary(t, "status", "--source", cfg.Source+" prot=1", "--target", cfg.Target, "--slot", cfg.Slot)
	if code != 1 || !strings.Contains(stderr, `did you mean "port"`) {
		t.Fatalf("status with a bad DSN: exit %d, stderr:\n%s", code, stderr)
	}
}
