package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// repstreamBinary is the binary the integration tests run (testbin).
var repstreamBinary string

func TestMain(m *testing.M) {
	var err error
	if repstreamBinary, err = testbin.Path(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgtest.Main(m, testbin.Remove)
}

func servers(t *testing.T) (src, tgt *pgcluster.Cluster) {
	t.Helper()
	return pgtest.Shared(t, "bench-src"), pgtest.Shared(t, "bench-tgt")
}

// TestWorkloads runs every workload at a tiny scale for both systems against
// real clusters: every run must verify, report.json must hold the documented
// fields, and the charts must be valid PNGs.
func TestWorkloads(t *testing.T) {
	src, tgt := servers(t)
	cases := []struct {
		workload string
		mode     Mode
		params   Params
		flags    []string
		vary     string
	}{
		{"conditions", "live", Params{Rows: 3000, TxnRows: 100}, nil, ""},
		{"conditions", "backlog", Params{Rows: 3000}, []string{"--apply-parallelism=2"}, ""},
		{"pedestals", "live", Params{Rows: 7 * 600}, nil, ""},
		{"pedestals", "backlog", Params{Rows: 7 * 600}, []string{"--memory=1MB", "--decoding-work-mem=64kB"}, ""},
		{"pedestals-blob", "live", Params{Scale: 0.02}, nil, ""},
		{"batch", "backlog", Params{Rows: 2000}, nil, "apply-parallelism=1,2"},
		{"single-row", "backlog", Params{Rows: 300}, nil, ""},
		{"unrelated", "live", Params{Rows: 500}, nil, ""},
		{"fly", "live", Params{Rows: 7 * 200, Rate: 400, WarmUp: 250 * time.Millisecond}, nil, ""},
		{"dbl", "live", Params{Rows: 40, Jobs: 2}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.workload+"/"+tc.mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out := t.TempDir()
			var live bytes.Buffer
			rep, err := Run(ctx, Options{
				Workload: tc.workload, Mode: tc.mode, Params: tc.params, RepstreamFlags: tc.flags, Vary: tc.vary,
				SourceDSN: src.DSN("postgres"), TargetDSN: tgt.DSN("postgres"),
				Binary: repstreamBinary, Out: out, Timeout: time.Minute, Live: &live,
			})
			if err != nil {
				t.Fatalf("Run: %v\nlive output:\n%s\nlogs:\n%s", err, live.String(), logs(out))
			}
			wantRuns := 2
			if tc.vary != "" {
				wantRuns = 3
			}
			if len(rep.Runs) != wantRuns {
				t.Fatalf("runs = %d, want %d", len(rep.Runs), wantRuns)
			}
			for _, r := range rep.Runs {
				if !r.Verified || r.Error != "" {
					t.Errorf("%s: verified=%v error=%q", r.Label, r.Verified, r.Error)
				}
				if r.Replication.Seconds <= 0 {
					t.Errorf("%s: replication time %v", r.Label, r.Replication.Seconds)
				}
				if r.Load.Rows > 0 && r.Replication.RowsPerSec <= 0 {
					t.Errorf("%s: rows/s %v", r.Label, r.Replication.RowsPerSec)
				}
				if r.WAL.SourceBytes <= 0 || r.WAL.TargetBytes <= 0 {
					t.Errorf("%s: WAL source %d target %d", r.Label, r.WAL.SourceBytes, r.WAL.TargetBytes)
				}
				if tc.params.WarmUp > 0 && r.Load.Txns != 200 {
					// The warm-up's 100 transactions come first, unmeasured.
					t.Errorf("%s: measured %d transactions, want 200 (after the warm-up's)", r.Label, r.Load.Txns)
				}
				if tc.mode == "live" && r.Latency.Seen == 0 {
					t.Errorf("%s: no probe seen", r.Label)
				}
				if r.System == "repstream" {
					if r.Resources.EngineCPUSeconds <= 0 || r.Resources.EnginePeakRSSBytes <= 0 {
						t.Errorf("%s: engine resources %+v", r.Label, r.Resources)
					}
					if r.FinalStats == nil {
						t.Errorf("%s: no final stats", r.Label)
					}
				}
				wantTables := len(rep.Runs[0].Tables)
				if len(r.Tables) != wantTables || wantTables == 0 {
					t.Errorf("%s: %d table checks", r.Label, len(r.Tables))
				}
			}
			if tc.workload == "dbl" {
				checkDBL(t, out, rep)
			}
			checkReportFiles(t, out, rep)
			if !strings.Contains(live.String(), "==") {
				t.Errorf("no progress output")
			}
		})
	}
}

func logs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "logs", "*"))
	for _, f := range files {
		fmt.Fprintf(&b, "--- %s\n%s\n", f, tail(f, 30))
	}
	return b.String()
}

