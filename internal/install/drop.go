package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/target"
)

// Drop removes the slot, the publication if repstream created it, and
// repstream's state for the slot on the target. What all of repstream's
// replications of a database share (the event trigger on the source, the
// schema repstream on either side) is removed with the last of them only;
// the log names the replications it is kept for. A schema repstream that
// another role could use is refused before anything is touched, and so,
// unless trust (--trust-table-owners), is an event trigger on the target
// that would run another role's code as a superuser target role
// (target.CheckEventTriggers): its DROPs fire it.
//
// spillDir is the slot's spill directory ("" for the default one): it is
// removed with the spill files in it (queue.RemoveSpillDir), unless a
// running repstream holds it locked (a warning then says it is left).
func Drop(ctx context.Context, sourceDSN, targetDSN, slot, publication, spillDir string, trust bool, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tgt, err := target.Connect(ctx, targetDSN, "repstream-drop")
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())
	var prog target.Progress
	exists, err := provision.CheckSchema(ctx, tgt, "target")
	if err != nil {
		return err
	}
	if exists {
		// Its DROPs fire the target's event triggers.
		if err := target.CheckEventTriggers(ctx, tgt, trust); err != nil {
			return err
		}
		if err := target.EnsureState(ctx, tgt); err != nil {
			return err
		}
		if prog, err = target.LoadProgress(ctx, tgt, slot); err != nil {
			return err
		}
	}
	src, err := connectSourceChecked(ctx, sourceDSN)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	if err := dropSlot(ctx, src, slot, log); err != nil {
		return err
	}
	if prog.CreatedPublication {
		if _, err := src.Exec(ctx, "DROP PUBLICATION IF EXISTS "+change.QuoteIdent(publication)); err != nil {
			return fmt.Errorf("drop publication %q: %w", publication, err)
		}
		log.Info("dropped publication", "publication", publication)
	}
	kept, err := target.Release(ctx, tgt, slot, log)
	if err != nil {
		return fmt.Errorf("drop repstream state of slot %q on the target: %w", slot, err)
	}
	// The replication origins no session uses (target.Origins.Use: a pool
	// the replications into the server share; those running make again
	// the ones they need).
	if err := target.DropIdleOrigins(ctx, tgt); err != nil {
		return err
	}
	if len(kept) > 0 {
		log.Info("dropped the slot's state on the target; kept the schema repstream: other replications use it", "slot", slot, "slots", kept)
	} else if exists {
		log.Info("dropped the schema repstream on the target", "slot", slot)
	}
	if spillDir == "" {
		spillDir = queue.DefaultSpillDir(slot)
	}
	if _, err := queue.RemoveSpillDir(spillDir, log); err != nil {
		log.Warn("the slot's spill directory is left", "dir", spillDir, "err", err)
	}
	return nil
}

// connectSourceChecked connects to the source and checks its schema
// repstream (one another role could use is refused) before a drop
// touches anything there.
func connectSourceChecked(ctx context.Context, sourceDSN string) (*pgx.Conn, error) {
	src, err := ConnectSource(ctx, sourceDSN)
	if err != nil {
		return nil, err
	}
	if _, err := provision.CheckSchema(ctx, src, "source"); err != nil {
		src.Close(context.Background())
		return nil, err
	}
	return src, nil
}

// dropSlot drops the slot (refused while a walsender streams from it) and
// its registration with the schema-change event trigger, which goes with
// the last replication of the database.
func dropSlot(ctx context.Context, src *pgx.Conn, slot string, log *slog.Logger) error {
	s, err := LookupSlot(ctx, src, slot)
	if err != nil {
		return err
	}
	if s.Exists {
		if s.Active {
			return fmt.Errorf("replication slot %q is in use: stop the repstream that streams from it first", slot)
		}
		if _, err := src.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
			return fmt.Errorf("drop replication slot %q: %w", slot, err)
		}
		log.Info("dropped replication slot", "slot", slot)
	} else {
		log.Info("no replication slot to drop", "slot", slot)
	}
	switch dropped, kept, err := ReleaseDDL(ctx, src, slot, log); {
	case err != nil:
		return err
	case len(kept) > 0:
		log.Info("kept the schema-change event trigger and the schema repstream on the source: other replications use them", "slots", kept)
	case dropped:
		log.Info("dropped the schema-change event trigger and the schema repstream on the source")
	}
	return nil
}

