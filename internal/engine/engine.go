package engine

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/tablesync"
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
	// brokers (capture, apply): the Kafka brokers and how to reach them
	// (runHalf).
	brokers kafkalog.Cluster
	// captureText (capture into Kafka) is why this process's capture
	// sessions stream text: a session streaming binary met a column type
	// that is not built in ("": none did).
	captureText string
	// topicBinary (apply from Kafka): the topic's last record, at start,
	// had binary values.
	topicBinary bool
	// topicID (apply from Kafka): the brokers' id of the topic, read at
	// start (checkTopicID; "": they give none).
	topicID string
	// srcID (apply from Kafka): the apply's source, which the topic's
	// epoch markers must name (kafkalog.Epoch.SameSource).
	srcID provision.Identity
	start time.Time
	// watch closes target connections that went silent (reconnect.go);
	// walsenderPID is the walsender of the last streaming attempt.
	watch        *target.LinkWatch
	walsenderPID uint32
	reachedOnce  bool // both servers answered and passed the start checks once (runResilient)
	// origins: how the target sessions mark their writes (prepareOrigins
	// makes it required when the target replicates back into the source).
	origins *target.Origins
	// checkLocal: apply refuses, as a conflict, to change a target row the
	// target's own transaction wrote after the source's (--origin none
	// with track_commit_timestamp on the target: prepareOrigins); eager
	// apply and folding are off then.
	checkLocal bool
	// ownerChecks: the target tables whose owner check passed, shared by
	// every writer of the process (target.OwnerChecks).
	ownerChecks *target.OwnerChecks
	slotCreated bool // this run created the slot: what it made before is kept (install/undo.go)
	// tables says which changes of tables copied at their own snapshot
	// apply skips; sync copies them and keeps their state (package
	// tablesync).
	tables *apply.TableFilter
	sync   *tablesync.Syncer
	kafka  atomic.Pointer[kafkalog.Reader] // apply --kafka: the topic's reader (kafka.go)

	mon *monitor // HTTP, progress, probes: for the whole of Run (monitor.go)
	// spillLock holds the spill directory for the whole of Run (not for
	// a capture into Kafka, which spills nothing): a second process using
	// it stops at its start, before it touches a database (queue/dir.go).
	// Each streaming attempt's Queue uses it.
	spillLock *queue.SpillDirLock
	// ddl is how this run follows schema changes (ddl.go). schemaMayLag:
	// resuming while it does, the target's tables may lag the source's
	// until the stream's pending schema changes are applied.
	ddl          ddlMode
	schemaMayLag bool
	// ddlKey and ddlSignedFrom check the trigger's messages (capture's
	// Options.DDLKey), read once it is installed.
	ddlKey        []byte
	ddlSignedFrom change.LSN
	// ddlKeySince: the source's WAL position read after ddlKey (an
	// apply's: capture's Options.DDLKeySince).
	ddlKeySince change.LSN
	// topicKey signs a capture --kafka's schema-change messages anew for
	// the topic (publishTopicKey); topicKeys check them in an apply
	// (readDDLKey).
	topicKey  ed25519.PrivateKey
	topicKeys map[string]ed25519.PublicKey
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
	e := &Engine{cfg: cfg, log: logger, stats: reg}
	e.origins = target.NewOrigins(logger)
	e.ownerChecks = &target.OwnerChecks{}
	e.sync = tablesync.New(tablesync.Options{Config: cfg, Logger: logger, Stats: reg, AfterCopy: e.afterCopy, Origins: e.origins})
	return e
}

// Stats returns the registry every stage reports to.
func (e *Engine) Stats() *stats.Registry { return e.stats }

