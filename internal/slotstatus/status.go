package slotstatus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// SlotStatus is what `repstream status` prints.
type SlotStatus struct {
	Slot           string  `json:"slot"`
	SourcePosition string  `json:"source_position"`
	Confirmed      string  `json:"confirmed_position"`
	Applied        string  `json:"applied_position"`
	LagBytes       int64   `json:"lag_bytes"`
	LagSeconds     float64 `json:"lag_seconds"` // -1 when unknown; with --kafka the target's (AddKafka), else the slot's flush lag
	RetainedBytes  int64   `json:"retained_wal_bytes"`
	Active         bool    `json:"active"`
	WALStatus      string  `json:"wal_status"`
	Snapshot       string  `json:"snapshot"`
	// InactiveSeconds is how long no repstream has streamed from the slot:
	// 0 while active, -1 when unknown (health.go).
	InactiveSeconds float64 `json:"inactive_seconds"`
	Invalidation    string  `json:"invalidation,omitempty"` // why the slot is invalidated (PostgreSQL 16+), "" when it is not
	// TablesNotCopied are the tables added or being copied (pending,
	// copying): the replication is not caught up while there are any.
	TablesNotCopied []string `json:"tables_not_copied,omitempty"`
	// ParkedTxns are the source transactions parked in the target's error
	// queue (--on-error park): the target lacks them until they are
	// retried or skipped (`repstream errors`).
	ParkedTxns int64 `json:"parked_txns"`
	// Kafka is the slot's topic as this target reads it (status --kafka;
	// kafka.go), nil without --kafka.
	Kafka *KafkaStatus `json:"kafka,omitempty"`

	targetOffset  int64  // the target's recorded kafka_offset (-1: none)
	targetTopicID string // and kafka_topic_id ("": none)
	// targetProg is the target's progress record, progressAge how long ago
	// it last advanced (repstream.progress.updated_at; -1: unknown).
	targetProg  target.Progress
	progressAge float64
	// copyAge is how long ago the record of the target's copies last
	// changed (target.CopyAge; -1: unknown or no copy under way), and
	// applyConnected whether an apply of the slot has a session on the
	// target (target.ApplyConnected).
	copyAge        float64
	applyConnected bool
	// targetName names the target for people: database "app" on host:port.
	targetName string
	// unknownLag says why LagSeconds is unknown ("": the slot's
	// repstream is not connected).
	unknownLag string
}

// Status reads a slot's positions from the source and the target.
func Status(ctx context.Context, sourceDSN, targetDSN, slot string) (SlotStatus, error) {
	st := SlotStatus{Slot: slot, LagSeconds: -1}
	src, err := install.ConnectSource(ctx, sourceDSN)
	if err != nil {
		return st, err
	}
	defer src.Close(context.Background())
	var confirmed, walStatus *string
	var retained *int64
	var cur string
	err = src.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, s.confirmed_flush_lsn::text, s.wal_status, s.active,
			pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint
		FROM pg_replication_slots s WHERE s.slot_name = $1`, slot).Scan(&cur, &confirmed, &walStatus, &st.Active, &retained)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, &SlotMissingError{Slot: slot}
	}
	if err != nil {
		return st, fmt.Errorf("read slot %q: %w", slot, err)
	}
	st.SourcePosition = cur
	if confirmed != nil {
		st.Confirmed = *confirmed
	}
	if walStatus != nil {
		st.WALStatus = *walStatus
	}
	if retained != nil {
		st.RetainedBytes = *retained
	}
	var lag *float64
	if err := src.QueryRow(ctx, `SELECT extract(epoch FROM coalesce(r.flush_lag, '0'::interval))::float8
		FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, slot).Scan(&lag); err == nil && lag != nil {
		st.LagSeconds = *lag
	}
	tgt, err := target.Connect(ctx, targetDSN, "repstream-status")
	if err != nil {
		return st, err
	}
	defer tgt.Close(context.Background())
	if err := readTarget(ctx, tgt, &st); err != nil {
		return st, err
	}
	applied := st.targetProg.Low
	for _, a := range st.targetProg.Applied {
		applied = max(applied, a)
	}
	st.Applied = applied.String()
	if err := readSlotHealth(ctx, src, tgt, &st); err != nil {
		return st, err
	}
	if st.ParkedTxns, err = errqueue.CountParked(ctx, tgt, slot); err != nil {
		return st, err
	}
	if c, err := change.ParseLSN(cur); err == nil && c > applied {
		st.LagBytes = int64(c - applied)
	}
	return st, nil
}

