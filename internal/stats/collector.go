package stats

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// MetricsContentType is the Content-Type of the Prometheus text format 0.0.4
// (what WriteMetrics writes; /metrics negotiates with the scraper).
const MetricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// BuildInfo is what repstream_build_info reports.
type BuildInfo struct {
	Version   string // the release or VCS version (cli.BuildVersion)
	GoVersion string // runtime.Version()
	Revision  string // the VCS revision Go stamped into the binary, "" if none
}

// ReadBuildInfo completes version with the Go version and the VCS revision
// the binary was built from. Without a version (or with "dev") it is the
// module's version, else the short VCS revision; "dev" only when the binary
// records neither.
func ReadBuildInfo(version string) BuildInfo {
	bi := BuildInfo{Version: version, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				bi.Revision = s.Value
			}
		}
	}
	if bi.Version == "" || bi.Version == "dev" {
		switch {
		case ok && info.Main.Version != "" && info.Main.Version != "(devel)":
			bi.Version = info.Main.Version
		case bi.Revision != "":
			bi.Version = bi.Revision[:min(12, len(bi.Revision))]
		default:
			bi.Version = "dev"
		}
	}
	return bi
}

// CollectorOptions configure NewCollector.
type CollectorOptions struct {
	Build BuildInfo
	// Health, if set, judges the snapshot for repstream_healthy (see Health).
	Health HealthOptions
}

// Collector is a prometheus.Collector that reads one Snapshot of the
// registry per scrape and exports it (design invariant 5: the registry stays
// the one source; nothing is counted twice). Every family it can emit is
// described up front, so a prometheus.Registry checks it.
//
// Components whose name ends in ".N" (the apply workers "apply.0", ...) are
// exported as component="apply", worker="N"; every other component has
// worker="". Auxiliary components (source, target, engine, conflicts and
// the initial copy's "copy:" tables) get their own families instead of the
// per-stage ones.
type Collector struct {
	reg  *Registry
	opts CollectorOptions
}

// NewCollector returns the collector of r.
func NewCollector(r *Registry, opts CollectorOptions) *Collector {
	return &Collector{reg: r, opts: opts}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("repstream_"+name, help, labels, nil)
}

