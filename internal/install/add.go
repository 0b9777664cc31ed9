package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// AddOptions are the settings of `tables add` beyond the configuration.
type AddOptions struct {
	Tables       []string // schema.table or schema.* patterns
	CreateTables bool     // create missing target tables
	Truncate     bool     // empty non-empty target tables (else that is an error)
	// NoticeWait bounds how long to wait for a running engine to start
	// filtering the tables before they are published (default 30s).
	NoticeWait time.Duration
}

// AddResult says what `tables add` did with one table.
type AddResult struct {
	Table  string
	Action string
}

// noticeWaitDefault is how long `tables add` waits for a running engine.
const noticeWaitDefault = 30 * time.Second

// AddTables adds tables to a running (or stopped) replication: it checks
// each (it exists, has a key or a replica identity, the target has a
// compatible table — or creates it with CreateTables — and it is empty or
// Truncate), records it as pending on the target and adds it to the
// publication — any publication, repstream's own or the user's (a warning
// says when it is not repstream's). A running engine is first asked to
// filter the tables (it marks them noticed), then they are published; the
// engine (or the next run) copies them at a snapshot of known position.
// Before the slot exists, the tables are only published: the first run's
// initial copy takes them with the others.
func AddTables(ctx context.Context, cfg config.Config, opts AddOptions, log *slog.Logger) ([]AddResult, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "tables")
	if len(opts.Tables) == 0 {
		return nil, errors.New("tables add: name at least one schema.table")
	}
	if opts.NoticeWait <= 0 {
		opts.NoticeWait = noticeWaitDefault
	}
	cfg.EnsureDefaults()
	pub := cfg.Publication
	src, tgt, closeBoth, err := ConnectBoth(ctx, cfg, "repstream-tables")
	if err != nil {
		return nil, err
	}
	defer closeBoth()
	if err := provision.SameDatabase(ctx, src, tgt); err != nil {
		return nil, err
	}
	if err := target.EnsureState(ctx, tgt); err != nil {
		return nil, err
	}
	var exists bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look up publication %q: %w", pub, err)
	}
	if !exists {
		return nil, fmt.Errorf("publication %q does not exist on the source: `repstream run --tables ...` creates it", pub)
	}
	prog, err := target.LoadProgress(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	if !prog.CreatedPublication {
		log.Warn("the publication was not created by repstream: adding the tables to it anyway", "publication", pub)
	}
	names, err := schema.ResolveTables(ctx, src, opts.Tables)
	if err != nil {
		return nil, err
	}
	published, err := PublicationTables(ctx, src, pub)
	if err != nil {
		return nil, err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	slot, err := LookupSlot(ctx, src, cfg.Slot)
	if err != nil {
		return nil, err
	}
	var res []AddResult
	var todo []schema.TableName
	for _, n := range names {
		if slices.Contains(published, n) && !isPending(syncs, n) {
			res = append(res, AddResult{n.String(), "already replicated"})
			continue
		}
		todo = append(todo, n)
	}
	if len(todo) == 0 {
		return res, nil
	}
	if err := CheckAddable(ctx, src, tgt, cfg.Slot, todo, opts.CreateTables, opts.Truncate, log); err != nil {
		return res, err
	}
	if !slot.Exists {
		if err := Publish(ctx, src, pub, todo, published); err != nil {
			return res, err
		}
		for _, n := range todo {
			res = append(res, AddResult{n.String(), "published: the first run copies it with the others"})
		}
		return res, nil
	}
	return addPending(ctx, src, tgt, cfg.Slot, pub, todo, published, slot.Active, opts.NoticeWait, res, log)
}

// addPending adds the tables todo once the slot exists: recorded pending,
// then — once a running engine (running: the slot is active) filters them —
// published; the engine, or the next run, copies them. res is what was
// said of the other tables.
func addPending(ctx context.Context, src, tgt *pgx.Conn, slot, pub string, todo, published []schema.TableName, running bool, noticeWait time.Duration, res []AddResult, log *slog.Logger) ([]AddResult, error) {
	for _, n := range todo {
		if err := target.SetTableState(ctx, tgt, slot, n.Schema, n.Name, target.TablePending); err != nil {
			return res, err
		}
	}
	if running {
		// The engine must filter the tables before their changes arrive.
		if err := waitNoticed(ctx, tgt, slot, todo, noticeWait); err != nil {
			return res, err
		}
	}
	if err := Publish(ctx, src, pub, todo, published); err != nil {
		return res, err
	}
	action := "pending: the next run copies it"
	if running {
		action = "pending: the running engine copies it"
	}
	for _, n := range todo {
		res = append(res, AddResult{n.String(), action})
		log.Info("table added", "table", n.String(), "publication", pub, "engine_running", running)
	}
	return res, nil
}

func isPending(syncs []target.TableSync, n schema.TableName) bool {
	for _, s := range syncs {
		if s.Schema == n.Schema && s.Name == n.Name {
			return s.State != target.TableReady
		}
	}
	return false
}

// waitNoticed waits until a running engine has marked every table noticed.
func waitNoticed(ctx context.Context, tgt *pgx.Conn, slot string, tables []schema.TableName, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		syncs, err := target.LoadTableSyncs(ctx, tgt, slot)
		if err != nil {
			return err
		}
		left := 0
		for _, n := range tables {
			for _, s := range syncs {
				if s.Schema == n.Schema && s.Name == n.Name && s.State == target.TablePending && !s.Noticed {
					left++
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the engine streaming from slot %q did not take up the added tables within %s "+
				"(a repstream without `tables add`?): they stay pending and unpublished; run `tables add` again once it runs a newer repstream, or stop it",
				slot, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WidenPublication adds to repstream's own publication the tables
// --tables (cfg.Tables) now matches that it lacks, as `tables add` does (no
// engine runs: the caller is the starting one, which copies them before it
// streams).
func WidenPublication(ctx context.Context, src, tgt *pgx.Conn, cfg config.Config, log *slog.Logger) error {
	names, err := schema.ResolveTables(ctx, src, cfg.Tables)
	if err != nil {
		return fmt.Errorf("resolve --tables on the source: %w", err)
	}
	published, err := PublicationTables(ctx, src, cfg.Publication)
	if err != nil {
		return err
	}
	var add []schema.TableName
	for _, n := range names {
		if !slices.Contains(published, n) {
			add = append(add, n)
		}
	}
	if len(add) == 0 {
		return nil
	}
	slot, err := LookupSlot(ctx, src, cfg.Slot)
	if err != nil {
		return err
	}
	if !slot.Exists {
		// The initial copy takes them.
		log.Info("--tables matches tables the publication lacks: adding them", "component", "tablesync", "tables", tableNames(add))
		return Publish(ctx, src, cfg.Publication, add, published)
	}
	if err := CheckAddable(ctx, src, tgt, cfg.Slot, add, cfg.CreateTables, cfg.Truncate, log); err != nil {
		return fmt.Errorf("--tables matches tables the publication lacks: %w", err)
	}
	for _, n := range add {
		if err := target.SetTableState(ctx, tgt, cfg.Slot, n.Schema, n.Name, target.TablePending); err != nil {
			return err
		}
	}
	log.Info("--tables matches tables the publication lacks: adding them (copied before streaming)", "component", "tablesync", "tables", tableNames(add))
	return Publish(ctx, src, cfg.Publication, add, published)
}

func tableNames(ts []schema.TableName) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
}

// TableRow is one line of `tables list`.
type TableRow struct {
	Table     string    `json:"table"`
	Published bool      `json:"published"`
	State     string    `json:"state"`    // pending, copying, ready, or "" (no copy recorded)
	SyncLSN   string    `json:"sync_lsn"` // "" before the copy
	Rows      int64     `json:"rows"`
	Bytes     int64     `json:"bytes"`
	CopiedAt  time.Time `json:"copied_at"`
	// IndexesNotBuilt are the source's indexes of the table that
	// --create-tables could not build on the target (and that are still
	// missing there): the table replicates without them.
	IndexesNotBuilt []target.UnbuiltIndex `json:"indexes_not_built,omitempty"`
}

// ListTables returns the publication's tables and every table with a sync
// state for the slot, ordered by name.
func ListTables(ctx context.Context, cfg config.Config) ([]TableRow, error) {
	cfg.EnsureDefaults()
	pub := cfg.Publication
	src, tgt, closeBoth, err := ConnectBoth(ctx, cfg, "repstream-tables")
	if err != nil {
		return nil, err
	}
	defer closeBoth()
	published, err := PublicationTables(ctx, src, pub)
	if err != nil {
		return nil, err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	rows := map[string]*TableRow{}
	var order []string
	get := func(name string) *TableRow {
		if r, ok := rows[name]; ok {
			return r
		}
		rows[name] = &TableRow{Table: name}
		order = append(order, name)
		return rows[name]
	}
	for _, t := range published {
		get(t.String()).Published = true
	}
	for _, s := range syncs {
		r := get(s.String())
		r.State, r.Rows, r.Bytes, r.CopiedAt = s.State, s.Rows, s.Bytes, s.CopiedAt
		if s.SyncLSN != 0 {
			r.SyncLSN = s.SyncLSN.String()
		}
	}
	unbuilt, err := target.UnbuiltIndexes(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	for _, u := range unbuilt {
		r := get(u.Table.String())
		r.IndexesNotBuilt = append(r.IndexesNotBuilt, u)
	}
	slices.Sort(order)
	out := make([]TableRow, len(order))
	for i, n := range order {
		out[i] = *rows[n]
	}
	return out, nil
}

// ConnectBoth opens an admin connection to the source and one to the
// target (application_name appName) for a command that reads and writes
// both; closeFn closes them.
func ConnectBoth(ctx context.Context, cfg config.Config, appName string) (src, tgt *pgx.Conn, closeFn func(), err error) {
	if src, err = ConnectSource(ctx, cfg.Source); err != nil {
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
