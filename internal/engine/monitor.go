package engine

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/stats"
)

// probeInterval is how often the monitor polls the source (WAL position,
// slot) and pings the target.
const probeInterval = 2 * time.Second

// monitor is what runs beside the pipeline for the whole of Run, from
// before the first connection to the end: the HTTP endpoint, the progress
// log, the probes of the source and the target, and the apply-lag gauge. It
// only writes the stats registry (components source, target and engine,
// see stats/names.go) and reads the watermark once streaming has begun.
//
// Invariant: wm is nil until streaming has created the watermark (each
// streaming attempt may create a new one, which replaces it); everything
// the monitor publishes goes through the registry.
type monitor struct {
	e     *Engine
	log   *slog.Logger
	wm    atomic.Pointer[apply.Watermark]
	phase *stats.Component
	kick  chan struct{} // a phase change: probe now (buffered, 1)
}

// Run replicates until ctx ends (then it returns nil after a clean stop), an
// error occurs, or the configuration's until-caught-up point is reached.
// With --http the endpoint serves from the start, before the initial copy.
func (e *Engine) Run(ctx context.Context) (err error) {
	if err := e.cfg.Validate(); err != nil {
		return err
	}
	e.mon = &monitor{e: e, log: e.log.With("component", "monitor"), phase: e.stats.Component(stats.CompEngine), kick: make(chan struct{}, 1)}
	e.setPhase("starting")
	e.declareSeries()
	mctx, stop, err := e.mon.start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		e.setPhase("stopping")
		if merr := stop(); err == nil {
			err = merr
		}
	}()
	return e.runResilient(mctx)
}

// setPhase records the run's phase (starting, copying, streaming,
// stopping) and has the source probed again at once: the slot may have just
// been created, and a slot state polled before it must not be judged.
func (e *Engine) setPhase(p string) {
	if e.mon == nil {
		return
	}
	e.stats.Component(stats.CompSource).SetInfo(stats.InfoWALStatus, "")
	e.mon.phase.SetInfo(stats.InfoPhase, p)
	select {
	case e.mon.kick <- struct{}{}:
	default:
	}
}

// watchWatermark hands the watermark to the monitor once streaming begins.
func (e *Engine) watchWatermark(wm *apply.Watermark) {
	if e.mon != nil {
		e.mon.wm.Store(wm)
	}
}

// watermark is the current streaming attempt's watermark, nil before the
// first: safe from any goroutine (the status endpoint), unlike e.wm, which
// belongs to the goroutine running the pipeline.
func (e *Engine) watermark() *apply.Watermark {
	if e.mon == nil {
		return nil
	}
	return e.mon.wm.Load()
}

// start listens (an --http address that cannot be bound fails the run at
// once), then starts the monitor's goroutines; the server bounds its
// connections and their timeouts (stats.DefaultServerOptions). The
// returned context is ctx, cancelled also when the HTTP server fails; stop
// ends the goroutines and returns that failure, if any.
func (m *monitor) start(ctx context.Context) (context.Context, func() error, error) {
	cfg := m.e.cfg
	var ln net.Listener
	if cfg.HTTP != "" {
		var lc net.ListenConfig
		var err error
		// A port alone binds 127.0.0.1 (stats.ListenAddr).
		if ln, err = lc.Listen(ctx, "tcp", stats.ListenAddr(cfg.HTTP)); err != nil {
			return nil, nil, fmt.Errorf("--http %s: %w", cfg.HTTP, err)
		}
	}
	mctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	var httpErr error
	if ln != nil {
		h := stats.NewHandler(m.e.stats, stats.HandlerOptions{
			Extra: func() any { return m.e.Status() },
			Collector: stats.CollectorOptions{
				Health: stats.HealthOptions{Judge: true, MaxApplyLag: cfg.HealthzMaxLag, Stale: 5 * probeInterval},
			},
		})
		wg.Go(func() {
			if err := stats.ServeListener(mctx, ln, h, m.e.log); err != nil {
				httpErr = err
				cancel(err)
			}
		})
	}
	if cfg.Progress > 0 {
		wg.Go(func() { m.e.progressLoop(mctx, cfg.Progress) })
	}
	if ln != nil {
		// The probes feed /metrics, /status and /healthz: only with --http
		// (they cost a connection on each side).
		wg.Go(func() { m.probeLoop(mctx) })
	}
	wg.Go(func() { m.lagLoop(mctx) })
	stop := func() error {
		cancel(nil)
		wg.Wait()
		return httpErr
	}
	return mctx, stop, nil
}