// run is Run under the monitor (monitor.go): it connects and checks both
// servers, provisions what the replication needs (package install), finds
// the target's record and the slot, decides from them what to do with the
// slot (planStart, plan.go) and does it, then streams.
func (e *Engine) run(ctx context.Context) (err error) {
	if err := e.cfg.Validate(); err != nil {
		return err
	}
	cfg := e.cfg
	e.start = time.Now()
	tuneRuntime(cfg)
	src, tgt, err := e.connectChecked(ctx)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	defer tgt.Close(context.Background())
	if err := e.refuseLoop(ctx, src, tgt); err != nil {
		return err
	}
	// A first start that fails before its slot exists leaves nothing
	// behind: what it created is removed again (newest first).
	firstStart, err := install.SlotMissing(ctx, src, cfg.Slot)
	if err != nil {
		return err
	}
	var undo install.Undo
	e.slotCreated = false
	defer func() {
		if err != nil && firstStart && !e.slotCreated {
			undo.Run(ctx, e.log)
		}
	}()
	prog, err := e.loadRecord(ctx, src, tgt, &undo)
	if err != nil {
		return err
	}
	if err := e.prepareOrigins(ctx, src, tgt); err != nil {
		return err
	}
	createdPub, err := e.ensurePublication(ctx, src, tgt, &undo, &prog)
	if err != nil {
		return err
	}
	tables, err := e.publishedTables(ctx, src, &undo, func(setUp func() error) error {
		return e.sync.TriggersAtStart(ctx, src, tgt, prog.Exists, setUp)
	})
	if err != nil {
		return err
	}
	if e.ddl != ddlTrigger {
		if err := target.SetTriggerDigest(ctx, tgt, cfg.Slot, target.NoTriggers); err != nil {
			return err
		}
	}
	e.schemaMayLag, e.copyResumed = resuming(prog, firstStart, e.ddl)
	if err := e.prepareTables(ctx, src, tgt, tables, createdPub, prog.Exists, &undo); err != nil {
		return err
	}
	slot, err := e.findSlot(ctx, src, tgt, tables)
	if err != nil {
		return err
	}
	plan, err := planStart(found{cfg: cfg, prog: prog, createdPub: createdPub, slot: slot})
	if err != nil {
		return err
	}
	prog, initialFlush, err := e.carryOut(ctx, tgt, tables, plan)
	if err != nil {
		return err
	}
	if err := e.beforeStreaming(ctx, src, tgt, tables, prog.Low); err != nil {
		return err
	}
	// The admin connections are not needed while streaming; each streaming
	// attempt opens its own to persist the watermark.
	src.Close(ctx)
	tgt.Close(ctx)
	return e.streamResilient(ctx, prog, initialFlush)
}

// tuneRuntime keeps the Go heap near the queue's budget: the budget is the
// knob the user sets for memory, the rest is a fixed overhead. The limit,
// not GOGC, bounds the heap; a higher GOGC then saves collections. And it
// runs Go code on Procs threads, unless GOMAXPROCS is set.
//
// Kafka mode's halves are tuned so too (runHalf): the apply as run is, its
// queue being the same; the capture keeps a thread per CPU for its
// reading, compressing and producing at once while it catches up, and
// its heap's limit is what its producer buffers at most (the records in
// flight to the brokers), not --memory, which it does not use.
func tuneRuntime(cfg config.Config) {
	budget := int64(cfg.Memory)
	if cfg.Role == config.RoleCapture {
		budget = 2*kafkalog.DefaultMaxInFlight + kafkalog.DefaultMaxRecord
	}
	debug.SetMemoryLimit(budget + 48<<20)
	debug.SetGCPercent(400)
	if os.Getenv("GOMAXPROCS") == "" && cfg.Role != config.RoleCapture {
		runtime.GOMAXPROCS(Procs(cfg.ApplyParallelism, runtime.NumCPU()))
	}
}

