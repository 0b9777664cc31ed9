package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/repstream/repstream/internal/stats"
)

// SchemaVersion is the version of report.json's layout (see REPORT.md).
const SchemaVersion = 1

// Report is everything one `repstream bench` invocation measured; it is
// written as report.json. Field meanings and units are in REPORT.md.
type Report struct {
	SchemaVersion int          `json:"schema_version"`
	Workload      string       `json:"workload"`
	Description   string       `json:"description"`
	Mode          Mode         `json:"mode"`
	Started       string       `json:"started"` // RFC 3339
	Settings      Settings     `json:"settings"`
	Machine       Machine      `json:"machine"`
	Runs          []*RunResult `json:"runs"`
	// DBL holds the dbl workload's per-test figures (nil for other workloads).
	DBL []DBLResult `json:"dbl,omitempty"`
}

// Settings records how the run was configured.
type Settings struct {
	Scale   float64           `json:"scale"`
	Rows    int64             `json:"rows"`
	Params  map[string]string `json:"params"`
	Systems []System          `json:"systems"`
	// Skipped are the systems asked for but not run, with the reason (and
	// the command that installs a missing peer).
	Skipped map[string]string `json:"skipped,omitempty"`
	// Peers describes how each peer was set up.
	Peers map[string]string `json:"peers,omitempty"`
	// Kafka describes how the kafka system was set up ("" without it).
	Kafka          string            `json:"kafka,omitempty"`
	Vary           string            `json:"vary,omitempty"`
	Repeat         int               `json:"repeat,omitempty"`
	RepstreamFlags []string          `json:"repstream_flags"`
	Native         map[string]string `json:"native"`
	ServerSettings map[string]string `json:"server_settings"`
	OwnClusters    bool              `json:"own_clusters"`
	Connection     string            `json:"connection"`
	Generation     string            `json:"generation"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs            int    `json:"cpus"`
	MemoryBytes     int64  `json:"memory_bytes"`
	Kernel          string `json:"kernel"`
	GoVersion       string `json:"go_version"`
	SourceVersion   string `json:"source_version"`
	TargetVersion   string `json:"target_version"`
	SourceServerNum int    `json:"source_server_version_num"`
}

// RunResult is one system's run of the workload.
type RunResult struct {
	System System `json:"system"` // "repstream", "kafka", "native", or a peer: "pglogical", "pgstream", "pgcopydb"
	Label  string `json:"label"`  // system plus the varied setting, e.g. "repstream apply-parallelism=2"
	// VaryValue is the value of the varied setting ("" without --vary).
	VaryValue string `json:"vary_value,omitempty"`
	// Round is the run's round with --repeat (1-based; 0 without it).
	Round int `json:"round,omitempty"`
	// Verified is true only when every replicated table equals the source.
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`

	Load        LoadFigures   `json:"load"`
	Replication ReplFigures   `json:"replication"`
	Latency     LatencyFigure `json:"latency"`
	Resources   Resources     `json:"resources"`
	WAL         WALFigures    `json:"wal"`
	Spill       SpillFigures  `json:"spill"`
	Tables      []TableCheck  `json:"tables"`
	// CopyTables (initial-copy workload) are the per-table completion times.
	CopyTables []CopyTableTime `json:"copy_tables,omitempty"`

	// Timeline is one sample a second of the target's applied row rate.
	Timeline []TimelinePoint `json:"timeline"`
	// Probes are the latency probe's observations.
	Probes []ProbePoint `json:"probes"`
	// Components are repstream's per-component rates, one entry a second.
	Components []ComponentSample `json:"components,omitempty"`
	// FinalStats is repstream's last stats snapshot before it was stopped.
	FinalStats *stats.Snapshot `json:"final_stats,omitempty"`
	// Bottleneck is repstream's bottleneck over the measured interval by
	// the advisor's rule (monitor.Advise): a component, "apply" for the
	// workers together, or "none"; BottleneckWorker the busiest worker.
	Bottleneck       string `json:"bottleneck,omitempty"`
	BottleneckWorker string `json:"bottleneck_worker,omitempty"`
	// CaptureFinalStats and CaptureBottleneck (kafka system) are the
	// capture half's; FinalStats, Bottleneck and Components are the
	// apply's.
	CaptureFinalStats *stats.Snapshot `json:"capture_final_stats,omitempty"`
	CaptureBottleneck string          `json:"capture_bottleneck,omitempty"`
	// StoppedTarget (kafka system, --kafka-targets 2) is the second
	// target's, stopped while the workload loaded.
	StoppedTarget *StoppedTarget `json:"stopped_target,omitempty"`
}

