package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// writeOutputs writes report.json, report.md and (with charts) the PNGs.
func writeOutputs(rep *Report, dir string, charts bool) error {
	var pngs []string
	var chartErr error
	if charts {
		pngs, chartErr = writeCharts(rep, dir)
	}
	if err := rep.WriteJSON(dir); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return fmt.Errorf("write report.md: %w", err)
	}
	WriteMarkdown(f, rep, pngs)
	if err := f.Close(); err != nil {
		return fmt.Errorf("write report.md: %w", err)
	}
	return chartErr
}

// figure is one row of the comparison table.
type figure struct {
	name  string
	unit  string
	lower bool // lower is better (times, CPU, bytes)
	get   func(*RunResult) float64
}

var figures = []figure{
	{"replication time", "s", true, func(r *RunResult) float64 { return r.Replication.Seconds }},
	{"rows/s", "", false, func(r *RunResult) float64 { return r.Replication.RowsPerSec }},
	{"MB/s (payload)", "", false, func(r *RunResult) float64 { return r.Replication.MBPerSec }},
	{"last commit → visible", "s", true, func(r *RunResult) float64 { return r.Replication.LastCommitToVisibleSeconds }},
	{"catch-up after load / start", "s", true, func(r *RunResult) float64 { return r.Replication.CatchUpSeconds }},
	{"start → first change visible (live)", "s", true, func(r *RunResult) float64 { return r.Replication.StartToVisibleSeconds }},
	{"probe latency p50", "ms", true, func(r *RunResult) float64 { return r.Latency.P50Ms }},
	{"probe latency p95", "ms", true, func(r *RunResult) float64 { return r.Latency.P95Ms }},
	{"probe latency p99", "ms", true, func(r *RunResult) float64 { return r.Latency.P99Ms }},
	{"probe latency max", "ms", true, func(r *RunResult) float64 { return r.Latency.MaxMs }},
	{"engine CPU (repstream / peer process)", "s", true, func(r *RunResult) float64 { return r.Resources.EngineCPUSeconds }},
	{"engine peak RSS", "MiB", true, func(r *RunResult) float64 { return float64(r.Resources.EnginePeakRSSBytes) / (1 << 20) }},
	{"walsender CPU", "s", true, func(r *RunResult) float64 { return r.Resources.WalsenderCPUSeconds }},
	{"walsender waiting for a CPU", "s", true, func(r *RunResult) float64 { return r.Resources.WalsenderRunQueueSeconds }},
	{"apply worker CPU (native / pglogical)", "s", true, func(r *RunResult) float64 { return r.Resources.ApplyWorkerCPUSeconds }},
	{"target backends CPU", "s", true, func(r *RunResult) float64 { return r.Resources.TargetBackendsCPUSeconds }},
	{"source backends CPU", "s", true, func(r *RunResult) float64 { return r.Resources.SourceBackendsCPUSeconds }},
	{"broker CPU (kafka)", "s", true, func(r *RunResult) float64 { return r.Resources.BrokerCPUSeconds }},
	{"total CPU", "s", true, func(r *RunResult) float64 { return r.Resources.TotalCPUSeconds }},
	{"source WAL", "MB", true, func(r *RunResult) float64 { return float64(r.WAL.SourceBytes) / 1e6 }},
	{"target WAL", "MB", true, func(r *RunResult) float64 { return float64(r.WAL.TargetBytes) / 1e6 }},
	{"target/source WAL", "×", true, func(r *RunResult) float64 { return r.WAL.Ratio }},
	{"source WAL retained for the slot, max", "MB", true, func(r *RunResult) float64 { return float64(r.WAL.SourceRetainedMaxBytes) / 1e6 }},
	{"engine spill", "MB", true, func(r *RunResult) float64 { return float64(r.Spill.EngineBytes) / 1e6 }},
	{"walsender spill", "MB", true, func(r *RunResult) float64 { return float64(r.Spill.SlotSpillBytes) / 1e6 }},
	{"walsender streamed", "MB", true, func(r *RunResult) float64 { return float64(r.Spill.SlotStreamBytes) / 1e6 }},
	{"source load time", "s", true, func(r *RunResult) float64 { return r.Load.Seconds }},
	{"source load rows/s", "", false, func(r *RunResult) float64 { return r.Load.RowsPerSec }},
}

