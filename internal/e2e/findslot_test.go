package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/testbin"
)

// TestAdminCommandsFindTheirReplication: errors, status, tables and drop
// without --slot on a target holding one replication's state use it, and
// say which; with two, they list them and ask.
func TestAdminCommandsFindTheirReplication(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE fs (id int PRIMARY KEY, v text)`)
	e.tgtExec(`INSERT INTO fs VALUES (1, 'on the target only')`)
	cfg := e.config("public.fs")
	cfg.Slot = "sc_" + strings.TrimPrefix(e.srcDB, "t_")
	if len(cfg.Slot) > 63 {
		cfg.Slot = cfg.Slot[:63]
	}
	cfg.Snapshot = false
	e.catchUp(cfg)
	cfg.OnError = config.OnErrorPark
	e.srcExec(`INSERT INTO fs VALUES (1, 'parked')`)
	e.srcExec(`INSERT INTO fs VALUES (2, 'fine')`)
	e.catchUp(cfg)
	bin := testbin.Repstream(t)
	out, err := exec.Command(bin, "errors", "list", "--target", cfg.Target).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "using slot "+cfg.Slot) || !strings.Contains(string(out), "public.fs") {
		t.Fatalf("errors list without --slot: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "status", "--source", cfg.Source, "--target", cfg.Target).CombinedOutput()
	if err != nil || !strings.Contains(string(out), cfg.Slot) {
		t.Fatalf("status without --slot: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "tables", "list", "--source", cfg.Source, "--target", cfg.Target).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "public.fs") {
		t.Fatalf("tables list without --slot: %v\n%s", err, out)
	}
	// A second replication into the same target: no guessing.
	e.both(`CREATE TABLE fs2 (id int PRIMARY KEY)`)
	two := e.config("public.fs2")
	e.catchUp(two)
	out, err = exec.Command(bin, "errors", "list", "--target", cfg.Target).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "name one with --slot") || !strings.Contains(string(out), cfg.Slot) || !strings.Contains(string(out), two.Slot) {
		t.Fatalf("errors list without --slot on a target of two replications: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "drop", "--source", cfg.Source, "--target", cfg.Target).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "name one with --slot") {
		t.Fatalf("drop without --slot on a target of two replications: %v\n%s", err, out)
	}
}
