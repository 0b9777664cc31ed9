package stats

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

var testBuild = BuildInfo{Version: "v1.2.3", GoVersion: "go1.26.8", Revision: "abc123"}

// monitoringFixture is fixture() plus the engine's auxiliary components: the
// polled source, the target probe, the phase, conflicts and a table copy.
func monitoringFixture() (*Registry, *fakeClock) {
	clk := newFakeClock()
	r := NewRegistry(WithClock(clk.Now), WithVersion("v1.2.3"))
	capture := r.Component("capture")
	capture.SetState(Busy)
	capture.Add(12000, 3_400_000)
	capture.AddTxns(120)
	capture.Counter("keepalives").Add(7)
	capture.Gauge("received_lsn").Store(0x3000)
	capture.Gauge("flushed_lsn").Store(0x2000)
	capture.SetInfo("slot", "repstream")
	q := r.Component("queue")
	q.Gauge("memory_bytes").Store(1 << 20)
	q.Gauge("txns_in_progress").Store(2)
	q.Gauge("txns_committed_pending").Store(5)
	sp := r.Component("spill")
	sp.Add(10, 4096)
	sp.Gauge("files").Store(1)
	a0, a1 := r.Component("apply.0"), r.Component("apply.1")
	a0.Add(100, 1000)
	a0.AddTxns(10)
	a1.Add(50, 500)
	a1.AddTxns(5)
	eager := r.Component("eager")
	eager.Add(1000, 10000)
	clk.Advance(time.Second)
	capture.SetState(Waiting)
	a0.SetState(Busy)
	clk.Advance(2 * time.Second)

	src := r.Component(CompSource)
	src.Gauge(GaugeWALLSN).Store(0x5000)
	src.Gauge(GaugeSlotConfirmed).Store(0x1000)
	src.Gauge(GaugeSlotRetained).Store(0x4000)
	src.Gauge(GaugeSlotExists).Store(1)
	src.Gauge(GaugeSlotActive).Store(1)
	src.Gauge(GaugeUp).Store(1)
	src.Gauge(GaugeLastOKUnixNano).Store(clk.Now().UnixNano())
	src.SetInfo(InfoWALStatus, "extended")
	src.Counter("reconnects").Add(1)
	capture.Counter("reconnects").Add(1) // capture's reconnects are the source's
	tgt := r.Component(CompTarget)
	tgt.Gauge(GaugeUp).Store(1)
	tgt.Gauge(GaugeLastOKUnixNano).Store(clk.Now().UnixNano())
	eng := r.Component(CompEngine)
	eng.SetInfo(InfoPhase, "streaming")
	eng.Gauge(GaugeOldestUnapplied).Store(clk.Now().Add(-90 * time.Second).UnixNano())
	r.Component(CompConflicts).Counter("unique_violation").Add(3)
	cp := r.Component(CopyPrefix + "public.t")
	cp.Add(400, 40000)
	cp.Gauge(GaugeRowsEstimate).Store(1000)
	cp.Gauge(GaugeBytesEstimate).Store(81920)
	lat := r.CommitLatency()
	for i := range 100 { // received 1..100 ms ago
		lat.Observe(StageReceived, clk.Now().Add(-time.Duration(i+1)*time.Millisecond).UnixNano())
	}
	lat.Observe(StageVisible, clk.Now().Add(-3*time.Millisecond).UnixNano())
	lat.Observe(StageVisible, 0) // no commit time: not recorded
	return r, clk
}

