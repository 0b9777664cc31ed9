package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/target"
)

// Per-table sync positions (repstream.tables, target/tables.go): a table
// copied at its own snapshot — the rest of an interrupted initial copy, a
// table added with `tables add` or a wider --tables — is copied from the
// exported snapshot of a temporary slot, whose consistent point L is the
// table's sync LSN. Apply skips the table's changes in source transactions
// ending at or below L and applies the later ones (apply.TableFilter).

// tablePollInterval is how often a running engine looks for tables added
// with `tables add`.
const tablePollInterval = 2 * time.Second

// syncTables copies tables from a new snapshot at a known position: it
// records them as copying, empties them on the target (they belong to this
// copy), creates a temporary slot exporting its snapshot, copies, and
// records each table ready at the slot's consistent point L once its copy is
// complete. ready (if set) is called with each table copied. The temporary
// slot goes away with its connection.
//
// atStart: a start copies them, before anything streams: the keys and
// indexes of the user's empty tables are set aside for the copy
// (setAsideForCopy), and made again as they were if it fails.
func (e *Engine) syncTables(ctx context.Context, tables []schema.TableName, atStart bool, ready func(t schema.TableName, l change.LSN)) (_ change.LSN, err error) {
	cfg := e.cfg
	log := e.log.With("component", "tablesync")
	tgt, err := target.Connect(ctx, cfg.Target, "repstream-tablesync")
	if err != nil {
		return 0, err
	}
	defer tgt.Close(context.Background())
	for _, t := range tables {
		if err := target.SetTableState(ctx, tgt, cfg.Slot, t.Schema, t.Name, target.TableCopying); err != nil {
			return 0, err
		}
	}
	if err := snapshot.CheckTargets(ctx, tgt, tables, true); err != nil {
		return 0, err
	}
	if atStart {
		if err := install.SetAsideForCopy(ctx, tgt, e.cfg.Slot, tables, e.cfg.KeepIndexes, e.log); err != nil {
			return 0, err
		}
		defer func() {
			if err != nil {
				install.RestoreSetAside(ctx, tgt, e.cfg.Target, e.cfg.Slot, e.log)
			}
		}()
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
		Tables: tables, Workers: cfg.SnapshotWorkers, Stats: e.stats, Logger: e.log,
		RangeSize: int64(cfg.SnapshotRangeSize), Binary: cfg.Binary, AfterCopy: e.afterCopy,
		OnTable: func(ctx context.Context, t schema.TableName, rows, bytes int64) error {
			mu.Lock()
			defer mu.Unlock()
			if err := target.SetTableReady(ctx, tgt, cfg.Slot, t.Schema, t.Name, l, rows, bytes); err != nil {
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

// markCopying records the tables of the initial copy as copying.
func (e *Engine) markCopying(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	for _, t := range tables {
		if err := target.SetTableState(ctx, tgt, e.cfg.Slot, t.Schema, t.Name, target.TableCopying); err != nil {
			return err
		}
	}
	return nil
}

// recordCopied returns the initial copy's OnTable callback: it records each
// table ready at the slot's consistent point.
func (e *Engine) recordCopied(tgt *pgx.Conn, low change.LSN) func(context.Context, schema.TableName, int64, int64) error {
	var mu sync.Mutex // tgt is one connection; OnTable runs on the copy's workers
	return func(ctx context.Context, t schema.TableName, rows, bytes int64) error {
		mu.Lock()
		defer mu.Unlock()
		return target.SetTableReady(ctx, tgt, e.cfg.Slot, t.Schema, t.Name, low, rows, bytes)
	}
}

// resumeCopy finishes an initial copy that a previous run began from the
// slot's snapshot and did not end: the tables it copied completely (ready)
// are kept, the others are emptied and copied from a new snapshot at a known
// position (their sync LSN).
func (e *Engine) resumeCopy(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	log := e.log.With("component", "tablesync")
	syncs, err := target.LoadTableSyncs(ctx, tgt, e.cfg.Slot)
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
		log.Info("initial copy was interrupted: copying a table again", "table", t.String())
		rest = append(rest, t)
	}
	if len(rest) > 0 {
		if _, err := e.syncTables(ctx, rest, true, nil); err != nil {
			return fmt.Errorf("resume the interrupted initial copy: %w", err)
		}
	}
	return target.SetSnapshot(ctx, tgt, e.cfg.Slot, target.SnapshotDone)
}

// syncPendingAtStart copies the tables added while no engine ran (pending,
// or copying when a previous run stopped during their copy), if they are in
// the publication; others stay pending.
func (e *Engine) syncPendingAtStart(ctx context.Context, tgt *pgx.Conn, published []schema.TableName) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, e.cfg.Slot)
	if err != nil {
		return err
	}
	var todo []schema.TableName
	for _, s := range syncs {
		t := schema.TableName{Schema: s.Schema, Name: s.Name}
		if s.State == target.TableReady {
			continue
		}
		if !slices.Contains(published, t) {
			e.log.Info("added table is not in the publication yet: it is copied once it is", "component", "tablesync", "table", t.String())
			continue
		}
		todo = append(todo, t)
	}
	if len(todo) == 0 {
		return nil
	}
	_, err = e.syncTables(ctx, todo, true, nil)
	return err
}

// loadTableFilter builds apply's filter from repstream.tables: the tables
// not ready, and the ready ones whose sync LSN lies beyond low (a table
// copied at or below low has no change left to skip).
func loadTableFilter(ctx context.Context, tgt *pgx.Conn, slot string, low change.LSN) (*apply.TableFilter, error) {
	syncs, err := target.LoadTableSyncs(ctx, tgt, slot)
	if err != nil {
		return nil, err
	}
	m := map[apply.TableName]apply.TableState{}
	for _, s := range syncs {
		if s.State == target.TableReady && s.SyncLSN <= low {
			continue
		}
		m[apply.TableName{Schema: s.Schema, Name: s.Name}] = apply.TableState{Ready: s.State == target.TableReady, SyncLSN: s.SyncLSN}
	}
	return apply.NewTableFilter(m), nil
}

// watchTables copies the tables `tables add` records while the engine runs.
// A pending table is filtered at once (apply writes none of its changes)
// and marked noticed, so that `tables add` publishes it only then; once it
// is in the publication, Eager is held, apply pauses between transactions
// (every dispatched group committed), the table is copied at a temporary
// slot's consistent point L, becomes ready at L in the filter, and apply
// goes on: its changes ending at or below L are skipped, later ones applied.
func (e *Engine) watchTables(ctx context.Context, filter *apply.TableFilter, ap *apply.Applier, eager *apply.Eager) error {
	log := e.log.With("component", "tablesync")
	tgt, err := target.Connect(ctx, e.cfg.Target, "repstream-tables")
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())
	t := time.NewTicker(tablePollInterval)
	defer t.Stop()
	for {
		if err := e.pollTables(ctx, tgt, filter, ap, eager, log); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (e *Engine) pollTables(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, ap *apply.Applier, eager *apply.Eager, log *slog.Logger) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, e.cfg.Slot)
	if err != nil {
		return err
	}
	var notice []string
	var waiting []target.TableSync
	for _, s := range syncs {
		if s.State == target.TableReady {
			continue
		}
		name := apply.TableName{Schema: s.Schema, Name: s.Name}
		if st, ok := filter.State(name); !ok || st.Ready {
			filter.Put(name, apply.TableState{})
			log.Info("table added: its changes wait for its copy", "table", s.String())
		}
		if !s.Noticed && s.State == target.TablePending {
			notice = append(notice, s.String())
		}
		waiting = append(waiting, s)
	}
	if err := target.MarkTablesNoticed(ctx, tgt, e.cfg.Slot, notice); err != nil {
		return err
	}
	if len(waiting) == 0 {
		return nil
	}
	// The source is asked only while a table waits (an admin connection
	// is not kept while streaming).
	src, err := install.ConnectSource(ctx, e.cfg.Source)
	if err != nil {
		return err
	}
	published, err := install.PublicationTables(ctx, src, e.cfg.Publication)
	src.Close(context.Background())
	if err != nil {
		return err
	}
	var todo []schema.TableName
	for _, s := range waiting {
		if t := (schema.TableName{Schema: s.Schema, Name: s.Name}); slices.Contains(published, t) {
			todo = append(todo, t)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if eager != nil {
		if err := eager.Hold(ctx); err != nil {
			return err
		}
		defer eager.Release()
	}
	start := time.Now()
	err = ap.Quiesce(ctx, func(ctx context.Context) error {
		log.Info("apply paused for the copy of added tables", "tables", tableList(todo))
		_, err := e.syncTables(ctx, todo, false, func(t schema.TableName, l change.LSN) {
			filter.Put(apply.TableName{Schema: t.Schema, Name: t.Name}, apply.TableState{Ready: true, SyncLSN: l})
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("copy added tables: %w", err)
	}
	log.Info("apply resumed after the copy of added tables", "tables", tableList(todo), "paused", time.Since(start).Round(time.Millisecond))
	return nil
}
