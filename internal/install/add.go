package install

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

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
