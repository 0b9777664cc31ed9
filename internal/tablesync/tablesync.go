package tablesync

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// Options are what a Syncer's copies need.
type Options struct {
	Config config.Config   // the run's configuration (defaults set)
	Logger *slog.Logger    // nil: discarded
	Stats  *stats.Registry // the copies' figures; nil: a registry of its own
	// AfterCopy builds what a table's copy deferred (keys and indexes
	// --create-tables left out) once its rows are in: the copy's
	// snapshot.Options.AfterCopy.
	AfterCopy func(ctx context.Context, dst *pgx.Conn, t schema.TableName) error
	// Origins marks the copies' and the emptying's writes (nil: best
	// effort, silent).
	Origins *target.Origins
}

// Syncer copies tables at their own snapshot and keeps their sync state:
// the one owner of repstream.tables for a running engine.
type Syncer struct {
	cfg       config.Config
	log       *slog.Logger
	stats     *stats.Registry
	afterCopy func(ctx context.Context, dst *pgx.Conn, t schema.TableName) error
	origins   *target.Origins
}

// New returns a Syncer with o's configuration, logger, registry and AfterCopy.
func New(o Options) *Syncer {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stats == nil {
		o.Stats = stats.NewRegistry()
	}
	return &Syncer{cfg: o.Config, log: o.Logger, stats: o.Stats, afterCopy: o.AfterCopy, origins: o.Origins}
}

// syncTables copies tables from a new snapshot at a known position: it
// refuses, before it changes anything, a table entering the slot's
// replication whose target table holds rows, unless --truncate
// (checkEntering); it records them as copying, empties them on the
// target (they belong to this copy), creates a temporary slot exporting its snapshot, copies, and
// records each table ready at the slot's consistent point L once its copy is
// complete. ready (if set) is called with each table copied. The temporary
// slot goes away with its connection.
//
// atStart: a start copies them, before anything streams: the keys and
// indexes of the user's empty tables are set aside for the copy
// (setAsideForCopy), and made again as they were if it fails.
func (ts *Syncer) syncTables(ctx context.Context, tables []schema.TableName, atStart bool, ready func(t schema.TableName, l change.LSN)) (_ change.LSN, err error) {
	cfg := ts.cfg
	log := ts.log.With("component", "tablesync")
	tgt, err := target.Connect(ctx, cfg.Target, "repstream-tablesync")
	if err != nil {
		return 0, err
	}
	defer tgt.Close(context.Background())
	// It empties the tables: a replicated change (target.Origins).
	if _, err := ts.origins.Use(ctx, tgt); err != nil {
		return 0, err
	}
	if err := ts.checkEntering(ctx, tgt, tables); err != nil {
		return 0, err
	}
	if !atStart {
		// Added while running: `tables add` made a missing target table,
		// but one that entered the publication otherwise (ALTER
		// PUBLICATION, a capture's wider --tables, without the event
		// trigger) may be missing: made with --create-tables, as a start
		// makes one, else a clear stop. (A start made its tables.)
		if err := ts.checkAdded(ctx, tgt, tables); err != nil {
			return 0, err
		}
	}
	if err := target.CheckOwners(ctx, tgt, tables, cfg.TrustTableOwners); err != nil {
		return 0, err
	}
	for _, t := range tables {
		if err := target.SetTableState(ctx, tgt, cfg.Slot, t.Schema, t.Name, target.TableCopying); err != nil {
			return 0, err
		}
	}
	if err := snapshot.CheckTargets(ctx, tgt, tables, true, log); err != nil {
		return 0, err
	}
	if atStart {
		if err := install.SetAsideForCopy(ctx, tgt, ts.cfg.Slot, tables, ts.cfg.KeepIndexes, ts.log); err != nil {
			return 0, err
		}
		defer func() {
			if err != nil {
				install.RestoreSetAside(ctx, tgt, ts.cfg.Target, ts.cfg.Slot, ts.log)
			}
		}()
	}
	idents, err := ts.beforeCopy(ctx, tgt)
	if err != nil {
		return 0, err
	}
	repl, err := capture.Connect(ctx, cfg.Source, "")
	if err != nil {
		return 0, err
	}
	defer repl.Close(context.Background())
	action := "(SNAPSHOT 'export')"
	if capture.ServerMajor(repl) < 15 {
		action = "EXPORT_SNAPSHOT"
	}
	name := tempSlotName(cfg.Slot)
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	if err != nil {
		return 0, fmt.Errorf("create temporary replication slot %q on the source for the copy of %s: %w", name, tableList(tables), err)
	}
	l, err := change.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	log.Info("copying tables from a temporary slot's snapshot", "tables", tableList(tables), "sync_lsn", l, "temporary_slot", name)
	var mu sync.Mutex // tgt is one connection; OnTable runs on the copy's workers
	r, err := snapshot.Copy(ctx, snapshot.Options{
		SourceDSN: cfg.Source, TargetDSN: cfg.Target, SnapshotName: res.SnapshotName, Publication: cfg.Publication,
		Tables: tables, Workers: cfg.SnapshotWorkers, Stats: ts.stats, Logger: ts.log, Origins: ts.origins,
		RangeSize: int64(cfg.SnapshotRangeSize), Binary: cfg.Binary, AfterCopy: ts.afterCopy,
		OnTable: func(ctx context.Context, t schema.TableName, rows, bytes int64) error {
			mu.Lock()
			defer mu.Unlock()
			if err := target.SetTableReady(ctx, tgt, cfg.Slot, t.Schema, t.Name, l, rows, bytes, idents[t]); err != nil {
				return err
			}
			if ready != nil {
				ready(t, l)
			}
			return nil
		},
	})
	if err != nil {
		return 0, fmt.Errorf("copy of %s at %s: %w", tableList(tables), l, err)
	}
	log.Info("tables copied", "tables", r.Tables, "rows", r.Rows, "bytes", r.Bytes, "sync_lsn", l, "elapsed", r.Time.Round(time.Millisecond))
	return l, nil
}

