package stats

import (
	"strconv"
	"strings"
)

// Names of the components and gauges that are not pipeline stages but facts
// the engine keeps in the registry for monitoring: the collector (/metrics),
// /healthz and the live page read them by these names, the engine writes them.
const (
	// CompSource holds what the engine polls from the source every few
	// seconds on a small connection of its own (see the Gauge* names below).
	// Reconnect counting adds a "reconnects" counter to it.
	CompSource = "source"
	// CompTarget holds the target's reachability; reconnect counting adds a
	// "reconnects" counter to it.
	CompTarget = "target"
	// CompEngine holds the run's phase (info "phase") and apply-lag input.
	CompEngine = "engine"
	// CompKafka is the Kafka mode's component: the topic's reader or
	// writer (counters, offsets) and the brokers' probe (GaugeUp,
	// GaugeLastOKUnixNano, InfoLastError, as for the source and target).
	CompKafka = "kafka"
	// CompConflicts has one counter per conflict kind (the kind is the
	// counter's name).
	CompConflicts = "conflicts"
	// CopyPrefix prefixes the component of one table of the initial copy:
	// "copy:schema.table". Its items and bytes are what was copied so far.
	CopyPrefix = "copy:"

	// Gauges of CompSource.
	GaugeWALLSN          = "wal_lsn"                 // pg_current_wal_lsn()
	GaugeSlotConfirmed   = "slot_confirmed_lsn"      // the slot's confirmed_flush_lsn
	GaugeSlotRetained    = "slot_retained_wal_bytes" // current WAL position minus the slot's restart_lsn
	GaugeSlotActive      = "slot_active"             // 1 when a walsender streams from the slot
	GaugeSlotExists      = "slot_exists"             // 1 when the slot exists
	InfoWALStatus        = "wal_status"              // the slot's wal_status (reserved, extended, unreserved, lost)
	GaugeUp              = "up"                      // CompSource and CompTarget: 1 when the last probe succeeded
	GaugeLastOKUnixNano  = "last_ok_unix_ns"         // CompSource and CompTarget: time of the last successful probe
	InfoLastError        = "last_error"              // CompSource and CompTarget: the last probe's error, "" after a success
	GaugeOldestUnapplied = "oldest_unapplied_commit_unix_ns"

	// Info of CompEngine.
	InfoPhase = "phase" // "starting", "copying", "streaming", "stopping"
	// GaugeIndexesNotBuilt (CompEngine): the source's indexes that
	// --create-tables could not build on the target and that are still
	// missing there.
	GaugeIndexesNotBuilt = "indexes_not_built"

	// Gauges of a copy component.
	GaugeRowsEstimate  = "rows_estimate"  // pg_class.reltuples (summed over partitions)
	GaugeBytesEstimate = "bytes_estimate" // relpages * block_size (summed over partitions)
	GaugeDone          = "done"           // 1 once the table is copied
)

// isAuxiliary reports whether a component is a fact holder rather than a
// pipeline stage (those get no busy/idle series).
func isAuxiliary(name string) bool {
	switch name {
	case CompSource, CompTarget, CompEngine, CompConflicts:
		return true
	}
	return strings.HasPrefix(name, CopyPrefix)
}

// splitWorker splits a component name into the stage and the worker:
// "apply.3" is ("apply", "3"); a name without a numeric suffix has worker "".
func splitWorker(name string) (component, worker string) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return name, ""
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name, ""
	}
	return name[:i], name[i+1:]
}

// reconnectSide is the side whose reconnects a component's "reconnects"
// counter counts: "source" for source* and capture, "target" for target*,
// the apply workers and eager apply; "" for the others.
func reconnectSide(name string) string {
	comp, _ := splitWorker(name)
	switch {
	case strings.HasPrefix(name, CompSource), comp == "capture":
		return CompSource
	case strings.HasPrefix(name, CompTarget), comp == "apply", comp == "eager":
		return CompTarget
	}
	return ""
}