// readTarget reads what the target records of st.Slot: its progress (how
// long ago it advanced, its offset in the topic), the tables not copied,
// and, while a copy is under way, how long ago its record changed and
// whether an apply of the slot is connected to the target.
func readTarget(ctx context.Context, tgt *pgx.Conn, st *SlotStatus) error {
	slot := st.Slot
	c := tgt.Config()
	st.targetName = fmt.Sprintf("database %q on %s:%d", c.Database, c.Host, c.Port)
	prog, err := target.LoadProgress(ctx, tgt, slot)
	if err != nil {
		return fmt.Errorf("read progress of slot %q on the target: %w", slot, err)
	}
	st.Snapshot = string(prog.Snapshot)
	st.targetOffset, st.progressAge, st.copyAge, st.targetProg = -1, -1, -1, prog
	if prog.Exists {
		st.targetOffset, st.targetTopicID = prog.KafkaOffset, prog.KafkaTopicID
		age, ok, err := target.ProgressAge(ctx, tgt, slot)
		if err != nil {
			return err
		}
		if ok {
			st.progressAge = max(age.Seconds(), 0)
		}
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, slot)
	if err != nil {
		return err
	}
	for _, s := range syncs {
		if s.State != target.TableReady {
			st.TablesNotCopied = append(st.TablesNotCopied, s.String()+" ("+s.State+")")
		}
	}
	if prog.Exists && (prog.Snapshot == target.SnapshotRunning || len(st.TablesNotCopied) > 0) {
		age, ok, err := target.CopyAge(ctx, tgt, slot)
		if err != nil {
			return err
		}
		if ok {
			st.copyAge = max(age.Seconds(), 0)
		}
	}
	if prog.Exists {
		if st.applyConnected, err = target.ApplyConnected(ctx, tgt, slot); err != nil {
			return err
		}
	}
	return nil
}

// Format prints a SlotStatus for people.
func (s SlotStatus) Format(w io.Writer) {
	lag := "unknown (repstream is not connected)"
	if s.unknownLag != "" {
		lag = "unknown (" + s.unknownLag + ")"
	}
	if s.LagSeconds >= 0 {
		lag = fmt.Sprintf("%.3f s", s.LagSeconds)
	}
	fmt.Fprintf(w, "slot               %s (active: %v, wal_status: %s)\n", s.Slot, s.Active, s.WALStatus)
	fmt.Fprintf(w, "source position    %s\n", s.SourcePosition)
	fmt.Fprintf(w, "confirmed position %s\n", s.Confirmed)
	fmt.Fprintf(w, "applied position   %s\n", s.Applied)
	fmt.Fprintf(w, "lag                %s (%s)\n", stats.HumanBytes(s.LagBytes), lag)
	if len(s.TablesNotCopied) > 0 {
		fmt.Fprintf(w, "tables not copied  %s\n", strings.Join(s.TablesNotCopied, ", "))
	}
	if s.ParkedTxns > 0 {
		fmt.Fprintf(w, "parked             %d source transactions, not applied (repstream errors list)\n", s.ParkedTxns)
	}
	fmt.Fprintf(w, "retained WAL       %s\n", stats.HumanBytes(s.RetainedBytes))
	if s.Kafka != nil {
		s.Kafka.format(w)
	}
	switch {
	case s.Active:
	case s.InactiveSeconds >= 0:
		fmt.Fprintf(w, "inactive for       %s\n", (time.Duration(s.InactiveSeconds) * time.Second).String())
	default:
		fmt.Fprintf(w, "inactive for       unknown\n")
	}
}
