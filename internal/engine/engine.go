// Package engine runs the replication pipeline for one slot: it checks the
// source and the target, creates the publication and the slot (with the
// initial copy) when they are missing, then runs capture → queue → apply
// until it is stopped, fails, or — with --until-caught-up — has applied
// everything that was committed when it started.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/sequences"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// Procs is the number of OS threads running Go code for a given apply
// parallelism. The engine's own work is a few microseconds a row (it mostly
// waits on PostgreSQL), and it shares the machine with the walsender and the
// target's backends: idle Go threads spinning for work took a fifth of the
// CPU of a 2-core machine (measured: `repstream bench conditions --mode
// backlog` went from 1.52x to 1.28x native's time with one thread). One
// thread serves up to four apply workers. GOMAXPROCS in the environment
// overrides it.
func Procs(parallelism, cpus int) int {
	return max(1, min(cpus, (parallelism+3)/4))
}

// Engine is one replication run. Its fields are read by the status endpoint
// while it runs.
type Engine struct {
	cfg    config.Config
	log    *slog.Logger
	stats  *stats.Registry
	wm     *apply.Watermark
	queue  *queue.Queue
	stopAt change.LSN
	binary bool // values travel in binary (config Binary and every column eligible)
	start  time.Time
	// watch closes target connections that went silent (reconnect.go);
	// walsenderPID is the walsender of the last streaming attempt.
	watch        *target.LinkWatch
	walsenderPID uint32
	reachedOnce  bool // both servers answered and passed the start checks once (runResilient)
	slotCreated  bool // this run created the slot: what it made before is kept (undo.go)
	// tables says which changes of tables copied at their own snapshot
	// apply skips (tablesync.go).
	tables *apply.TableFilter

	mon *monitor // HTTP, progress, probes: for the whole of Run (monitor.go)
	// ddl is how this run follows schema changes (ddl.go). schemaMayLag:
	// resuming while it does, the target's tables may lag the source's
	// until the stream's pending schema changes are applied.
	ddl          ddlMode
	schemaMayLag bool
	// copyResumed: this start resumes an initial copy an earlier run began
	// (progress says the snapshot is running, and the slot is there). Its
	// ready tables were copied at the slot's consistent point, so schema
	// changes since are still in the stream; its other tables are copied
	// again whole.
	copyResumed bool
}

// New prepares a run; Run does the work.
func New(cfg config.Config, logger *slog.Logger, reg *stats.Registry) *Engine {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = stats.NewRegistry()
	}
	cfg.EnsureDefaults()
	return &Engine{cfg: cfg, log: logger, stats: reg}
}

// Stats returns the registry every stage reports to.
func (e *Engine) Stats() *stats.Registry { return e.stats }

