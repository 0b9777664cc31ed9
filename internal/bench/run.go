package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// systemRun is one system's run of the workload, in phases:
//
//	setUp       databases, tables, publication; the system prepared
//	watch       the probe and the sampler, in the background
//	replicate   live: start the system, then load; backlog: load, then start
//	            (both end with the probe's marker committed on the source)
//	collect     wait until everything is visible, read the end positions,
//	            stop the background and the system
//	verify      compare every table; then runFigures turns the readings into
//	            the reported figures
//
// It runs on the runner's goroutine; the probe and the sampler run on
// goroutines of their own until stopBG returns.
type systemRun struct {
	r   *runner
	sp  runSpec
	res *RunResult
	ctx context.Context // the run's: bounded by Options.Timeout

	srcDSN, tgtDSN, slot string
	tgt2DSN              string // the kafka system's second target ("": none)
	sys                  replSystem
	rsys                 *repstreamSys // nil for other systems
	broker               *kafkaBroker  // the kafka system's (nil for others)
	probe                *Probe
	smp                  *sampler
	loadEnv              *LoadEnv

	bg       sync.WaitGroup
	cancelBG context.CancelFunc
	probeErr error

	m             readings
	epoch, markAt time.Time
	markID        int64
	stoppedBGOnce sync.Once
}

// readings are a run's raw measurements: times and WAL positions.
type readings struct {
	mode               Mode
	loadStart, loadEnd time.Time
	replStart, visible time.Time
	// sysStart, started (live mode): the system started, and the warm-up
	// probe committed after its slot was active seen on the target.
	sysStart, started time.Time
	load              LoadStats
	srcWAL0, srcWAL1  change.LSN
	tgtWAL0, tgtWAL1  change.LSN
	payload           int64 // bytes of the replicated tables' rows at the end (verify)
}

// runFigures derives a run's reported figures from its readings. It is pure:
// the formulas live here and nowhere else.
func runFigures(m readings) (LoadFigures, ReplFigures, WALFigures) {
	lf := LoadFigures{Seconds: m.loadEnd.Sub(m.loadStart).Seconds(), Rows: m.load.Rows, Txns: m.load.Txns,
		SourceRows: m.load.SourceRows, PayloadBytes: m.payload}
	if s := lf.Seconds; s > 0 {
		lf.RowsPerSec = float64(m.load.SourceRows) / s
		lf.TxnsPerSec = float64(m.load.Txns) / s
	}
	repl := m.visible.Sub(m.replStart).Seconds()
	rf := ReplFigures{Seconds: repl, LastCommitToVisibleSeconds: m.visible.Sub(m.loadEnd).Seconds()}
	if m.mode == ModeLive {
		rf.CatchUpSeconds = m.visible.Sub(m.loadEnd).Seconds()
	} else {
		rf.CatchUpSeconds = repl
	}
	if !m.started.IsZero() {
		rf.StartToVisibleSeconds = m.started.Sub(m.sysStart).Seconds()
	}
	if repl > 0 {
		rf.RowsPerSec = float64(m.load.Rows) / repl
		rf.MBPerSec = float64(m.payload) / 1e6 / repl
	}
	wf := WALFigures{SourceBytes: int64(m.srcWAL1 - m.srcWAL0), TargetBytes: int64(m.tgtWAL1 - m.tgtWAL0)}
	if wf.SourceBytes > 0 {
		wf.Ratio = float64(wf.TargetBytes) / float64(wf.SourceBytes)
	}
	return lf, rf, wf
}

func (r *runner) doRun(ctx context.Context, sp runSpec, res *RunResult) error {
	if r.wl.Copy {
		return r.doCopyRun(ctx, sp, res)
	}
	db := fmt.Sprintf("bench_%d_%s", sp.idx, sp.system)
	if err := r.setupDatabases(ctx, db); err != nil {
		return err
	}
	defer r.dropDB(r.src, db)
	defer r.dropDB(r.tgt, db)
	run := &systemRun{r: r, sp: sp, res: res, srcDSN: r.src.dsnFor(db), tgtDSN: r.tgt.dsnFor(db),
		slot: fmt.Sprintf("bench_%d_%s", sp.idx, sp.system), m: readings{mode: r.o.Mode}}
	if sp.system == SystemKafka {
		b, err := r.kafka(ctx)
		if err != nil {
			return err
		}
		run.broker = b
		if r.o.kafkaAfterRun != nil {
			defer r.o.kafkaAfterRun(b) // after the cleanup
		}
		if r.o.KafkaTargets > 1 {
			db2 := db + "_b"
			if err := r.createDB(ctx, r.tgt, db2); err != nil {
				return err
			}
			defer r.dropDB(r.tgt, db2)
			if err := execOn(ctx, r.tgt.dsnFor(db2), r.wl.DDL+"\n"+ProbeDDL); err != nil {
				return fmt.Errorf("create the workload's tables on the second target: %w", err)
			}
			run.tgt2DSN = r.tgt.dsnFor(db2)
		}
	}
	run.setUp()
	// Cleanup runs before the databases are dropped (defers run LIFO).
	defer run.sys.cleanup(context.Background())
	if err := run.sys.prepare(ctx); err != nil {
		return err
	}
	if p, ok := run.sys.(*pglogicalSys); ok && p.slot() != "" {
		run.slot = p.slot() // pglogical names its slot itself
	}
	runCtx, cancelRun := context.WithTimeout(ctx, r.o.Timeout)
	defer cancelRun()
	run.ctx = runCtx
	run.watch()
	defer run.stopBG()
	if err := run.replicate(); err != nil {
		return err
	}
	if err := run.collect(ctx); err != nil {
		return err
	}
	return run.verify(ctx)
}

