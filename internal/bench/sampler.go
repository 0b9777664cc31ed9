package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// sampler takes four samples a second during a system run: the PIDs and CPU of
// the walsender and the target's backends, the target's applied row rate
// (pg_stat_user_tables), the system's own statistics; and prints the live
// line.
//
// Invariants (under mu): src and tgt are used only while mu is held; points
// are in time order and only taken while measuring (after begin); lastTup
// and lastAt are the previous throughput reading.
type sampler struct {
	r      *runner
	label  string
	srcDSN string
	tgtDSN string
	slot   string
	tables []string
	probe  *Probe
	sys    replSystem
	load   *LoadEnv
	meter  *cpuMeter
	waits  *cpuMeter // the same processes' time waiting for a CPU
	start  time.Time
	// sourceBackends meters every backend of the source database (the
	// walsenders as "walsender", the others as "source"), not just the
	// slot's walsender: the initial copy's sessions.
	sourceBackends bool

	mu        sync.Mutex
	src, tgt  *pgx.Conn
	phase     string
	measuring bool
	t0        time.Time
	points    []TimelinePoint
	lastTup   int64
	lastAt    time.Time
	lastRate  float64
	// retainedMax is the most WAL the source kept for the slot
	// (pg_current_wal_lsn() - restart_lsn) at any sample; -1 before one.
	retainedMax int64
}

func newSampler(r *runner, sp runSpec, srcDSN, tgtDSN, slot string, tables []string, probe *Probe, sys replSystem) *sampler {
	return &sampler{r: r, label: sp.label, srcDSN: srcDSN, tgtDSN: tgtDSN, slot: slot, tables: tables, probe: probe,
		sys: sys, meter: newCPUMeter(), waits: newRunDelayMeter(), phase: "setup", start: time.Now(), retainedMax: -1}
}

func (s *sampler) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

func (s *sampler) connect(ctx context.Context) error {
	if s.src == nil {
		c, err := pgx.Connect(ctx, s.srcDSN)
		if err != nil {
			return err
		}
		s.src = c
	}
	if s.tgt == nil {
		c, err := pgx.Connect(ctx, s.tgtDSN)
		if err != nil {
			return err
		}
		s.tgt = c
	}
	return nil
}

func (s *sampler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.src != nil {
		s.src.Close(context.Background())
		s.src = nil
	}
	if s.tgt != nil {
		s.tgt.Close(context.Background())
		s.tgt = nil
	}
}

func (s *sampler) run(ctx context.Context) {
	defer s.close()
	// Four samples a second (the timeline of short runs), one live line and
	// one poll of the system's own statistics a second.
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sample(ctx, false)
		if i%4 == 0 {
			s.sys.poll(ctx)
			fmt.Fprintln(s.r.out, s.liveLine())
		}
	}
}

// begin starts the measured interval at t0.
func (s *sampler) begin(ctx context.Context, t0 time.Time) {
	s.mu.Lock()
	s.t0 = t0
	s.measuring = true
	s.mu.Unlock()
	s.sample(ctx, true)
}

func (s *sampler) sampleNow(ctx context.Context) { s.sample(ctx, false) }

// pids returns the PostgreSQL processes to meter, by group.
func (s *sampler) pids(ctx context.Context) map[int]string {
	out := map[int]string{}
	var ws *int32
	if err := s.src.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&ws); err == nil && ws != nil {
		out[int(*ws)] = "walsender"
	}
	if s.sourceBackends {
		s.sourcePids(ctx, out)
	}
	rows, err := s.tgt.Query(ctx, `SELECT pid, backend_type FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND coalesce(application_name, '') <> $1`, appName)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var pid int32
		var bt string
		if rows.Scan(&pid, &bt) == nil {
			if bt == "logical replication worker" || strings.HasPrefix(bt, "pglogical") {
				out[int(pid)] = "apply"
			} else {
				out[int(pid)] = "target"
			}
		}
	}
	return out
}