// run is Run under the monitor (monitor.go).
func (e *Engine) run(ctx context.Context) (err error) {
	if err := e.cfg.Validate(); err != nil {
		return err
	}
	cfg := e.cfg
	e.start = time.Now()
	// Keep the Go heap near the queue's budget: the budget is the knob the
	// user sets for memory, the rest is a fixed overhead.
	// The limit, not GOGC, bounds the heap; a higher GOGC then saves collections.
	debug.SetMemoryLimit(int64(cfg.Memory) + 48<<20)
	debug.SetGCPercent(400)
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(Procs(cfg.ApplyParallelism, runtime.NumCPU()))
	}

	src, err := connectSource(ctx, cfg.Source)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	tgt, err := target.Connect(ctx, cfg.Target, "repstream-admin")
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())

	if err := checkSource(ctx, src); err != nil {
		return err
	}
	if err := checkReplicationAttribute(ctx, src, cfg.Source); err != nil {
		return err
	}
	if err := provision.SameDatabase(ctx, src, tgt); err != nil {
		return err
	}
	// Both servers answered and passed the checks: from here on a lost
	// connection is a fault to ride through, not a wrong configuration.
	e.reachedOnce = true
	// A first start that fails before its slot exists leaves nothing
	// behind: what it created is removed again (newest first).
	firstStart, err := slotMissing(ctx, src, cfg.Slot)
	if err != nil {
		return err
	}
	var undo undoList
	e.slotCreated = false
	defer func() {
		if err != nil && firstStart && !e.slotCreated {
			undo.run(ctx, e.log)
		}
	}()
	if err := undo.state(ctx, tgt, cfg.Slot, e.log); err != nil {
		return err
	}
	if err := target.Register(ctx, tgt, cfg.Slot); err != nil {
		return fmt.Errorf("prepare repstream state on the target: %w", pgerr.CreateSchemaPrivilege(tgt.Config().Database, tgt.Config().User).Explain(err))
	}
	// Another engine streaming from the slot makes it active; so does, for a
	// moment, the walsender of a run that just died.
	if err := waitSlotInactive(ctx, src, cfg.Slot, 10*time.Second, e.log); err != nil {
		return err
	}
	// A killed previous run's target sessions may still be finishing commits
	// they received: wait for them before reading what is applied.
	if err := target.WaitForPreviousApply(ctx, tgt, cfg.Slot, 30*time.Second, e.log); err != nil {
		return err
	}
	prog, err := target.LoadProgress(ctx, tgt, cfg.Slot)
	if err != nil {
		return fmt.Errorf("read progress of slot %q on the target: %w", cfg.Slot, err)
	}

	createdPub, err := ensurePublication(ctx, src, cfg.Publication, cfg.Tables, cfg.DDL == "true", e.log)
	if err != nil {
		return err
	}
	if createdPub {
		undo.publication(src, cfg.Publication)
		// Recorded at once, so that drop removes it even if this run fails
		// before the slot exists.
		if err := target.MarkPublicationCreated(ctx, tgt, cfg.Slot); err != nil {
			return err
		}
		prog.CreatedPublication = true
	}
	if !createdPub && prog.CreatedPublication && len(cfg.Tables) > 0 {
		// A wider --tables adds the new tables as `tables add` does.
		if err := e.widenPublication(ctx, src, tgt); err != nil {
			return err
		}
	}
	if e.ddl, err = setUpDDL(ctx, src, cfg.DDL, cfg.Slot, cfg.Publication, e.log); err != nil {
		return err
	}
	if e.ddl == ddlTrigger {
		undo.ddlTrigger(src, cfg.Slot, e.log)
	}
	tables, err := publicationTables(ctx, src, cfg.Publication)
	if err != nil {
		return err
	}
	if err := checkPublishes(ctx, src, cfg.Publication, cfg.PartialPublication, e.log); err != nil {
		return err
	}
	if err := checkUntrackedPartitions(ctx, src, cfg, e.ddl, tables); err != nil {
		return err
	}
	if len(tables) == 0 {
		e.log.Warn("the publication has no tables: nothing will be replicated", "publication", cfg.Publication)
	}
	e.schemaMayLag = e.ddl != ddlOff && prog.Exists && prog.Low > 0 && prog.Snapshot != target.SnapshotRunning
	e.copyResumed = prog.Exists && prog.Snapshot == target.SnapshotRunning && !firstStart
	// A keyless table that repstream itself would publish is refused: once
	// published, the source refuses its UPDATEs and DELETEs — the run
	// would break the application writing it.
	noBinary, err := e.prepareTargetTables(ctx, src, tgt, tables, cfg.CreateTables, createdPub, &undo)
	if err != nil {
		return err
	}
	e.binary = cfg.Binary && noBinary == ""
	if cfg.Binary && noBinary != "" {
		e.log.Info("values travel as text, not binary", "reason", noBinary)
	}

	slot, err := lookupSlot(ctx, src, cfg.Slot)
	if err != nil {
		return err
	}
	if err := checkTablePrivileges(ctx, src, tgt, tables, !slot.exists && cfg.Snapshot); err != nil {
		return err
	}
	var initialFlush change.LSN
	switch {
	case !slot.exists:
		if prog.Exists && prog.Low > 0 && prog.Snapshot != target.SnapshotRunning {
			return fmt.Errorf("replication slot %q does not exist on the source, but the target has applied changes up to %s: "+
				"the slot was dropped and the changes since then are lost; run `repstream drop --slot %s` and start again to resynchronise",
				cfg.Slot, prog.Low, cfg.Slot)
		}
		if prog.Snapshot == target.SnapshotRunning {
			// The slot of an interrupted copy is gone: its tables are copied
			// again from the new slot's snapshot.
			if err := e.emptyCopied(ctx, tgt, tables); err != nil {
				return err
			}
		}
		low, err := e.createSlot(ctx, tgt, tables, createdPub || prog.CreatedPublication)
		if err != nil {
			return err
		}
		prog = target.Progress{Exists: true, Low: low, Snapshot: target.SnapshotDone, CreatedPublication: createdPub}
		initialFlush = low
	default:
		if slot.plugin != "pgoutput" {
			return fmt.Errorf("replication slot %q uses plugin %q; repstream needs a pgoutput slot", cfg.Slot, slot.plugin)
		}
		if slot.walStatus == "lost" {
			return fmt.Errorf("replication slot %q is invalidated (wal_status lost: the WAL it needed was removed, max_slot_wal_keep_size): "+
				"run `repstream drop --slot %s` and start again to resynchronise", cfg.Slot, cfg.Slot)
		}
		if prog.Exists && prog.Snapshot == target.SnapshotRunning {
			if err := e.resumeCopy(ctx, tgt, tables); err != nil {
				return err
			}
			prog.Snapshot = target.SnapshotDone
		}
		if err := checkRestoredTarget(cfg, prog, slot.confirmed); err != nil {
			return err
		}
		if !prog.Exists {
			if !cfg.AdoptSlot {
				return fmt.Errorf("replication slot %q exists on the source (confirmed up to %s) but the target has no state for it: "+
					"the target may be another one than the slot's (a wrong --target) or rebuilt, and the changes before %s would be missing on it; "+
					"run `repstream drop --slot %s` and start again for a new initial copy, or pass --adopt-slot if the target holds the data up to %s",
					cfg.Slot, slot.confirmed, slot.confirmed, cfg.Slot, slot.confirmed)
			}
			e.log.Warn("--adopt-slot: the target has no state for the slot: applying from the slot's confirmed position, without an initial copy", "slot", cfg.Slot, "confirmed", slot.confirmed)
			if err := target.InitProgress(ctx, tgt, cfg.Slot, slot.confirmed, target.SnapshotNone, false); err != nil {
				return err
			}
			prog = target.Progress{Exists: true, Low: slot.confirmed, Snapshot: target.SnapshotNone}
		}
		initialFlush = max(prog.Low, slot.confirmed)
	}

	if err := e.syncPendingAtStart(ctx, tgt, tables); err != nil {
		return err
	}
	if e.tables, err = loadTableFilter(ctx, tgt, cfg.Slot, prog.Low); err != nil {
		return err
	}
	if cfg.UntilCaughtUp {
		var s string
		if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
			return fmt.Errorf("read the source's WAL position: %w", err)
		}
		if e.stopAt, err = change.ParseLSN(s); err != nil {
			return err
		}
		e.log.Info("will stop once caught up", "source_position", e.stopAt)
		pushWALPastStop(ctx, src, e.log)
	}
	// The tables --create-tables made that no copy has built (the copies
	// above build theirs): before any change is applied to them.
	// So are the foreign keys that reference tables set aside for the copy.
	if err := target.BuildAllDeferred(ctx, tgt, cfg.Slot, e.log); err != nil {
		return fmt.Errorf("keys and indexes after the copy: %w", err)
	}
	e.noteUnbuiltIndexes(ctx, tgt)
	// The admin connections are not needed while streaming; each streaming
	// attempt opens its own to persist the watermark.
	src.Close(ctx)
	tgt.Close(ctx)
	return e.streamResilient(ctx, prog, initialFlush)
}