// setUp makes the system's handle.
func (s *systemRun) setUp() {
	env := sysEnv{srcDSN: s.srcDSN, tgtDSN: s.tgtDSN, tgt2DSN: s.tgt2DSN, slot: s.slot, pub: "bench_pub", outDir: s.r.o.Out, label: s.sp.label,
		log: s.r.log.With("system", s.sp.label)}
	switch s.sp.system {
	case SystemRepstream:
		s.rsys = newRepstream(env, s.r.o.Binary, s.sp.flags)
		s.sys = s.rsys
		return
	case SystemPglogical:
		s.sys = newPglogical(env, qualifiedTables(s.r.wl), false)
		return
	case SystemPgstream:
		s.sys = newPgstream(env, append(slices.Clone(s.r.wl.Tables), ProbeTable))
		return
	case SystemKafka:
		s.sys = newKafka(env, s.r.o.Binary, s.sp.flags, s.broker)
		return
	}
	n := newNative(env, s.r.version)
	n.binary = s.r.o.NativeBinary
	s.sys = n
}

// watch starts the probe (commit → visible latency) and the sampler (rates,
// CPU, memory over time) in the background.
func (s *systemRun) watch() {
	s.probe = NewProbe(withApp(s.srcDSN), withApp(s.tgtDSN), 100*time.Millisecond, s.r.log)
	var bg context.Context
	bg, s.cancelBG = context.WithCancel(s.ctx)
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.probeErr = s.probe.Run(bg) }()
	s.smp = newSampler(s.r, s.sp, withApp(s.srcDSN), withApp(s.tgtDSN), s.slot, append([]string{}, s.r.wl.Tables...), s.probe, s.sys)
	s.loadEnv = &LoadEnv{DSN: s.srcDSN, Params: s.r.o.Params, dbl: s.r.dblSink}
	s.smp.load = s.loadEnv
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.smp.run(bg) }()
}

// stopBG stops the probe and the sampler and waits for them.
func (s *systemRun) stopBG() {
	s.stoppedBGOnce.Do(func() {
		if s.cancelBG != nil {
			s.cancelBG()
		}
		s.bg.Wait()
	})
}

// beginMeasure starts the measured interval at at: the target's WAL
// position, the engine's and the sampler's epoch.
func (s *systemRun) beginMeasure(at time.Time) error {
	s.epoch = at
	var err error
	if s.m.tgtWAL0, err = currentLSN(s.ctx, s.tgtDSN); err != nil {
		return err
	}
	if e, ok := s.sys.(interface{ setEpoch(time.Time) }); ok {
		e.setEpoch(at) // repstream, kafka
	}
	s.smp.begin(s.ctx, at)
	return nil
}

// warmUp waits, in live mode, until a probe committed on the source is
// visible on the target: the measured interval then begins with every
// system replicating end to end, not with one still starting (its
// connections, a Kafka apply reading its topic) while the load's first
// transactions queue. What that start took, from the system's start, is
// replication.start_to_visible_seconds.
func (s *systemRun) warmUp() error {
	id, _, err := s.probe.Mark(s.ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.sys.dead():
			cancel()
		case <-ctx.Done():
		}
	}()
	at, err := s.probe.WaitSeen(ctx, id)
	if err != nil {
		select {
		case <-s.sys.dead():
			return s.sys.deadErr()
		default:
		}
		return fmt.Errorf("warm-up: %w", err)
	}
	s.m.started = at
	return nil
}

// load runs the workload against the source.
func (s *systemRun) load() error {
	s.smp.setPhase("load")
	s.m.loadStart = time.Now()
	var err error
	s.m.load, err = s.r.wl.Load(s.ctx, s.loadEnv)
	s.m.loadEnd = time.Now()
	if err != nil {
		return fmt.Errorf("load %s: %w", s.r.wl.Name, err)
	}
	return nil
}

// start starts the system (remembering when native last started: backlog
// runs space native's runs, see nativeSpacing).
func (s *systemRun) start() error {
	if s.sp.system == SystemNative {
		defer func() { s.r.lastNative = time.Now() }()
	}
	return s.sys.start(s.ctx)
}