// StoppedTarget is the kafka system's second target: its apply stays
// stopped from the system's start until the first target has everything,
// then starts and catches up from the topic alone.
type StoppedTarget struct {
	StoppedSeconds float64 `json:"stopped_seconds"`  // from the system's start to its apply's
	CatchUpSeconds float64 `json:"catch_up_seconds"` // from its apply's start until every table's count equals the source's
	// ApplyCPUSeconds is its apply process's CPU (not in the engine's).
	ApplyCPUSeconds float64      `json:"apply_cpu_seconds"`
	Verified        bool         `json:"verified"`
	Tables          []TableCheck `json:"tables"`
}

// LoadFigures describe the workload's load on the source.
type LoadFigures struct {
	Seconds float64 `json:"seconds"`
	Rows    int64   `json:"rows"` // row changes (insert/update/delete) in replicated tables
	Txns    int64   `json:"txns"`
	// SourceRows counts every row written, including tables not replicated.
	SourceRows   int64   `json:"source_rows"`
	RowsPerSec   float64 `json:"rows_per_sec"`
	TxnsPerSec   float64 `json:"txns_per_sec"`
	PayloadBytes int64   `json:"payload_bytes"` // sum(pg_column_size(row)) of the replicated tables at the end
	// SourceDBBytes (initial-copy) is pg_database_size of the loaded source
	// database (tables, indexes, TOAST).
	SourceDBBytes int64 `json:"source_db_bytes,omitempty"`
}

// ReplFigures are the headline replication figures.
type ReplFigures struct {
	// Seconds: live mode, first source commit → last change visible on the
	// target; backlog mode, replication start → last change visible.
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"` // payload MB (10^6 bytes) per second
	// LastCommitToVisibleSeconds: from the last load transaction's commit on
	// the source to its changes visible on the target (in backlog mode this
	// includes the time replication was stopped: see CatchUpSeconds).
	LastCommitToVisibleSeconds float64 `json:"last_commit_to_visible_seconds"`
	// CatchUpSeconds: from replication start (backlog) or load end (live) to visible.
	CatchUpSeconds float64 `json:"catch_up_seconds"`
	// StartToVisibleSeconds (live mode): from the system's start to a
	// change committed once its slot is active visible on the target (the
	// warm-up before the measured interval).
	StartToVisibleSeconds float64 `json:"start_to_visible_seconds,omitempty"`
}

// LatencyFigure summarises the probe: commit on the source → visible on the target.
type LatencyFigure struct {
	Probes int     `json:"probes"`
	Seen   int     `json:"seen"`
	P50Ms  float64 `json:"p50_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Resources are CPU seconds and memory, from /proc and the kernel's rusage.
type Resources struct {
	EngineCPUSeconds    float64 `json:"engine_cpu_seconds"`
	EnginePeakRSSBytes  int64   `json:"engine_peak_rss_bytes"`
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds"`
	// WalsenderRunQueueSeconds: the time the slot's walsender was runnable
	// but waiting for a CPU (/proc/<pid>/schedstat), over the same
	// interval. The walsender decodes alone: when it is the bottleneck,
	// this is what the processes beside it on the machine cost it.
	WalsenderRunQueueSeconds float64 `json:"walsender_runqueue_seconds"`
	ApplyWorkerCPUSeconds    float64 `json:"apply_worker_cpu_seconds"`
	TargetBackendsCPUSeconds float64 `json:"target_backends_cpu_seconds"`
	// SourceBackendsCPUSeconds: the source database's backends other than
	// walsenders (the copy's COPY TO sessions); metered in the
	// initial-copy workload only (elsewhere the load's own session is there).
	SourceBackendsCPUSeconds float64 `json:"source_backends_cpu_seconds,omitempty"`
	// BrokerCPUSeconds (kafka system): the Kafka broker's JVM, utime+stime
	// from /proc/<pid>/stat at the system's start and at its stop.
	BrokerCPUSeconds float64 `json:"broker_cpu_seconds,omitempty"`
	// TotalCPUSeconds = engine + walsender + source backends + target
	// backends (the apply worker is one of the target backends) + broker.
	TotalCPUSeconds float64 `json:"total_cpu_seconds"`
}