func (e *Engine) stream(ctx context.Context, tgt *pgx.Conn, prog target.Progress, initialFlush change.LSN) error {
	cfg := e.cfg
	q, err := queue.New(queue.Options{Budget: int64(cfg.Memory), SpillDir: cfg.SpillDir, Stats: e.stats, Logger: e.log, Producer: e.stats.Component("capture")})
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	defer q.Close()
	e.queue = q
	e.wm = apply.NewWatermark(prog.Low)
	e.watchWatermark(e.wm)
	acker := newRecordedAcker(e.wm, prog.Low)
	e.setPhase("streaming")
	capOpts := capture.Options{
		DSN: cfg.Source, Slot: cfg.Slot, Publication: cfg.Publication,
		StartLSN: prog.Low, InitialFlush: initialFlush,
		DecodingWorkMem: cfg.DecodingWorkMem, StatusInterval: cfg.StatusInterval, StopAt: e.stopAt, Binary: e.binary,
		Timeout: cfg.SourceTimeout, GatherWait: cfg.GroupWait,
		Queue: q, Acker: acker, Stats: e.stats, Logger: e.log,
	}
	capOpts.DDLMessages = e.ddl == ddlTrigger
	apOpts := apply.Options{
		TargetDSN: cfg.Target, Writer: e.writerOptions(false),
		Parallelism: cfg.ApplyParallelism, CommitOrder: cfg.CommitOrder,
		GroupMaxTxns: cfg.GroupMaxTxns, GroupMaxBytes: int64(cfg.GroupMaxBytes), Collapse: cfg.Collapse,
		Applied: prog.IsApplied, Watermark: e.wm, Stats: e.stats, Logger: e.log,
		CatchUpWait: cfg.CatchUpWait, GroupWait: cfg.GroupWait,
		// In a backlog, groups fill up to a quarter of the group limit, and
		// never hold more than an eighth of the queue's memory.
		CatchUpGroupBytes: min(int64(cfg.GroupMaxBytes)/4, int64(cfg.Memory)/8),
		LinkWatch:         e.watch,
		Tables:            e.tables, Quiesce: true,
	}
	skips, err := target.LoadSkipRequests(ctx, tgt, cfg.Slot, prog.Low)
	if err != nil {
		return err
	}
	apOpts.OnError, apOpts.SkipRequested = cfg.OnError, skips.Take
	useEager := cfg.Eager && e.eagerWithConflicts(cfg.OnError, len(skips))
	var eager *apply.Eager // nil unless --eager; never stored in an interface when nil
	if useEager {
		skipBelow := prog.Low
		for _, a := range prog.Applied {
			skipBelow = max(skipBelow, a)
		}
		eager = apply.NewEager(apply.EagerOptions{
			Watermark: e.wm, SkipBelow: skipBelow, Stats: e.stats, Logger: e.log, Tables: e.tables,
			NewWriter: func(ctx context.Context, st *stats.Component) (apply.EagerWriter, func(), error) {
				return target.OpenSession(ctx, target.SessionOptions{
					DSN: cfg.Target, AppName: "repstream-eager", Watch: e.watch,
					Writer: eagerWriter(e.writerOptions(true), st, e.log),
				})
			},
		})
		capOpts.Eager, apOpts.Eager = eager, eager
	}
	capt, err := capture.New(capOpts)
	if err != nil {
		return err
	}
	apOpts.Behind, apOpts.Gathers = capt.Behind, capt.Gathers
	ap, err := apply.New(apOpts)
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	defer func() { e.walsenderPID = capt.BackendPID() }()
	g.Go(func() error {
		return onSide("source", pgerr.ReplicationPrivilege(dsnUser(cfg.Source)).Explain(capt.Run(gctx)))
	})
	g.Go(func() error { return onSide("target", ap.Run(gctx, q)) })
	if eager != nil {
		g.Go(func() error { return onSide("target", eager.Run(gctx)) })
	}
	if e.watch != nil {
		g.Go(func() error { return e.watch.Run(gctx) })
	}
	g.Go(func() error { return e.watchTables(gctx, e.tables, ap, eager) })
	persisted := prog.Low
	g.Go(func() error { return onSide("target", e.persistLoop(gctx, tgt, acker, &persisted)) })
	err = g.Wait()
	caughtUp := errors.Is(err, capture.ErrCaughtUp)
	// Persist the final watermark with a fresh context: the run's may be done.
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	perr := e.persist(pctx, tgt, &persisted)
	pcancel()
	e.logSummary()
	switch {
	case caughtUp:
		if err := e.copyPendingAtEnd(ctx, tgt); err != nil {
			return errors.Join(perr, err)
		}
		if err := e.checkTablesReady(tgt); err != nil {
			return errors.Join(perr, err)
		}
		e.log.Info("caught up: everything committed before the start is applied and acknowledged",
			"position", e.wm.Flush(), "elapsed", time.Since(e.start).Round(time.Millisecond))
		return errors.Join(perr, e.syncSequencesAtEnd())
	case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || pgerr.ConnectionLost(err)):
		// A stop. pgx tears a connection down when its context is
		// cancelled, and a call under way may then report the socket's
		// close rather than the context: that is the stop too (the
		// watermark persisted above is what the next run resumes from).
		e.log.Info("stopped", "applied_up_to", e.wm.Flush())
		return e.syncSequencesAtEnd()
	}
	return err
}

