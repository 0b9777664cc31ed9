package engine

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/probe"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
)

// monitor is what runs beside the pipeline for the whole of Run, from
// before the first connection to the end: the HTTP endpoint, the progress
// log, the probes of the source and the target (package probe), and the
// apply-lag gauge. It only writes the stats registry (components source,
// target and engine, see stats/names.go) and reads the watermark once
// streaming has begun.
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
	if e.cfg.Role != config.RoleCapture {
		if e.spillLock, err = queue.LockSpillDir(e.cfg.SpillDir); err != nil {
			return err
		}
		defer func() { e.spillLock.Close(); e.spillLock = nil }()
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
	if e.cfg.Role != config.RoleRun {
		return e.runHalf(mctx)
	}
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
				Health: stats.HealthOptions{Judge: true, MaxApplyLag: cfg.HealthzMaxLag, Stale: 5 * probe.Interval},
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
	if ln != nil && cfg.Role != config.RoleCapture {
		// The probes feed /metrics, /status and /healthz: only with --http
		// (they cost a connection on each side).
		wg.Go(func() {
			probe.Loop(mctx, probe.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, Stats: m.e.stats, Logger: m.log, Kick: m.kick})
		})
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
