package install

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// WidenPublication adds to repstream's own publication the tables
// --tables (cfg.Tables) now matches that it lacks, as `tables add` does (no
// engine runs: the caller is the starting one, which copies them before it
// streams).
func WidenPublication(ctx context.Context, src, tgt *pgx.Conn, cfg config.Config, log *slog.Logger) error {
	add, published, err := unpublished(ctx, src, cfg.Publication, cfg.Tables)
	if err != nil || len(add) == 0 {
		return err
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
	if err := CheckAddable(ctx, src, tgt, cfg.Slot, cfg.Publication, add, cfg.CreateTables, cfg.Truncate, cfg.TrustTableOwners, log); err != nil {
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

// WidenCapturePublication is WidenPublication for `capture --kafka`,
// which has no target: it adds to the publication the tables --tables
// (patterns) now matches that it lacks, if repstream made it (marked), and
// each apply copies them at a snapshot of its own (the event trigger
// reports the ALTER PUBLICATION in the stream; without it, an apply copies
// a table it never copied at its first change). Before, a capture started
// again with a wider --tables used the publication as it was, and the new
// tables reached no target without a word. One repstream did not make is
// left as it is, and the start stops naming the tables.
func WidenCapturePublication(ctx context.Context, src *pgx.Conn, pub string, patterns []string, log *slog.Logger) error {
	add, published, err := unpublished(ctx, src, pub, patterns)
	if err != nil || len(add) == 0 {
		return err
	}
	var mark *string
	if err := src.QueryRow(ctx, "SELECT obj_description(oid, 'pg_publication') FROM pg_catalog.pg_publication WHERE pubname = $1", pub).Scan(&mark); err != nil {
		return fmt.Errorf("look up publication %q: %w", pub, err)
	}
	if mark == nil || *mark != PublicationMark {
		return fmt.Errorf("--tables matches tables publication %q lacks (%s), and repstream did not make it, so it does not change it: "+
			"add them yourself (ALTER PUBLICATION %s ADD TABLE ...; each apply then copies them), or leave them out of --tables",
			pub, strings.Join(tableNames(add), ", "), change.QuoteIdent(pub))
	}
	log.Info("--tables matches tables the publication lacks: adding them; each apply copies them at a snapshot of its own", "publication", pub, "tables", tableNames(add))
	return Publish(ctx, src, pub, add, published)
}

// unpublished returns the tables patterns (--tables) matches that
// publication pub lacks, and those it has.
func unpublished(ctx context.Context, src *pgx.Conn, pub string, patterns []string) (add, published []schema.TableName, err error) {
	names, err := schema.ResolveTables(ctx, src, patterns)
	if err != nil {
		return nil, nil, fmt.Errorf("resolve --tables on the source: %w", err)
	}
	if published, err = PublicationTables(ctx, src, pub); err != nil {
		return nil, nil, err
	}
	for _, n := range names {
		if !slices.Contains(published, n) {
			add = append(add, n)
		}
	}
	return add, published, nil
}

func tableNames(ts []schema.TableName) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
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