// connectChecked opens the admin connections to both servers and checks
// them: wal_level, the source role's REPLICATION, not one database twice,
// no event trigger on the target that would run another role's code as a
// superuser target role (target.CheckEventTriggers).
func (e *Engine) connectChecked(ctx context.Context) (src, tgt *pgx.Conn, err error) {
	cfg := e.cfg
	src, tgt, closeBoth, err := install.ConnectBoth(ctx, cfg, "repstream-admin")
	if err != nil {
		return nil, nil, err
	}
	if err := install.CheckSource(ctx, src); err != nil {
		closeBoth()
		return nil, nil, err
	}
	if err := install.CheckReplicationAttribute(ctx, src, cfg.Source); err != nil {
		closeBoth()
		return nil, nil, err
	}
	if err := provision.SameDatabase(ctx, src, tgt); err != nil {
		closeBoth()
		return nil, nil, err
	}
	// Before the first DDL on the target (its schema repstream, a
	// --create-tables table, a key built after a copy).
	if err := target.CheckEventTriggers(ctx, tgt, cfg.TrustTableOwners); err != nil {
		closeBoth()
		return nil, nil, err
	}
	// Both servers answered and passed the checks: from here on a lost
	// connection is a fault to ride through, not a wrong configuration.
	e.reachedOnce = true
	return src, tgt, nil
}

// loadRecord registers the slot on the target (undone with the rest if a
// first start fails), waits for the slot to be free and for a previous
// run's target sessions, and reads the target's record of the slot.
func (e *Engine) loadRecord(ctx context.Context, src, tgt *pgx.Conn, undo *install.Undo) (target.Progress, error) {
	cfg := e.cfg
	if err := undo.State(ctx, tgt, cfg.Slot, e.log); err != nil {
		return target.Progress{}, err
	}
	if err := target.Register(ctx, tgt, cfg.Slot); err != nil {
		return target.Progress{}, fmt.Errorf("prepare repstream state on the target: %w", pgerr.CreateSchemaPrivilege(tgt.Config().Database, tgt.Config().User).Explain(err))
	}
	// Another engine streaming from the slot makes it active; so does, for a
	// moment, the walsender of a run that just died.
	if err := install.WaitSlotInactive(ctx, src, cfg.Slot, 10*time.Second, e.log); err != nil {
		return target.Progress{}, err
	}
	// A killed previous run's target sessions may still be finishing commits
	// they received: wait for them before reading what is applied.
	if err := target.WaitForPreviousApply(ctx, tgt, cfg.Slot, 30*time.Second, e.log); err != nil {
		return target.Progress{}, err
	}
	prog, err := target.LoadProgress(ctx, tgt, cfg.Slot)
	if err != nil {
		return target.Progress{}, fmt.Errorf("read progress of slot %q on the target: %w", cfg.Slot, err)
	}
	return prog, nil
}

// ensurePublication creates the publication from --tables if it is
// missing, recording that in prog (and on the target at once, so that drop
// removes it even if this run fails before the slot exists), or widens the
// one repstream made to a wider --tables. It reports whether it created it.
func (e *Engine) ensurePublication(ctx context.Context, src, tgt *pgx.Conn, undo *install.Undo, prog *target.Progress) (bool, error) {
	cfg := e.cfg
	createdPub, err := install.EnsurePublication(ctx, src, cfg.Publication, cfg.Tables, cfg.DDL == "true", e.log)
	if err != nil {
		return false, err
	}
	if createdPub {
		undo.Publication(src, cfg.Publication)
		if err := target.MarkPublicationCreated(ctx, tgt, cfg.Slot); err != nil {
			return false, err
		}
		prog.CreatedPublication = true
	}
	if !createdPub && prog.CreatedPublication && len(cfg.Tables) > 0 {
		// A wider --tables adds the new tables as `tables add` does.
		if err := install.WidenPublication(ctx, src, tgt, cfg, e.log); err != nil {
			return false, err
		}
	}
	return createdPub, nil
}

