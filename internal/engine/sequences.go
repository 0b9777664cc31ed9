package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/sequences"
)

// syncSequencesAtEnd runs SyncSequences when the run asked for it
// (--sync-sequences), with a fresh context: the run's may be done.
func (e *Engine) syncSequencesAtEnd() error {
	if !e.cfg.SyncSequences {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := SyncSequences(ctx, e.cfg, e.log); err != nil {
		return fmt.Errorf("--sync-sequences: %w", err)
	}
	return nil
}

// SyncSequences copies the positions of the sequences the replicated tables
// use (the tables of cfg.Tables, or else of the publication) from the source
// to the target: `repstream sequences sync`, and `run --sync-sequences` once
// caught up. See package sequences for which ones and why a target sequence
// is never moved backwards.
func SyncSequences(ctx context.Context, cfg config.Config, log *slog.Logger) ([]sequences.Result, error) {
	cfg.EnsureDefaults()
	src, tgt, closeBoth, err := install.ConnectBoth(ctx, cfg, "repstream-admin")
	if err != nil {
		return nil, err
	}
	defer closeBoth()
	var tables []schema.TableName
	if len(cfg.Tables) > 0 {
		if tables, err = schema.ResolveTables(ctx, src, cfg.Tables); err != nil {
			return nil, err
		}
	} else {
		pub := cfg.Publication
		if tables, err = install.PublicationTables(ctx, src, pub); err != nil {
			return nil, err
		}
		if len(tables) == 0 {
			return nil, fmt.Errorf("publication %q has no tables (or does not exist): name the tables with --tables", pub)
		}
	}
	seqs, err := sequences.Used(ctx, src, tables)
	if err != nil {
		return nil, err
	}
	res, err := sequences.Sync(ctx, src, tgt, seqs)
	if err != nil {
		return res, err
	}
	for _, r := range res {
		log.Info("sequence", "component", "sequences", "sequence", r.Sequence.String(), "action", string(r.Action),
			"source_last_value", r.Source.LastValue, "target_last_value", r.Target.LastValue)
	}
	return res, nil
}
