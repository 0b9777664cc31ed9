package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// TestStatusAndDrop: `repstream status` reports the slot's positions as JSON
// and text; `repstream drop` removes the slot, the publication repstream
// created and its state on the target.
func TestStatusAndDrop(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE s (id int PRIMARY KEY)`)
	cfg := e.config("public.s")
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO s SELECT generate_series(1, 100)`)
	e.catchUp(cfg)
	bin := testbin.Repstream(t)
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
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'"); n != 0 {
		t.Errorf("the target state is still there after drop of the only replication")
	}
	// status on a dropped slot is a clear error.
	out, err = exec.Command(bin, append([]string{"status"}, conn...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not exist") {
		t.Errorf("status of a dropped slot: %v\n%s", err, out)
	}
}

// TestHTTPEndpoints: a running engine serves its stats and positions as JSON
// at /status and in Prometheus format at /metrics.
func TestHTTPEndpoints(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE h (id int PRIMARY KEY)`)
	cfg := e.config("public.h")
	e.catchUp(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg.HTTP = addr
	stop := e.start(cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	e.srcExec(`INSERT INTO h SELECT generate_series(1, 1000)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	get := func(path string) string {
		t.Helper()
		var body string
		pgtest.WaitFor(t, "GET "+path, 10*time.Second, func() (bool, error) {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return false, err // the endpoint may not listen yet
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
			}
			body = string(b)
			return true, nil
		})
		return body
	}
	var st struct {
		Stats struct {
			Components []struct {
				Name  string `json:"name"`
				Items int64  `json:"items"`
			} `json:"components"`
		} `json:"stats"`
		Status struct {
			Slot       string `json:"slot"`
			FlushedLSN string `json:"flushed_lsn"`
		} `json:"status"`
	}
	body := get("/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	applied := int64(0)
	for _, c := range st.Stats.Components {
		if strings.HasPrefix(c.Name, "apply.") {
			applied += c.Items
		}
	}
	if st.Status.Slot != cfg.Slot || st.Status.FlushedLSN == "" || applied < 1000 {
		t.Fatalf("/status: slot %q flushed %q, %d changes applied (want 1000):\n%s", st.Status.Slot, st.Status.FlushedLSN, applied, body)
	}
	if m := get("/metrics"); !strings.Contains(m, `repstream_component_items_total{component="capture",worker=""}`) || !strings.Contains(m, "# TYPE") {
		t.Fatalf("/metrics lacks the capture counter:\n%.2000s", m)
	}
}
