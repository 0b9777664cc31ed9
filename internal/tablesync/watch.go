package tablesync

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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
