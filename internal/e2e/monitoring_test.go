package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
)

// monitored is an engine running in the background with --http.
type monitored struct {
	t    *testing.T
	addr string
	stop func() error
}

// startMonitored starts the engine with --http on a free port and returns
// at once (the endpoint listens before the engine connects anywhere).
func startMonitored(t *testing.T, cfg config.Config) *monitored {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg.HTTP = addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- engine.New(cfg, testLogger(t), stats.NewRegistry(stats.WithVersion("e2e-version"))).Run(ctx)
	}()
	m := &monitored{t: t, addr: addr}
	m.stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("engine did not stop within 30s")
		}
	}
	return m
}

// get returns the status code and body of GET path (an error while the
// endpoint does not listen yet).
func (m *monitored) request(method, path string) (int, string, error) {
	req, err := http.NewRequest(method, "http://"+m.addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitStreaming waits until the engine streams (its initial copy is over).
func (m *monitored) waitStreaming() {
	m.t.Helper()
	pgtest.WaitFor(m.t, "the engine to stream", time.Minute, func() (bool, error) {
		_, body, err := m.request(http.MethodGet, "/healthz")
		return err == nil && strings.Contains(body, `"phase":"streaming"`), nil
	})
}

func (m *monitored) get(path string) string {
	m.t.Helper()
	code, body, err := m.request(http.MethodGet, path)
	if err != nil || code != http.StatusOK {
		m.t.Fatalf("GET %s: %d %v\n%.2000s", path, code, err, body)
	}
	return body
}

// exposedNames returns the metric names in a text exposition (families from
// their TYPE lines).
func exposedNames(text string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(rest, " ")
			names[name] = true
		}
	}
	return names
}

var metricRE = regexp.MustCompile(`\brepstream_[a-zA-Z0-9_]+`)

// Series of the operations kit that a scrape at the very start of a run
// lacks, each for a reason: every other series the kit uses — every
// counter an alert takes the increase of in particular — is exported from
// the first scrape, at 0 (TestMetricsAtStart).
var (
	// afterProbe: gauges whose value is unknown until the first probe of
	// the source or the target (2 s; a lag or slot status of 0 would be
	// false): absent, an alert on them cannot fire on a guess.
	afterProbe = map[string]bool{
		"repstream_source_lag_bytes":        true,
		"repstream_slot_retained_wal_bytes": true,
		"repstream_slot_wal_status":         true,
		"repstream_connection_up":           true,
	}
	// perTable: labelled by a table of the initial copy, which exists once
	// that copy starts (and never in a run that resumes without one).
	perTable = map[string]bool{
		"repstream_copy_rows_total":    true,
		"repstream_copy_rows_estimate": true,
	}
)