// publishedTables sets up how schema changes are followed (installing the
// event trigger, through around unless it is nil: setUpDDL; undone with
// the rest if a first start fails) and returns
// the publication's tables, once checked: the publication publishes every
// kind of change (or --partial-publication), and partitions published
// through their root are followed (or --allow-untracked-partitions).
func (e *Engine) publishedTables(ctx context.Context, src *pgx.Conn, undo *install.Undo, around func(setUp func() error) error) ([]schema.TableName, error) {
	cfg := e.cfg
	var err error
	if e.ddl, err = setUpDDL(ctx, src, cfg.DDL, cfg.Slot, cfg.Publication, e.log, around); err != nil {
		return nil, err
	}
	if e.ddl == ddlTrigger {
		undo.DDLTrigger(src, cfg.Slot, e.log)
		if e.ddlKey, e.ddlSignedFrom, err = install.DDLSigning(ctx, src, cfg.Slot); err != nil {
			return nil, err
		}
	}
	tables, err := install.PublicationTables(ctx, src, cfg.Publication)
	if err != nil {
		return nil, err
	}
	if err := install.CheckPublishes(ctx, src, cfg.Publication, cfg.PartialPublication, e.log); err != nil {
		return nil, err
	}
	if e.ddl != ddlTrigger && !cfg.AllowUntrackedPartitions {
		if err := install.CheckUntrackedPartitions(ctx, src, cfg.Publication, e.ddl, tables); err != nil {
			return nil, err
		}
	}
	if len(tables) == 0 {
		e.log.Warn("the publication has no tables: nothing will be replicated", "publication", cfg.Publication)
	}
	return tables, nil
}

// prepareTables checks (and with --create-tables makes) the target's
// tables (install.PrepareTables) and decides whether values travel in
// binary. A keyless table that repstream itself would publish
// (createdPub) is refused: once published, the source refuses its UPDATEs
// and DELETEs — the run would break the application writing it.
//
// On a start that streams on (resumed: the target has a record of the
// slot, and no initial copy to finish), a table it had to make is
// recorded pending, and this start copies it before it streams
// (beforeStreaming; tablesync's CopyMade): one the slot records (copied,
// or streamed from its start) was dropped on the target since, and made
// empty it would take the source's changes without their rows before;
// one it does not record was made (or published) on the source while no
// engine ran, and what the stream still has of it — its CREATE TABLE,
// rows, schema changes — was made for its earlier definitions, not the
// one it was made with now (replayed, an ALTER of a column its later
// primary key holds stopped the run). Copied at a snapshot, what the
// stream has of it up to there is skipped (apply.TableFilter); a table
// published in a session with the trigger off (no message ever comes)
// is made and copied the same way.
func (e *Engine) prepareTables(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName, createdPub, resumed bool, undo *install.Undo) error {
	cfg := e.cfg
	noBinary, created, err := install.PrepareTables(ctx, src, tgt, tables, install.TablesStart{
		Slot: cfg.Slot, Publication: cfg.Publication, Create: cfg.CreateTables, RefuseKeyless: createdPub,
		CopyResumed: e.copyResumed, SchemaMayLag: e.schemaMayLag, FollowsDDL: e.ddl != ddlOff, TypesFollowed: e.ddl == ddlTrigger,
		TrustTableOwners: cfg.TrustTableOwners,
	}, undo, e.log)
	if err != nil {
		return err
	}
	if resumed && !e.copyResumed && len(created) > 0 {
		if err := e.sync.CopyMade(ctx, tgt, created); err != nil {
			return err
		}
	}
	e.binary = cfg.Binary && noBinary == ""
	switch {
	case noBinary == "":
	case cfg.Role == config.RoleApply && e.topicBinary:
		return fmt.Errorf("the capture writes this slot's values in binary (repstream capture --binary, the default), and this target cannot take them: %s: "+
			"make the target column's type the source's, or start the capture with --binary=false first", noBinary)
	case cfg.Role == config.RoleApply:
		// The capture chose the values' format for every apply.
		e.log.Warn("this target cannot take values in binary: if the capture writes them so (its default, when every column is of a built-in type), "+
			"this apply stops at that table's first change; make the column's type the source's, or start the capture with --binary=false", "reason", noBinary)
	case cfg.Binary:
		e.log.Info("values travel as text, not binary", "reason", noBinary)
	}
	return nil
}