// WALFigures are WAL bytes written during the measured interval.
type WALFigures struct {
	SourceBytes int64   `json:"source_bytes"`
	TargetBytes int64   `json:"target_bytes"`
	Ratio       float64 `json:"target_source_ratio"`
	// SourceRetainedMaxBytes is the most WAL the source kept for the
	// slot (pg_current_wal_lsn() - restart_lsn) at any sample of the
	// measured interval.
	SourceRetainedMaxBytes int64 `json:"source_retained_max_bytes"`
}

// SpillFigures count bytes written aside because a transaction did not fit.
type SpillFigures struct {
	EngineBytes     int64 `json:"engine_bytes"`      // repstream's spill files
	SlotSpillBytes  int64 `json:"slot_spill_bytes"`  // walsender's reorder buffer spill (pg_stat_replication_slots)
	SlotStreamBytes int64 `json:"slot_stream_bytes"` // bytes the walsender streamed before commit
}

// TableCheck is the verification of one table.
type TableCheck struct {
	Table      string `json:"table"`
	Replicated bool   `json:"replicated"`
	SourceRows int64  `json:"source_rows"`
	TargetRows int64  `json:"target_rows"`
	SourceMD5  string `json:"source_md5"`
	TargetMD5  string `json:"target_md5"`
	Equal      bool   `json:"equal"`
}

// TimelinePoint is one second of the target's applied changes.
type TimelinePoint struct {
	T          float64 `json:"t"` // seconds since the measured interval began
	RowsPerSec float64 `json:"rows_per_sec"`
	LagSeconds float64 `json:"lag_seconds"` // probe lag at that moment (age of the oldest unseen probe)
	// RetainedWALBytes is the WAL the source kept for the slot then.
	RetainedWALBytes int64 `json:"retained_wal_bytes"`
}

// ProbePoint is one probe row.
type ProbePoint struct {
	T         float64 `json:"t"`          // commit time, seconds since the measured interval began
	LatencyMs float64 `json:"latency_ms"` // -1 if never seen
}

// ComponentSample is one second of repstream's per-component rates.
type ComponentSample struct {
	T     float64      `json:"t"`
	Rates []stats.Rate `json:"rates"`
}

// DBLResult is one Benchware DBL test (dbl workload).
type DBLResult struct {
	Test          string  `json:"test"`        // DBL-12, DBL-11, DBL-22
	Replication   string  `json:"replication"` // none, repstream, native
	RowsPerCommit int     `json:"rows_per_commit"`
	Jobs          int     `json:"jobs"`
	Rows          int64   `json:"rows"`
	Txns          int64   `json:"txns"`
	Seconds       float64 `json:"seconds"`
	RowsPerSec    float64 `json:"rows_per_sec"`
	TPS           float64 `json:"tps"`
	ServiceMs     float64 `json:"sql_service_ms"` // mean time of one transaction's SQL, as the client saw it
	WALMBPerSec   float64 `json:"wal_mb_per_sec"`
	WALWrites     int64   `json:"wal_writes"`
	WALSyncs      int64   `json:"wal_syncs"`
	CPUBusyPct    float64 `json:"cpu_busy_pct"` // whole machine, from /proc/stat
}

// WriteJSON writes r to dir/report.json.
func (r *Report) WriteJSON(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	p := filepath.Join(dir, "report.json")
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// ReadReport reads a report.json.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("parse report %s: %w", path, err)
	}
	return &r, nil
}