// TestMonitoring: the endpoint serves from the start of the run (before
// the initial copy), /metrics has the named series (promtool clean when
// present), /healthz is 200 while replicating, / is the live page, the
// endpoints are read-only and show no DSN, and the dashboard and alert
// rules use only exported series. Ends comparing source and target.
func TestMonitoring(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE mon (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO mon SELECT g, repeat('x', 100) FROM generate_series(1, 50000) g`)
	e.srcExec(`ANALYZE mon`)
	cfg := e.config("public.mon")
	cfg.Progress = 200 * time.Millisecond
	m := startMonitored(t, cfg)
	defer func() {
		if err := m.stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()

	// From the start: the first answer comes before streaming.
	var first stats.HealthReport
	pgtest.WaitFor(t, "GET /healthz", 10*time.Second, func() (bool, error) {
		code, body, err := m.request(http.MethodGet, "/healthz")
		if err != nil {
			return false, nil
		}
		if code != http.StatusOK {
			t.Fatalf("/healthz = %d while starting: %s", code, body)
		}
		return true, json.Unmarshal([]byte(body), &first)
	})
	if first.Phase != "starting" && first.Phase != "copying" {
		t.Errorf("first /healthz came in phase %q, want starting or copying (served before the initial copy)", first.Phase)
	}

	e.waitCaughtUp(cfg.Slot, time.Minute)
	e.srcExec(`INSERT INTO mon SELECT g, 'streamed' FROM generate_series(50001, 51000) g`)
	e.srcExec(`UPDATE mon SET v = 'u' WHERE id <= 100`)
	e.waitCaughtUp(cfg.Slot, time.Minute)

	// /metrics: the named series, after the source has been polled.
	var metrics string
	pgtest.WaitFor(t, "source lag and phase streaming in /metrics", 20*time.Second, func() (bool, error) {
		metrics = m.get("/metrics")
		return strings.Contains(metrics, "\nrepstream_source_lag_bytes ") &&
			strings.Contains(metrics, `repstream_phase{phase="streaming"} 1`) &&
			strings.Contains(metrics, `repstream_slot_wal_status{status="reserved"} 1`), nil
	})
	names := exposedNames(metrics)
	for _, want := range []string{
		"repstream_build_info", "repstream_source_lag_bytes", "repstream_apply_lag_seconds",
		"repstream_slot_retained_wal_bytes", "repstream_slot_wal_status", "repstream_component_busy_seconds_total",
		"repstream_component_idle_seconds_total", "repstream_component_flow_control_seconds_total",
		"repstream_captured_changes_total", "repstream_applied_changes_total", "repstream_applied_transactions_total",
		"repstream_queue_memory_bytes", "repstream_spill_bytes_total", "repstream_copy_rows_total",
		"repstream_copy_rows_estimate", "repstream_reconnects_total", "repstream_connection_up", "repstream_healthy",
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if !names[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, want := range []string{
		`repstream_build_info{goversion="` + runtime.Version() + `",revision="`,
		`version="e2e-version"} 1`,
		`repstream_copy_rows_total{table="public.mon"} 50000`,
		`repstream_copy_done{table="public.mon"} 1`,
		`repstream_component_busy_seconds_total{component="apply",worker="0"}`,
		`repstream_component_busy_seconds_total{component="capture",worker=""}`,
		`repstream_slot_wal_status{status="reserved"} 1`,
		`repstream_connection_up{side="source"} 1`,
		`repstream_connection_up{side="target"} 1`,
		"\nrepstream_healthy 1",
		"\nrepstream_captured_changes_total 1100\n",
		`repstream_commit_latency_seconds_count{stage="received"} `,
		`repstream_commit_latency_seconds_count{stage="visible"} `,
		`repstream_commit_latency_seconds_count{stage="durable"} `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if v := sample(t, metrics, `repstream_component_busy_seconds_total{component="capture",worker=""}`); v <= 0 {
		t.Errorf("capture busy seconds = %v, want > 0 (decoding and queueing)", v)
	}
	promtoolMetrics(t, metrics)

	// /healthz, /, /status.
	var health stats.HealthReport
	if err := json.Unmarshal([]byte(m.get("/healthz")), &health); err != nil || health.Status != "ok" || health.Phase != "streaming" {
		t.Errorf("/healthz = %+v (%v), want ok while streaming", health, err)
	}
	if page := m.get("/"); !strings.Contains(page, `id="comp-capture"`) || !strings.Contains(page, "<script>") {
		t.Errorf("/ is not the live page:\n%.500s", page)
	}
	status := m.get("/status")
	var st struct {
		Status stats.LiveStatus `json:"status"`
	}
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		t.Fatal(err)
	}
	if st.Status.Phase != "streaming" || st.Status.SourceLagBytes == nil || !st.Status.Healthy || st.Status.SlotWALStatus != "reserved" {
		t.Errorf("/status monitoring fields: %+v", st.Status.LiveMonitoring)
	}

	// Safe to expose: read-only, no DSN, malformed requests are 4xx.
	for _, body := range []string{metrics, status, m.get("/healthz")} {
		for _, secret := range []string{cfg.Source, cfg.Target, "password"} {
			if strings.Contains(body, secret) {
				t.Errorf("an endpoint shows %q", secret)
			}
		}
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		for _, path := range []string{"/", "/status", "/metrics", "/healthz"} {
			if code, _, err := m.request(method, path); err != nil || code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d %v, want 405", method, path, code, err)
			}
		}
	}
	conn, err := net.Dial("tcp", m.addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"))
	reply, _ := io.ReadAll(io.LimitReader(conn, 200))
	conn.Close()
	if !bytes.HasPrefix(reply, []byte("HTTP/1.1 400")) {
		t.Errorf("malformed request answered %q, want 400", reply)
	}
	if code, _, _ := m.request(http.MethodGet, "/metrics?x=%zz"); code != http.StatusOK {
		t.Errorf("GET with a bad query = %d", code)
	}

	// The operations kit uses only series the engine exports.
	for name := range kitSeries(t) {
		if !names[name] {
			t.Errorf("the operations kit uses %s, which /metrics does not export", name)
		}
	}

	e.assertSame("mon", "id")
}

// sample returns the value of one series in a text exposition.
func sample(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

func promtoolMetrics(t *testing.T, text string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian: apt-get install prometheus): skipping promtool check metrics")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// kitSeries parses deploy/prometheus/alerts.yml and
// deploy/grafana/repstream.json, checks their shape, runs promtool check
// rules when promtool is present, and returns every repstream_ series
// their expressions use.
func kitSeries(t *testing.T) map[string]bool {
	t.Helper()
	rulesPath := filepath.Join(repoRoot(), "deploy", "prometheus", "alerts.yml")
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var exprs []string
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			alerts[r.Alert] = true
		}
	}
	for _, want := range []string{"RepstreamDown", "RepstreamApplyLagHigh", "RepstreamSlotRetainedWALHigh", "RepstreamSlotLost", "RepstreamReconnectStorm", "RepstreamParkedErrors"} {
		if !alerts[want] {
			t.Errorf("alerts.yml lacks alert %s", want)
		}
	}
	if !slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, "up{") && strings.Contains(e, "== 0") }) {
		t.Errorf("alerts.yml has no `up == 0` alert")
	}
	dashPath := filepath.Join(repoRoot(), "deploy", "grafana", "repstream.json")
	db, err := os.ReadFile(dashPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(db, &dash); err != nil {
		t.Fatalf("repstream.json: %v", err)
	}
	var walk func(v any)
	nDash := 0
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query") {
					exprs = append(exprs, s)
					nDash++
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	if nDash < 10 {
		t.Errorf("the dashboard has %d queries", nDash)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricRE.FindAllString(e, -1) {
			used[name] = true
		}
	}
	if path, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed (Debian: apt-get install prometheus): skipping promtool check rules")
	} else if out, err := exec.Command(path, "check", "rules", rulesPath).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	if len(used) < 10 {
		t.Errorf("the operations kit uses %d repstream_ series: %v", len(used), used)
	}
	return used
}

