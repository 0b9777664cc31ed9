package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// Status reports the running engine's positions.
func (e *Engine) Status() stats.LiveStatus {
	s := stats.LiveStatus{Slot: e.cfg.Slot, UptimeSeconds: time.Since(e.start).Seconds()}
	if wm := e.watermark(); wm != nil {
		s.AppliedLow = wm.Low().String()
		s.FlushedLSN = wm.Flush().String()
		s.PendingTxns = wm.Pending()
	}
	if snap, ok := e.stats.Snapshot().Component("capture"); ok {
		s.ReceivedLSN = change.LSN(snap.Gauges["received_lsn"]).String()
	}
	if e.stopAt != 0 {
		s.StopAt = e.stopAt.String()
	}
	s.LiveMonitoring = e.liveMonitoring()
	return s
}

// ProgressLine summarises two snapshots of the registry in one line.
func ProgressLine(prev, cur stats.Snapshot) string {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1
	}
	rate := func(name string, f func(stats.ComponentSnapshot) int64) float64 {
		a, _ := prev.Component(name)
		b, _ := cur.Component(name)
		return float64(f(b)-f(a)) / dt
	}
	items := func(c stats.ComponentSnapshot) int64 { return c.Items }
	var applied, appliedTxns float64
	for _, c := range cur.Components {
		if strings.HasPrefix(c.Name, "apply.") || c.Name == "eager" { // eager apply counts too
			applied += rate(c.Name, items)
			appliedTxns += rate(c.Name, func(c stats.ComponentSnapshot) int64 { return c.Txns })
		}
	}
	q, _ := cur.Component("queue")
	sp, _ := cur.Component("spill")
	capt, _ := cur.Component("capture")
	lag := capt.Gauges["received_lsn"] - capt.Gauges["flushed_lsn"]
	if lag < 0 {
		lag = 0
	}
	return fmt.Sprintf("capture %s changes/s | queue %s in memory, %d txns waiting | spilled %s | apply %s rows/s, %s txns/s | unacknowledged %s",
		human(rate("capture", items)), bytesHuman(q.Gauges["memory_bytes"]), q.Gauges["txns_committed_pending"],
		bytesHuman(sp.Bytes), human(applied), human(appliedTxns), bytesHuman(lag))
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fK", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fK", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func bytesHuman(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}

// SlotStatus is what `repstream status` prints.
type SlotStatus struct {
	Slot           string  `json:"slot"`
	SourcePosition string  `json:"source_position"`
	Confirmed      string  `json:"confirmed_position"`
	Applied        string  `json:"applied_position"`
	LagBytes       int64   `json:"lag_bytes"`
	LagSeconds     float64 `json:"lag_seconds"` // -1 when unknown
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
	prog, err := target.LoadProgress(ctx, tgt, slot)
	if err != nil {
		return st, fmt.Errorf("read progress of slot %q on the target: %w", slot, err)
	}
	applied := prog.Low
	for _, a := range prog.Applied {
		applied = max(applied, a)
	}
	st.Applied = applied.String()
	st.Snapshot = string(prog.Snapshot)
	if err := readSlotHealth(ctx, src, tgt, &st); err != nil {
		return st, err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, slot)
	if err != nil {
		return st, err
	}
	for _, s := range syncs {
		if s.State != target.TableReady {
			st.TablesNotCopied = append(st.TablesNotCopied, s.String()+" ("+s.State+")")
		}
	}
	if c, err := change.ParseLSN(cur); err == nil && c > applied {
		st.LagBytes = int64(c - applied)
	}
	return st, nil
}

// Format prints a SlotStatus for people.
func (s SlotStatus) Format(w io.Writer) {
	lag := "unknown (repstream is not connected)"
	if s.LagSeconds >= 0 {
		lag = fmt.Sprintf("%.3f s", s.LagSeconds)
	}
	fmt.Fprintf(w, "slot               %s (active: %v, wal_status: %s)\n", s.Slot, s.Active, s.WALStatus)
	fmt.Fprintf(w, "source position    %s\n", s.SourcePosition)
	fmt.Fprintf(w, "confirmed position %s\n", s.Confirmed)
	fmt.Fprintf(w, "applied position   %s\n", s.Applied)
	fmt.Fprintf(w, "lag                %s (%s)\n", bytesHuman(s.LagBytes), lag)
	if len(s.TablesNotCopied) > 0 {
		fmt.Fprintf(w, "tables not copied  %s\n", strings.Join(s.TablesNotCopied, ", "))
	}
	fmt.Fprintf(w, "retained WAL       %s\n", bytesHuman(s.RetainedBytes))
	switch {
	case s.Active:
	case s.InactiveSeconds >= 0:
		fmt.Fprintf(w, "inactive for       %s\n", (time.Duration(s.InactiveSeconds) * time.Second).String())
	default:
		fmt.Fprintf(w, "inactive for       unknown\n")
	}
}

// Drop removes what repstream made for slot on both sides (install.Drop).
func Drop(ctx context.Context, sourceDSN, targetDSN, slot, publication, spillDir string, log *slog.Logger) error {
	return install.Drop(ctx, sourceDSN, targetDSN, slot, publication, spillDir, log)
}

// Flushed returns the position acknowledged as applied (0 before Run starts streaming).
func (e *Engine) Flushed() change.LSN {
	wm := e.watermark()
	if wm == nil {
		return 0
	}
	return wm.Flush()
}
