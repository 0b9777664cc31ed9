package tablesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
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
	src, tgt, closeBoth, err := install.ConnectBoth(ctx, cfg, "repstream-tables")
	if err != nil {
		return nil, err
	}
	defer closeBoth()
	if err := provision.SameDatabase(ctx, src, tgt); err != nil {
		return nil, err
	}
	if err := target.CheckEventTriggers(ctx, tgt, cfg.TrustTableOwners); err != nil {
		return nil, err
	}
	if err := target.EnsureState(ctx, tgt); err != nil {
		return nil, err
	}
	var exists, marked bool
	if err := src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
	coalesce((SELECT obj_description(oid, 'pg_publication') = $2 FROM pg_publication WHERE pubname = $1), false)`, pub, install.PublicationMark).Scan(&exists, &marked); err != nil {
		return nil, fmt.Errorf("look up publication %q: %w", pub, err)
	}
	if !exists {
		return nil, fmt.Errorf("publication %q does not exist on the source: `repstream run --tables ...` creates it", pub)
	}
	prog, err := target.LoadProgress(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	if !prog.CreatedPublication && !marked { // marked: made by a run or a capture --kafka
		log.Warn("the publication was not created by repstream: adding the tables to it anyway", "publication", pub)
	}
	names, err := schema.ResolveTables(ctx, src, opts.Tables)
	if err != nil {
		return nil, err
	}
	published, err := install.PublicationTables(ctx, src, pub)
	if err != nil {
		return nil, err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	slot, err := install.LookupSlot(ctx, src, cfg.Slot)
	if err != nil {
		return nil, err
	}
	// A target of the Kafka mode (it has recorded a topic offset) shares
	// the publication with the slot's other targets: a table another
	// target added is published but not yet copied here.
	kafkaTarget := prog.Exists && prog.KafkaOffset >= 0
	var res []AddResult
	var todo []schema.TableName
	for _, n := range names {
		if slices.Contains(published, n) && !isPending(syncs, n) && (!kafkaTarget || isKnown(syncs, n)) {
			res = append(res, AddResult{n.String(), "already replicated"})
			continue
		}
		todo = append(todo, n)
	}
	if len(todo) == 0 {
		return res, nil
	}
	if err := install.CheckAddable(ctx, src, tgt, cfg.Slot, cfg.Publication, todo, opts.CreateTables, opts.Truncate, cfg.TrustTableOwners, log); err != nil {
		return res, err
	}
	if !slot.Exists {
		if err := install.Publish(ctx, src, pub, todo, published); err != nil {
			return res, err
		}
		for _, n := range todo {
			res = append(res, AddResult{n.String(), "published: the first run copies it with the others"})
		}
		return res, nil
	}
	running := slot.Active
	if kafkaTarget {
		// The slot is the capture's: what must filter the tables is this
		// target's apply.
		if running, err = target.ApplyRunning(ctx, tgt, cfg.Slot); err != nil {
			return res, err
		}
	}
	return addPending(ctx, src, tgt, cfg.Slot, pub, todo, published, running, opts.NoticeWait, res, log)
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
	if err := install.Publish(ctx, src, pub, todo, published); err != nil {
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

func isKnown(syncs []target.TableSync, n schema.TableName) bool {
	for _, s := range syncs {
		if s.Schema == n.Schema && s.Name == n.Name {
			return true
		}
	}
	return false
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