// tempSlotName is a name for a temporary slot of the slot's table copies
// (at most 63 bytes, unique enough: a temporary slot lives with its session).
func tempSlotName(slot string) string {
	suffix := "_sync_" + strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	if len(slot)+len(suffix) > 63 {
		slot = slot[:63-len(suffix)]
	}
	return slot + suffix
}

func tableList(tables []schema.TableName) string {
	s := ""
	for i, t := range tables {
		if i > 0 {
			s += ", "
		}
		s += t.String()
	}
	return s
}

// MarkCopying records the tables of the initial copy as copying.
func (ts *Syncer) MarkCopying(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	for _, t := range tables {
		if err := target.SetTableState(ctx, tgt, ts.cfg.Slot, t.Schema, t.Name, target.TableCopying); err != nil {
			return err
		}
	}
	return nil
}

// RecordCopied returns the initial copy's OnTable callback: it records each
// table ready at the slot's consistent point, with its source identity
// from idents (SourceIdents, read before the slot was made).
func (ts *Syncer) RecordCopied(tgt *pgx.Conn, low change.LSN, idents map[schema.TableName]target.SourceInfo) func(context.Context, schema.TableName, int64, int64) error {
	var mu sync.Mutex // tgt is one connection; OnTable runs on the copy's workers
	return func(ctx context.Context, t schema.TableName, rows, bytes int64) error {
		mu.Lock()
		defer mu.Unlock()
		return target.SetTableReady(ctx, tgt, ts.cfg.Slot, t.Schema, t.Name, low, rows, bytes, idents[t])
	}
}

// beforeCopy is what a copy does on the source before its snapshot, on
// one connection: the publication must publish every kind of change (a
// table recorded for a new copy because it left some out, the event
// trigger's message, is copied once it is set back, or the run stops
// here: CheckPublishing), and the published tables' source identities are
// read (sourceIdents), so that a later change of them is seen.
func (ts *Syncer) beforeCopy(ctx context.Context, tgt *pgx.Conn) (map[schema.TableName]target.SourceInfo, error) {
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	if err := ts.CheckPublishing(ctx, src, tgt); err != nil {
		return nil, err
	}
	return ts.sourceIdents(ctx, src), nil
}