// writerOptions is the template of the target writers' options this run
// needs: what the writer must know of the slot, the value format and how
// schema changes are followed. eager: for eager apply, whose added
// columns are read as the source has them at the transaction's end.
func (e *Engine) writerOptions(eager bool) target.WriterOptions {
	return target.WriterOptions{
		Slot: e.cfg.Slot, Binary: e.binary,
		RelationDDL: e.ddl == ddlRelation, CreateTables: e.cfg.CreateTables, AddedColumn: addedColumnOnSource(e.cfg.Source, eager),
		Publication: e.cfg.Publication, Resync: e.resync,
	}
}

// eagerWriter is eager apply's writer options: the template with its stats
// and logger.
func eagerWriter(w target.WriterOptions, st *stats.Component, log *slog.Logger) target.WriterOptions {
	w.Stats, w.Logger = st, log.With("component", "eager")
	return w
}

// persist writes the low watermark to the target so that the applied set
// stays small; the exactly-once record itself is written with every applied
// transaction.
func (e *Engine) persist(ctx context.Context, tgt *pgx.Conn, persisted *change.LSN) error {
	low := e.wm.Flush()
	if low <= *persisted {
		return nil
	}
	if err := target.AdvanceLow(ctx, tgt, e.cfg.Slot, low); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("record low watermark %s on the target: %w", low, err)
	}
	*persisted = low
	return nil
}

