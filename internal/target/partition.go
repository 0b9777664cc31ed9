package target

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/schema"
)

// Partitions of a table published through its root
// (publish_via_partition_root): what pgoutput does not send, the source's
// partition triggers report (install/partitions.go), and the writer carries
// here, in the transaction of the source's change:
//
//   - TRUNCATE of a partition: the target's partition of the same name, if
//     it is one of the root's holding the same rows (same partition
//     constraint and key), is truncated; otherwise the root's rows in the
//     source partition's constraint are deleted. A hash partition's
//     constraint names its parent by OID and cannot be evaluated on the
//     target: unless the target's root is empty, the run stops.
//   - ATTACH PARTITION: the target's table of that name, when the target's
//     parent is partitioned, is attached there as well. The rows the
//     attached table held: if the publication replicated it under its own
//     name, the target's copy of it has them (attached, or moved into the
//     root and the table dropped); otherwise the root is copied again
//     (pending, as `tables add` does: emptied, copied from a new snapshot,
//     its changes up to then skipped).
//   - DETACH PARTITION: the target's partition of the same name holding the
//     same rows is detached; otherwise the root's rows in its constraint
//     are deleted — or, when the publication publishes the detached table
//     under its own name from then on, moved into the target's table of
//     that name (created if missing).
//
// Anything else stops the run, naming the table, the partition and the LSN.

// targetPart is what the target has under a partition's name.
type targetPart struct {
	exists      bool
	kind        string // relkind
	partition   bool   // a partition of some table
	ofRoot      bool   // a partition in the tree of the root (same name as the source's)
	parent      string // its parent, when a partition
	constraint  string
	parentKey   string
	partitioned bool
}

func (w *Writer) loadTargetPart(ctx context.Context, root, part schema.TableName) (targetPart, error) {
	var p targetPart
	err := w.conn.QueryRow(ctx, `
SELECT c.relkind::text, c.relispartition,
       COALESCE(c.relispartition AND pg_catalog.pg_partition_root(c.oid) = pg_catalog.to_regclass($2), false),
       COALESCE((SELECT i.inhparent::regclass::text FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid), ''),
       COALESCE(pg_catalog.pg_get_partition_constraintdef(c.oid), ''),
       COALESCE((SELECT pg_catalog.pg_get_partkeydef(i.inhparent) FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid), '')
FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)`, part.Quoted(), root.Quoted()).
		Scan(&p.kind, &p.partition, &p.ofRoot, &p.parent, &p.constraint, &p.parentKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("look up %s on the target: %w", part, err)
	}
	p.exists, p.partitioned = true, p.kind == "p"
	return p, nil
}

// holdsSame: the target's partition of that name holds the rows the
// source's does.
func (p targetPart) holdsSame(pc *ddlmsg.PartitionChange) bool {
	return p.exists && p.ofRoot && p.parentKey == pc.PartKey && schema.SamePartitionConstraint(p.constraint, pc.Constraint)
}

// partition applies a partition message (everything buffered is sent and
// the transaction begun).
func (w *Writer) partition(ctx context.Context, c *change.Change, msg *ddlmsg.Message, pc *ddlmsg.PartitionChange) error {
	root, part := schema.NameFromDDL(&msg.Table), schema.TableName{Schema: pc.Schema, Name: pc.Name}
	fail := func(err error) error {
		return fmt.Errorf("apply %s of partition %s of %s at %s: %w", msg.Tag, part, root, c.LSN, err)
	}
	// Whatever happens, the cached statements of both tables are stale.
	defer w.forget(root)
	defer w.forget(part)
	rootKind, err := w.relkind(ctx, root.Quoted())
	if err != nil {
		return fail(err)
	}
	if rootKind == "" {
		return fail(fmt.Errorf("the target has no table %s: create it there as on the source, then restart", root))
	}
	tp, err := w.loadTargetPart(ctx, root, part)
	if err != nil {
		return fail(err)
	}
	if err := w.checkOwner(ctx, root); err != nil {
		return fail(err)
	}
	if tp.exists {
		if err := w.checkOwner(ctx, part); err != nil {
			return fail(err)
		}
	}
	p := &partChange{w: w, lsn: c.LSN, msg: msg, pc: pc, root: root, part: part, tp: tp,
		inPart: "(" + pc.Constraint + ") IS NOT FALSE", fail: fail}
	switch msg.Tag {
	case ddlmsg.TagTruncatePartition:
		return p.truncate(ctx)
	case ddlmsg.TagAttachPartition:
		return p.attach(ctx)
	case ddlmsg.TagDetachPartition:
		return p.detach(ctx)
	}
	return fail(fmt.Errorf("unknown partition change"))
}

