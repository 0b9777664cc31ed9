// Package bench is repstream's performance lab: it re-runs the workloads of
// the seed studies (conditions, pedestals, pedestals-blob, batch, single-row,
// unrelated, fly, dbl) against repstream and against PostgreSQL's native
// logical replication in the same run, verifies that every target equals its
// source, and writes report.json, report.md and PNG charts.
//
// # How a run works
//
// Run starts (or connects to) one source and one target server. Each system
// run ("repstream", "native", or one repstream run per --vary value) gets its
// own fresh source database and its own fresh target database, in which the
// workload's tables and the probe table are created; the workload is then
// generated on that source database, so every system replicates the same
// data, one system after the other (never at the same time).
//
//   - live: replication runs while the workload loads; replication time is
//     from the first source commit to the last change visible on the target.
//     The measured interval begins once a probe committed after the
//     system's start is visible on the target, and fly's, after a warm-up
//     of the workload at its rate (--warm-up, 5 s): a start's first change
//     to each table reads the target's catalog on each apply connection, a
//     transient reported apart (start → first change visible), not in the
//     steady state's latency.
//   - backlog: the slot exists (repstream: a first `run --until-caught-up`
//     creates it; kafka: capture until its slot exists and apply until its
//     initial copy is done, both stopped; native: the subscription is created
//     disabled), the workload loads, then replication starts; replication
//     time is that catch-up.
//
// "Visible" is detected the same way for both systems: a marker row committed
// on the source after the load appears on the target, and then every
// replicated table's row count equals the source's. Then each table is
// compared (count and md5 of its ordered rows); a run that does not verify is
// reported FAILED and its figures are not shown.
//
// The kafka system is repstream's Kafka mode: `repstream capture` and
// `repstream apply`, two subprocesses, joined by a throwaway Kafka cluster
// of one broker, or three (--kafka-brokers), at Kafka's own 1 GiB heap
// (internal/kafkatest) that the first kafka run starts, warms up for 5 s
// and Run closes; the brokers' JVMs' CPU is counted too (kafka.go). With
// --kafka-targets 2 a second apply into a second target database stays
// stopped until the first target has everything, then catches up; the
// source's WAL retained for the slot is sampled for every system.
//
// repstream runs as a subprocess (the repstream binary itself), so its CPU
// time comes from the kernel (its wait's rusage) and its peak RSS from its
// /proc VmHWM, read while it runs (watchPeakRSS), and its per-component stats are
// polled from its --http /status endpoint once a second. PostgreSQL process
// CPU comes from /proc/<pid>/stat (walsender: the slot's active_pid; native
// apply worker: the target database's "logical replication worker" backends;
// target backends: every other backend of the target database in
// pg_stat_activity, except the bench's own connections). The report schema is documented in REPORT.md.
package bench