// createSlot creates the slot and, with --snapshot, copies the existing rows
// from its exported snapshot. It returns the slot's consistent point.
func (e *Engine) createSlot(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName, createdPub bool) (_ change.LSN, err error) {
	cfg := e.cfg
	if cfg.Snapshot {
		if err := snapshot.CheckTargets(ctx, tgt, tables, cfg.Truncate); err != nil {
			return 0, err
		}
		// Before the slot: no table state of an earlier copy survives.
		if err := e.markCopying(ctx, tgt, tables); err != nil {
			return 0, err
		}
		// The user's empty tables are copied as bare as those
		// --create-tables makes; a copy that fails (or a slot that
		// cannot be made) leaves them as they were.
		if err := e.setAsideForCopy(ctx, tgt, tables); err != nil {
			return 0, err
		}
		defer func() {
			if err != nil {
				e.restoreSetAside(ctx, tgt)
			}
		}()
	}
	repl, err := capture.Connect(ctx, cfg.Source, "")
	if err != nil {
		return 0, pgerr.ReplicationPrivilege(dsnUser(cfg.Source)).Explain(err)
	}
	defer repl.Close(context.Background())
	action := "(SNAPSHOT 'nothing')"
	if cfg.Snapshot {
		action = "(SNAPSHOT 'export')"
	}
	if capture.ServerMajor(repl) < 15 {
		action = "NOEXPORT_SNAPSHOT"
		if cfg.Snapshot {
			action = "EXPORT_SNAPSHOT"
		}
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	if err != nil {
		return 0, fmt.Errorf("create replication slot %q on the source: %w", cfg.Slot, err)
	}
	e.slotCreated = true
	low, err := change.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	e.log.Info("created replication slot", "slot", cfg.Slot, "consistent_point", low)
	if !cfg.Snapshot {
		return low, target.InitProgress(ctx, tgt, cfg.Slot, low, target.SnapshotNone, createdPub)
	}
	if err := target.InitProgress(ctx, tgt, cfg.Slot, low, target.SnapshotRunning, createdPub); err != nil {
		return 0, err
	}
	e.log.Info("initial copy from the slot's snapshot", "tables", len(tables), "snapshot", res.SnapshotName)
	e.setPhase("copying")
	r, err := snapshot.Copy(ctx, snapshot.Options{
		SourceDSN: cfg.Source, TargetDSN: cfg.Target, SnapshotName: res.SnapshotName, Publication: cfg.Publication,
		Tables: tables, Workers: cfg.SnapshotWorkers, Stats: e.stats, Logger: e.log, OnTable: e.recordCopied(tgt, low),
		RangeSize: int64(cfg.SnapshotRangeSize), Binary: cfg.Binary, AfterCopy: e.afterCopy,
	})
	if err != nil {
		return 0, fmt.Errorf("initial copy: %w", err)
	}
	e.log.Info("initial copy done", "tables", r.Tables, "rows", r.Rows, "bytes", r.Bytes, "elapsed", r.Time.Round(time.Millisecond))
	return low, target.SetSnapshot(ctx, tgt, cfg.Slot, target.SnapshotDone)
}

// connectBoth opens an admin connection to the source and one to the
// target (application_name appName) for a command that reads and writes
// both; closeFn closes them.
func connectBoth(ctx context.Context, cfg config.Config, appName string) (src, tgt *pgx.Conn, closeFn func(), err error) {
	if src, err = connectSource(ctx, cfg.Source); err != nil {
		return nil, nil, nil, err
	}
	if tgt, err = target.Connect(ctx, cfg.Target, appName); err != nil {
		src.Close(context.WithoutCancel(ctx))
		return nil, nil, nil, err
	}
	return src, tgt, func() {
		tgt.Close(context.WithoutCancel(ctx))
		src.Close(context.WithoutCancel(ctx))
	}, nil
}

func connectSource(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgdsn.ParsePgx(dsn)
	if err != nil {
		return nil, fmt.Errorf("source DSN: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "repstream-admin"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to source %s: %w", pgdsn.Describe(&cfg.Config), err)
	}
	return conn, nil
}

func checkSource(ctx context.Context, src *pgx.Conn) error {
	var level string
	if err := src.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("read the source's wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("the source has wal_level=%s; logical replication needs wal_level=logical (set it in postgresql.conf and restart the server)", level)
	}
	return nil
}

// ensurePublication creates the publication from the table patterns when it
// does not exist. It reports whether it created it.
func ensurePublication(ctx context.Context, src *pgx.Conn, pub string, patterns []string, guarded bool, log *slog.Logger) (bool, error) {
	var exists bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication %q: %w", pub, err)
	}
	if exists {
		if len(patterns) > 0 {
			log.Info("publication exists: using it as it is (--tables only creates it, or adds tables to one repstream created)", "publication", pub)
		}
		return false, nil
	}
	if len(patterns) == 0 {
		return false, fmt.Errorf("publication %q does not exist on the source: create it, or give --tables to let repstream create it", pub)
	}
	names, sql, err := publicationSQL(ctx, src, pub, patterns, guarded, log)
	if err != nil {
		return false, err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = n.Quoted()
	}
	// A partitioned table named in --tables is replicated as that table:
	// its changes and its initial copy come under the root's name (the
	// target needs the root, partitioned or not, not the same partitions).
	var partitioned bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = ANY($1::regclass[]) AND relkind = 'p')", quoted).Scan(&partitioned); err != nil {
		return false, fmt.Errorf("create publication %q: look for partitioned tables: %w", pub, err)
	}
	if partitioned {
		sql += " WITH (publish_via_partition_root = true)"
	}
	if _, err := src.Exec(ctx, sql); err != nil {
		return false, fmt.Errorf("create publication %q: %w", pub, pgerr.PublicationPrivilege(pub, sqlNames(names), src.Config().User).Explain(err))
	}
	log.Info("created publication", "publication", pub, "tables", len(names))
	return true, nil
}

