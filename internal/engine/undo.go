package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/target"
)

// undoList is what a first start created on the servers before its slot
// existed — the state schema (or the slot's progress row in it), the
// publication, the schema-change event trigger — so that a start that
// fails then (a missing or incompatible target table, a keyless table, a
// missing privilege, no free slot) leaves the servers as it found them.
// Once the slot exists the run is committed: an interrupted initial copy is
// resumed by the next run, which needs all of it.
//
// Tables --create-tables made are not removed (they may already hold what
// the user wants to keep); the error names them in the log.
type undoList []undoStep

type undoStep struct {
	what string
	do   func(context.Context) error
}

// run undoes, newest first, with a context of its own (the run's may be
// done); a step that fails is logged and the rest still run.
func (u undoList) run(ctx context.Context, log *slog.Logger) {
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

// stateSchema records how to remove the target's state for slot: the
// schema if it does not exist yet, else the slot's rows if it has none.
func (u *undoList) stateSchema(ctx context.Context, tgt *pgx.Conn, slot string) error {
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
	switch {
	case !schemaExists:
		*u = append(*u, undoStep{"the state schema repstream on the target", func(ctx context.Context) error {
			_, err := tgt.Exec(ctx, "DROP SCHEMA IF EXISTS repstream CASCADE")
			return err
		}})
	case !slotKnown:
		*u = append(*u, undoStep{fmt.Sprintf("the state of slot %q on the target", slot), func(ctx context.Context) error {
			return target.DropState(ctx, tgt, slot)
		}})
	}
	return nil
}

// publication records how to drop the publication this run created.
func (u *undoList) publication(src *pgx.Conn, name string) {
	*u = append(*u, undoStep{fmt.Sprintf("publication %q on the source", name), func(ctx context.Context) error {
		_, err := src.Exec(ctx, "DROP PUBLICATION IF EXISTS "+change.QuoteIdent(name))
		return err
	}})
}

// ddlTrigger records how to remove the schema-change event trigger, if it
// is not installed yet (another slot's run may share one that is).
func (u *undoList) ddlTrigger(ctx context.Context, src *pgx.Conn) error {
	var have bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'repstream_ddl')").Scan(&have); err != nil {
		return fmt.Errorf("look up repstream's event trigger on the source: %w", err)
	}
	if have {
		return nil
	}
	*u = append(*u, undoStep{"the schema-change event trigger on the source", func(ctx context.Context) error {
		_, err := dropDDLTrigger(ctx, src)
		return err
	}})
	return nil
}

// slotMissing reports whether the slot does not exist yet (a first start).
func slotMissing(ctx context.Context, src *pgx.Conn, slot string) (bool, error) {
	var exists bool
	err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)", slot).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look up replication slot %q: %w", slot, err)
	}
	return !exists, nil
}