// lagLoop publishes the source commit time of the oldest committed
// transaction not yet applied, twice a second (0 when there is none).
func (m *monitor) lagLoop(ctx context.Context) {
	g := m.phase.Gauge(stats.GaugeOldestUnapplied)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if wm := m.wm.Load(); wm != nil {
			if at, ok := wm.OldestUnapplied(); ok {
				g.Store(at.UnixNano())
			} else {
				g.Store(0)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeLoop polls the source's WAL position and the slot, and pings the
// target, every probeInterval, each on a small connection of its own that
// is reopened after a failure.
func (m *monitor) probeLoop(ctx context.Context) {
	src := &prober{side: stats.CompSource, dsn: m.e.cfg.Source, st: m.e.stats.Component(stats.CompSource)}
	tgt := &prober{side: stats.CompTarget, dsn: m.e.cfg.Target, st: m.e.stats.Component(stats.CompTarget)}
	defer src.close()
	defer tgt.close()
	slot := m.e.cfg.Slot
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		src.probe(ctx, m.log, func(ctx context.Context, conn *pgx.Conn) error { return pollSource(ctx, conn, slot, src.st) })
		tgt.probe(ctx, m.log, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SELECT 1")
			return err
		})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// prober keeps one monitoring connection to one side and records each
// probe's outcome in the side's component: gauges up and last_ok_unix_ns,
// info last_error (never a password: connection errors name host, port,
// user and database at most).
type prober struct {
	side string
	dsn  string
	st   *stats.Component
	conn *pgx.Conn
}

func (p *prober) probe(ctx context.Context, log *slog.Logger, f func(context.Context, *pgx.Conn) error) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := p.connect(pctx)
	if err == nil {
		err = f(pctx, p.conn)
	}
	if ctx.Err() != nil {
		return // stopping: not a failure of the side
	}
	if err != nil {
		msg := pgdsn.RedactError(err).Error()
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		if p.st.Gauge(stats.GaugeUp).Swap(0) == 1 {
			log.Warn("probe failed", "side", p.side, "err", msg)
		}
		p.st.SetInfo(stats.InfoLastError, msg)
		p.close()
		return
	}
	if p.st.Gauge(stats.GaugeUp).Swap(1) == 0 && p.st.Gauge(stats.GaugeLastOKUnixNano).Load() != 0 {
		log.Info("probe succeeds again", "side", p.side)
	}
	p.st.Gauge(stats.GaugeLastOKUnixNano).Store(time.Now().UnixNano())
	p.st.SetInfo(stats.InfoLastError, "")
}

func (p *prober) connect(ctx context.Context) error {
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	cfg, err := pgdsn.ParsePgx(p.dsn)
	if err != nil {
		return fmt.Errorf("%s DSN: %w", p.side, err)
	}
	cfg.RuntimeParams["application_name"] = "repstream-monitor"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s %s: %w", p.side, pgdsn.Describe(&cfg.Config), err)
	}
	p.conn = conn
	return nil
}

func (p *prober) close() {
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.conn.Close(ctx)
		p.conn = nil
	}
}

// pollSource reads the source's current WAL position and the slot's row
// into the source component's gauges.
func pollSource(ctx context.Context, conn *pgx.Conn, slot string, st *stats.Component) error {
	var cur string
	var confirmed, walStatus *string
	var active, exists bool
	var retained *int64
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, s.confirmed_flush_lsn::text, s.wal_status,
			coalesce(s.active, false), pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint, s.slot_name IS NOT NULL
		FROM (SELECT 1) AS one LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = $1`, slot).
		Scan(&cur, &confirmed, &walStatus, &active, &retained, &exists)
	if err != nil {
		return fmt.Errorf("poll the source's WAL position and slot %q: %w", slot, err)
	}
	lsn, err := change.ParseLSN(cur)
	if err != nil {
		return err
	}
	st.Gauge(stats.GaugeWALLSN).Store(int64(lsn))
	st.Gauge(stats.GaugeSlotExists).Store(b2i(exists))
	st.Gauge(stats.GaugeSlotActive).Store(b2i(active))
	if retained != nil {
		st.Gauge(stats.GaugeSlotRetained).Store(max(0, *retained))
	}
	if confirmed != nil {
		if c, err := change.ParseLSN(*confirmed); err == nil {
			st.Gauge(stats.GaugeSlotConfirmed).Store(int64(c))
		}
	}
	switch {
	case !exists:
		st.SetInfo(stats.InfoWALStatus, "missing")
	case walStatus != nil:
		st.SetInfo(stats.InfoWALStatus, *walStatus)
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
