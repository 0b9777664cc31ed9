package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/stats"
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
	if e.cfg.Role != config.RoleRun {
		s.Role = string(e.cfg.Role)
		e.kafkaStatus(&s)
	}
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
		human(rate("capture", items)), stats.HumanBytes(q.Gauges["memory_bytes"]), q.Gauges["txns_committed_pending"],
		stats.HumanBytes(sp.Bytes), human(applied), human(appliedTxns), stats.HumanBytes(lag))
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
