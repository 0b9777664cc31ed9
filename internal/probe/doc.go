// Package probe is the monitor's probes of the two servers: one small
// connection to each side (application_name repstream-monitor), polled
// every Interval, recording in the stats registry whether the side answers
// (gauges up and last_ok_unix_ns, info last_error, never a password) and,
// for the source, its WAL position and the slot's state. They feed
// /metrics, /status and /healthz. WALLoop reads the source's WAL position
// alone, for capture --kafka's record sizes.
//
// Files:
//
//	doc.go    this overview
//	probe.go  Loop, Options, Interval: the probes; pollSource: the source's WAL position and slot
//	wal.go    WALLoop, WALInterval: the source's WAL position every quarter second
package probe