// documentedFields are the report.json keys REPORT.md documents.
var documentedFields = map[string][]string{
	"":            {"schema_version", "workload", "description", "mode", "started", "settings", "machine", "runs"},
	"settings":    {"scale", "rows", "params", "systems", "repstream_flags", "native", "server_settings", "own_clusters", "generation"},
	"machine":     {"cpus", "memory_bytes", "kernel", "go_version", "source_version", "target_version", "source_server_version_num"},
	"run":         {"system", "label", "verified", "load", "replication", "latency", "resources", "wal", "spill", "tables", "timeline", "probes"},
	"load":        {"seconds", "rows", "txns", "source_rows", "rows_per_sec", "txns_per_sec", "payload_bytes"},
	"replication": {"seconds", "rows_per_sec", "mb_per_sec", "last_commit_to_visible_seconds", "catch_up_seconds"},
	"latency":     {"probes", "seen", "p50_ms", "p95_ms", "p99_ms", "max_ms"},
	"resources":   {"engine_cpu_seconds", "engine_peak_rss_bytes", "walsender_cpu_seconds", "apply_worker_cpu_seconds", "target_backends_cpu_seconds", "total_cpu_seconds"},
	"wal":         {"source_bytes", "target_bytes", "target_source_ratio"},
	"spill":       {"engine_bytes", "slot_spill_bytes", "slot_stream_bytes"},
}

func checkReportFiles(t *testing.T, dir string, rep *Report) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	has := func(obj map[string]any, where string, keys []string) {
		for _, k := range keys {
			if _, ok := obj[k]; !ok {
				t.Errorf("report.json %s: missing %q", where, k)
			}
		}
	}
	has(m, "top level", documentedFields[""])
	has(m["settings"].(map[string]any), "settings", documentedFields["settings"])
	has(m["machine"].(map[string]any), "machine", documentedFields["machine"])
	runs, _ := m["runs"].([]any)
	if len(runs) != len(rep.Runs) {
		t.Fatalf("report.json has %d runs, want %d", len(runs), len(rep.Runs))
	}
	for _, r := range runs {
		run := r.(map[string]any)
		has(run, "run", documentedFields["run"])
		for _, sub := range []string{"load", "replication", "latency", "resources", "wal", "spill"} {
			has(run[sub].(map[string]any), sub, documentedFields[sub])
		}
	}
	back, err := ReadReport(filepath.Join(dir, "report.json"))
	if err != nil || back.Workload != rep.Workload || len(back.Runs) != len(rep.Runs) {
		t.Errorf("ReadReport: %v %+v", err, back)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| replication time (s) |") || !strings.Contains(string(md), "## Verification") {
		t.Errorf("report.md lacks the results or verification table:\n%s", md)
	}
	pngs, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	if len(pngs) < 2 { // timeline + at least one components chart
		t.Errorf("charts: %v", pngs)
	}
	for _, p := range pngs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: not a valid PNG: %v", p, err)
			continue
		}
		if img.Bounds().Dx() < 300 || img.Bounds().Dy() < 200 {
			t.Errorf("%s: tiny image %v", p, img.Bounds())
		}
		if !strings.Contains(string(md), filepath.Base(p)) {
			t.Errorf("report.md does not show %s", filepath.Base(p))
		}
	}
	if rep.Settings.Vary != "" {
		if _, err := os.Stat(filepath.Join(dir, "vary.png")); err != nil {
			t.Errorf("vary chart: %v", err)
		}
	}
}

func checkDBL(t *testing.T, dir string, rep *Report) {
	t.Helper()
	// 8 DBL-12 steps + jobs 1, 2 for DBL-11 and DBL-22, for each of none, repstream, native.
	if len(rep.DBL) != 3*12 {
		t.Errorf("dbl results: %d, want 36", len(rep.DBL))
	}
	seen := map[string]int{}
	for _, d := range rep.DBL {
		seen[d.Replication]++
		if d.Rows <= 0 || d.RowsPerSec <= 0 || d.TPS <= 0 || d.ServiceMs <= 0 || d.WALMBPerSec <= 0 {
			t.Errorf("dbl result without figures: %+v", d)
		}
	}
	if seen["none"] != 12 || seen["repstream"] != 12 || seen["native"] != 12 {
		t.Errorf("dbl results per replication: %v", seen)
	}
	for _, f := range []string{"dbl-rows-per-commit.png", "dbl-jobs.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("dbl chart: %v", err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "## DBL tests") || !strings.Contains(string(md), "| DBL-22 | all | 2 | native |") {
		t.Errorf("report.md lacks the DBL table:\n%s", md)
	}
}
