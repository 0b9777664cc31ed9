package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestParseProcStatCPU(t *testing.T) {
	tests := []struct {
		name string
		line string
		want float64
		ok   bool
	}{
		{"plain", "1234 (postgres) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 1 0 100 1000 10", 3.0, true},
		{"name with spaces and parens", "77 (postgres: walsender (x) ) R 1 1 1 0 -1 0 0 0 0 0 1000 234 0 0 20 0 1 0", 12.34, true},
		{"truncated", "1 (x) S 1 2 3", 0, false},
		{"no paren", "1 x S", 0, false},
		{"bad number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 1 0", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStatCPU([]byte(tc.line))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (got < tc.want-1e-9 || got > tc.want+1e-9) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzParseProcStatCPU(f *testing.F) {
	f.Add([]byte("1234 (postgres) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 1 0 100 1000 10"))
	f.Add([]byte("1 ((() S"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseProcStatCPU(b)
		if err == nil && v < 0 && !bytes.Contains(b, []byte("-")) {
			t.Fatalf("negative CPU %v without a minus sign", v)
		}
	})
}

// TestParseSchedstatDelay: the second field of /proc/<pid>/schedstat, in
// seconds; this process's own line parses.
func TestParseSchedstatDelay(t *testing.T) {
	got, err := parseSchedstatDelay([]byte("5210001234 1500000000 4321\n"))
	if err != nil || got != 1.5 {
		t.Fatalf("got %v, %v; want 1.5", got, err)
	}
	for _, bad := range []string{"", "12", "12 x 3"} {
		if _, err := parseSchedstatDelay([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := procRunDelaySeconds(os.Getpid()); err != nil {
		t.Skipf("no schedstat here: %v", err)
	}
}

func TestParamsRows(t *testing.T) {
	tests := []struct {
		p    Params
		seed int64
		want int64
	}{
		{Params{}, 1000, 1000},
		{Params{Scale: 0.5}, 1000, 500},
		{Params{Scale: 0.0001}, 1000, 1},
		{Params{Scale: 0.5, Rows: 42}, 1000, 42},
	}
	for _, tc := range tests {
		if got := tc.p.rows(tc.seed); got != tc.want {
			t.Errorf("%+v.rows(%d) = %d, want %d", tc.p, tc.seed, got, tc.want)
		}
	}
}

func TestPlan(t *testing.T) {
	specs, err := plan(Options{Systems: AllSystems, Vary: "apply-parallelism=1,2,4",
		RepstreamFlags: []string{"--memory=64MB"}})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, s := range specs {
		labels = append(labels, s.label)
	}
	want := "repstream apply-parallelism=1,repstream apply-parallelism=2,repstream apply-parallelism=4,native"
	if got := strings.Join(labels, ","); got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
	if f := specs[1].flags; len(f) != 2 || f[0] != "--memory=64MB" || f[1] != "--apply-parallelism=2" {
		t.Errorf("flags %v", f)
	}
	if specs[0].idx == specs[1].idx {
		t.Errorf("runs share an index (and so their databases)")
	}
	for _, bad := range []string{"apply-parallelism", "=1,2", "x="} {
		if _, err := plan(Options{Systems: []System{SystemRepstream}, Vary: bad}); err == nil {
			t.Errorf("plan accepted --vary %q", bad)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, n := range []string{"conditions", "pedestals", "pedestals-blob", "batch", "single-row", "unrelated", "fly", "dbl"} {
		w, err := Lookup(n)
		if err != nil {
			t.Errorf("Lookup(%q): %v", n, err)
			continue
		}
		if w.DDL == "" && n != "dbl" || w.Description == "" {
			t.Errorf("%s: incomplete workload", n)
		}
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "conditions") {
		t.Errorf("Lookup(nope) = %v, want an error listing the workloads", err)
	}
}

func TestProgressBar(t *testing.T) {
	if got := progressBar(5, 10, 10); !strings.HasPrefix(got, "[#####-----]  50%") {
		t.Errorf("progressBar = %q", got)
	}
	if got := progressBar(20, 10, 4); !strings.HasPrefix(got, "[####] 100%") {
		t.Errorf("progressBar over 100%% = %q", got)
	}
}

func sampleReport() *Report {
	mk := func(sys System, secs float64, ok bool) *RunResult {
		r := &RunResult{System: sys, Label: sys.String(), Verified: ok}
		r.Replication = ReplFigures{Seconds: secs, RowsPerSec: 1000 / secs}
		r.Load = LoadFigures{Rows: 1000, Txns: 10, SourceRows: 1000}
		r.Tables = []TableCheck{{Table: "t", Replicated: true, SourceRows: 1000, TargetRows: 1000, Equal: ok}}
		if !ok {
			r.Error = "verification failed"
		}
		return r
	}
	return &Report{Workload: "conditions", Mode: "live", Description: "d",
		Settings: Settings{Native: map[string]string{"subscription_options": NativeOptions}},
		Runs:     []*RunResult{mk("repstream", 2, true), mk("native", 4, true)}}
}

func TestWriteMarkdownRatio(t *testing.T) {
	var b bytes.Buffer
	WriteMarkdown(&b, sampleReport(), []string{"timeline.png"})
	md := b.String()
	for _, want := range []string{
		"| figure | repstream | native | repstream / native |",
		"| replication time (s) | 2.00 | 4.00 | 0.50 |",
		"| rows/s | 500.0 | 250.0 | 2.00 |",
		"![timeline](timeline.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestFailedRunShowsNoFigures(t *testing.T) {
	rep := sampleReport()
	rep.Runs[0].Verified = false
	rep.Runs[0].Error = "verification failed: target differs"
	var b bytes.Buffer
	WriteMarkdown(&b, rep, nil)
	md := b.String()
	if !strings.Contains(md, "| verified | **FAILED** | yes |") {
		t.Errorf("failed run not marked:\n%s", md)
	}
	if !strings.Contains(md, "| replication time (s) | — | 4.00 | — |") {
		t.Errorf("a failed run's figure is shown:\n%s", md)
	}
	var s bytes.Buffer
	SummaryTable(&s, []*Report{rep})
	if !strings.Contains(s.String(), "| repstream | FAILED |") {
		t.Errorf("summary:\n%s", s.String())
	}
}

func TestCPUMeter(t *testing.T) {
	m := newCPUMeter()
	// Our own process is a convenient pid whose CPU only grows.
	self := map[int]string{os.Getpid(): "walsender"}
	m.observe(self, true)
	end := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(end) { // burn a little CPU
	}
	m.observe(self, false)
	if got := m.total("walsender"); got < 0 {
		t.Errorf("total = %v", got)
	}
	if got := m.total("nothing"); got != 0 {
		t.Errorf("empty group total = %v", got)
	}
}

func BenchmarkParseProcStatCPU(b *testing.B) {
	line := []byte("1234 (postgres) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 1 0 100 1000 10 0 0 0 0")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseProcStatCPU(line); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProbeResults(b *testing.B) {
	p := NewProbe("", "", 0, nil)
	t0 := time.Now()
	for i := int64(1); i <= 3000; i++ { // 5 minutes of probes
		p.nextID = i
		p.sent[i] = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		p.seen[i] = p.sent[i].Add(time.Duration(i%50) * time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Results(t0, time.Time{}, time.Time{})
	}
}

// TestPlanRepeat: --repeat N gives N rounds, every second one reversed
// (ABBA), each run with its own index and round.
func TestPlanRepeat(t *testing.T) {
	specs, err := plan(Options{Systems: AllSystems, Repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	seen := map[int]bool{}
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s/%d", s.label, s.round))
		if seen[s.idx] {
			t.Errorf("index %d used twice (runs would share databases)", s.idx)
		}
		seen[s.idx] = true
	}
	want := "repstream #1/1,native #1/1,native #2/2,repstream #2/2,repstream #3/3,native #3/3"
	if strings.Join(got, ",") != want {
		t.Errorf("plan %s, want %s", strings.Join(got, ","), want)
	}
	if _, err := Run(context.Background(), Options{Workload: "conditions", Repeat: 2, Vary: "apply-parallelism=1,2"}); err == nil {
		t.Error("--repeat with --vary accepted")
	}
}

// TestWriteMarkdownRounds: ratios are taken within a round (not against the
// last native run) and summarised by their median; a round whose native run
// failed gives no ratio.
func TestWriteMarkdownRounds(t *testing.T) {
	mk := func(sys System, round int, secs float64, ok bool) *RunResult {
		r := &RunResult{System: sys, Label: fmt.Sprintf("%s #%d", sys, round), Round: round, Verified: ok}
		r.Replication = ReplFigures{Seconds: secs, RowsPerSec: 1000 / secs}
		return r
	}
	rep := sampleReport()
	rep.Settings.Repeat = 4
	rep.Runs = []*RunResult{
		mk("repstream", 1, 2, true), mk("native", 1, 4, true),
		mk("native", 2, 2, true), mk("repstream", 2, 3, true),
		mk("repstream", 3, 1, true), mk("native", 3, 10, true),
		mk("repstream", 4, 1, true), mk("native", 4, 1, false),
	}
	var b bytes.Buffer
	WriteMarkdown(&b, rep, nil)
	md := b.String()
	for _, want := range []string{
		"## Over 4 rounds",
		"| replication time (s) | **0.50** | 0.10 | 1.50 | 0.50, 1.50, 0.10 |",
		// the main table compares each repstream run with its own round's native
		"| replication time (s) | 2.00 | 4.00 | 2.00 | 3.00 | 1.00 | 10.00 | 1.00 | — | 0.50 | 1.50 | 0.10 | — |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	var s bytes.Buffer
	SummaryTable(&s, []*Report{rep})
	if !strings.Contains(s.String(), "| conditions | live | repstream #2 | yes | 0 | 3.00 | 333.3 |") || !strings.Contains(s.String(), "| 0.67 |") {
		t.Errorf("summary does not compare within the round:\n%s", s.String())
	}
}

func TestParseVmHWM(t *testing.T) {
	status := "Name:\trepstream\nVmPeak:\t 1300000 kB\nVmHWM:\t   76288 kB\nVmRSS:\t   70000 kB\n"
	if v, err := parseVmHWM([]byte(status)); err != nil || v != 76288<<10 {
		t.Errorf("parseVmHWM = %v, %v; want %d", v, err, 76288<<10)
	}
	for _, bad := range []string{"Name:\tzombie\n", "VmHWM:\t12 MB\n", "VmHWM:\tx kB\n"} {
		if v, err := parseVmHWM([]byte(bad)); err == nil {
			t.Errorf("parseVmHWM(%q) = %v, want an error", bad, v)
		}
	}
	// This process's own: running, so read.
	done := make(chan struct{})
	peak := watchPeakRSS(os.Getpid(), done)
	if v := peak(); v <= 0 {
		t.Errorf("watchPeakRSS of this process = %d", v)
	}
	close(done)
}