// findSlot looks the slot up and checks, before anything is copied, the
// roles' privileges on the tables: the target role's to write them, and
// the source role's to read them when the initial copy will (no slot yet,
// --snapshot).
func (e *Engine) findSlot(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName) (install.Slot, error) {
	slot, err := install.LookupSlot(ctx, src, e.cfg.Slot)
	if err != nil {
		return slot, err
	}
	if err := install.CheckTablePrivileges(ctx, src, tgt, tables, !slot.Exists && e.cfg.Snapshot); err != nil {
		return slot, err
	}
	return slot, target.CheckOwners(ctx, tgt, tables, e.cfg.TrustTableOwners)
}

// carryOut does what the plan says, in order, and returns the record the
// run streams from and the position it starts at.
func (e *Engine) carryOut(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName, p startPlan) (target.Progress, change.LSN, error) {
	cfg := e.cfg
	prog, initialFlush := p.prog, p.initialFlush
	for _, s := range p.steps {
		var err error
		switch s {
		case stepEmptyCopied:
			err = e.sync.EmptyCopied(ctx, tgt, tables)
		case stepCreateSlot:
			var low change.LSN
			low, err = e.createSlot(ctx, tgt, tables, p.recordPub)
			prog.Low, initialFlush = low, low
		case stepResumeCopy:
			err = e.sync.ResumeCopy(ctx, tgt, tables)
		case stepAdoptSlot:
			e.log.Warn("--adopt-slot: the target has no state for the slot: applying from the slot's confirmed position, without an initial copy", "slot", cfg.Slot, "confirmed", prog.Low)
			if err = target.InitProgress(ctx, tgt, cfg.Slot, prog.Low, target.SnapshotNone, false); err == nil {
				err = target.SetTablesStreamed(ctx, tgt, cfg.Slot, tables, prog.Low, e.sync.SourceIdents(ctx))
			}
		case stepRefuse:
			err = p.refuse
		}
		if err != nil {
			return target.Progress{}, 0, err
		}
	}
	if prog.Exists && prog.Snapshot == target.SnapshotNone {
		if err := e.recordLegacyStreamed(ctx, tgt, tables, prog.Low); err != nil {
			return target.Progress{}, 0, err
		}
	}
	return prog, initialFlush, nil
}

// recordLegacyStreamed records the published tables of a slot that
// streams without a copy as streamed, when an earlier version recorded
// none: without that, a run would copy each
// of them anew at its first change (CopyUnrecorded).
func (e *Engine) recordLegacyStreamed(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName, low change.LSN) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, e.cfg.Slot)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(syncs, func(s target.TableSync) bool { return s.State == target.TableReady }) {
		return nil
	}
	e.log.Info("recording the published tables as streamed without a copy (a slot started by an earlier version)", "tables", len(tables))
	return target.SetTablesStreamed(ctx, tgt, e.cfg.Slot, tables, low, e.sync.SourceIdents(ctx))
}

