package target

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// Tables the stream carries that repstream.tables does not record
// (WriterOptions.CopyUnrecorded): nothing said that the table entered the
// publication, so its rows before may not be on the target. Without the
// source's event trigger (--ddl=relation or false) nothing says so for
// ALTER PUBLICATION ... ADD TABLE, ADD TABLES IN SCHEMA, SET SCHEMA into a
// published schema, RENAME, SET LOGGED, a table holding rows attached as
// a leaf partition; with it, a session with the trigger off does the same
// (PostgreSQL 17's event_triggers = off, which a superuser may set).
// Every table the slot's copy or `tables add` copied, every table a run
// without a copy streamed from its start, and every table a schema-change
// message made (SetTableMade, moved along by its renames:
// RenameTableRecord) is recorded; a table met in the stream that is not is
// recorded pending and copied anew from a new snapshot (tablesync's
// Watch), as `tables add` does. Without the event trigger, a table created
// on the source after the start is copied too (it was empty then, so that
// costs a copy, not correctness). So is a recorded table whose changes
// come under another relation id than the source oid recorded with it
// (TableSync.SourceIdent): the table recorded was dropped, and another
// made or renamed in its place. Tables that enter or leave the
// publication without a change in the stream are tablesync's publication
// poll's (tablesync/publication.go).
//
// The change that meets the table is not written: a table not ready gets
// none of its changes (apply.TableFilter), and an UPDATE of a row copied
// later would not find it. A table this transaction created ahead of its
// CREATE TABLE AS message (ctas.go) is new: its rows are all in the
// stream, and the message records it.

// errTakenUp: the change's table was recorded pending in this transaction
// (or found pending): the change is left out, the copy holds it.
var errTakenUp = errors.New("table waits for its copy")

// tableState returns the slot's recorded state of table tn ("" when
// repstream.tables has no row for it).
func tableState(ctx context.Context, conn *pgx.Conn, slot string, tn schema.TableName) (string, error) {
	state, _, err := tableStateIdent(ctx, conn, slot, tn)
	return state, err
}

// tableStateIdent is tableState with the table's recorded source identity
// (TableSync.SourceIdent; "" when none).
func tableStateIdent(ctx context.Context, conn *pgx.Conn, slot string, tn schema.TableName) (state, ident string, err error) {
	err = conn.QueryRow(ctx, "SELECT state, coalesce(source_ident, '') FROM repstream.tables WHERE slot = $1 AND schema_name = $2 AND table_name = $3",
		slot, tn.Schema, tn.Name).Scan(&state, &ident)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read the sync state of %s for slot %q: %w", tn, slot, err)
	}
	return state, ident, nil
}

// identOID returns the source table oid a source identity begins with
// (install.PublicationIdents: "oid/..."), 0 when it has none.
func identOID(ident string) uint32 {
	head, _, _ := strings.Cut(ident, "/")
	oid, err := strconv.ParseUint(head, 10, 32)
	if err != nil {
		return 0
	}
	return uint32(oid)
}

// SetTablesStreamed records tables as streamed from the slot's start
// without a copy (--snapshot=false, --adopt-slot): ready at low, with no
// copy figures, and the source identity idents has for each (read before
// the slot was made, or at its adoption; none: the first poll records
// one). A table already recorded keeps its state.
func SetTablesStreamed(ctx context.Context, conn *pgx.Conn, slot string, tables []schema.TableName, low change.LSN, srcs map[schema.TableName]SourceInfo) error {
	b := &pgx.Batch{}
	for _, t := range tables {
		b.Queue(`INSERT INTO repstream.tables (slot, schema_name, table_name, state, sync_lsn, source_ident, source_types)
VALUES ($1, $2, $3, 'ready', $4::pg_lsn, NULLIF($5, ''), NULLIF($6, '')) ON CONFLICT (slot, schema_name, table_name) DO NOTHING`, slot, t.Schema, t.Name, low.String(), srcs[t].Ident, srcs[t].Types)
	}
	if err := sendTx(ctx, conn, b); err != nil {
		return fmt.Errorf("record the tables of slot %q as streamed from %s: %w", slot, low, err)
	}
	return nil
}

