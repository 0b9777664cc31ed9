package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// fixture builds a registry with a deterministic history: five components,
// state changes, counters, gauges, info, and names that need sanitising.
func fixture() *Registry {
	clk := newFakeClock()
	r := NewRegistry(WithClock(clk.Now))
	capture := r.Component("capture")
	queue := r.Component("queue")
	spill := r.Component("spill")
	coord := r.Component("coordinator")
	apply := r.Component("apply.0")

	capture.SetInfo("slot", "repstream_slot")
	capture.SetInfo("protocol", "4")
	capture.SetInfo("note", "say \"hi\"\\\nbye")
	capture.SetState(Busy)
	capture.Add(12000, 3_400_000)
	capture.AddTxns(120)
	capture.Counter("keepalives").Add(7)
	capture.Counter("messages.received").Add(12345)
	capture.Gauge("received_lsn").Store(0x16B3748)

	clk.Advance(1500 * time.Millisecond)
	capture.SetState(Waiting)
	queue.SetState(Busy)
	queue.Add(12000, 3_400_000)
	queue.AddTxns(120)
	queue.Gauge("bytes_buffered").Store(1 << 20)
	queue.Gauge("txns-open").Store(3)
	spill.Add(500, 64_000)
	spill.Counter("files_total").Add(2)
	coord.AddTxns(118)
	coord.Counter("barriers").Add(1)
	// Names that collide with built-in families or across kinds.
	coord.Counter("items").Add(5)
	coord.Gauge("items").Store(6)
	coord.Counter("9lives").Add(9)

	clk.Advance(500 * time.Millisecond)
	apply.SetState(Busy)
	apply.Add(11800, 3_300_000)
	apply.AddTxns(118)
	apply.Counter("rows_copied").Add(11000)
	apply.Counter("rows.copied").Add(800) // sanitises to the same series: summed

	clk.Advance(250 * time.Millisecond)
	return r
}

func TestStatusJSONGolden(t *testing.T) {
	t.Parallel()
	r := fixture()
	extra := func() any {
		return map[string]any{"confirmed_lsn": "0/16B3748", "lag_bytes": 4096}
	}
	body := get(t, Handler(r, extra), "/status", http.StatusOK, "application/json")
	golden(t, "status.json", body)

	// Round trip: the document decodes back into the types.
	var resp struct {
		Stats  Snapshot       `json:"stats"`
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("decode /status: %v", err)
	}
	if len(resp.Stats.Components) != 5 || resp.Status["confirmed_lsn"] != "0/16B3748" {
		t.Errorf("decoded status = %+v", resp)
	}
	if !near(resp.Stats.Uptime, 2.25) {
		t.Errorf("uptime = %v, want 2.25", resp.Stats.Uptime)
	}

	// Without an extra function, status is null.
	body = get(t, Handler(r, nil), "/status", http.StatusOK, "application/json")
	if !bytes.Contains(body, []byte(`"status": null`)) {
		t.Errorf("status without extra: %s", body)
	}
}

// TestMetricsParserRejects makes sure the exposition checker can fail.
func TestMetricsParserRejects(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"sample before TYPE":   "repstream_x 1\n",
		"duplicate series":     "# HELP a_total h\n# TYPE a_total counter\na_total 1\na_total 2\n",
		"bad value":            "# HELP a h\n# TYPE a gauge\na one\n",
		"bad label":            "# HELP a h\n# TYPE a gauge\na{b=\"c} 1\n",
		"bad name":             "# HELP a.b h\n# TYPE a.b gauge\na.b 1\n",
		"interleaved families": "# HELP a h\n# TYPE a gauge\n# HELP b h\n# TYPE b gauge\na 1\n",
		"TYPE twice":           "# HELP a h\n# TYPE a gauge\n# TYPE a gauge\n",
		"unknown type":         "# HELP a h\n# TYPE a histogramm\n",
		"counter not _total":   "# HELP a h\n# TYPE a counter\na 1\n",
		"no trailing newline":  "# HELP a h\n# TYPE a gauge\na 1",
	} {
		if _, err := parseExposition([]byte(text)); err == nil {
			t.Errorf("%s: parser accepted %q", name, text)
		}
	}
}

func TestHandlerRouting(t *testing.T) {
	t.Parallel()
	h := Handler(NewRegistry(), nil)
	for _, tt := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/status", http.StatusOK},
		{http.MethodHead, "/metrics", http.StatusOK},
		{http.MethodPost, "/status", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodGet, "/", http.StatusOK},
		{http.MethodGet, "/healthz", http.StatusOK},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed},
		{http.MethodPut, "/", http.StatusMethodNotAllowed},
		{http.MethodGet, "/index.html", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.code {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, rec.Code, tt.code)
		}
	}
}

func TestStatusExtraNotEncodable(t *testing.T) {
	t.Parallel()
	h := Handler(NewRegistry(), func() any { return make(chan int) })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("code = %d, want 500", rec.Code)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	r.Component("capture").Add(3, 30)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, Handler(r, nil), nil) }()

	url := "http://" + ln.Addr().String()
	for _, path := range []string{"/status", "/metrics"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("capture")) {
			t.Errorf("GET %s = %d %s", path, resp.StatusCode, b)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeListener after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListener did not return after cancel")
	}
	if _, err := http.Get(url + "/status"); err == nil {
		t.Error("server still answering after shutdown")
	}
}

