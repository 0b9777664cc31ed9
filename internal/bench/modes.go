package bench

import (
	"fmt"
	"strings"
)

// Mode is how a run measures replication.
type Mode string

const (
	// ModeLive replicates while the workload loads the source (the default).
	ModeLive Mode = "live"
	// ModeBacklog loads the source with replication stopped, then measures
	// the catch-up.
	ModeBacklog Mode = "backlog"
)

func (m Mode) String() string { return string(m) }

// Set implements pflag.Value: anything but live or backlog is an error.
func (m *Mode) Set(v string) error {
	switch n := Mode(strings.TrimSpace(v)); n {
	case ModeLive, ModeBacklog:
		*m = n
		return nil
	}
	return fmt.Errorf("%q: want %s or %s", v, ModeLive, ModeBacklog)
}

// Type implements pflag.Value.
func (m *Mode) Type() string { return "live|backlog" }

// System is a replication system the bench runs.
type System string

const (
	SystemRepstream System = "repstream" // this engine (Options.Binary)
	SystemNative    System = "native"    // PostgreSQL's subscriptions
	SystemPglogical System = "pglogical" // pglogical 2 node + subscription (peer)
	SystemPgstream  System = "pgstream"  // xataio/pgstream postgres -> postgres with wal2json (peer)
	SystemPgcopydb  System = "pgcopydb"  // pgcopydb clone, initial-copy workload only (peer)
	// SystemKafka is this engine's Kafka mode: `repstream capture` and
	// `repstream apply` joined by a throwaway broker (kafka.go).
	SystemKafka System = "kafka"
)

// KnownSystems lists every system --systems accepts.
var KnownSystems = []System{SystemRepstream, SystemNative, SystemPglogical, SystemPgstream, SystemPgcopydb, SystemKafka}

// AllSystems is the default: every system, repstream first.
var AllSystems = []System{SystemRepstream, SystemNative}

func (s System) String() string { return string(s) }

// IsPeer is true for the systems the bench compares with that are neither
// repstream (direct or through Kafka) nor native.
func (s System) IsPeer() bool { return s != SystemRepstream && s != SystemNative && s != SystemKafka }

// ParseSystem parses a system name.
func ParseSystem(v string) (System, error) {
	s := System(strings.TrimSpace(v))
	for _, k := range KnownSystems {
		if s == k {
			return s, nil
		}
	}
	return "", fmt.Errorf("unknown system %q (want one of %s)", strings.TrimSpace(v), Systems(KnownSystems))
}

// Systems is a comma-separated list of systems, as --systems takes it.
type Systems []System

func (l Systems) String() string {
	names := make([]string, len(l))
	for i, s := range l {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

// Set implements pflag.Value: every entry must be a known system, once.
func (l *Systems) Set(v string) error {
	var out Systems
	for _, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		s, err := ParseSystem(part)
		if err != nil {
			return err
		}
		for _, have := range out {
			if have == s {
				return fmt.Errorf("system %q named twice", s)
			}
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return fmt.Errorf("%q: name at least one system (%s)", v, Systems(AllSystems))
	}
	*l = out
	return nil
}

// Type implements pflag.Value.
func (l *Systems) Type() string { return "systems" }