func publicationTables(ctx context.Context, src *pgx.Conn, pub string) ([]schema.TableName, error) {
	rows, err := src.Query(ctx, "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2", pub)
	if err != nil {
		return nil, fmt.Errorf("list tables of publication %q: %w", pub, err)
	}
	var out []schema.TableName
	for rows.Next() {
		var t schema.TableName
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// prepareTargetTables checks that every published table exists on the target
// (creating it with createTables) and warns about tables whose updates and
// deletes the source cannot publish. It returns why values cannot travel in
// binary ("" if they can): binary needs every column to have the same
// built-in type on both sides.
//
// Tables are created with what they need — their schema and the
// user-defined types of their columns (enums, composites, domains, ranges,
// dependencies first) — in one target transaction: all of it, or nothing.
//
// What it creates is recorded in undo, to be dropped again if this first
// start fails before its slot exists.
func (e *Engine) prepareTargetTables(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName, create, refuseKeyless bool, undo *undoList) (noBinary string, err error) {
	log := e.log
	var missing []*schema.Table
	var again []schema.TableName
	var problems, lagging, keyless []string
	// With a resumed initial copy: the tables copied already, and those a
	// start made bare (--create-tables) whose copy did not complete.
	ready, bare := map[schema.TableName]bool{}, map[schema.TableName]bool{}
	var copying []schema.TableName
	if e.copyResumed {
		syncs, err := target.LoadTableSyncs(ctx, tgt, e.cfg.Slot)
		if err != nil {
			return "", err
		}
		deferred, err := target.DeferredTables(ctx, tgt, e.cfg.Slot)
		if err != nil {
			return "", err
		}
		// The user's tables set aside for the copy are not bare tables
		// a start made: never made again.
		setAside, err := target.SetAsideTables(ctx, tgt, e.cfg.Slot)
		if err != nil {
			return "", err
		}
		deferred = slices.DeleteFunc(deferred, func(t schema.TableName) bool { return slices.Contains(setAside, t) })
		for _, s := range syncs {
			t := schema.TableName{Schema: s.Schema, Name: s.Name}
			ready[t] = s.State == target.TableReady
			bare[t] = !ready[t] && slices.Contains(deferred, t)
			if s.State == target.TableCopying {
				copying = append(copying, t)
			}
		}
	}
	for _, t := range tables {
		st, err := schema.LoadTable(ctx, src, t.Schema, t.Name)
		if err != nil {
			return "", fmt.Errorf("source table %s: %w", t, err)
		}
		if st.ReplicaIdentity == change.IdentityNothing || st.ReplicaIdentity == change.IdentityDefault && len(st.PrimaryKey) == 0 {
			if refuseKeyless {
				keyless = append(keyless, t.String()+": no primary key and no replica identity: published, the source would refuse its UPDATEs and DELETEs (ALTER TABLE "+t.Quoted()+" REPLICA IDENTITY FULL, or add a primary key; or leave it out of --tables)")
			} else {
				log.Warn("source table has no primary key and no replica identity: its UPDATEs and DELETEs fail on the source (ALTER TABLE ... REPLICA IDENTITY FULL)", "table", t.String())
			}
		}
		tt, err := schema.LoadTable(ctx, tgt, t.Schema, t.Name)
		if err == nil && create && bare[t] && stillBare(tt) {
			// Made bare by an earlier start, its copy not complete: the
			// copy starts it again from empty, so it is made again from
			// the source's definition as it is now — which may have
			// changed since — with what is built after its copy.
			again = append(again, t)
			missing = append(missing, st)
			if noBinary == "" {
				noBinary = binaryProblem(st, st)
			}
			continue
		}
		if err == nil {
			for _, p := range schema.Incompatible(st, tt) {
				if e.schemaMayLag || e.copyResumed && ready[t] && e.ddl != ddlOff {
					lagging = append(lagging, t.String()+": "+p)
				} else {
					problems = append(problems, t.String()+": "+p)
				}
			}
			if noBinary == "" {
				noBinary = binaryProblem(st, tt)
			}
			continue
		}
		if !errors.Is(err, schema.ErrTableNotFound) {
			return "", fmt.Errorf("target table %s: %w", t, err)
		}
		if !create {
			return "", fmt.Errorf("table %s is missing on the target: create it, or pass --create-tables", t)
		}
		missing = append(missing, st)
		if noBinary == "" {
			noBinary = binaryProblem(st, st)
		}
	}
	if len(keyless) > 0 {
		return "", fmt.Errorf("tables repstream would publish cannot be replicated as they are:\n  %s", strings.Join(keyless, "\n  "))
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("the target's tables cannot take the source's rows (fix them, or drop them and use --create-tables):\n  %s",
			strings.Join(problems, "\n  "))
	}
	// A table whose copy did not complete and that the source no longer
	// publishes (renamed or dropped there, or taken out of the
	// publication) is left as it is: its copy state stays "copying" (not
	// ready), so that apply skips what the stream still has for it. Said
	// once, here.
	for _, t := range copying {
		if !slices.Contains(tables, t) {
			log.Warn("a table whose copy did not complete is no longer published by the source (renamed or dropped there, or taken out of the publication): it is left on the target part copied and gets no changes; drop it when you no longer need it",
				"table", t.String())
		}
	}
	if len(lagging) > 0 {
		// Apply stops at the change that cannot be applied, if any.
		log.Warn("the target's tables differ from the source's; schema changes still in the stream may account for it",
			"differences", strings.Join(lagging, "; "))
	}
	if len(missing) > 0 {
		made, err := createTargetTables(ctx, src, tgt, missing, again, e.cfg.Slot, log)
		if err != nil {
			return "", err
		}
		undo.createdTables(tgt, e.cfg.Slot, made)
	}
	return noBinary, nil
}

// setAsideForCopy sets aside the keys and indexes of the target's empty
// tables among tables for the copy (target.SetAside), unless
// --keep-indexes; the tables the target role does not own are named once.
func (e *Engine) setAsideForCopy(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	if e.cfg.KeepIndexes {
		return nil
	}
	log := e.log.With("component", "snapshot")
	notOwned, err := target.SetAside(ctx, tgt, e.cfg.Slot, tables, log)
	if err != nil {
		return err
	}
	if len(notOwned) > 0 {
		log.Info("copying into target tables with their keys and indexes in place: the target role does not own them (or a table whose foreign key references them), "+
			"and only an owner may drop and make again their keys and indexes; the copy is slower for it", "tables", tableList(notOwned), "role", tgt.Config().User)
	}
	return nil
}

// restoreSetAside makes again, as they were, the keys and indexes of the
// tables set aside for a copy that failed or was stopped (emptying them:
// the next run copies them again), with a context of its own (the run's
// may be done). A failure is logged: the next run, or `repstream drop`,
// makes them again.
func (e *Engine) restoreSetAside(ctx context.Context, tgt *pgx.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if tgt.IsClosed() {
		var err error
		if tgt, err = target.Connect(rctx, e.cfg.Target, "repstream-admin"); err != nil {
			e.log.Warn("the target tables set aside for the copy keep going without their keys and indexes until the next run or `repstream drop`", "err", err)
			return
		}
		defer tgt.Close(context.WithoutCancel(ctx))
	}
	if err := target.RestoreSetAside(rctx, tgt, e.cfg.Slot, false, e.log.With("component", "snapshot")); err != nil {
		e.log.Warn("the target tables set aside for the copy keep going without their keys and indexes until the next run or `repstream drop`", "err", err)
	}
}

// stillBare reports whether a target table is as a start made it for its
// copy: an ordinary table with no primary key. (A table by that name that
// has one is not the one the record was made for: made again by hand.)
func stillBare(t *schema.Table) bool {
	return !t.Partitioned && len(t.PrimaryKey) == 0
}

// afterCopy builds the keys and indexes of a table --create-tables made
// (target.BuildDeferred) once its copy has all of its rows: the copy's
// snapshot.Options.AfterCopy.
func (e *Engine) afterCopy(ctx context.Context, dst *pgx.Conn, t schema.TableName) error {
	if err := target.BuildDeferred(ctx, dst, e.cfg.Slot, t, e.log.With("component", "snapshot")); err != nil {
		return err
	}
	e.noteUnbuiltIndexes(ctx, dst)
	return nil
}

// createTargetTables creates tables on the target, with their schemas and
// the user-defined types they need, in one transaction. A type the target
// already has must be compatible (schema.UserType.Incompatible); a type of
// an extension needs the extension on the target. It returns what it made.
// The tables in again exist and are dropped first, in the same transaction:
// bare tables of this slot whose copy did not complete, made again.
//
// With a slot (a start: nothing streams before its copies are done and
// built), a table is made bare — no primary key, no other index, the
// default replica identity — and what it lacks is recorded for slot in the
// same transaction (target.DeferDDL), to be built once its rows are copied
// (target.BuildDeferred). Without (`tables add`: a running engine applies
// schema changes to a pending table before its copy), it is made with its
// primary key and replica identity, and the caller builds its other indexes.
func createTargetTables(ctx context.Context, src, tgt *pgx.Conn, tables []*schema.Table, again []schema.TableName, slot string, log *slog.Logger) (made createdObjects, err error) {
	types, exts, err := schema.TypesFor(ctx, src, tables)
	if err != nil {
		return made, fmt.Errorf("--create-tables: %w", err)
	}
	for _, x := range exts {
		var ok bool
		if err := tgt.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = $1)", x.Extension).Scan(&ok); err != nil {
			return made, fmt.Errorf("--create-tables: look up extension %s on the target: %w", x.Extension, err)
		}
		if !ok {
			return made, fmt.Errorf("--create-tables: %w: type %s comes from extension %s, which the target lacks: CREATE EXTENSION %s on the target",
				schema.ErrExtensionType, x.Type, x.Extension, change.QuoteIdent(x.Extension))
		}
	}
	tx, err := tgt.Begin(ctx)
	if err != nil {
		return made, fmt.Errorf("--create-tables: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if len(again) > 0 {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '30s'"); err != nil {
			return made, fmt.Errorf("--create-tables: %w", err)
		}
	}
	for _, t := range again {
		if _, err := tx.Exec(ctx, "DROP TABLE "+t.Quoted()); err != nil {
			return made, fmt.Errorf("--create-tables: make %s again (made bare by an earlier start, its copy did not complete, and it is copied again from empty): drop it: %w", t, err)
		}
		log.Info("making the table again from the source's definition: its copy did not complete", "table", t)
	}
	schemas := map[string]bool{}
	ensureSchema := func(s string) error {
		if schemas[s] {
			return nil
		}
		schemas[s] = true
		var have bool
		if err := tx.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL", change.QuoteIdent(s)).Scan(&have); err != nil {
			return fmt.Errorf("look up schema %s on the target: %w", s, err)
		}
		if have {
			return nil
		}
		if _, err := tx.Exec(ctx, schema.CreateSchemaSQL(s)); err != nil {
			return fmt.Errorf("create schema %s on the target: %w", s, err)
		}
		made.add("schema "+s, "DROP SCHEMA "+change.QuoteIdent(s))
		return nil
	}
	for _, u := range types {
		have, err := schema.LoadType(ctx, tx, u.Schema, u.Name)
		if err != nil {
			return made, fmt.Errorf("look up type %s on the target: %w", u, err)
		}
		if have != nil {
			if why := u.Incompatible(have); why != "" {
				return made, fmt.Errorf("--create-tables: type %s exists on the target but differs from the source's: %s", u, why)
			}
			continue
		}
		if err := ensureSchema(u.Schema); err != nil {
			return made, err
		}
		if _, err := tx.Exec(ctx, u.CreateSQL()); err != nil {
			return made, fmt.Errorf("create type %s on the target: %w", u, err)
		}
		made.add("type "+u.String(), u.DropSQL())
	}
	// Sequences the columns' defaults draw from (serial), before the tables;
	// identity columns make their own.
	names := make([]schema.TableName, len(tables))
	for i, st := range tables {
		names[i] = st.TableName()
	}
	seqs, err := sequences.Used(ctx, src, names)
	if err != nil {
		return made, fmt.Errorf("--create-tables: %w", err)
	}
	for _, seq := range seqs {
		sql, identity, err := sequences.CreateSQL(ctx, src, seq)
		if err != nil {
			return made, fmt.Errorf("--create-tables: %w", err)
		}
		if identity {
			continue
		}
		if err := ensureSchema(seq.Schema); err != nil {
			return made, err
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return made, fmt.Errorf("create sequence %s on the target: %w", seq, err)
		}
		made.add("sequence "+seq.String(), "DROP SEQUENCE IF EXISTS "+seq.Quoted()) // gone with its table if owned by it
	}
	for _, st := range tables {
		if err := ensureSchema(st.Schema); err != nil {
			return made, err
		}
		if slot != "" {
			if err := createBare(ctx, src, tx, st, slot); err != nil {
				return made, err
			}
		} else {
			if _, err := tx.Exec(ctx, schema.CreateTableSQL(st)); err != nil {
				return made, fmt.Errorf("create table %s on the target: %w", st.TableName(), err)
			}
			for _, sql := range schema.ReplicaIdentitySQL(st) {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return made, fmt.Errorf("set the replica identity of %s on the target: %w", st.TableName(), err)
				}
			}
		}
		made.add("table "+st.TableName().String(), "DROP TABLE "+st.TableName().Quoted())
		made.tables = append(made.tables, st.TableName())
	}
	if err := tx.Commit(ctx); err != nil {
		return made, fmt.Errorf("--create-tables: commit: %w", err)
	}
	for _, c := range made.what {
		log.Info("created on the target", "what", c)
	}
	return made, nil
}

