package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/target"
)

// TestMetricsAtStart: the first scrape of /metrics, as soon as the endpoint
// answers, already has every series the shipped alerts and dashboard use
// (parsed from deploy/), at 0 where nothing was counted yet — a conflict
// counter of every kind, the reconnect counters, every stage and apply
// worker — so that an alert on increase(...) sees the first event. Only
// the gauges that wait for the first probe and the initial copy's
// per-table series come later, and are there once the run streams.
func TestMetricsAtStart(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE ms (id int PRIMARY KEY)`)
	e.srcExec(`INSERT INTO ms SELECT generate_series(1, 100)`)
	cfg := e.config("public.ms")
	cfg.ApplyParallelism = 2
	m := startMonitored(t, cfg)
	defer func() {
		if err := m.stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	var first string
	pgtest.WaitFor(t, "the first answer of /metrics", 10*time.Second, func() (bool, error) {
		code, body, err := m.request(http.MethodGet, "/metrics")
		first = body
		return err == nil && code == http.StatusOK, nil
	})
	kit := kitSeries(t)
	names := exposedNames(first)
	for name := range kit {
		if !names[name] && !afterProbe[name] && !perTable[name] {
			t.Errorf("the operations kit uses %s, which the first scrape lacks (a series an alert or panel uses must exist at 0 from the start)", name)
		}
	}
	want := []string{
		`repstream_reconnects_total{side="source"} 0`,
		`repstream_reconnects_total{side="target"} 0`,
		`repstream_component_busy_seconds_total{component="capture",worker=""}`,
		`repstream_component_busy_seconds_total{component="apply",worker="0"}`,
		`repstream_component_busy_seconds_total{component="apply",worker="1"}`,
		`repstream_component_flow_control_seconds_total{component="eager",worker=""}`,
		`repstream_queue_transactions{state="committed"} 0`,
		"\nrepstream_spill_bytes_total 0\n",
		"\nrepstream_captured_changes_total 0\n",
	}
	for _, k := range target.ConflictKinds() {
		want = append(want, `repstream_conflicts_total{kind="`+string(k)+`"} 0`)
	}
	for _, w := range want {
		if !strings.Contains(first, w) {
			t.Errorf("the first scrape lacks %s", strings.TrimSpace(w))
		}
	}
	promtoolMetrics(t, first)

	// Streaming: every series of the kit, the late ones gauges.
	m.waitStreaming()
	var metrics string
	pgtest.WaitFor(t, "the probed series in /metrics", 20*time.Second, func() (bool, error) {
		metrics = m.get("/metrics")
		names = exposedNames(metrics)
		for name := range kit {
			if !names[name] {
				return false, nil
			}
		}
		return true, nil
	})
	for name := range afterProbe {
		if !strings.Contains(metrics, "# TYPE "+name+" gauge\n") {
			t.Errorf("%s may come after the first probe only as a gauge (a counter must exist at 0 from the start)", name)
		}
	}
	e.waitCaughtUp(cfg.Slot, time.Minute) // a stop while streaming starts may fail the run
}
