package bench

import (
	"fmt"
	"io"
	"slices"
)

// isCopyReport is true for a report of a copy workload (initial-copy).
func isCopyReport(rep *Report) bool {
	if w, err := Lookup(rep.Workload); err == nil {
		return w.Copy
	}
	return false
}

// copyFigures are the rows of an initial-copy report: time and CPU by
// process group (no probe, no load-side figures).
var copyFigures = []figure{
	{"copy time (start → every row on the target, done)", "s", true, func(r *RunResult) float64 { return r.Replication.Seconds }},
	{"rows/s", "", false, func(r *RunResult) float64 { return r.Replication.RowsPerSec }},
	{"MB/s (payload)", "", false, func(r *RunResult) float64 { return r.Replication.MBPerSec }},
	{"engine CPU (repstream / pgcopydb process tree)", "s", true, func(r *RunResult) float64 { return r.Resources.EngineCPUSeconds }},
	{"engine peak RSS", "MiB", true, func(r *RunResult) float64 { return float64(r.Resources.EnginePeakRSSBytes) / (1 << 20) }},
	{"walsender CPU (source)", "s", true, func(r *RunResult) float64 { return r.Resources.WalsenderCPUSeconds }},
	{"source backends CPU (COPY TO …)", "s", true, func(r *RunResult) float64 { return r.Resources.SourceBackendsCPUSeconds }},
	{"apply/sync workers CPU (native / pglogical)", "s", true, func(r *RunResult) float64 { return r.Resources.ApplyWorkerCPUSeconds }},
	{"target backends CPU (incl. workers)", "s", true, func(r *RunResult) float64 { return r.Resources.TargetBackendsCPUSeconds }},
	{"total CPU", "s", true, func(r *RunResult) float64 { return r.Resources.TotalCPUSeconds }},
	{"target WAL", "MB", true, func(r *RunResult) float64 { return float64(r.WAL.TargetBytes) / 1e6 }},
	{"source load time (not measured)", "s", true, func(r *RunResult) float64 { return r.Load.Seconds }},
}

// figuresFor is the figure list of a report.
func figuresFor(rep *Report) []figure {
	if isCopyReport(rep) {
		return copyFigures
	}
	return figures
}

const copyNote = "Copy time: from the system's start (repstream `run --snapshot --create-tables --until-caught-up`, native CREATE SUBSCRIPTION " +
	"with copy_data, pglogical create_subscription with synchronize_data, `pgcopydb clone`) until it reports the copy done " +
	"(exit 0, every table 'r' in pg_subscription_rel, every table synchronised) and every table's row count equals the source's. " +
	"repstream and pgcopydb start from an empty target database and create the tables (indexes after the data); native and pglogical " +
	"need the tables (with their indexes) created beforehand. CPU from /proc, sampled four times a second: engine = the process and " +
	"its waited-for children (rusage); walsenders and other backends of the source database; every backend of the target database. " +
	"A backend that lives less than a sample interval may be missed."

const preMadeNote = "Pre-made tables (--pre-made): every system starts on a target whose tables were made beforehand with their " +
	"primary keys and indexes, as pg_dump --schema-only makes them. repstream runs without --create-tables: it sets the empty " +
	"tables' keys and indexes aside for the copy and makes them again after it. pgcopydb clone runs with --drop-if-exists: it " +
	"drops the tables and makes them again from the source's definition, indexes after the data."

// writeCopyTablesMarkdown renders when each table's rows were all on the
// target, per run.
func writeCopyTablesMarkdown(w io.Writer, runs []*RunResult) {
	var tables []string
	for _, r := range runs {
		for _, t := range r.CopyTables {
			if !slices.Contains(tables, t.Table) {
				tables = append(tables, t.Table)
			}
		}
	}
	if len(tables) == 0 {
		return
	}
	fmt.Fprintf(w, "### Per table: seconds from start until all its rows were inserted on the target\n\n| table | rows |")
	for _, r := range runs {
		fmt.Fprintf(w, " %s |", r.Label)
	}
	fmt.Fprintf(w, "\n|---|---:|")
	for range runs {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, t := range tables {
		var rows int64
		cells := ""
		for _, r := range runs {
			cell := " — |"
			for _, c := range r.CopyTables {
				if c.Table == t {
					rows = c.Rows
					if c.Seconds >= 0 && r.Verified {
						cell = fmt.Sprintf(" %s |", fmtFig(c.Seconds))
					}
				}
			}
			cells += cell
		}
		fmt.Fprintf(w, "| %s | %d |%s\n", t, rows, cells)
	}
	fmt.Fprintf(w, "\nFrom the target's pg_stat_user_tables.n_tup_ins, which a backend reports at most once a second (±1 s); "+
		"indexes built after the data are not included (the copy time above is).\n\n")
}