func fmtFig(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// WriteMarkdown renders the report as Markdown: settings, the comparison
// table (each system's figure and the ratio repstream/native), verification
// and the charts.
func WriteMarkdown(w io.Writer, rep *Report, pngs []string) {
	fmt.Fprintf(w, "# repstream bench: %s (%s mode)\n\n", rep.Workload, rep.Mode)
	fmt.Fprintf(w, "%s.\n\n", rep.Description)
	m := rep.Machine
	fmt.Fprintf(w, "- started %s on %d CPUs, %.1f GiB RAM, %s, %s\n", rep.Started, m.CPUs, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.GoVersion)
	fmt.Fprintf(w, "- source: %s\n- target: %s\n", firstWords(m.SourceVersion, 2), firstWords(m.TargetVersion, 2))
	var params []string
	for _, k := range sortedKeys(rep.Settings.Params) {
		params = append(params, k+"="+rep.Settings.Params[k])
	}
	fmt.Fprintf(w, "- workload parameters: %s\n", strings.Join(params, ", "))
	if len(rep.Settings.RepstreamFlags) > 0 {
		fmt.Fprintf(w, "- repstream flags: `%s`\n", strings.Join(rep.Settings.RepstreamFlags, " "))
	}
	if rep.Settings.Vary != "" {
		fmt.Fprintf(w, "- varied: `%s`\n", rep.Settings.Vary)
	}
	fmt.Fprintf(w, "- native: subscription WITH (%s)\n", rep.Settings.Native["subscription_options"])
	if rep.Settings.Connection != "" {
		fmt.Fprintf(w, "- connections (both systems): %s\n", rep.Settings.Connection)
	}
	fmt.Fprintf(w, "- repstream: values in binary (pgoutput binary, binary COPY) when every column has the same built-in type on both sides, else text; `--binary=false` forces text\n")
	if rep.Settings.Kafka != "" {
		fmt.Fprintf(w, "- kafka: %s\n", rep.Settings.Kafka)
	}
	for _, k := range sortedKeys(rep.Settings.Peers) {
		fmt.Fprintf(w, "- %s: %s\n", k, rep.Settings.Peers[k])
	}
	for _, k := range sortedKeys(rep.Settings.Skipped) {
		fmt.Fprintf(w, "- **skipped %s**: %s\n", k, rep.Settings.Skipped[k])
	}
	fmt.Fprintf(w, "- %s\n\n", rep.Settings.Generation)

	if len(rep.DBL) > 0 {
		writeDBLMarkdown(w, rep)
	}
	if len(rep.Runs) > 0 {
		writeRunsMarkdown(w, rep)
	}
	for _, p := range pngs {
		fmt.Fprintf(w, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
	}
}

func writeRunsMarkdown(w io.Writer, rep *Report) {
	runs := rep.Runs
	var native *RunResult
	for _, r := range runs {
		if r.System == SystemNative {
			native = r
		}
	}
	fmt.Fprintf(w, "## Results\n\n| figure |")
	for _, r := range runs {
		fmt.Fprintf(w, " %s |", r.Label)
	}
	withRatio := native != nil && len(runs) > 1
	if withRatio {
		for _, r := range runs {
			if r.System != SystemNative {
				fmt.Fprintf(w, " %s / native |", r.Label)
			}
		}
	}
	fmt.Fprintf(w, "\n|---|")
	for range runs {
		fmt.Fprintf(w, "---:|")
	}
	if withRatio {
		for _, r := range runs {
			if r.System != SystemNative {
				fmt.Fprintf(w, "---:|")
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| verified |")
	for _, r := range runs {
		if r.Verified {
			fmt.Fprintf(w, " yes |")
		} else {
			fmt.Fprintf(w, " **FAILED** |")
		}
	}
	if withRatio {
		for _, r := range runs {
			if r.System != SystemNative {
				fmt.Fprintf(w, " |")
			}
		}
	}
	fmt.Fprintln(w)
	for _, f := range figuresFor(rep) {
		name := f.name
		if f.unit != "" {
			name += " (" + f.unit + ")"
		}
		fmt.Fprintf(w, "| %s |", name)
		for _, r := range runs {
			if !r.Verified {
				fmt.Fprintf(w, " — |")
				continue
			}
			fmt.Fprintf(w, " %s |", fmtFig(f.get(r)))
		}
		if withRatio {
			for _, r := range runs {
				if r.System == SystemNative {
					continue
				}
				n := nativeOf(runs, r)
				if n == nil {
					fmt.Fprintf(w, " — |")
					continue
				}
				a, b := f.get(r), f.get(n)
				if !r.Verified || !n.Verified || b == 0 {
					fmt.Fprintf(w, " — |")
					continue
				}
				fmt.Fprintf(w, " %.2f |", a/b)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nRows: %s", loadSummary(runs))
	for _, r := range runs {
		if r.Load.SourceDBBytes > 0 {
			fmt.Fprintf(w, " Source database: %.0f MB (tables and indexes).", float64(r.Load.SourceDBBytes)/1e6)
			break
		}
	}
	if isCopyReport(rep) {
		fmt.Fprintf(w, "\n\n%s\n\n", copyNote)
		if rep.Settings.Params["pre_made"] == "true" {
			fmt.Fprintf(w, "%s\n\n", preMadeNote)
		}
		writeCopyTablesMarkdown(w, runs)
	} else {
		fmt.Fprintf(w, "\n\nReplication time: live mode, first source commit → last change visible on the target; backlog mode, replication start → last change visible. ")
		fmt.Fprintf(w, "Probe: a row committed on the source every 100 ms, polled on the target every eighth of its age (250 µs to 10 ms) until seen. CPU from /proc; the native apply worker is counted in the target backends.\n\n")
	}
	writeBottlenecks(w, runs)
	writeCommitLatency(w, runs)

	if rep.Settings.Repeat > 1 {
		writeRoundsMarkdown(w, rep)
	}
	writeKafkaDirect(w, rep)
	writeStoppedTargets(w, rep)
	fmt.Fprintf(w, "## Verification\n\n| run | table | source rows | target rows | equal |\n|---|---|---:|---:|---|\n")
	for _, r := range runs {
		if len(r.Tables) == 0 {
			fmt.Fprintf(w, "| %s | — | | | **FAILED**: %s |\n", r.Label, oneLine(r.Error))
		}
		for _, t := range r.Tables {
			eq := "yes (count + md5)"
			if !t.Replicated {
				eq = "yes (not replicated: empty on target)"
			}
			if !t.Equal {
				eq = "**NO**"
			}
			fmt.Fprintf(w, "| %s | %s | %d | %d | %s |\n", r.Label, t.Table, t.SourceRows, t.TargetRows, eq)
		}
		if r.Error != "" && len(r.Tables) > 0 {
			fmt.Fprintf(w, "| %s | | | | **FAILED**: %s |\n", r.Label, oneLine(r.Error))
		}
	}
	fmt.Fprintln(w)
}

func loadSummary(runs []*RunResult) string {
	for _, r := range runs {
		if r.Verified {
			return fmt.Sprintf("%d row changes replicated in %d source transactions (%d rows written on the source, %.1f MB payload).",
				r.Load.Rows, r.Load.Txns, r.Load.SourceRows, float64(r.Load.PayloadBytes)/1e6)
		}
	}
	return "no verified run."
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.ReplaceAll(s, "|", "/")
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

// nativeOf is the native run r is compared with: the one of r's round (with
// --repeat), else the last native run; nil if there is none.
func nativeOf(runs []*RunResult, r *RunResult) *RunResult { return baseOf(runs, r, SystemNative) }

// baseOf is the run of system base that r is compared with: the one of r's
// round (with --repeat), else the last one; nil if there is none.
func baseOf(runs []*RunResult, r *RunResult, base System) *RunResult {
	var n *RunResult
	for _, x := range runs {
		if x.System == base && (r.Round == 0 || x.Round == r.Round) {
			n = x
		}
	}
	return n
}

// systemRoundRatios returns f's sys/base ratio of every round in which
// both runs verified, in round order.
func systemRoundRatios(runs []*RunResult, f figure, sys, base System) []float64 {
	var out []float64
	for _, r := range runs {
		if r.System != sys || !r.Verified {
			continue
		}
		n := baseOf(runs, r, base)
		if n == nil || !n.Verified || f.get(n) == 0 {
			continue
		}
		out = append(out, f.get(r)/f.get(n))
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// writeRoundsMarkdown summarises --repeat: per figure, the median of the
// rounds' repstream/native ratios, their range, and each round's ratio.
func writeRoundsMarkdown(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "## Over %d rounds\n\nEach round ran both systems on fresh databases, every second round in reverse order; a ratio compares the two runs of one round.\n\n", rep.Settings.Repeat)
	var systems []System
	for _, r := range rep.Runs {
		if r.System != SystemNative && !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
	}
	for _, sys := range systems {
		writeSystemRounds(w, rep, sys, SystemNative)
	}
}

// writeKafkaDirect compares the kafka system with repstream's direct mode
// (`run`), round by round, when both ran.
func writeKafkaDirect(w io.Writer, rep *Report) {
	var kafka, direct bool
	for _, r := range rep.Runs {
		kafka = kafka || r.System == SystemKafka
		direct = direct || r.System == SystemRepstream
	}
	if !kafka || !direct {
		return
	}
	fmt.Fprintf(w, "## Kafka path against direct mode\n\nkafka (`repstream capture` and `repstream apply` through a broker) over repstream (`repstream run`), each run against the repstream run of its round.\n\n")
	writeSystemRounds(w, rep, SystemKafka, SystemRepstream)
}

// writeStoppedTargets reports the kafka runs' second targets (stopped
// while the workload loaded) beside the source's WAL: what the source kept
// for the slot at most against all it wrote, which is what a slot of its
// own would have kept for a target stopped that long.
func writeStoppedTargets(w io.Writer, rep *Report) {
	var rows []string
	for _, r := range rep.Runs {
		st := r.StoppedTarget
		if st == nil {
			continue
		}
		verified := "yes (count + md5)"
		if !st.Verified {
			verified = "**NO**"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", r.Label, fmtFig(st.StoppedSeconds), fmtFig(st.CatchUpSeconds),
			fmtFig(st.ApplyCPUSeconds), fmtFig(float64(r.WAL.SourceRetainedMaxBytes)/1e6), fmtFig(float64(r.WAL.SourceBytes)/1e6), verified))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## A stopped target\n\nThe kafka system's second target: its apply stayed stopped from the system's start until the first target had everything, "+
		"then caught up from the topic. Retained: the most WAL the source kept for the slot at any sample (four a second) of the run, "+
		"the second target's catch-up included; written: the source's WAL over the run, what a slot of the stopped target's own would have kept.\n\n")
	fmt.Fprintf(w, "| run | stopped (s) | its catch-up (s) | its apply CPU (s) | source WAL retained, max (MB) | source WAL written (MB) | verified |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, row := range rows {
		fmt.Fprintln(w, row)
	}
	fmt.Fprintln(w)
}

func writeSystemRounds(w io.Writer, rep *Report, sys, base System) {
	fmt.Fprintf(w, "| figure | median %s / %s | min | max | per round |\n|---|---:|---:|---:|---|\n", sys, base)
	for _, f := range figuresFor(rep) {
		rs := systemRoundRatios(rep.Runs, f, sys, base)
		if len(rs) == 0 || slices.Max(rs) == 0 { // e.g. the native apply worker's CPU
			continue
		}
		per := make([]string, len(rs))
		for i, x := range rs {
			per[i] = fmt.Sprintf("%.2f", x)
		}
		name := f.name
		if f.unit != "" {
			name += " (" + f.unit + ")"
		}
		fmt.Fprintf(w, "| %s | **%.2f** | %.2f | %.2f | %s |\n", name, median(rs), slices.Min(rs), slices.Max(rs), strings.Join(per, ", "))
	}
	fmt.Fprintln(w)
}

// SummaryTable renders a compact one-line-per-run table (the `make bench`
// summary).
func SummaryTable(w io.Writer, reps []*Report) {
	fmt.Fprintf(w, "| workload | mode | system | verified | rows | repl s | rows/s | MB/s | commit→visible s | p99 ms | total CPU s | tgt/src WAL | ratio rows/s rs/native |\n")
	fmt.Fprintf(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, rep := range reps {
		for _, r := range rep.Runs {
			native := nativeOf(rep.Runs, r)
			if native != nil && !native.Verified {
				native = nil
			}
			ver := "yes"
			if !r.Verified {
				ver = "FAILED"
			}
			ratio := ""
			if r.System != SystemNative && r.Verified && native != nil && native.Replication.RowsPerSec > 0 {
				ratio = fmt.Sprintf("%.2f", r.Replication.RowsPerSec/native.Replication.RowsPerSec)
			}
			if !r.Verified {
				fmt.Fprintf(w, "| %s | %s | %s | FAILED | | | | | | | | | |\n", rep.Workload, rep.Mode, r.Label)
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", rep.Workload, rep.Mode, r.Label, ver,
				r.Load.Rows, fmtFig(r.Replication.Seconds), fmtFig(r.Replication.RowsPerSec), fmtFig(r.Replication.MBPerSec),
				fmtFig(r.Replication.LastCommitToVisibleSeconds), fmtFig(r.Latency.P99Ms), fmtFig(r.Resources.TotalCPUSeconds),
				fmtFig(r.WAL.Ratio), ratio)
		}
		for _, d := range rep.DBL {
			_ = d
		}
	}
}