// partChange is one partition message being applied: the target has the
// root (checked), tp is what it has under the partition's name, looked up
// before any change; every error goes through fail, which names the
// change, the tables and the LSN.
type partChange struct {
	w          *Writer
	lsn        change.LSN
	msg        *ddlmsg.Message
	pc         *ddlmsg.PartitionChange
	root, part schema.TableName
	tp         targetPart
	inPart     string // a WHERE condition: a root's row is in the source's partition
	fail       func(error) error
}

// relkind returns the relkind of the table named (quoted) name on the
// target, "" if there is none.
func (w *Writer) relkind(ctx context.Context, name string) (string, error) {
	var kind string
	err := w.conn.QueryRow(ctx, "SELECT COALESCE((SELECT relkind::text FROM pg_catalog.pg_class WHERE oid = pg_catalog.to_regclass($1)), '')", name).Scan(&kind)
	return kind, err
}

// truncate: the target's partition holding the same rows is truncated;
// otherwise the root's rows in the partition's constraint are deleted
// (which a hash partition's constraint cannot tell).
func (p *partChange) truncate(ctx context.Context) error {
	w := p.w
	if p.tp.holdsSame(p.pc) {
		if err := w.exec(ctx, "TRUNCATE "+p.part.Quoted()); err != nil {
			return p.fail(err)
		}
		w.log.Info("truncated partition on the target, as on the source", "table", p.root, "partition", p.part, "lsn", p.lsn)
		return nil
	}
	if schema.HashPartition(p.pc.Constraint) {
		return w.hashPartitionStop(ctx, p.root, p.part, p.fail)
	}
	n, err := w.execCount(ctx, "DELETE FROM "+p.root.Quoted()+" WHERE "+p.inPart)
	if err != nil {
		return p.fail(err)
	}
	w.log.Info("deleted the rows of a partition truncated on the source", "table", p.root, "partition", p.part, "rows", n, "lsn", p.lsn)
	return nil
}

// attach attaches the target's table of that name where the target's
// parent is partitioned; otherwise the rows go into the root: moved from
// the target's copy of the table if the publication replicated it under
// its own name, copied again with the root if the table held rows.
func (p *partChange) attach(ctx context.Context) error {
	w := p.w
	alone := p.pc.PublishedAlone(w.opts.Publication)
	if done, err := p.attachOnTarget(ctx, alone); done || err != nil {
		return err
	}
	switch {
	case alone && p.tp.exists && !p.tp.partition:
		// The publication replicated the table under its own name: the
		// target's copy holds its rows. They are the root's now.
		cols := insertableColumns(p.msg)
		n, err := w.execCount(ctx, "INSERT INTO "+p.root.Quoted()+" ("+cols+") SELECT "+cols+" FROM "+p.part.Quoted())
		if err != nil {
			return p.fail(fmt.Errorf("move its rows into %s on the target: %w", p.root, err))
		}
		if err := w.exec(ctx, "DROP TABLE "+p.part.Quoted()); err != nil {
			return p.fail(err)
		}
		w.log.Info("attached on the source: moved the table's rows into its root on the target and dropped the table (the source publishes it through the root now)",
			"table", p.root, "partition", p.part, "rows", n, "lsn", p.lsn)
		return nil
	case p.pc.Rows:
		return w.resync(ctx, p.root, p.part, p.lsn, p.fail)
	}
	w.log.Info("partition attached on the source, without rows", "table", p.root, "partition", p.part, "lsn", p.lsn)
	return nil
}