// replicate loads the workload while the system replicates (live) or with
// the system stopped, starting it afterwards (backlog).
func (s *systemRun) replicate() error {
	var err error
	if s.m.srcWAL0, err = currentLSN(s.ctx, s.srcDSN); err != nil {
		return err
	}
	if s.r.o.Mode == ModeLive {
		s.m.sysStart = time.Now()
		if err := s.start(); err != nil {
			return err
		}
		if err := waitSlotActive(s.ctx, s.srcDSN, s.slot, s.sys); err != nil {
			return err
		}
		if err := s.warmUp(); err != nil {
			return err
		}
		if s.r.wl.WarmsUp && s.r.o.Params.WarmUp > 0 {
			// The load begins the interval after its warm-up. The probes
			// tick through the warm-up too (each apply connection's first
			// change to the probe table is a start's as well); only those
			// committed in the interval are counted.
			var measureErr error
			s.loadEnv.measure = func() {
				at := time.Now()
				s.m.loadStart = at
				if s.m.srcWAL0, measureErr = currentLSN(s.ctx, s.srcDSN); measureErr == nil {
					measureErr = s.beginMeasure(at)
				}
			}
			s.probe.SetTicking(true)
			if err := s.load(); err != nil {
				return err
			}
			if measureErr != nil {
				return measureErr
			}
		} else {
			if err := s.beginMeasure(time.Now()); err != nil {
				return err
			}
			s.probe.SetTicking(true)
			if err := s.load(); err != nil {
				return err
			}
		}
		s.smp.setPhase("catch-up")
		if s.markID, s.markAt, err = s.probe.Mark(s.ctx); err != nil {
			return err
		}
		s.m.replStart = s.loadEnv.firstCommit
		if s.m.replStart.IsZero() {
			s.m.replStart = s.m.loadStart
		}
		return nil
	}
	if err := s.load(); err != nil {
		return err
	}
	if s.markID, _, err = s.probe.Mark(s.ctx); err != nil {
		return err
	}
	if s.m.srcWAL1, err = currentLSN(s.ctx, s.srcDSN); err != nil {
		return err
	}
	if s.sp.system == SystemNative {
		if err := s.r.nativeSpacing(s.ctx, s.tgtDSN); err != nil {
			return err
		}
	}
	s.smp.setPhase("catch-up")
	s.m.replStart = time.Now()
	if err := s.beginMeasure(s.m.replStart); err != nil {
		return err
	}
	if err := s.start(); err != nil {
		return err
	}
	s.probe.SetTicking(true)
	return nil
}

// collect waits until the marker and every table's rows are visible on the
// target, reads the end positions and the last resource samples, and stops
// the background and the system.
func (s *systemRun) collect(ctx context.Context) error {
	var err error
	s.m.visible, err = s.r.waitVisible(s.ctx, s.probe, s.markID, s.srcDSN, s.tgtDSN, s.sys)
	if err == nil {
		// Probes committed while waitVisible looked must be in too before
		// the system stops: verification compares bench_probe. (Seen
		// when a system holds a transaction a few milliseconds — repstream
		// gathering a steady stream — and stops on SIGTERM without it.)
		err = s.r.waitProbes(s.ctx, s.probe, s.sys)
	}
	s.probe.SetTicking(false)
	if err != nil {
		return err
	}
	s.smp.setPhase("verify")
	if s.r.o.Mode == ModeLive {
		if s.m.srcWAL1, err = currentLSN(s.ctx, s.srcDSN); err != nil {
			return err
		}
	}
	if s.m.tgtWAL1, err = currentLSN(s.ctx, s.tgtDSN); err != nil {
		return err
	}
	s.smp.sampleNow(s.ctx) // last CPU readings before processes go away
	slotStats(s.ctx, s.srcDSN, s.slot, s.res)
	if k, ok := s.sys.(*kafkaSys); ok && k.stopped != nil {
		s.smp.setPhase("target 2")
		if s.res.StoppedTarget, err = k.catchUpStopped(s.ctx, append(slices.Clone(s.r.wl.Tables), ProbeTable)); err != nil {
			return err
		}
	}
	s.stopBG()
	if s.probeErr != nil {
		return s.probeErr
	}
	return s.sys.stop(ctx, s.res)
}

// verify compares every table and fills the result's figures.
func (s *systemRun) verify(ctx context.Context) error {
	res := s.res
	// The marker's commit may be recorded just after the poller saw it.
	res.Probes, res.Latency = s.probe.Results(s.epoch, s.epoch, later(s.m.visible, s.markAt))
	res.Timeline = s.smp.timeline()
	s.smp.fillResources(res)
	checks, ok, payload, err := verify(ctx, s.srcDSN, s.tgtDSN, s.r.wl.Tables, s.r.wl.Unreplicated)
	res.Tables = checks
	s.m.payload = payload
	retained := res.WAL.SourceRetainedMaxBytes
	res.Load, res.Replication, res.WAL = runFigures(s.m)
	res.WAL.SourceRetainedMaxBytes = retained
	if err != nil {
		return err
	}
	setVerified(res, checks, ok)
	if st := res.StoppedTarget; st != nil {
		checks, ok, _, err := verify(ctx, s.srcDSN, s.tgt2DSN, s.r.wl.Tables, s.r.wl.Unreplicated)
		st.Tables, st.Verified = checks, ok
		if err != nil {
			return fmt.Errorf("the second target: %w", err)
		}
		if !ok && res.Verified {
			setVerified(res, checks, false)
			res.Error = "the second target: " + res.Error
		}
	}
	return nil
}