func TestCollectorGolden(t *testing.T) {
	t.Parallel()
	r, _ := monitoringFixture()
	var buf bytes.Buffer
	if err := WriteMetrics(&buf, r, CollectorOptions{Build: testBuild, Health: HealthOptions{Judge: true, MaxApplyLag: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	golden(t, "metrics.txt", buf.Bytes())
	series, err := parseExposition(buf.Bytes())
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, buf.Bytes())
	}
	for s, want := range map[string]float64{
		`repstream_build_info{goversion="go1.26.8",revision="abc123",version="v1.2.3"}`:     1,
		`repstream_component_busy_seconds_total{component="capture",worker=""}`:             1,
		`repstream_component_flow_control_seconds_total{component="capture",worker=""}`:     2,
		`repstream_component_busy_seconds_total{component="apply",worker="0"}`:              2,
		`repstream_component_idle_seconds_total{component="apply",worker="1"}`:              3,
		`repstream_component_state{component="capture",state="waiting",worker=""}`:          1,
		`repstream_component_events_total{component="capture",name="keepalives",worker=""}`: 7,
		`repstream_captured_changes_total`:                                                  12000,
		`repstream_applied_changes_total`:                                                   1150,
		`repstream_applied_transactions_total`:                                              15,
		`repstream_queue_memory_bytes`:                                                      1 << 20,
		`repstream_queue_transactions{state="committed"}`:                                   5,
		`repstream_spill_bytes_total`:                                                       4096,
		`repstream_source_lag_bytes`:                                                        0x3000,
		`repstream_slot_retained_wal_bytes`:                                                 0x4000,
		`repstream_slot_wal_status{status="extended"}`:                                      1,
		`repstream_slot_wal_status{status="lost"}`:                                          0,
		`repstream_apply_lag_seconds`:                                                       90,
		`repstream_reconnects_total{side="source"}`:                                         2,
		`repstream_reconnects_total{side="target"}`:                                         0,
		`repstream_conflicts_total{kind="unique_violation"}`:                                3,
		`repstream_copy_rows_total{table="public.t"}`:                                       400,
		`repstream_copy_rows_estimate{table="public.t"}`:                                    1000,
		`repstream_phase{phase="streaming"}`:                                                1,
		`repstream_healthy`:                                                                 0, // lag 90 s > 1 min
		`repstream_connection_up{side="target"}`:                                            1,
		`repstream_commit_latency_seconds_count{stage="received"}`:                          100,
		`repstream_commit_latency_seconds_count{stage="visible"}`:                           1,
	} {
		got, ok := series[s]
		if !ok {
			t.Errorf("series %s missing", s)
			continue
		}
		if !near(got, want) {
			t.Errorf("%s = %v, want %v", s, got, want)
		}
	}
	// Commit latencies: the histograms keep 2 significant digits.
	for s, want := range map[string]float64{
		`repstream_commit_latency_seconds{stage="received",quantile="0.5"}`:  0.050,
		`repstream_commit_latency_seconds{stage="received",quantile="0.99"}`: 0.099,
		`repstream_commit_latency_seconds{stage="visible",quantile="0.5"}`:   0.003,
		`repstream_commit_latency_seconds_sum{stage="received"}`:             5.05,
	} {
		if got, ok := series[s]; !ok || math.Abs(got-want) > want/50 {
			t.Errorf("%s = %v (present: %v), want %v within 2%%", s, got, ok, want)
		}
	}
	for s := range series {
		if strings.Contains(s, `component="source"`) || strings.Contains(s, `component="copy:`) {
			t.Errorf("auxiliary component exported as a stage: %s", s)
		}
	}
	promtoolCheckMetrics(t, buf.Bytes())
}

// promtoolCheckMetrics runs `promtool check metrics` when promtool exists.
func promtoolCheckMetrics(t *testing.T, text []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian: apt-get install prometheus): skipping promtool check metrics")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	r, _ := monitoringFixture()
	h := NewHandler(r, HandlerOptions{Collector: CollectorOptions{Build: testBuild}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q", ct)
	}
	body := rec.Body.String()
	for _, want := range []string{"\ngo_goroutines ", "\nprocess_cpu_seconds_total ", "repstream_build_info{", "repstream_source_lag_bytes "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	promtoolCheckMetrics(t, rec.Body.Bytes())
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	r, clk := monitoringFixture()
	check := func(opts HealthOptions, code int, reason string) {
		t.Helper()
		rec := httptest.NewRecorder()
		NewHandler(r, HandlerOptions{Collector: CollectorOptions{Health: opts}}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != code {
			t.Errorf("/healthz = %d, want %d: %s", rec.Code, code, rec.Body)
		}
		var rep HealthReport
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("/healthz body %q: %v", rec.Body, err)
		}
		if rep.Phase != "streaming" {
			t.Errorf("phase = %q", rep.Phase)
		}
		if reason != "" && !strings.Contains(strings.Join(rep.Reasons, "|"), reason) {
			t.Errorf("reasons %q lack %q", rep.Reasons, reason)
		}
	}
	check(HealthOptions{MaxApplyLag: 5 * time.Minute}, http.StatusOK, "")
	check(HealthOptions{MaxApplyLag: time.Minute}, http.StatusServiceUnavailable, "apply lag 1m30s exceeds 1m0s")
	r.Component(CompTarget).Gauge(GaugeUp).Store(0)
	r.Component(CompTarget).SetInfo(InfoLastError, "connection refused")
	check(HealthOptions{}, http.StatusServiceUnavailable, "target connection down: connection refused")
	r.Component(CompTarget).Gauge(GaugeUp).Store(1)
	r.Component(CompTarget).SetInfo(InfoLastError, "")
	clk.Advance(time.Minute)
	check(HealthOptions{Stale: 10 * time.Second}, http.StatusServiceUnavailable, "source: no successful probe for 1m0s")
	r.Component(CompSource).Gauge(GaugeLastOKUnixNano).Store(clk.Now().UnixNano())
	r.Component(CompTarget).Gauge(GaugeLastOKUnixNano).Store(clk.Now().UnixNano())
	r.Component(CompSource).SetInfo(InfoWALStatus, "lost")
	check(HealthOptions{}, http.StatusServiceUnavailable, "replication slot lost")
}

func TestLivePage(t *testing.T) {
	t.Parallel()
	body := get(t, Handler(NewRegistry(), nil), "/", http.StatusOK, "text/html; charset=utf-8")
	for _, want := range []string{`id="comp-capture"`, `id="comp-queue"`, `id="comp-apply"`, `id="comp-target"`, `fetch("status"`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, bad := range []string{"http://", "https://", "//cdn"} {
		if bytes.Contains(body, []byte(bad)) {
			t.Errorf("page refers to an external resource (%s)", bad)
		}
	}
}

func TestReadBuildInfo(t *testing.T) {
	t.Parallel()
	if bi := ReadBuildInfo("v9"); bi.Version != "v9" || bi.GoVersion == "" {
		t.Errorf("ReadBuildInfo(v9) = %+v", bi)
	}
	bi := ReadBuildInfo("dev")
	if bi.Revision != "" && bi.Version == "dev" {
		t.Errorf("version dev although the binary records revision %s", bi.Revision)
	}
}

func TestSplitWorker(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"apply.0": {"apply", "0"}, "apply.12": {"apply", "12"}, "capture": {"capture", ""},
		"a.b": {"a.b", ""}, ".1": {".1", ""}, "x.": {"x.", ""},
	} {
		c, w := splitWorker(in)
		if c != want[0] || w != want[1] {
			t.Errorf("splitWorker(%q) = %q, %q; want %q", in, c, w, want)
		}
	}
}

// FuzzMetricsExposition feeds arbitrary component, counter, gauge and info
// names through the collector: the exposition is always valid, never fails.
func FuzzMetricsExposition(f *testing.F) {
	f.Add("capture", "keepalives", "depth", "slot", "s1")
	f.Add("apply.0", "rows.copied", "txns-open", "protocol", "4")
	f.Add("a\"b\\c\nd", "items", "state", "note", "say \"hi\"\n")
	f.Add("", "", "", "", "")
	f.Add("copy:x", "reconnects", "done", "k", "\xff\xfe")
	f.Add("conflicts", "\xff", "", "wal_status", "lost")
	f.Fuzz(func(t *testing.T, comp, counter, gauge, infoKey, infoValue string) {
		r := NewRegistry()
		c := r.Component(comp)
		c.Add(1, 2)
		c.Counter(counter).Add(3)
		c.Counter(counter + "\xff").Add(4) // may repair onto the same series
		c.Gauge(gauge).Store(-5)
		c.SetInfo(infoKey, infoValue)
		r.Component(comp + "2").Gauge(gauge).Store(6)
		var buf bytes.Buffer
		if err := WriteMetrics(&buf, r, CollectorOptions{Build: testBuild}); err != nil {
			t.Fatal(err)
		}
		if _, err := parseExposition(buf.Bytes()); err != nil {
			t.Fatalf("invalid exposition: %v\n%s", err, buf.Bytes())
		}
	})
}

// FuzzHandler sends arbitrary methods and paths: the handler answers, never
// panics, never 5xx.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/status")
	f.Add("POST", "/metrics")
	f.Add("GET", "/%zz")
	f.Add("BREW", "//..//healthz")
	f.Add("GET", "/?a=%00")
	r, _ := monitoringFixture()
	h := NewHandler(r, HandlerOptions{Extra: func() any { return map[string]int{"x": 1} }})
	f.Fuzz(func(t *testing.T, method, path string) {
		req, err := http.NewRequest(method, "http://x"+path, nil)
		if err != nil {
			return // not a request a server would parse either
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Errorf("%s %q = %d", method, path, rec.Code)
		}
	})
}

func TestRatesSkipAuxiliary(t *testing.T) {
	t.Parallel()
	r, _ := monitoringFixture()
	for _, rt := range Rates(r.Snapshot(), r.Snapshot()) {
		if isAuxiliary(rt.Name) {
			t.Errorf("Rates lists the auxiliary component %q", rt.Name)
		}
	}
}
