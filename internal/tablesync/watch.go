package tablesync

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// tablePollInterval is how often a running engine looks for tables added
// with `tables add`.
const tablePollInterval = 2 * time.Second

// Pause is what the copy of added tables needs of apply: eager apply held
// (Hold: no new eager transaction, the one in flight commits; Release: it
// goes on) — *apply.Eager's, nothing without --eager — and the coordinator
// paused between transactions while fn runs, every dispatched group
// committed (Quiesce: *apply.Applier's).
type Pause interface {
	Hold(ctx context.Context) error
	Release()
	Quiesce(ctx context.Context, fn func(ctx context.Context) error) error
}

// Watch copies the tables `tables add` records while the engine runs.
// A pending table is filtered at once (apply writes none of its changes)
// and marked noticed, so that `tables add` publishes it only then; once it
// is in the publication, Eager is held, apply pauses between transactions
// (every dispatched group committed), the table is copied at a temporary
// slot's consistent point L, becomes ready at L in the filter, and apply
// goes on: its changes ending at or below L are skipped, later ones applied.
//
// Every config.PublicationPoll it also checks that the publication still
// publishes every kind of change, and with followPublication (a run
// without the source's event trigger) compares it with the tables the
// slot records (publication.go).
func (ts *Syncer) Watch(ctx context.Context, filter *apply.TableFilter, pause Pause, followPublication bool) error {
	log := ts.log.With("component", "tablesync")
	tgt, err := target.Connect(ctx, ts.cfg.Target, "repstream-tables")
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())
	pp := &publicationPoll{every: ts.cfg.PublicationPoll, last: time.Now(), tables: followPublication, out: map[schema.TableName]change.LSN{}}
	t := time.NewTicker(tablePollInterval)
	defer t.Stop()
	for {
		err := ts.pollPublication(ctx, tgt, pp, filter, log)
		if err == nil {
			err = ts.pollTables(ctx, tgt, filter, pause, log)
		}
		if err != nil {
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

func (ts *Syncer) pollTables(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, pause Pause, log *slog.Logger) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	var notice []string
	var waiting []target.TableSync
	for _, s := range syncs {
		if s.State == target.TableReady {
			continue
		}
		name := schema.TableName{Schema: s.Schema, Name: s.Name}
		if st, ok := filter.State(name); !ok || st.Ready {
			filter.Put(name, apply.TableState{})
			log.Info("table added: its changes wait for its copy", "table", s.String())
		}
		if !s.Noticed && s.State == target.TablePending {
			notice = append(notice, s.String())
		}
		waiting = append(waiting, s)
	}
	if err := target.MarkTablesNoticed(ctx, tgt, ts.cfg.Slot, notice); err != nil {
		return err
	}
	if len(waiting) == 0 {
		return nil
	}
	// The source is asked only while a table waits (an admin connection
	// is not kept while streaming).
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		return err
	}
	published, err := install.PublicationTables(ctx, src, ts.cfg.Publication)
	if err != nil {
		src.Close(context.Background())
		return err
	}
	var todo, unpublished []schema.TableName
	for _, s := range waiting {
		t := schema.TableName{Schema: s.Schema, Name: s.Name}
		switch {
		case slices.Contains(published, t):
			todo = append(todo, t)
		case s.State == target.TablePending:
			unpublished = append(unpublished, t)
		}
	}
	still, err := ts.GivePendingUp(ctx, src, tgt, unpublished)
	src.Close(context.Background())
	if err != nil {
		return err
	}
	for _, t := range unpublished {
		if !slices.Contains(still, t) {
			filter.Drop(t) // a table made again under its name is unrecorded
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if err := ts.waitOpenTransactions(ctx, todo, log); err != nil {
		return err
	}
	if err := pause.Hold(ctx); err != nil {
		return err
	}
	defer pause.Release()
	start := time.Now()
	err = pause.Quiesce(ctx, func(ctx context.Context) error {
		log.Info("apply paused for the copy of added tables", "tables", tableList(todo))
		_, err := ts.syncTables(ctx, todo, false, func(t schema.TableName, l change.LSN) {
			filter.Put(t, apply.TableState{Ready: true, SyncLSN: l})
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("copy added tables: %w", err)
	}
	log.Info("apply resumed after the copy of added tables", "tables", tableList(todo), "paused", time.Since(start).Round(time.Millisecond))
	return nil
}

// openWaitLog is how often waitOpenTransactions says what it waits for.
const openWaitLog = 10 * time.Second

// waitOpenTransactions waits, before apply pauses for the copy of tables,
// until every transaction open on the source now (one that has written:
// it has an xid; a prepared one too) has ended. The copy's temporary slot
// waits for them before it has a snapshot, and apply is paused while it
// is made: a session left idle in a transaction, or a prepared
// transaction never committed, held every table's replication up, with
// nothing said. Waiting for them first, apply goes on meanwhile, and the
// log names them. (One begun after this look can still hold the slot.)
func (ts *Syncer) waitOpenTransactions(ctx context.Context, tables []schema.TableName, log *slog.Logger) error {
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	// Only a wait: a source that cannot say (a look that fails) leaves it
	// to the slot, as before.
	var open []string
	if err := src.QueryRow(ctx, `SELECT coalesce(array_agg(x::text), '{}') FROM pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot()) x`).Scan(&open); err != nil {
		log.Debug("cannot look up the transactions open on the source", "err", err)
		return ctx.Err()
	}
	start := time.Now()
	for next := start.Add(openWaitLog); len(open) > 0; {
		if err := src.QueryRow(ctx, `SELECT coalesce(array_agg(x::text), '{}') FROM unnest($1::xid8[]) x WHERE pg_catalog.pg_xact_status(x) = 'in progress'`, open).Scan(&open); err != nil {
			log.Debug("cannot look up the transactions open on the source", "err", err)
			return ctx.Err()
		}
		if len(open) == 0 {
			break
		}
		if now := time.Now(); now.After(next) {
			next = now.Add(openWaitLog)
			var who string
			_ = src.QueryRow(ctx, `SELECT coalesce(string_agg(w, '; '), '') FROM (
	SELECT 'pid ' || a.pid || ' (' || coalesce(a.state, '?') || ' since ' || coalesce(a.xact_start::text, '?') || ', user ' || coalesce(a.usename::text, '?') || ')' AS w
	FROM pg_catalog.pg_stat_activity a WHERE a.backend_xid::text = ANY ($1::text[])
	UNION ALL SELECT 'prepared transaction ' || pg_catalog.quote_literal(p.gid) || ' (since ' || p.prepared::text || ')'
	FROM pg_catalog.pg_prepared_xacts p WHERE p.transaction::text = ANY ($1::text[])) s`, shortXids(open)).Scan(&who)
			log.Warn("the copy of added tables waits for transactions open on the source to end (its snapshot needs them ended); apply goes on meanwhile",
				"tables", tableList(tables), "open_transactions", len(open), "which", who, "waited", now.Sub(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}

// shortXids is each 64-bit xid of xids as its 32-bit form, as
// pg_stat_activity and pg_prepared_xacts show it.
func shortXids(xids []string) []string {
	out := make([]string, 0, len(xids))
	for _, x := range xids {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, strconv.FormatUint(n&0xffffffff, 10))
	}
	return out
}