// TestLivePageChromium renders the live page in headless Chromium against a
// running engine: the DOM has the pipeline's components, and the number of
// changes capture shows grows after the source changes.
func TestLivePageChromium(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no chromium found (Debian: apt-get install chromium; make test installs it when root): skipping the live page's browser test")
	}
	e := newEnv(t)
	e.both(`CREATE TABLE page (id int PRIMARY KEY)`)
	cfg := e.config("public.page")
	m := startMonitored(t, cfg)
	defer func() {
		if err := m.stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	m.waitStreaming()
	e.srcExec(`INSERT INTO page SELECT generate_series(1, 1000)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	pgtest.WaitFor(t, "capture to count 1000 changes", 20*time.Second, func() (bool, error) {
		return strings.Contains(m.get("/metrics"), "\nrepstream_captured_changes_total 1000\n"), nil
	})
	profile := t.TempDir()
	dump := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, "--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
			"--user-data-dir="+profile, "--virtual-time-budget=5000", "--dump-dom", "http://"+m.addr+"/")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("chromium could not render (%v): skipping\n%.2000s", err, stderr.String())
		}
		return string(out)
	}
	captured := func(dom string) int {
		t.Helper()
		re := regexp.MustCompile(`<tr id="row-capture"><td>capture</td><td>\w+</td><td>(\d+)</td>`)
		mm := re.FindStringSubmatch(dom)
		if mm == nil {
			t.Fatalf("the rendered page has no capture row:\n%.4000s", dom)
		}
		n, _ := strconv.Atoi(mm[1])
		return n
	}
	dom := dump()
	for _, want := range []string{`id="comp-capture"`, `id="comp-queue"`, `id="worker-apply.0"`, `id="comp-target"`, `id="row-capture"`, `class="ok">healthy`,
		`<tr id="latency-received"><td>received</td>`, `<tr id="latency-visible"><td>visible</td>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %s:\n%.4000s", want, dom)
		}
	}
	before := captured(dom)
	e.srcExec(`INSERT INTO page SELECT generate_series(1001, 3000)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	pgtest.WaitFor(t, "capture to count 3000 changes", 20*time.Second, func() (bool, error) {
		return strings.Contains(m.get("/metrics"), "\nrepstream_captured_changes_total 3000\n"), nil
	})
	after := captured(dump())
	if before != 1000 || after != 3000 {
		t.Errorf("the page showed %d then %d captured changes, want 1000 then 3000", before, after)
	}
	e.assertSame("page", "id")
}

// TestHealthzApplyLag: while a lock on the target holds apply back, the
// apply lag grows past --healthz-max-lag and /healthz answers 503 naming
// it; once the lock goes, everything is applied, the lag is 0 and /healthz
// is 200 again.
func TestHealthzApplyLag(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE lag (id int PRIMARY KEY)`)
	cfg := e.config("public.lag")
	cfg.HealthzMaxLag = time.Second
	m := startMonitored(t, cfg)
	defer func() {
		if err := m.stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	m.waitStreaming()
	ctx := context.Background()
	tx, err := e.Tgt.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE lag IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`INSERT INTO lag SELECT generate_series(1, 100)`)
	var body string
	pgtest.WaitFor(t, "/healthz to answer 503 for the apply lag", 30*time.Second, func() (bool, error) {
		code, b, err := m.request(http.MethodGet, "/healthz")
		body = b
		return err == nil && code == http.StatusServiceUnavailable, nil
	})
	if !strings.Contains(body, "apply lag") || !strings.Contains(body, "exceeds 1s") {
		t.Errorf("/healthz reasons: %s", body)
	}
	if lag := sample(t, m.get("/metrics"), "repstream_apply_lag_seconds"); lag < 1 {
		t.Errorf("repstream_apply_lag_seconds = %v while apply is held back", lag)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(cfg.Slot, time.Minute)
	pgtest.WaitFor(t, "/healthz to answer 200 again", 30*time.Second, func() (bool, error) {
		code, b, err := m.request(http.MethodGet, "/healthz")
		body = b
		return err == nil && code == http.StatusOK, nil
	})
	if lag := sample(t, m.get("/metrics"), "repstream_apply_lag_seconds"); lag != 0 {
		t.Errorf("repstream_apply_lag_seconds = %v once caught up", lag)
	}
	e.assertSame("lag", "id")
}
