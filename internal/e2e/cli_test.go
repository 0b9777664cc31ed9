package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestStatusAndDrop: `repstream status` reports the slot's positions as JSON
// and text; `repstream drop` removes the slot, the publication repstream
// created and its state on the target.
func TestStatusAndDrop(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE s (id int PRIMARY KEY)`)
	cfg := e.config("public.s")
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO s SELECT generate_series(1, 100)`)
	e.catchUp(cfg)
	bin := repstreamBinary(t)
	conn := []string{"--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot}

	out, err := exec.Command(bin, append([]string{"status", "--json"}, conn...)...).Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	str := func(k string) string { v, _ := raw[k].(string); return v }
	if str("slot") != cfg.Slot || str("source_position") == "" || str("confirmed_position") == "" ||
		str("applied_position") == "" || str("applied_position") == "0/0" {
		t.Fatalf("status is missing positions: %s", out)
	}
	for _, k := range []string{"lag_bytes", "lag_seconds", "retained_wal_bytes", "wal_status"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status --json has no %s: %s", k, out)
		}
	}
	text, err := exec.Command(bin, append([]string{"status"}, conn...)...).Output()
	if err != nil || !strings.Contains(string(text), "applied position") || !strings.Contains(string(text), "retained WAL") {
		t.Fatalf("status: %v\n%s", err, text)
	}

	if out, err := exec.Command(bin, append([]string{"drop"}, conn...)...).CombinedOutput(); err != nil {
		t.Fatalf("drop: %v\n%s", err, out)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
		t.Errorf("the slot is still there after drop")
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_publication WHERE pubname = '"+cfg.Slot+"'"); n != 0 {
		t.Errorf("the publication repstream created is still there after drop")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.progress WHERE slot = '"+cfg.Slot+"'"); n != 0 {
		t.Errorf("the target state is still there after drop")
	}
	// status on a dropped slot is a clear error.
	out, err = exec.Command(bin, append([]string{"status"}, conn...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not exist") {
		t.Errorf("status of a dropped slot: %v\n%s", err, out)
	}
}