// beforeStreaming copies the tables added since the last run (pending),
// loads what apply skips of tables copied at their own snapshot, fixes
// where --until-caught-up stops, and builds the keys and indexes no copy
// has built.
func (e *Engine) beforeStreaming(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName, low change.LSN) error {
	cfg := e.cfg
	if err := e.sync.SyncPending(ctx, src, tgt, tables); err != nil {
		return err
	}
	var err error
	if e.tables, err = e.sync.LoadFilter(ctx, tgt, low); err != nil {
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
	if err := target.BuildAllAfterCopy(ctx, tgt, cfg.Slot, cfg.TrustTableOwners, e.log); err != nil {
		return fmt.Errorf("keys and indexes after the copy: %w", err)
	}
	e.noteUnbuiltIndexes(ctx, tgt)
	return nil
}

// stream runs one streaming attempt: capture → queue → apply from prog
// (initialFlush: the position capture may acknowledge before apply
// reports any), with the watermark persisted as apply advances, until it
// stops, fails or catches up.
func (e *Engine) stream(ctx context.Context, tgt *pgx.Conn, prog target.Progress, initialFlush change.LSN) error {
	cfg := e.cfg
	q, err := queue.New(queue.Options{Budget: int64(cfg.Memory), SpillDir: cfg.SpillDir, Lock: e.spillLock, Stats: e.stats, Logger: e.log, Producer: e.stats.Component("capture")})
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	defer q.Close()
	e.queue = q
	e.wm = apply.NewWatermark(prog.Low)
	e.wm.TraceLatency(e.stats.CommitLatency(), stats.StageVisible, stats.StageDurable)
	e.watchWatermark(e.wm)
	acker := newRecordedAcker(e.wm, prog.Low)
	e.setPhase("streaming")
	capt, ap, eager, err := e.pipeline(ctx, tgt, q, acker, prog, initialFlush)
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	defer func() { e.walsenderPID = capt.BackendPID() }()
	g.Go(func() error {
		return onSide("source", pgerr.ReplicationPrivilege(install.DSNUser(cfg.Source)).Explain(capt.Run(gctx)))
	})
	g.Go(func() error { return onSide("target", ap.Run(gctx, q)) })
	if eager != nil {
		g.Go(func() error { return onSide("target", eager.Run(gctx)) })
	}
	if e.watch != nil {
		g.Go(func() error { return e.watch.Run(gctx) })
	}
	g.Go(func() error { return e.sync.Watch(gctx, e.tables, applyPause{ap, eager}, e.ddl != ddlTrigger) })
	persisted := prog.Low
	g.Go(func() error { return onSide("target", e.persistLoop(gctx, tgt, acker, &persisted)) })
	err = g.Wait()
	// Persist the final watermark with a fresh context: the run's may be done.
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	perr := e.persist(pctx, tgt, &persisted)
	pcancel()
	e.logSummary()
	return e.streamEnded(ctx, tgt, err, perr)
}

// pipeline makes the stages of a streaming attempt: capture (into q,
// acknowledging through acker), apply and, with --eager, eager apply (nil
// otherwise; never stored in an interface when nil).
func (e *Engine) pipeline(ctx context.Context, tgt *pgx.Conn, q *queue.Queue, acker *recordedAcker, prog target.Progress, initialFlush change.LSN) (*capture.Capture, *apply.Applier, *apply.Eager, error) {
	cfg := e.cfg
	capOpts := capture.Options{
		DSN: cfg.Source, Slot: cfg.Slot, Publication: cfg.Publication,
		StartLSN: prog.Low, InitialFlush: initialFlush,
		DecodingWorkMem: cfg.DecodingWorkMem, StatusInterval: cfg.StatusInterval, StopAt: e.stopAt, Binary: e.binary,
		Timeout: cfg.SourceTimeout, GatherWait: cfg.GroupWait, SkipOrigins: cfg.Origin == config.OriginNone,
		Queue: q, Acker: acker, Stats: e.stats, Logger: e.log,
	}
	capOpts.DDLMessages, capOpts.DDLKey, capOpts.DDLSignedFrom = e.ddl == ddlTrigger, e.ddlKey, e.ddlSignedFrom
	capOpts.DDLKeyNow = ddlKeyNow(cfg.Source, cfg.Slot)
	apOpts := apply.Options{
		TargetDSN: cfg.Target, Writer: e.writerOptions(false),
		Parallelism: cfg.ApplyParallelism, CommitOrder: cfg.CommitOrder,
		GroupMaxTxns: cfg.GroupMaxTxns, GroupMaxBytes: int64(cfg.GroupMaxBytes), Collapse: cfg.Collapse && !e.checkLocal,
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
		return nil, nil, nil, err
	}
	apOpts.OnError, apOpts.SkipRequested = cfg.OnError, skips.Take
	useEager := cfg.Eager && e.eagerWithConflicts(cfg.OnError, len(skips))
	var eager *apply.Eager
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
		return nil, nil, nil, err
	}
	apOpts.Behind, apOpts.Gathers = capt.Behind, capt.Gathers
	ap, err := apply.New(apOpts)
	if err != nil {
		return nil, nil, nil, err
	}
	return capt, ap, eager, nil
}

