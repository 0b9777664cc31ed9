package engine

import (
	"context"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// Partitions under a root publication: the source's partition triggers
// (install/partitions.go) report a TRUNCATE of one partition, an ATTACH
// PARTITION and a DETACH PARTITION; the target writer carries them
// (target/partition.go), and a table holding rows attached as a partition
// is copied again (resync).

// resync makes apply write none of a table's changes until it is copied
// again: the writer has recorded it pending (a table holding rows attached
// to it as a partition, a table that enters the publication); the tables'
// watch (tablesync's Watch) copies it. The undo gives the filter back the
// table's state before, for a writer whose transaction did not commit.
func (e *Engine) resync(t schema.TableName) (undo func()) {
	prev, had := e.tables.State(t)
	e.tables.Put(t, apply.TableState{})
	return func() {
		if had {
			e.tables.Put(t, prev)
		} else {
			e.tables.Drop(t)
		}
	}
}

// copyPendingAtEnd copies, before a run that caught up ends, the published
// tables apply recorded pending after the last poll of tablesync's Watch (a
// table holding rows attached as a partition of one): everything up to the stop
// is applied, so the copy's new snapshot is later, and its sync LSN makes
// the next run skip what the copy holds.
//
// A published table the slot does not record (added to the publication
// without the event trigger, or in a session with it off, nothing written
// to it since; a table a schema-change message made is recorded, and every
// message is applied by now) is recorded pending first and copied too:
// the publication poll of tablesync's Watch may not have run in a short
// run. Without the event trigger, so is a recorded table whose source
// identity changed (tablesync's FollowIdents). In every mode, a
// publication that no longer publishes every kind of change stops the
// run instead of letting it say it caught up (CheckPublishing); with the
// event trigger, so does a trigger turned off (CheckDDLTriggers).
func (e *Engine) copyPendingAtEnd(ctx context.Context, tgt *pgx.Conn) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, e.cfg.Slot)
	if err != nil {
		return err
	}
	untracked := e.ddl != ddlTrigger
	src, err := install.ConnectSource(ctx, e.cfg.Source)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	// Nor is it true while the event trigger has been off.
	if !untracked {
		if err := e.sync.CheckDDLTriggers(ctx, src, tgt); err != nil {
			return err
		}
	}
	// Caught up is not true of a publication that left changes out
	// since the start (the poll may not have looked in a short run).
	if err := e.sync.CheckPublishing(ctx, src, tgt); err != nil {
		return err
	}
	idents, err := install.PublicationIdents(ctx, src, e.cfg.Publication)
	if err != nil {
		return err
	}
	published := slices.SortedFunc(maps.Keys(idents), schema.TableName.Compare)
	if untracked {
		if err := e.sync.FollowIdents(ctx, tgt, e.tables, syncs, idents); err != nil {
			return err
		}
		// Nor of a table whose enum or composite type was altered.
		if err := e.sync.FollowTypes(ctx, src, tgt, e.tables, syncs, published); err != nil {
			return err
		}
	}
	if err := e.sync.PendUnrecorded(ctx, tgt, e.tables, syncs, published); err != nil {
		return err
	}
	return e.sync.SyncPending(ctx, src, tgt, published)
}