// CheckSlotIdle refuses a slot a walsender streams from (a capture or a
// run still running); a missing slot passes.
func CheckSlotIdle(ctx context.Context, sourceDSN, slot string) error {
	src, err := ConnectSource(ctx, sourceDSN)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	s, err := LookupSlot(ctx, src, slot)
	if err != nil {
		return err
	}
	if s.Active {
		return fmt.Errorf("replication slot %q is in use: stop the repstream that streams from it first", slot)
	}
	return nil
}

// DropCapture removes what `repstream capture` made on the source for
// slot: the slot (refused while a capture streams from it), its
// registration with the event trigger, and publication if repstream made
// it (PublicationMark) and no other pgoutput slot of the database may
// stream it (one kept is logged).
// The topic and the targets' state are the caller's.
func DropCapture(ctx context.Context, sourceDSN, slot, publication string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src, err := connectSourceChecked(ctx, sourceDSN)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	// Which slot streams which publication is said only when it starts
	// streaming: every other pgoutput slot of the database may use it
	// (another capture, one without the event trigger and so not in
	// repstream.replications, a subscription).
	var others []string
	if err := src.QueryRow(ctx, `SELECT coalesce(array_agg(slot_name::text ORDER BY slot_name), '{}') FROM pg_catalog.pg_replication_slots
WHERE database = current_database() AND plugin = 'pgoutput' AND slot_name <> $1`, slot).Scan(&others); err != nil {
		return fmt.Errorf("look up the other slots of the database: %w", err)
	}
	if err := dropSlot(ctx, src, slot, log); err != nil {
		return err
	}
	var mark *string
	err = src.QueryRow(ctx, "SELECT obj_description(oid, 'pg_publication') FROM pg_catalog.pg_publication WHERE pubname = $1", publication).Scan(&mark)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		log.Info("no publication to drop", "publication", publication)
		return nil
	case err != nil:
		return fmt.Errorf("look up publication %q: %w", publication, err)
	case mark == nil || *mark != PublicationMark:
		log.Info("kept the publication: not marked as made by repstream (made by hand, or by an earlier version): drop it by hand if nothing uses it", "publication", publication)
		return nil
	case len(others) > 0:
		log.Info("kept the publication: other logical replication slots of the database may use it; drop it by hand if none does", "publication", publication, "slots", others)
		return nil
	}
	if _, err := src.Exec(ctx, "DROP PUBLICATION IF EXISTS "+change.QuoteIdent(publication)); err != nil {
		return fmt.Errorf("drop publication %q: %w", publication, err)
	}
	log.Info("dropped publication", "publication", publication)
	return nil
}

// DropTarget removes repstream's state for the slot on one target only
// (`drop --target-only`: an apply of the Kafka mode), leaving the source,
// the slot, the publication and the topic to the capture and the other
// targets; the schema repstream goes with the target's last replication.
// spillDir is the apply's spill directory: removed with its files.
func DropTarget(ctx context.Context, targetDSN, slot, spillDir string, trust bool, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tgt, err := target.Connect(ctx, targetDSN, "repstream-drop")
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())
	exists, err := provision.CheckSchema(ctx, tgt, "target")
	if err != nil {
		return err
	}
	if !exists {
		log.Info("nothing of repstream on the target", "slot", slot)
		return nil
	}
	// Its DROPs fire the target's event triggers.
	if err := target.CheckEventTriggers(ctx, tgt, trust); err != nil {
		return err
	}
	if err := target.EnsureState(ctx, tgt); err != nil {
		return err
	}
	if err := target.WaitForPreviousApply(ctx, tgt, slot, 5*time.Second, log); err != nil {
		return fmt.Errorf("an apply of slot %q still runs on the target: stop it first (%w)", slot, err)
	}
	kept, err := target.Release(ctx, tgt, slot, log)
	if err != nil {
		return fmt.Errorf("drop repstream state of slot %q on the target: %w", slot, err)
	}
	if len(kept) > 0 {
		log.Info("dropped the slot's state on the target; kept the schema repstream: other replications use it", "slot", slot, "slots", kept)
	} else {
		log.Info("dropped the slot's state and the schema repstream on the target", "slot", slot)
	}
	if _, err := queue.RemoveSpillDir(spillDir, log); err != nil {
		log.Warn("the apply's spill directory is left", "dir", spillDir, "err", err)
	}
	return nil
}
