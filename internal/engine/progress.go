package engine

import (
	"context"
	"strings"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/probe"
	"github.com/repstream/repstream/internal/stats"
)

func (e *Engine) liveMonitoring() stats.LiveMonitoring {
	snap := e.stats.Snapshot()
	var m stats.LiveMonitoring
	eng, _ := snap.Component(stats.CompEngine)
	m.Phase = eng.Info[stats.InfoPhase]
	src, _ := snap.Component(stats.CompSource)
	if lag, ok := stats.SourceLagBytes(snap); ok {
		m.SourceLagBytes = &lag
		m.SourceWALLSN = change.LSN(src.Gauges[stats.GaugeWALLSN]).String()
	}
	m.ApplyLagSeconds = stats.ApplyLag(snap).Seconds()
	m.SlotRetainedWALBytes = src.Gauges[stats.GaugeSlotRetained]
	m.SlotWALStatus = src.Info[stats.InfoWALStatus]
	m.Healthy, m.HealthReasons = stats.Health(snap, stats.HealthOptions{MaxApplyLag: e.cfg.HealthzMaxLag, Stale: 5 * probe.Interval})
	return m
}

// progressLoop logs once per interval: while the initial copy runs, its
// progress per table and in total (rows, bytes, ETA); while streaming, the
// ProgressLine (eager apply included).
func (e *Engine) progressLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	prev := e.stats.Snapshot()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := e.stats.Snapshot()
		eng, _ := cur.Component(stats.CompEngine)
		switch eng.Info[stats.InfoPhase] {
		case "copying":
			e.logCopyProgress(prev, cur)
		case "streaming":
			e.log.Info(ProgressLine(prev, cur))
		}
		prev = cur
	}
}

// CopyProgress is the initial copy's progress in one snapshot.
type CopyProgress struct {
	Tables, TablesDone     int
	Rows, Bytes, RowsTotal int64 // RowsTotal: estimates of tables not done, counts of those done
}

// logCopyProgress logs one line per table being copied and one in total,
// with rates over the interval and an ETA from the row estimates.
func (e *Engine) logCopyProgress(prev, cur stats.Snapshot) {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1
	}
	var tot CopyProgress
	for _, c := range cur.Components {
		table, ok := strings.CutPrefix(c.Name, stats.CopyPrefix)
		if !ok {
			continue
		}
		tot.Tables++
		tot.Rows += c.Items
		tot.Bytes += c.Bytes
		est := c.Gauges[stats.GaugeRowsEstimate]
		if c.Gauges[stats.GaugeDone] == 1 {
			tot.TablesDone++
			tot.RowsTotal += c.Items
			continue
		}
		tot.RowsTotal += max(est, c.Items)
		p, _ := prev.Component(c.Name)
		rate := float64(c.Items-p.Items) / dt
		e.log.Info("initial copy: table", "table", table, "rows", c.Items, "rows_estimate", est,
			"bytes", c.Bytes, "rows_per_second", int64(rate), "eta", eta(est-c.Items, rate))
	}
	var prevRows int64
	for _, c := range prev.Components {
		if strings.HasPrefix(c.Name, stats.CopyPrefix) {
			prevRows += c.Items
		}
	}
	rate := float64(tot.Rows-prevRows) / dt
	e.log.Info("initial copy", "tables_done", tot.TablesDone, "tables", tot.Tables,
		"rows", tot.Rows, "rows_estimate", tot.RowsTotal, "bytes", tot.Bytes, "size", stats.HumanBytes(tot.Bytes),
		"rows_per_second", int64(rate), "eta", eta(tot.RowsTotal-tot.Rows, rate))
}

// eta is the time left for rows at rate, or "unknown".
func eta(rows int64, rate float64) string {
	if rows <= 0 {
		return "0s"
	}
	if rate <= 0 {
		return "unknown"
	}
	d := time.Duration(float64(rows) / rate * float64(time.Second))
	if d < time.Second {
		return "<1s"
	}
	return d.Round(time.Second).String()
}