// SourceIdents returns the source identity of every table the publication
// publishes (install.PublicationIdents), recorded with a copy: without the
// event trigger, the publication poll copies a table anew whose identity
// changed since. A source that does not answer gives none: the next poll
// records them.
func (ts *Syncer) SourceIdents(ctx context.Context) map[schema.TableName]target.SourceInfo {
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		ts.log.Debug("source identities of the published tables not read", "component", "tablesync", "err", err)
		return nil
	}
	defer src.Close(context.WithoutCancel(ctx))
	return ts.sourceIdents(ctx, src)
}

func (ts *Syncer) sourceIdents(ctx context.Context, src *pgx.Conn) map[schema.TableName]target.SourceInfo {
	idents, err := install.PublicationIdents(ctx, src, ts.cfg.Publication)
	if err != nil {
		ts.log.Debug("source identities of the published tables not read", "component", "tablesync", "err", err)
		return nil
	}
	types, err := install.PublicationColumnTypes(ctx, src, ts.cfg.Publication)
	if err != nil {
		ts.log.Debug("column types of the published tables not read", "component", "tablesync", "err", err)
	}
	out := make(map[schema.TableName]target.SourceInfo, len(idents))
	for t, id := range idents {
		out[t] = target.SourceInfo{Ident: id, Types: types[t]}
	}
	return out
}

// ResumeCopy finishes an initial copy that a previous run began from the
// slot's snapshot and did not end: the tables it copied completely (ready)
// are kept, the others are emptied and copied from a new snapshot at a known
// position (their sync LSN).
func (ts *Syncer) ResumeCopy(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	log := ts.log.With("component", "tablesync")
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	ready := map[schema.TableName]target.TableSync{}
	for _, s := range syncs {
		if s.State == target.TableReady {
			ready[schema.TableName{Schema: s.Schema, Name: s.Name}] = s
		}
	}
	var rest []schema.TableName
	for _, t := range tables {
		if s, ok := ready[t]; ok {
			log.Info("initial copy was interrupted: keeping a table it copied", "table", t.String(),
				"rows", s.Rows, "sync_lsn", s.SyncLSN, "copied_at", s.CopiedAt)
			continue
		}
		if len(syncs) > 0 {
			log.Info("initial copy was interrupted: copying a table again", "table", t.String())
		} // else nothing was copied or begun: a first copy (apply --kafka's goes this way)
		rest = append(rest, t)
	}
	if len(rest) > 0 {
		if _, err := ts.syncTables(ctx, rest, true, nil); err != nil {
			return fmt.Errorf("resume the interrupted initial copy: %w", err)
		}
	}
	return target.SetSnapshot(ctx, tgt, ts.cfg.Slot, target.SnapshotDone)
}

// SyncPending copies the tables added while no engine ran (pending,
// or copying when a previous run stopped during their copy), if they are in
// the publication; others stay pending, but for those the source no longer
// has (GivePendingUp).
func (ts *Syncer) SyncPending(ctx context.Context, src, tgt *pgx.Conn, published []schema.TableName) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	var todo, unpublished []schema.TableName
	for _, s := range syncs {
		t := schema.TableName{Schema: s.Schema, Name: s.Name}
		if s.State == target.TableReady {
			continue
		}
		if !slices.Contains(published, t) {
			if s.State == target.TablePending {
				unpublished = append(unpublished, t)
			}
			continue
		}
		todo = append(todo, t)
	}
	waiting, err := ts.GivePendingUp(ctx, src, tgt, unpublished)
	if err != nil {
		return err
	}
	for _, t := range waiting {
		ts.log.Info("added table is not in the publication yet: it is copied once it is", "component", "tablesync", "table", t.String())
	}
	if len(todo) == 0 {
		return nil
	}
	_, err = ts.syncTables(ctx, todo, true, nil)
	return err
}