var (
	cw = []string{"component", "worker"}

	dBuild       = desc("build_info", "Build of the running repstream (always 1).", "version", "goversion", "revision")
	dUptime      = desc("uptime_seconds", "Seconds since the engine's stats registry was created.")
	dPhase       = desc("phase", "1 for the run's current phase (starting, copying, streaming, stopping).", "phase")
	dHealthy     = desc("healthy", "1 when /healthz answers 200, else 0.")
	dBusy        = desc("component_busy_seconds_total", "Seconds the component spent doing its own work.", cw...)
	dIdle        = desc("component_idle_seconds_total", "Seconds the component spent waiting for input from upstream.", cw...)
	dFlow        = desc("component_flow_control_seconds_total", "Seconds the component had work but was held back (flow control, memory budget, dependencies, locks).", cw...)
	dState       = desc("component_state", "1 for the state the component is in now (busy, idle, waiting).", "component", "worker", "state")
	dItems       = desc("component_items_total", "Items (changes, rows, messages: the component's unit) the component processed.", cw...)
	dBytes       = desc("component_bytes_total", "Bytes the component processed.", cw...)
	dTxns        = desc("component_transactions_total", "Transactions the component processed.", cw...)
	dCounter     = desc("component_events_total", "A named counter of the component (what it counts is its name).", "component", "worker", "name")
	dGauge       = desc("component_value", "A named gauge of the component (what it measures is its name).", "component", "worker", "name")
	dInfo        = desc("component_info", "A text fact about the component (always 1).", "component", "worker", "key", "value")
	dCapChanges  = desc("captured_changes_total", "Row changes decoded from the slot.")
	dCapBytes    = desc("captured_bytes_total", "Bytes of row changes decoded from the slot.")
	dCapTxns     = desc("captured_transactions_total", "Committed source transactions received.")
	dAppChanges  = desc("applied_changes_total", "Changes applied to the target (apply workers and eager apply).")
	dAppBytes    = desc("applied_bytes_total", "Bytes of changes applied to the target (apply workers and eager apply).")
	dAppTxns     = desc("applied_transactions_total", "Source transactions applied to the target (apply workers and eager apply).")
	dQueueMem    = desc("queue_memory_bytes", "Bytes of changes the queue holds in memory (bounded by --memory).")
	dQueueTxns   = desc("queue_transactions", "Transactions in the queue: in_progress (still streaming) or committed (waiting for apply).", "state")
	dSpillBytes  = desc("spill_bytes_total", "Bytes written to spill files.")
	dSpillFiles  = desc("spill_files", "Spill files on disk now.")
	dReceived    = desc("received_lsn", "The newest source WAL position received (as a number).")
	dAcked       = desc("acknowledged_lsn", "The WAL position acknowledged to the slot: everything below is durably applied.")
	dSourceWAL   = desc("source_wal_lsn", "The source's current WAL position (pg_current_wal_lsn(), polled).")
	dSourceLag   = desc("source_lag_bytes", "The source's current WAL position minus the position applied on the target.")
	dApplyLag    = desc("apply_lag_seconds", "Now minus the source commit time of the oldest committed transaction not yet applied; 0 when caught up.")
	dRetained    = desc("slot_retained_wal_bytes", "WAL the source keeps for the slot (current position minus restart_lsn).")
	dWALStatus   = desc("slot_wal_status", "1 for the slot's current wal_status (reserved, extended, unreserved, lost).", "status")
	dSlotActive  = desc("slot_active", "1 when a walsender streams from the slot.")
	dUp          = desc("connection_up", "1 when the engine's last probe of that side succeeded.", "side")
	dReconnects  = desc("reconnects_total", "Reconnections to the source or the target.", "side")
	dConflicts   = desc("conflicts_total", "Conflicts met while applying, by kind.", "kind")
	dCopyRows    = desc("copy_rows_total", "Rows of the table copied so far by the initial copy.", "table")
	dCopyBytes   = desc("copy_bytes_total", "Bytes (COPY text) of the table copied so far by the initial copy.", "table")
	dCopyRowsEst = desc("copy_rows_estimate", "Estimated rows of the table (pg_class.reltuples) when its copy started.", "table")
	dCopyByteEst = desc("copy_bytes_estimate", "Estimated size of the table on disk (relpages) when its copy started.", "table")
	dCopyDone    = desc("copy_done", "1 once the table's initial copy is complete.", "table")
	dCommitLat   = desc("commit_latency_seconds", "Seconds from a source transaction's commit (its commit timestamp) to a stage of this process: quantiles over the last 1 to 2 minutes (NaN: no transaction then), count and sum since it started. Stages: received (decoded), visible (committed on the target), durable (the target's WAL flushed past it), acked (capture --kafka: the brokers hold it).", "stage")
	dUnbuilt     = desc("indexes_not_built", "Indexes of the source that --create-tables could not build on the target and that are still missing there (`repstream tables list` names them); the tables replicate without them.")

	allDescs = []*prometheus.Desc{dBuild, dUptime, dPhase, dHealthy, dBusy, dIdle, dFlow, dState, dItems, dBytes, dTxns,
		dCounter, dGauge, dInfo, dCapChanges, dCapBytes, dCapTxns, dAppChanges, dAppBytes, dAppTxns, dQueueMem, dQueueTxns,
		dSpillBytes, dSpillFiles, dReceived, dAcked, dSourceWAL, dSourceLag, dApplyLag, dRetained, dWALStatus, dSlotActive,
		dUp, dReconnects, dConflicts, dCopyRows, dCopyBytes, dCopyRowsEst, dCopyByteEst, dCopyDone, dUnbuilt, dCommitLat}

	phases      = []string{"starting", "copying", "streaming", "stopping"}
	walStatuses = []string{"reserved", "extended", "unreserved", "lost"}
)

// Describe sends every family the collector can emit.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect takes one snapshot and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.reg.Snapshot()
	e := emitter{ch: ch, seen: map[string]bool{}}
	b := c.opts.Build
	if b.Version == "" {
		b = ReadBuildInfo(c.reg.Version())
	}
	e.gauge(dBuild, 1, b.Version, b.GoVersion, b.Revision)
	e.gauge(dUptime, s.Uptime)
	c.collectStages(&e, s)
	c.collectEngine(&e, s)
	for _, l := range s.CommitLatency {
		// Quantiles of the recent window (as client_golang's summaries
		// keep a sliding one), count and sum since the start.
		q := map[float64]float64{0.5: math.NaN(), 0.9: math.NaN(), 0.99: math.NaN()}
		if l.RecentCount > 0 {
			q = map[float64]float64{0.5: l.RecentP50 / 1000, 0.9: l.RecentP90 / 1000, 0.99: l.RecentP99 / 1000}
		}
		if m, err := prometheus.NewConstSummary(dCommitLat, uint64(l.Count), l.Mean*float64(l.Count)/1000, q, l.Stage); err == nil {
			ch <- m
		}
	}
}