// streamEnded is how a streaming attempt that ended with err (perr: the
// final watermark's persisting) ends the run: caught up (the tables
// pending copied, every table ready, the sequences synchronised), stopped,
// or failed.
func (e *Engine) streamEnded(ctx context.Context, tgt *pgx.Conn, err, perr error) error {
	switch {
	case errors.Is(err, capture.ErrCaughtUp):
		if err := e.copyPendingAtEnd(ctx, tgt); err != nil {
			return errors.Join(perr, err)
		}
		if err := e.sync.CheckReady(tgt); err != nil {
			return errors.Join(perr, err)
		}
		// Caught up is not true of what the error queue holds.
		if n, err := errqueue.CountParked(ctx, tgt, e.cfg.Slot); err != nil || n > 0 {
			e.log.Warn("caught up, except the source transactions parked in the error queue, which the target lacks until they are retried or skipped: repstream errors list",
				"parked", n, "err", err, "position", e.wm.Flush(), "elapsed", time.Since(e.start).Round(time.Millisecond))
		} else {
			e.log.Info("caught up: everything committed before the start is applied and acknowledged",
				"position", e.wm.Flush(), "elapsed", time.Since(e.start).Round(time.Millisecond))
		}
		return errors.Join(perr, e.syncSequencesAtEnd())
	case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || pgerr.ConnectionLost(err)):
		// A stop. pgx tears a connection down when its context is
		// cancelled, and a call under way may then report the socket's
		// close rather than the context: that is the stop too (the
		// watermark persisted above is what the next run resumes from).
		if perr != nil {
			// The next run resumes from the record before, which is
			// safe: what was applied since is recorded with its rows.
			e.log.Warn("the last low watermark was not recorded on the target", "err", perr)
		}
		e.log.Info("stopped", "applied_up_to", e.wm.Flush())
		return e.syncSequencesAtEnd()
	}
	return err
}

// applyPause is the pause of apply the copy of added tables needs
// (tablesync.Pause): eager, if any, held, and the applier quiesced.
type applyPause struct {
	ap    *apply.Applier
	eager *apply.Eager // nil without --eager
}

func (p applyPause) Hold(ctx context.Context) error {
	if p.eager == nil {
		return nil
	}
	return p.eager.Hold(ctx)
}

func (p applyPause) Release() {
	if p.eager != nil {
		p.eager.Release()
	}
}

func (p applyPause) Quiesce(ctx context.Context, fn func(ctx context.Context) error) error {
	return p.ap.Quiesce(ctx, fn)
}

