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

// publicationPoll follows what pgoutput never reports: whether the
// publication still publishes every kind of change (in every mode) and,
// without the source's event trigger (--ddl=relation, false; tables),
// which tables it publishes. The writer copies a table the stream carries that
// the slot never recorded (target/unrecorded.go); this poll also finds
//   - a table published and not recorded that has no change in the stream
//     yet (ALTER PUBLICATION ... ADD TABLE of a table nobody writes):
//     recorded pending, copied;
//   - a recorded table the publication no longer publishes (ALTER
//     PUBLICATION ... DROP TABLE, RENAME, SET SCHEMA out, DROP TABLE, SET
//     UNLOGGED), first seen at source WAL position X. Once apply has
//     passed X (none of its changes from before is still on the way) and
//     it is still out, its record is removed: it is no longer replicated,
//     and if it comes back, it is unrecorded, so copied anew (its changes
//     outside were never in the stream). A table set UNLOGGED stops the
//     run, as with the event trigger. If it is back before that, it is
//     recorded pending at once and copied anew;
//   - a publication changed to leave out inserts, updates, deletes or
//     truncates (ALTER PUBLICATION ... SET (publish = ...)): the run stops,
//     as a start would refuse it (install.CheckPublishes), saying that the
//     changes left out since then are missing.
//
// Out and back within one poll is not seen: docs/schema-changes.md says
// so.
type publicationPoll struct {
	every  time.Duration // config.PublicationPoll
	tables bool          // compare the tables too (no event trigger)
	last   time.Time
	out    map[schema.TableName]change.LSN // recorded, seen out of the publication at this source position
}

// poll runs one comparison when its interval has passed.
func (ts *Syncer) pollPublication(ctx context.Context, tgt *pgx.Conn, pp *publicationPoll, filter *apply.TableFilter, log *slog.Logger) error {
	if time.Since(pp.last) < pp.every {
		return nil
	}
	pp.last = time.Now()
	if !pp.tables && ts.cfg.PartialPublication {
		return nil
	}
	// A source out of reach is the stream's to report (and ride out):
	// the poll tries again next time.
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		log.Debug("publication poll: source not reached", "err", err)
		return nil
	}
	defer src.Close(context.WithoutCancel(ctx))
	var at change.LSN
	var s string
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		log.Debug("publication poll: source not reached", "err", err)
		return nil
	}
	if at, err = change.ParseLSN(s); err != nil {
		return err
	}
	if !ts.cfg.PartialPublication {
		if err := install.CheckPublishes(ctx, src, ts.cfg.Publication, false, log); err != nil {
			return fmt.Errorf("the publication changed while the engine ran (seen at source WAL position %s): the changes it left out since then never reached the target; "+
				"once it publishes them again, copy the tables again (take them out of the publication, then `repstream tables add --truncate`): %w", at, err)
		}
	}
	if !pp.tables {
		return nil
	}
	published, err := install.PublicationTables(ctx, src, ts.cfg.Publication)
	if err != nil {
		return err
	}
	prog, err := target.LoadProgress(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	recorded := map[schema.TableName]bool{}
	for _, sy := range syncs {
		t := schema.TableName{Schema: sy.Schema, Name: sy.Name}
		recorded[t] = true
		if sy.State != target.TableReady {
			continue // pending, copying: tablesync's Watch has them
		}
		in := slices.Contains(published, t)
		since, wasOut := pp.out[t]
		switch {
		case in && wasOut:
			delete(pp.out, t)
			if err := ts.recopy(ctx, tgt, filter, t); err != nil {
				return err
			}
			log.Warn("a table left the publication and came back (without the event trigger): its changes outside were not in the stream, it is copied anew", "table", t.String())
		case in:
		case !wasOut:
			pp.out[t] = at
		case prog.Low >= since:
			delete(pp.out, t)
			var unlogged bool
			if err := src.QueryRow(ctx, "SELECT coalesce((SELECT relpersistence = 'u' FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), false)",
				t.Quoted()).Scan(&unlogged); err != nil {
				return fmt.Errorf("look up %s on the source: %w", t, err)
			}
			if err := target.ForgetTable(ctx, tgt, ts.cfg.Slot, t); err != nil {
				return err
			}
			if unlogged {
				return fmt.Errorf("table %s was set UNLOGGED on the source (before WAL position %s): its changes are no longer written to the WAL, so they cannot be replicated "+
					"and the target would fall behind without a word; set it LOGGED again on the source (repstream then copies it anew), or take it out of the publication", t, since)
			}
			log.Warn("a table is no longer in the publication: it is no longer replicated, and the target keeps it as it is; if it comes back, it is copied anew",
				"table", t.String(), "publication", ts.cfg.Publication, "source_position", since)
		}
	}
	for t := range pp.out {
		if !recorded[t] {
			delete(pp.out, t)
		}
	}
	return ts.PendUnrecorded(ctx, tgt, filter, syncs, published)
}

// PendUnrecorded records pending, and filters, every published table that
// syncs (the slot's recorded tables) lacks: without the event trigger, one
// added to the publication that nothing wrote since. Watch copies them
// (and a run that ends caught up, before it ends).
func (ts *Syncer) PendUnrecorded(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, syncs []target.TableSync, published []schema.TableName) error {
	for _, t := range published {
		if slices.ContainsFunc(syncs, func(s target.TableSync) bool { return s.Schema == t.Schema && s.Name == t.Name }) {
			continue
		}
		if err := ts.recopy(ctx, tgt, filter, t); err != nil {
			return err
		}
		ts.log.Warn("a table is in the publication that this replication never copied (without the event trigger: ALTER PUBLICATION ... ADD TABLE, "+
			"or a table created since): it is copied from a new snapshot, then streamed", "component", "tablesync", "table", t.String())
	}
	return nil
}

// recopy records t pending and filters it: Watch copies it.
func (ts *Syncer) recopy(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, t schema.TableName) error {
	filter.Put(t, apply.TableState{})
	return target.SetTableState(ctx, tgt, ts.cfg.Slot, t.Schema, t.Name, target.TablePending)
}