func (s *sampler) sample(ctx context.Context, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.measuring {
		return
	}
	if err := s.connect(ctx); err != nil {
		return
	}
	pids := s.pids(ctx)
	s.meter.observe(pids, first)
	s.waits.observe(pids, first)
	retained := s.retained(ctx)
	var tup int64
	err := s.tgt.QueryRow(ctx, "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables WHERE relname = ANY($1)", s.tables).Scan(&tup)
	if err != nil {
		return
	}
	now := time.Now()
	if first || s.lastAt.IsZero() {
		s.lastTup, s.lastAt = tup, now
		s.points = append(s.points, TimelinePoint{T: now.Sub(s.t0).Seconds(), LagSeconds: s.probe.Lag(now).Seconds(), RetainedWALBytes: retained})
		return
	}
	dt := now.Sub(s.lastAt).Seconds()
	if dt < 0.1 {
		return
	}
	s.lastRate = float64(tup-s.lastTup) / dt
	s.lastTup, s.lastAt = tup, now
	s.points = append(s.points, TimelinePoint{T: now.Sub(s.t0).Seconds(), RowsPerSec: s.lastRate, LagSeconds: s.probe.Lag(now).Seconds(),
		RetainedWALBytes: retained})
}

// retained reads the WAL the source keeps for the slot and keeps the most
// seen (0 when the slot is not there or the reading fails).
func (s *sampler) retained(ctx context.Context) int64 {
	var v int64
	err := s.src.QueryRow(ctx, "SELECT coalesce((pg_current_wal_lsn() - restart_lsn)::bigint, 0) FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&v)
	if err != nil {
		return 0
	}
	s.retainedMax = max(s.retainedMax, v)
	return v
}

func (s *sampler) timeline() []TimelinePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TimelinePoint(nil), s.points...)
}

func (s *sampler) fillResources(res *RunResult) {
	s.mu.Lock()
	res.WAL.SourceRetainedMaxBytes = max(0, s.retainedMax)
	s.mu.Unlock()
	r := &res.Resources
	r.WalsenderCPUSeconds = s.meter.total("walsender")
	r.WalsenderRunQueueSeconds = s.waits.total("walsender")
	r.ApplyWorkerCPUSeconds = s.meter.total("apply")
	r.TargetBackendsCPUSeconds = s.meter.total("target") + r.ApplyWorkerCPUSeconds
	r.SourceBackendsCPUSeconds = s.meter.total("source")
	r.TotalCPUSeconds = r.EngineCPUSeconds + r.WalsenderCPUSeconds + r.SourceBackendsCPUSeconds + r.TargetBackendsCPUSeconds + r.BrokerCPUSeconds
}

// liveLine renders one status line: phase, load progress, target rate, lag
// and the system's own part (spill, busiest component).
func (s *sampler) liveLine() string {
	s.mu.Lock()
	phase, rate := s.phase, s.lastRate
	s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "[%6.1fs] %-10s %-8s", time.Since(s.start).Seconds(), s.label, phase)
	if s.load != nil {
		total, done := s.load.Total.Load(), s.load.Done.Load()
		if total > 0 && phase == "load" {
			b.WriteString(" " + progressBar(done, total, 20))
		}
	}
	fmt.Fprintf(&b, " | target %s rows/s | lag %.2fs", humanCount(rate), s.probe.Lag(time.Now()).Seconds())
	if l := s.sys.live(); l != "" {
		b.WriteString(" | " + l)
	}
	return b.String()
}

func progressBar(done, total int64, width int) string {
	f := min(1, float64(done)/float64(total))
	n := int(f * float64(width))
	return fmt.Sprintf("[%s%s] %3.0f%% %s/%s", strings.Repeat("#", n), strings.Repeat("-", width-n), f*100,
		humanCount(float64(done)), humanCount(float64(total)))
}

func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// sourcePids adds the source database's backends (but the bench's own).
func (s *sampler) sourcePids(ctx context.Context, out map[int]string) {
	rows, err := s.src.Query(ctx, `SELECT pid, backend_type FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND coalesce(application_name, '') <> $1`, appName)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var pid int32
		var bt string
		if rows.Scan(&pid, &bt) == nil {
			if bt == "walsender" {
				out[int(pid)] = "walsender"
			} else {
				out[int(pid)] = "source"
			}
		}
	}
}