// attachOnTarget attaches the target's table of that name (a table, not a
// partition) to the source's parent if the target has it partitioned, and
// says whether it did (then the change is applied, the root copied again
// if the table's rows were not the source's).
func (p *partChange) attachOnTarget(ctx context.Context, alone bool) (bool, error) {
	w, pc := p.w, p.pc
	if !p.tp.exists || p.tp.partition || pc.Parent == "" {
		return false, nil
	}
	parentKind, err := w.relkind(ctx, pc.Parent)
	if err != nil {
		return true, p.fail(err)
	}
	if parentKind != "p" {
		return false, nil
	}
	if err := w.exec(ctx, "ALTER TABLE "+pc.Parent+" ATTACH PARTITION "+p.part.Quoted()+" "+pc.Bound); err != nil {
		return true, p.fail(fmt.Errorf("attach it on the target as on the source: %w", err))
	}
	w.log.Info("attached partition on the target, as on the source", "table", p.root, "partition", p.part, "lsn", p.lsn)
	if alone || !pc.Rows {
		return true, nil // the target's table was the source's, rows and all
	}
	return true, w.resync(ctx, p.root, p.part, p.lsn, p.fail)
}

// detach detaches the target's partition holding the same rows; otherwise
// the root's rows in the partition's constraint are deleted, or moved into
// the target's table of that name when the publication publishes the
// detached table under its own name.
func (p *partChange) detach(ctx context.Context) error {
	w := p.w
	alone := p.pc.PublishedAlone(w.opts.Publication)
	if p.tp.holdsSame(p.pc) {
		if err := w.exec(ctx, "ALTER TABLE "+p.tp.parent+" DETACH PARTITION "+p.part.Quoted()); err != nil {
			return p.fail(err)
		}
		if !alone {
			w.log.Warn("detached partition on the target, as on the source; the publication does not publish it: it is no longer replicated", "table", p.root, "partition", p.part, "lsn", p.lsn)
			return nil
		}
		w.log.Info("detached partition on the target, as on the source; replicated as a table of its own", "table", p.root, "partition", p.part, "lsn", p.lsn)
		return p.recordDetached(ctx)
	}
	if schema.HashPartition(p.pc.Constraint) {
		return w.hashPartitionStop(ctx, p.root, p.part, p.fail)
	}
	copied, err := p.copiedSinceDetach(ctx)
	if err != nil {
		return p.fail(err)
	}
	if !alone || copied {
		n, err := w.execCount(ctx, "DELETE FROM "+p.root.Quoted()+" WHERE "+p.inPart)
		if err != nil {
			return p.fail(err)
		}
		if copied {
			w.log.Info("detached on the source: deleted the partition's rows from the target's root; the table of its own was copied after the detach",
				"table", p.root, "partition", p.part, "rows", n, "lsn", p.lsn)
			return nil
		}
		w.log.Warn("deleted the rows of a partition detached on the source from the target's root; the publication does not publish the detached table: it is not replicated",
			"table", p.root, "partition", p.part, "rows", n, "lsn", p.lsn)
		return nil
	}
	if err := p.detachedTable(ctx); err != nil {
		return err
	}
	cols := insertableColumns(p.msg)
	n, err := w.execCount(ctx, "WITH d AS (DELETE FROM "+p.root.Quoted()+" WHERE "+p.inPart+" RETURNING "+cols+") INSERT INTO "+p.part.Quoted()+" ("+cols+") SELECT "+cols+" FROM d")
	if err != nil {
		return p.fail(fmt.Errorf("move its rows out of %s on the target: %w", p.root, err))
	}
	w.log.Info("detached on the source: moved the partition's rows out of the target's root into a table of its own, replicated from now on",
		"table", p.root, "partition", p.part, "rows", n, "lsn", p.lsn)
	return p.recordDetached(ctx)
}

