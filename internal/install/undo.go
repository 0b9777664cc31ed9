package install

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// Undo is what a first start created on the servers before its slot
// existed — the state schema (or the slot's progress row in it), the
// publication, the schema-change event trigger — so that a start that
// fails then (a missing or incompatible target table, a keyless table, a
// missing privilege, no free slot) leaves the servers as it found them.
// Shared objects (the state schema, the event trigger) are released, not
// dropped: they go only with the last replication that uses them, so a
// failed start never removes what another start, even a concurrent one,
// needs.
// Once the slot exists the run is committed: an interrupted initial copy is
// resumed by the next run, which needs all of it.
//
// What --create-tables made (tables, their sequences, types and schemas) is
// dropped too, but only while every table it made is still empty: the copy
// writes them only once the slot exists, so a row there is somebody else's
// and everything is left (the log says so).
type Undo []undoStep

type undoStep struct {
	what string
	do   func(context.Context) error
}

// Run undoes, newest first, with a context of its own (the run's may be
// done); a step that fails is logged and the rest still run.
func (u Undo) Run(ctx context.Context, log *slog.Logger) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	for i := len(u) - 1; i >= 0; i-- {
		if err := u[i].do(uctx); err != nil {
			log.Warn("the failed start could not remove what it made", "what", u[i].what, "err", err)
			continue
		}
		log.Info("the failed start removed what it made", "what", u[i].what)
	}
}

// State records how to remove the target's state for slot, if it has none
// yet: its rows and registration and, when no other replication uses the
// target, the schema repstream with it (target.Release). Another slot's
// state, even one made by a start running at the same instant, is kept.
func (u *Undo) State(ctx context.Context, tgt *pgx.Conn, slot string, log *slog.Logger) error {
	var schemaExists, slotKnown bool
	err := tgt.QueryRow(ctx, `SELECT to_regclass('repstream.progress') IS NOT NULL`).Scan(&schemaExists)
	if err != nil {
		return fmt.Errorf("look for repstream's state on the target: %w", err)
	}
	if schemaExists {
		if err := tgt.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM repstream.progress WHERE slot = $1)`, slot).Scan(&slotKnown); err != nil {
			return fmt.Errorf("look for repstream's state on the target: %w", err)
		}
	}
	if slotKnown {
		return nil
	}
	*u = append(*u, undoStep{fmt.Sprintf("the state of slot %q on the target", slot), func(ctx context.Context) error {
		kept, err := target.Release(ctx, tgt, slot, log)
		if len(kept) > 0 {
			log.Info("the schema repstream on the target is kept for the other replications", "slots", kept)
		}
		return err
	}})
	return nil
}

// Publication records how to drop the publication this run created.
func (u *Undo) Publication(src *pgx.Conn, name string) {
	*u = append(*u, undoStep{fmt.Sprintf("publication %q on the source", name), func(ctx context.Context) error {
		_, err := src.Exec(ctx, "DROP PUBLICATION IF EXISTS "+change.QuoteIdent(name))
		return err
	}})
}

// DDLTrigger records how to remove this slot's registration as a user of
// the schema-change event trigger, and the trigger with the last one.
func (u *Undo) DDLTrigger(src *pgx.Conn, slot string, log *slog.Logger) {
	*u = append(*u, undoStep{"the schema-change event trigger's registration on the source", func(ctx context.Context) error {
		_, kept, err := ReleaseDDL(ctx, src, slot, log)
		if len(kept) > 0 {
			log.Info("the schema-change event trigger is kept for the other replications", "slots", kept)
		}
		return err
	}})
}

// Created is what CreateTables made on the target, in the
// order it made them: what (for the log) and the statement that drops each,
// and the tables among them.
type Created struct {
	what, drops []string
	tables      []schema.TableName
}

func (m *Created) add(what, drop string) {
	m.what, m.drops = append(m.what, what), append(m.drops, drop)
}

// CreatedTables records how to drop what --create-tables made: in one
// target transaction, newest first, after checking under an exclusive lock
// that every table it made is still empty.
func (u *Undo) CreatedTables(tgt *pgx.Conn, slot string, made Created) {
	if len(made.drops) == 0 {
		return
	}
	what := "what --create-tables made on the target (" + strings.Join(made.what, ", ") + ")"
	*u = append(*u, undoStep{what, func(ctx context.Context) error {
		tx, err := tgt.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		// Within the undo's own time bound: the later steps still run.
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
			return err
		}
		for _, t := range made.tables {
			if _, err := tx.Exec(ctx, "LOCK TABLE "+t.Quoted()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return err
			}
			var rows bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+t.Quoted()+")").Scan(&rows); err != nil {
				return err
			}
			if rows {
				return fmt.Errorf("table %s has rows written by something else since: all of it is left in place", t)
			}
		}
		for i := len(made.drops) - 1; i >= 0; i-- {
			if _, err := tx.Exec(ctx, made.drops[i]); err != nil {
				return fmt.Errorf("%s: %w", made.drops[i], err)
			}
		}
		for _, t := range made.tables {
			if err := target.ForgetBuild(ctx, tx, slot, t); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	}})
}