// writerOptions is the template of the target writers' options this run
// needs: what the writer must know of the slot, the value format and how
// schema changes are followed. eager: for eager apply, whose added
// columns are read as the source has them at the transaction's end.
func (e *Engine) writerOptions(eager bool) target.WriterOptions {
	w := target.WriterOptions{
		Slot: e.cfg.Slot, Binary: e.binary,
		RelationDDL: e.ddl == ddlRelation, SchemaChangesStop: e.ddl == ddlOff, CreateTables: e.cfg.CreateTables, AddedColumn: addedColumnOnSource(e.cfg.Source, eager), SourceTypes: sourceTypes(e.cfg.Source), SourceTypeNames: sourceTypeNames(e.cfg.Source),
		Publication: e.cfg.Publication, Resync: e.resync, PartialPublication: e.cfg.PartialPublication,
		// Nothing said that a table the slot does not record entered the
		// publication (no event trigger, or a session with it off): it
		// is copied.
		CopyUnrecorded:   true,
		TrustTableOwners: e.cfg.TrustTableOwners,
		Origins:          e.origins,
		OwnerChecks:      e.ownerChecks,
		CheckLocalWrites: e.checkLocal,
	}
	if e.cfg.Role == config.RoleApply {
		w.BinaryAdvice = "the topic carries this table's values in binary (repstream capture --binary, the default), which need the same built-in type on both sides: " +
			"make the target column's type the source's and start this apply again (a capture started with --binary=false writes text from then on)"
	}
	return w
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
		if err := snapshot.CheckTargets(ctx, tgt, tables, cfg.Truncate, e.log); err != nil {
			return 0, err
		}
		// Before the slot: no table state of an earlier copy survives.
		if err := e.sync.MarkCopying(ctx, tgt, tables); err != nil {
			return 0, err
		}
		// The user's empty tables are copied as bare as those
		// --create-tables makes; a copy that fails (or a slot that
		// cannot be made) leaves them as they were.
		if err := install.SetAsideForCopy(ctx, tgt, e.cfg.Slot, tables, e.cfg.KeepIndexes, e.log); err != nil {
			return 0, err
		}
		defer func() {
			if err != nil {
				install.RestoreSetAside(ctx, tgt, e.cfg.Target, e.cfg.Slot, e.log)
			}
		}()
	}
	idents := e.sync.SourceIdents(ctx) // before the slot's snapshot: a later change of them is seen
	res, closeRepl, err := install.CreateSlot(ctx, cfg.Source, cfg.Slot, cfg.Snapshot)
	if err != nil {
		return 0, err
	}
	// Its replication connection holds the exported snapshot: open until the copy is done.
	defer closeRepl()
	e.slotCreated = true
	low, err := change.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	e.log.Info("created replication slot", "slot", cfg.Slot, "consistent_point", low)
	if !cfg.Snapshot {
		if err := target.InitProgress(ctx, tgt, cfg.Slot, low, target.SnapshotNone, createdPub); err != nil {
			return 0, err
		}
		// Recorded: a table the stream carries later and the slot does
		// not record entered the publication after (CopyUnrecorded).
		return low, target.SetTablesStreamed(ctx, tgt, cfg.Slot, tables, low, idents)
	}
	if err := target.InitProgress(ctx, tgt, cfg.Slot, low, target.SnapshotRunning, createdPub); err != nil {
		return 0, err
	}
	e.log.Info("initial copy from the slot's snapshot", "tables", len(tables), "snapshot", res.SnapshotName)
	e.setPhase("copying")
	r, err := snapshot.Copy(ctx, snapshot.Options{
		SourceDSN: cfg.Source, TargetDSN: cfg.Target, SnapshotName: res.SnapshotName, Publication: cfg.Publication,
		Tables: tables, Workers: cfg.SnapshotWorkers, Stats: e.stats, Logger: e.log, OnTable: e.sync.RecordCopied(tgt, low, idents), Origins: e.origins,
		RangeSize: int64(cfg.SnapshotRangeSize), Binary: cfg.Binary, AfterCopy: e.afterCopy,
	})
	if err != nil {
		return 0, fmt.Errorf("initial copy: %w", err)
	}
	e.log.Info("initial copy done", "tables", r.Tables, "rows", r.Rows, "bytes", r.Bytes, "elapsed", r.Time.Round(time.Millisecond))
	return low, target.SetSnapshot(ctx, tgt, cfg.Slot, target.SnapshotDone)
}

// afterCopy builds the keys and indexes of a table --create-tables made
// (target.BuildAfterCopy) once its copy has all of its rows: the copy's
// snapshot.Options.AfterCopy.
func (e *Engine) afterCopy(ctx context.Context, dst *pgx.Conn, t schema.TableName) error {
	if err := target.BuildAfterCopy(ctx, dst, e.cfg.Slot, t, e.cfg.TrustTableOwners, e.log.With("component", "snapshot")); err != nil {
		return err
	}
	e.noteUnbuiltIndexes(ctx, dst)
	return nil
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