// copiedSinceDetach reports whether the target's table of the detached
// partition's name is one this replication copied after the detach: a
// partition detached while no engine ran, which the next start made and
// copied (tablesync's CopyMade). The root's rows of it then just go.
func (p *partChange) copiedSinceDetach(ctx context.Context) (bool, error) {
	syncs, err := LoadTableSyncs(ctx, p.w.conn, p.w.opts.Slot)
	if err != nil {
		return false, err
	}
	for _, t := range syncs {
		if t.Schema == p.part.Schema && t.Name == p.part.Name {
			return t.State == TableReady && !t.CopiedAt.IsZero() && t.SyncLSN >= p.lsn, nil
		}
	}
	return false, nil
}

// recordDetached records a detached partition that the publication
// publishes as a table of its own as streamed from here
// (SetTableMade; its source oid is for the publication poll to record):
// the target has its rows, and the writer copies only tables that entered
// the publication unseen.
func (p *partChange) recordDetached(ctx context.Context) error {
	w := p.w
	if !w.opts.CopyUnrecorded {
		return nil
	}
	if err := SetTableMade(ctx, w.conn, w.opts.Slot, p.part, p.lsn, 0); err != nil {
		return p.fail(err)
	}
	return nil
}

// detachedTable makes sure the target has an empty table of its own under
// the detached partition's name for its rows: the one it has (it must be
// neither a partition nor hold rows), or one created with the root's
// columns (their sequences stay the root's).
func (p *partChange) detachedTable(ctx context.Context) error {
	w, part := p.w, p.part
	if p.tp.exists {
		var empty bool
		if err := w.conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+part.Quoted()+")").Scan(&empty); err != nil {
			return p.fail(err)
		}
		if p.tp.partition || !empty {
			return p.fail(fmt.Errorf("the source publishes the detached table %s from now on, and the target's table of that name is not an empty table of its own: move or empty it on the target, then restart", part))
		}
		return nil
	}
	t := p.msg.Table
	t.Schema, t.Name, t.Kind = part.Schema, part.Name, "r"
	t.Columns = make([]ddlmsg.Column, len(p.msg.Columns))
	for i, col := range p.msg.Columns {
		col.Sequence = nil // the root owns it
		t.Columns[i] = col
	}
	for _, sql := range schema.CreateSQLFromDDL(&t) {
		if err := w.exec(ctx, sql); err != nil {
			return p.fail(fmt.Errorf("create the detached table on the target (%s): %w", sql, err))
		}
	}
	return nil
}

// resync records the root as pending in the transaction (the copy of
// `tables add`: emptied, copied from a new snapshot) and tells the engine.
func (w *Writer) resync(ctx context.Context, root, part schema.TableName, lsn change.LSN, fail func(error) error) error {
	if err := SetTableState(ctx, w.conn, w.opts.Slot, root.Schema, root.Name, TablePending); err != nil {
		return fail(err)
	}
	w.markTakenUp(root)
	w.log.Warn("a table holding rows was attached on the source as a partition: the target's root is copied again (emptied, copied from a new snapshot)",
		"table", root, "partition", part, "lsn", lsn)
	return nil
}

// hashPartitionStop: a hash partition's rows cannot be told apart on a
// target partitioned otherwise; nothing to do if the root is empty.
func (w *Writer) hashPartitionStop(ctx context.Context, root, part schema.TableName, fail func(error) error) error {
	var empty bool
	if err := w.conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+root.Quoted()+")").Scan(&empty); err != nil {
		return fail(err)
	}
	if empty {
		return nil
	}
	return fail(fmt.Errorf("%s is a hash partition and the target's %s has no partition %s with the same bound: its rows cannot be told apart there; "+
		"partition the target's table as the source's (the same hash partitions, by the same names), then restart", part, root, part))
}

// execCount runs sql in the transaction and returns the rows it affected.
func (w *Writer) execCount(ctx context.Context, sql string) (int64, error) {
	res, err := w.conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(res) == 0 {
		return 0, nil
	}
	return res[len(res)-1].CommandTag.RowsAffected(), nil
}

// insertableColumns lists the root's columns a row can be written to (not
// generated), quoted.
func insertableColumns(msg *ddlmsg.Message) string {
	var cols []string
	for _, c := range msg.Columns {
		if c.Generated == nil {
			cols = append(cols, change.QuoteIdent(c.Name))
		}
	}
	return strings.Join(cols, ", ")
}
