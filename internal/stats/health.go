package stats

import (
	"fmt"
	"time"
)

// HealthOptions say when the engine is unhealthy.
type HealthOptions struct {
	// Judge enables the judgement (repstream_healthy; /healthz answers 200
	// without it).
	Judge bool
	// MaxApplyLag: apply lag above it is unhealthy (0: no limit).
	MaxApplyLag time.Duration
	// Stale: a side whose last successful probe is older than this is down
	// even if no probe has failed yet (a probe hangs). 0: 30 s.
	Stale time.Duration
}

// HealthReport is the JSON document /healthz serves.
type HealthReport struct {
	Status  string   `json:"status"` // "ok" or "unhealthy"
	Phase   string   `json:"phase,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
}

// Health judges a snapshot: healthy while the run starts, copies or
// replicates, unhealthy (with one reason per problem) when a probe of the
// source, the target or (Kafka mode) the brokers failed or is stale, the slot is lost (wal_status
// lost) or the apply lag passes opts.MaxApplyLag.
func Health(s Snapshot, opts HealthOptions) (bool, []string) {
	stale := opts.Stale
	if stale <= 0 {
		stale = 30 * time.Second
	}
	var reasons []string
	for _, side := range []string{CompSource, CompTarget, CompKafka} {
		cs, ok := s.Component(side)
		if !ok {
			continue // not probed yet
		}
		last := cs.Gauges[GaugeLastOKUnixNano]
		switch {
		case cs.Gauges[GaugeUp] == 0 && cs.Info[InfoLastError] != "":
			reasons = append(reasons, fmt.Sprintf("%s connection down: %s", side, cs.Info[InfoLastError]))
		case last > 0 && s.Time.Sub(time.Unix(0, last)) > stale:
			reasons = append(reasons, fmt.Sprintf("%s: no successful probe for %s", side, s.Time.Sub(time.Unix(0, last)).Round(time.Second)))
		}
	}
	if src, ok := s.Component(CompSource); ok {
		if src.Info[InfoWALStatus] == "lost" {
			reasons = append(reasons, "replication slot lost (wal_status lost): the WAL it needed was removed; the run cannot continue")
		}
	}
	if lag := ApplyLag(s); opts.MaxApplyLag > 0 && lag > opts.MaxApplyLag {
		reasons = append(reasons, fmt.Sprintf("apply lag %s exceeds %s", lag.Round(time.Second), opts.MaxApplyLag))
	}
	return len(reasons) == 0, reasons
}