func (c *Collector) collectStages(e *emitter, s Snapshot) {
	var appChanges, appBytes, appTxns float64
	for _, cs := range s.Components {
		if isAuxiliary(cs.Name) {
			continue
		}
		comp, worker := splitWorker(cs.Name)
		e.counter(dBusy, cs.BusySeconds, comp, worker)
		e.counter(dIdle, cs.IdleSeconds, comp, worker)
		e.counter(dFlow, cs.WaitingSeconds, comp, worker)
		for _, st := range []State{Busy, Idle, Waiting} {
			e.gauge(dState, b2f(cs.State == st.String()), comp, worker, st.String())
		}
		e.counter(dItems, float64(cs.Items), comp, worker)
		e.counter(dBytes, float64(cs.Bytes), comp, worker)
		e.counter(dTxns, float64(cs.Txns), comp, worker)
		for _, k := range sortedKeys(cs.Counters) {
			e.counter(dCounter, float64(cs.Counters[k]), comp, worker, k)
		}
		for _, k := range sortedKeys(cs.Gauges) {
			e.gauge(dGauge, float64(cs.Gauges[k]), comp, worker, k)
		}
		for _, k := range sortedKeys(cs.Info) {
			e.gauge(dInfo, 1, comp, worker, k, cs.Info[k])
		}
		switch comp {
		case "capture":
			e.counter(dCapChanges, float64(cs.Items))
			e.counter(dCapBytes, float64(cs.Bytes))
			e.counter(dCapTxns, float64(cs.Txns))
			e.gauge(dReceived, float64(cs.Gauges["received_lsn"]))
			e.gauge(dAcked, float64(cs.Gauges["flushed_lsn"]))
		case "queue":
			e.gauge(dQueueMem, float64(cs.Gauges["memory_bytes"]))
			e.gauge(dQueueTxns, float64(cs.Gauges["txns_in_progress"]), "in_progress")
			e.gauge(dQueueTxns, float64(cs.Gauges["txns_committed_pending"]), "committed")
		case "spill":
			e.counter(dSpillBytes, float64(cs.Bytes))
			e.gauge(dSpillFiles, float64(cs.Gauges["files"]))
		case "apply":
			appChanges += float64(cs.Items)
			appBytes += float64(cs.Bytes)
			appTxns += float64(cs.Txns)
		case "eager":
			appChanges += float64(cs.Items)
			appBytes += float64(cs.Bytes)
			appTxns += float64(cs.Txns)
		}
	}
	e.counter(dAppChanges, appChanges)
	e.counter(dAppBytes, appBytes)
	e.counter(dAppTxns, appTxns)
}