// LoadFilter builds apply's filter from repstream.tables: the tables
// not ready, and the ready ones whose sync LSN lies beyond low (a table
// copied at or below low has no change left to skip).
func (ts *Syncer) LoadFilter(ctx context.Context, tgt *pgx.Conn, low change.LSN) (*apply.TableFilter, error) {
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return nil, err
	}
	m := map[schema.TableName]apply.TableState{}
	for _, s := range syncs {
		if s.State == target.TableReady && s.SyncLSN <= low {
			continue
		}
		m[schema.TableName{Schema: s.Schema, Name: s.Name}] = apply.TableState{Ready: s.State == target.TableReady, SyncLSN: s.SyncLSN}
	}
	return apply.NewTableFilter(m), nil
}

// GivePendingUp forgets the pending tables of unpublished (added, not in
// the publication) that the source no longer has — dropped, or renamed
// while no engine ran (a table renamed from one is published under its
// new name and copied as such) — with a warning each, and returns the
// others, which wait for the publication. Kept, such a record waited for
// ever, and no run was caught up again ("tables not copied yet").
func (ts *Syncer) GivePendingUp(ctx context.Context, src, tgt *pgx.Conn, unpublished []schema.TableName) ([]schema.TableName, error) {
	var waiting []schema.TableName
	for _, t := range unpublished {
		var exists bool
		if err := src.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.Quoted()).Scan(&exists); err != nil {
			return nil, fmt.Errorf("look for added table %s on the source: %w", t, err)
		}
		if exists {
			waiting = append(waiting, t)
			continue
		}
		if err := target.ForgetPending(ctx, tgt, ts.cfg.Slot, t); err != nil {
			return nil, err
		}
		ts.log.Warn("an added table, not copied yet, is no longer on the source (dropped, or renamed: a table renamed from it is copied under its new name): its copy is given up, and the target's table of its name is left as it is",
			"component", "tablesync", "table", t.String())
	}
	return waiting, nil
}

// checkAdded checks tables added while an engine runs as `tables add`
// does (install.CheckAddable): each missing on the target is made from
// the source's definition with --create-tables, else the copy stops
// naming it.
func (ts *Syncer) checkAdded(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	return install.CheckAddable(ctx, src, tgt, ts.cfg.Slot, ts.cfg.Publication, tables, ts.cfg.CreateTables, true, ts.cfg.TrustTableOwners, ts.log)
}

// checkEntering refuses, unless the run has --truncate, a table of
// tables that enters the slot's replication (TableSync.Entering: it was
// not recorded when the stream, a start or the publication poll found it
// published, as ALTER PUBLICATION ... ADD TABLE makes it) whose target
// table holds rows: those are the user's, not a copy's, and the copy
// would delete them. So a start refuses a table that holds rows, and
// `tables add` (which records a table it checked, with its own
// --truncate). The run stops naming the tables and the ways out; nothing
// is changed before (the table stays pending, and the next start checks
// again). A table the target lacks is checkAdded's.
func (ts *Syncer) checkEntering(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	if ts.cfg.Truncate {
		return nil
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	var held []string
	for _, s := range syncs {
		t := schema.TableName{Schema: s.Schema, Name: s.Name}
		if !s.Entering || s.State != target.TablePending || !slices.Contains(tables, t) {
			continue
		}
		var exists bool
		if err := tgt.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.Quoted()).Scan(&exists); err != nil {
			return fmt.Errorf("check target table %s: %w", t, err)
		}
		if !exists {
			continue
		}
		_, rows, err := snapshot.HasRows(ctx, tgt, t, ts.log)
		if err != nil {
			return err
		}
		if rows {
			held = append(held, t.String())
		}
	}
	if len(held) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s entered the replication of slot %q otherwise than by `repstream tables add` (ALTER PUBLICATION ... ADD TABLE, ADD TABLES IN SCHEMA, ...), "+
		"and its target table holds rows this replication did not write, which its copy would delete: repstream empties such a table only when told to. "+
		"Empty it on the target yourself, or run `repstream tables add --truncate %s` (it empties it), or start again with --truncate; "+
		"meanwhile it waits, pending, for its copy",
		snapshot.ErrTargetNotEmpty, strings.Join(held, ", "), ts.cfg.Slot, strings.Join(held, " "))
}
