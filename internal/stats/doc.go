// Package stats is the one statistics registry every pipeline stage reports
// to (design invariant 5): capture, queue, spill, coordinator and each apply
// worker own a [Component] in a shared [Registry] and count what passes
// through them (items, bytes, transactions) and where their wall time goes
// (busy, idle, waiting).
//
// Everything that shows performance reads this one source: the live progress
// line and the monitor (via [Rates] between two [Snapshot]s), the HTTP
// endpoint ([NewHandler]: JSON at /status, /metrics through [Collector], a
// prometheus.Collector that reads one snapshot per scrape, /healthz judged
// by [Health], and the live page at /), the bottleneck advisor and the
// benchmark reports. Facts that are not pipeline stages (the polled source,
// the target probe, the run's phase, conflicts, the initial copy's tables)
// live in components named in names.go.
//
// # States
//
// A component is always in exactly one [State]; [Component.SetState] closes
// the current interval and opens the next, so the three state times of a
// component add up to its age. Their meaning is fixed so that the advisor can
// compare stages:
//
//   - Busy: doing the component's own work (decoding, copying, applying).
//   - Idle: nothing to do, waiting for input from upstream (an empty queue,
//     no WAL from the server).
//   - Waiting: has work but is blocked by something else: downstream back
//     pressure (flow control), a lock, the memory budget, a dependency.
//
// A stage that is Busy most of an interval is the bottleneck; stages upstream
// of it show Waiting (flow control), stages downstream show Idle.
//
// State belongs to one goroutine's activity: a pool of workers registers one
// component per worker ("apply.0", "apply.1", …) rather than sharing one.
//
// # Cost
//
// [Component.Add] and [Component.AddTxns] are single atomic adds (no lock, no
// allocation) and may be called per row. [Component.SetState] takes a
// per-component mutex and reads the clock: call it per batch or per wait, not
// per row. Named counters and gauges are get-or-create under a lock: look them
// up once and keep the returned *atomic.Int64. [CommitLatency.Observe] takes
// a mutex and reads the clock (about 120 ns): once per transaction and stage.
//
// # Commit latency
//
// Besides the components, a registry keeps [CommitLatency]: histograms of
// how long after its source commit each transaction reached each step of
// this process (received, visible, durable; a Kafka capture's acked),
// which apply.Watermark records, since the start and over the last one to
// two LatencyWindows. Snapshots carry both; /metrics exports the summary
// repstream_commit_latency_seconds (the recent quantiles, count and sum
// since the start).
//
// Files:
//
//	doc.go       this overview
//	stats.go     Registry, Component, State, Snapshot
//	latency.go   CommitLatency, StageLatency, the stage names, OrderStages
//	names.go     the components and gauges that are not pipeline stages
//	rates.go     Rates between two snapshots
//	collector.go the Prometheus collector (/metrics), BuildInfo, SourceLagBytes, ApplyLag
//	health.go    Health (/healthz)
//	http.go      the HTTP endpoint and its server limits
//	live.go      LiveStatus: what /status reports next to the stats
//	page.go      the live page (web/)
//	human.go     HumanBytes
package stats