func (c *Collector) collectEngine(e *emitter, s Snapshot) {
	if eng, ok := s.Component(CompEngine); ok {
		for _, p := range phases {
			e.gauge(dPhase, b2f(eng.Info[InfoPhase] == p), p)
		}
	}
	if src, ok := s.Component(CompSource); ok {
		if lag, ok := SourceLagBytes(s); ok {
			e.gauge(dSourceWAL, float64(src.Gauges[GaugeWALLSN]))
			e.gauge(dSourceLag, float64(lag))
		}
		if src.Gauges[GaugeSlotExists] == 1 {
			e.gauge(dRetained, float64(src.Gauges[GaugeSlotRetained]))
			e.gauge(dSlotActive, float64(src.Gauges[GaugeSlotActive]))
			for _, st := range walStatuses {
				e.gauge(dWALStatus, b2f(src.Info[InfoWALStatus] == st), st)
			}
		}
	}
	if eng, ok := s.Component(CompEngine); ok {
		e.gauge(dApplyLag, ApplyLag(s).Seconds())
		e.gauge(dUnbuilt, float64(eng.Gauges[GaugeIndexesNotBuilt]))
	}
	reconnects := map[string]int64{}
	for _, cs := range s.Components {
		if side := reconnectSide(cs.Name); side != "" {
			reconnects[side] += cs.Counters["reconnects"]
		}
	}
	for _, side := range []string{CompSource, CompTarget} {
		e.counter(dReconnects, float64(reconnects[side]), side)
		if cs, ok := s.Component(side); ok {
			e.gauge(dUp, float64(cs.Gauges[GaugeUp]), side)
		}
	}
	if cs, ok := s.Component(CompKafka); ok && cs.Gauges[GaugeLastOKUnixNano] != 0 || ok && cs.Info[InfoLastError] != "" {
		e.gauge(dUp, float64(cs.Gauges[GaugeUp]), CompKafka) // the brokers (Kafka mode)
	}
	if cs, ok := s.Component(CompConflicts); ok {
		for _, k := range sortedKeys(cs.Counters) {
			e.counter(dConflicts, float64(cs.Counters[k]), k)
		}
	}
	for _, cs := range s.Components {
		table, ok := strings.CutPrefix(cs.Name, CopyPrefix)
		if !ok {
			continue
		}
		e.counter(dCopyRows, float64(cs.Items), table)
		e.counter(dCopyBytes, float64(cs.Bytes), table)
		e.gauge(dCopyRowsEst, float64(cs.Gauges[GaugeRowsEstimate]), table)
		e.gauge(dCopyByteEst, float64(cs.Gauges[GaugeBytesEstimate]), table)
		e.gauge(dCopyDone, float64(cs.Gauges[GaugeDone]), table)
	}
	if c.opts.Health.Judge {
		ok, _ := Health(s, c.opts.Health)
		e.gauge(dHealthy, b2f(ok))
	}
}

// SourceLagBytes is the source's current WAL position minus what is applied
// (the position acknowledged to the slot while streaming, the slot's
// confirmed position before), never negative; ok is false until the
// source's position has been polled.
func SourceLagBytes(s Snapshot) (int64, bool) {
	src, ok := s.Component(CompSource)
	if !ok || src.Gauges[GaugeWALLSN] == 0 {
		return 0, false
	}
	applied := src.Gauges[GaugeSlotConfirmed]
	if capt, ok := s.Component("capture"); ok && capt.Gauges["flushed_lsn"] > 0 {
		applied = capt.Gauges["flushed_lsn"]
	}
	return max(0, src.Gauges[GaugeWALLSN]-applied), true
}

// ApplyLag is the snapshot's time minus the source commit time of the oldest
// committed transaction not yet applied on the target (0 when there is none).
func ApplyLag(s Snapshot) time.Duration {
	eng, _ := s.Component(CompEngine)
	oldest := eng.Gauges[GaugeOldestUnapplied]
	if oldest <= 0 {
		return 0
	}
	return max(0, s.Time.Sub(time.Unix(0, oldest)))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// emitter sends const metrics, dropping a series already sent in this scrape
// (two free-text names can map to the same labels) and repairing label
// values that are not UTF-8, so that a scrape never fails.
type emitter struct {
	ch   chan<- prometheus.Metric
	seen map[string]bool
}

func (e *emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e.send(d, prometheus.CounterValue, v, labels)
}

func (e *emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.send(d, prometheus.GaugeValue, v, labels)
}

func (e *emitter) send(d *prometheus.Desc, t prometheus.ValueType, v float64, labels []string) {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	key := d.String() + "\xff" + strings.Join(labels, "\xff")
	if e.seen[key] {
		return
	}
	e.seen[key] = true
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return
	}
	e.ch <- m
}

// NewPrometheusRegistry returns a registry of its own (never the global
// default) with the registry's collector and Go's go_ and process_
// collectors.
func NewPrometheusRegistry(r *Registry, opts CollectorOptions) *prometheus.Registry {
	pr := prometheus.NewRegistry()
	pr.MustRegister(NewCollector(r, opts),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return pr
}

// MetricsHandler serves pr in the format the scraper asks for.
func MetricsHandler(pr *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(pr, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// WriteMetrics writes the snapshot collector's families (no go_ or process_
// ones) for r in the text format 0.0.4, sorted: what tests and tools compare.
func WriteMetrics(w io.Writer, r *Registry, opts CollectorOptions) error {
	pr := prometheus.NewRegistry()
	if err := pr.Register(NewCollector(r, opts)); err != nil {
		return err
	}
	mfs, err := pr.Gather()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	_, err = w.Write(buf.Bytes())
	return err
}