// checkRecorded is plan's check of rel's table with CopyUnrecorded: nil
// when it is recorded ready (remembered for the writer's life), errTakenUp
// when it waits for a copy — recorded pending here if it was not recorded
// at all.
func (w *Writer) checkRecorded(ctx context.Context, rel *change.Relation) error {
	tn := schema.TableName{Schema: rel.Namespace, Name: rel.Name}
	if id, ok := w.recorded[tn]; ok && id == rel.ID || w.ahead.open[tn] {
		return nil
	}
	state, ident, err := tableStateIdent(ctx, w.conn, w.opts.Slot, tn)
	if err != nil {
		return err
	}
	replaced := false
	switch state {
	case TableReady:
		if oid := identOID(ident); oid != 0 && oid != rel.ID {
			// Another table of that name than the one copied: the
			// one recorded was dropped (or renamed away) and this
			// one made (or renamed) in its place, with rows the
			// stream may not have carried.
			replaced = true
			break
		}
		if w.recorded == nil {
			w.recorded = map[schema.TableName]uint32{}
		}
		w.recorded[tn] = rel.ID
		return nil
	case TablePending, TableCopying:
		// Recorded by this transaction (before a savepoint rolled back
		// to): undone with it; else committed.
		w.resyncFilter(tn, w.takenUp[tn])
		return errTakenUp
	}
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	if err := w.ensureBegun(ctx); err != nil {
		return err
	}
	// Not recorded: it enters the slot's replication (PendEntering); one
	// replaced keeps its record, and is copied anew.
	if err := PendEntering(ctx, w.conn, w.opts.Slot, tn); err != nil {
		return err
	}
	w.markTakenUp(tn)
	delete(w.recorded, tn)
	if replaced {
		w.log.Warn("the stream carries another table than the one this replication recorded under that name (a DROP TABLE and CREATE TABLE, or a RENAME, in its place, "+
			"without the source's event trigger or in a session with it off): it is copied from a new snapshot, then streamed",
			"table", tn, "relation_id", rel.ID, "copied_relation_id", identOID(ident))
		return errTakenUp
	}
	w.log.Warn("the stream carries a table this replication never copied nor saw made (an ALTER PUBLICATION ... ADD TABLE, a SET SCHEMA or RENAME into the publication "+
		"without the source's event trigger, or in a session with it off; a CREATE TABLE look alike): it is copied from a new snapshot, then streamed",
		"table", tn, "relation_id", rel.ID)
	return errTakenUp
}

// markTakenUp notes that this transaction recorded tn pending and tells
// the engine's filter, undoably.
func (w *Writer) markTakenUp(tn schema.TableName) {
	if w.takenUp == nil {
		w.takenUp = map[schema.TableName]bool{}
	}
	w.takenUp[tn] = true
	w.resyncFilter(tn, true)
}

// resyncFilter tells the engine (WriterOptions.Resync) to write none of
// tn's changes until it is copied. undoable: the pending record is this
// transaction's, so a rollback must undo that (undoResyncs).
func (w *Writer) resyncFilter(tn schema.TableName, undoable bool) {
	if w.opts.Resync == nil {
		return
	}
	undo := w.opts.Resync(tn)
	if undoable && undo != nil {
		w.resyncUndo = append(w.resyncUndo, undo)
	}
}

// undoResyncs gives the engine's filter back the states it had before
// this transaction recorded tables pending: the transaction (or the
// savepoint's part of it) did not commit, so no copy will come for them.
// Their next change meets the check again.
func (w *Writer) undoResyncs() {
	for i := len(w.resyncUndo) - 1; i >= 0; i-- {
		w.resyncUndo[i]()
	}
	w.resyncUndo = w.resyncUndo[:0]
}

// abandonTakenUp ends a transaction that did not commit: the filter gets
// back what it had, and no table is this transaction's any more.
func (w *Writer) abandonTakenUp() {
	w.undoResyncs()
	clear(w.takenUp)
}

// endTakenUp forgets, at a commit, which tables the transaction recorded
// pending: the records stand.
func (w *Writer) endTakenUp() {
	w.resyncUndo = w.resyncUndo[:0]
	clear(w.takenUp)
}