// createBare creates st without its keys and indexes in tx, and records
// them for slot, to be built after its copy.
func createBare(ctx context.Context, src *pgx.Conn, tx pgx.Tx, st *schema.Table, slot string) error {
	bare := *st
	bare.PrimaryKey = nil
	if _, err := tx.Exec(ctx, schema.CreateTableSQL(&bare)); err != nil {
		return fmt.Errorf("create table %s on the target: %w", st.TableName(), err)
	}
	var keys []string
	if pk := schema.PrimaryKeySQL(st); pk != "" {
		keys = append(keys, pk)
	}
	keys = append(keys, schema.ReplicaIdentitySQL(st)...)
	indexes, err := schema.IndexesSQL(ctx, src, st)
	if err != nil {
		return err
	}
	return target.DeferDDL(ctx, tx, slot, st.TableName(), keys, indexes)
}

func binaryProblem(st, tt *schema.Table) string {
	for _, c := range st.Columns {
		if c.Generated {
			continue // not published
		}
		i := tt.Column(c.Name)
		if i < 0 || tt.Columns[i].Generated {
			continue
		}
		if err := target.BinaryCompatible(c.TypeOID, tt.Columns[i].TypeOID); err != nil {
			return fmt.Sprintf("column %q of %s (%s): %v", c.Name, st.TableName(), c.Type, err)
		}
	}
	return ""
}