func TestServeListenError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Serve(context.Background(), ln.Addr().String(), Handler(NewRegistry(), nil), nil)
	if err == nil || !strings.Contains(err.Error(), "listen stats endpoint") {
		t.Errorf("Serve on a busy port = %v, want a listen error", err)
	}
}

func TestServeStopsOnCanceledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Serve(ctx, "127.0.0.1:0", Handler(NewRegistry(), nil), nil)
	// Either the listen sees the canceled context or the server shuts down
	// at once; both are a clean, prompt exit or a listen error wrapping it.
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Serve with canceled ctx = %v", err)
	}
}

func get(t *testing.T, h http.Handler, path string, code int, contentType string) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != code {
		t.Fatalf("GET %s = %d, want %d: %s", path, rec.Code, code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != contentType {
		t.Errorf("GET %s Content-Type = %q, want %q", path, ct, contentType)
	}
	return rec.Body.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file (run with -update after review):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var (
	metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// parseExposition checks text against the Prometheus text format 0.0.4 as
// repstream writes it (every family has HELP then TYPE before its samples,
// samples of a family are contiguous, counters end in _total, no timestamps)
// and returns the value of every series, keyed by its line's name{labels}.
func parseExposition(text []byte) (map[string]float64, error) {
	if len(text) > 0 && text[len(text)-1] != '\n' {
		return nil, errors.New("missing trailing newline")
	}
	series := map[string]float64{}
	types := map[string]string{}
	helps := map[string]bool{}
	current := ""
	for i, line := range strings.Split(strings.TrimSuffix(string(text), "\n"), "\n") {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d %q: %s", i+1, line, fmt.Sprintf(format, args...))
		}
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, _, _ := strings.Cut(line[len("# HELP "):], " ")
			if !metricNameRE.MatchString(name) {
				return nil, fail("bad metric name")
			}
			if helps[name] {
				return nil, fail("second HELP")
			}
			helps[name] = true
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, ok := strings.Cut(line[len("# TYPE "):], " ")
			if !ok || !metricNameRE.MatchString(name) {
				return nil, fail("bad TYPE line")
			}
			if _, dup := types[name]; dup {
				return nil, fail("second TYPE")
			}
			switch typ {
			case "counter":
				if !strings.HasSuffix(name, "_total") {
					return nil, fail("counter name without _total")
				}
			case "gauge", "summary":
			default:
				return nil, fail("unknown type %q", typ)
			}
			if !helps[name] {
				return nil, fail("TYPE without HELP")
			}
			types[name] = typ
			current = name
		case strings.HasPrefix(line, "#") || line == "":
			return nil, fail("unexpected comment or blank line")
		default:
			key, value, err := splitSample(line)
			if err != nil {
				return nil, fail("%v", err)
			}
			name, _, _ := strings.Cut(key, "{")
			if types[current] == "summary" && (name == current+"_sum" || name == current+"_count") {
				name = current
			}
			if name != current {
				return nil, fail("sample of %q outside its family (current %q)", name, current)
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return nil, fail("value: %v", err)
			}
			if types[name] == "counter" && v < 0 {
				return nil, fail("negative counter")
			}
			if _, dup := series[key]; dup {
				return nil, fail("duplicate series")
			}
			series[key] = v
		}
	}
	return series, nil
}

// splitSample splits `name{l="v",...} value` and validates name and labels.
func splitSample(line string) (key, value string, err error) {
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", "", errors.New("no value")
	}
	if !metricNameRE.MatchString(line[:i]) {
		return "", "", errors.New("bad metric name")
	}
	j := i
	if line[i] == '{' {
		j++
		for first := true; ; first = false {
			if line[j:j+1] == "}" && first {
				return "", "", errors.New("empty label set")
			}
			eq := strings.IndexByte(line[j:], '=')
			if eq < 0 || !labelNameRE.MatchString(line[j:j+eq]) {
				return "", "", errors.New("bad label name")
			}
			j += eq + 1
			if j >= len(line) || line[j] != '"' {
				return "", "", errors.New("label value not quoted")
			}
			j++
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' {
					j++
					if j >= len(line) || !strings.ContainsRune(`\"n`, rune(line[j])) {
						return "", "", errors.New("bad escape in label value")
					}
				}
			}
			if j >= len(line) {
				return "", "", errors.New("unterminated label value")
			}
			j++ // closing quote
			if j < len(line) && line[j] == ',' {
				j++
				continue
			}
			if j < len(line) && line[j] == '}' {
				j++
				break
			}
			return "", "", errors.New("bad label separator")
		}
	}
	if j >= len(line) || line[j] != ' ' {
		return "", "", errors.New("no space before value")
	}
	value = line[j+1:]
	if strings.Contains(value, " ") {
		return "", "", errors.New("timestamps or extra fields not expected")
	}
	return line[:j], value, nil
}