// waitSlotInactive waits up to wait for the slot (if it exists) not to be in
// use by a walsender.
func waitSlotInactive(ctx context.Context, src *pgx.Conn, slot string, wait time.Duration, log *slog.Logger) error {
	start := time.Now()
	for logged := false; ; {
		var active bool
		var pid *int32
		err := src.QueryRow(ctx, "SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active, &pid)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !active {
			return nil
		}
		if err != nil {
			return fmt.Errorf("look up replication slot %q: %w", slot, err)
		}
		if time.Since(start) > wait {
			p := int32(0)
			if pid != nil {
				p = *pid
			}
			return fmt.Errorf("replication slot %q is active (in use by walsender PID %d) for more than %s: "+
				"another repstream or client is streaming from it; stop it first", slot, p, wait)
		}
		if !logged {
			log.Info("replication slot is active (a previous run ending?): waiting", "slot", slot)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type slotInfo struct {
	exists    bool
	plugin    string
	confirmed change.LSN
	walStatus string
	active    bool
}

func lookupSlot(ctx context.Context, src *pgx.Conn, name string) (slotInfo, error) {
	var s slotInfo
	var confirmed, plugin, walStatus *string
	err := src.QueryRow(ctx, `SELECT plugin::text, confirmed_flush_lsn::text, wal_status, active
		FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, name).
		Scan(&plugin, &confirmed, &walStatus, &s.active)
	if errors.Is(err, pgx.ErrNoRows) {
		var other string
		if err := src.QueryRow(ctx, "SELECT coalesce(database, '(physical)') FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&other); err == nil {
			return s, fmt.Errorf("replication slot %q belongs to database %q, not this one", name, other)
		}
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("look up replication slot %q: %w", name, err)
	}
	s.exists = true
	if plugin != nil {
		s.plugin = *plugin
	}
	if walStatus != nil {
		s.walStatus = *walStatus
	}
	if confirmed != nil {
		if s.confirmed, err = change.ParseLSN(*confirmed); err != nil {
			return s, err
		}
	}
	return s, nil
}

// logSummary logs what the run did: the figures a person (or a test) wants
// at the end — changes and bytes captured, transactions applied, spill.
func (e *Engine) logSummary() {
	snap := e.stats.Snapshot()
	capt, _ := snap.Component("capture")
	q, _ := snap.Component("queue")
	sp, _ := snap.Component("spill")
	var applied, appliedTxns int64
	for _, c := range snap.Components {
		if strings.HasPrefix(c.Name, "apply.") {
			applied += c.Items
			appliedTxns += c.Txns
		}
	}
	e.log.Info("summary",
		"elapsed", time.Since(e.start).Round(time.Millisecond),
		"changes", capt.Counters["changes"], "change_bytes", q.Bytes,
		"txns_applied", appliedTxns, "changes_applied", applied,
		"spilled_bytes", sp.Bytes, "spilled_accounted_bytes", sp.Counters["accounted_bytes"], "spilled_changes", sp.Items,
		"flow_control_seconds", float64(capt.Counters["flow_control_ns"])/1e9)
}
