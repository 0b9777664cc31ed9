package target

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// tablesSchema creates repstream.tables: the sync state of every table the
// copy or `tables add` handled, per slot — as native subscriptions keep
// srsubstate and srsublsn in pg_subscription_rel.
//
// Invariants (kept by the engine):
//   - state 'pending': the table was added (`tables add`, a wider --tables)
//     and its rows are not copied yet; the apply writes none of its changes.
//     noticed is set once a running engine filters the table, so that the
//     table is added to the publication only after that.
//   - state 'copying': its rows are being copied; the target's rows of the
//     table belong to that copy (a new copy empties them first).
//   - state 'ready': its rows were copied from a snapshot taken at sync_lsn
//     (L). The source transactions ending at or below L are in the copy, so
//     apply skips the table's changes in them; it applies those ending
//     after L. Or the stream carried every row it has, from L on: streamed
//     from the slot's start (--snapshot=false, --adopt-slot:
//     SetTablesStreamed), or made on the source by the schema-change
//     message at L (SetTableMade; RenameTableRecord follows its renames).
//   - entering (pending): the table had no row here when it was
//     recorded — it enters this slot's replication for the first time
//     (ALTER PUBLICATION ... ADD TABLE, seen in the stream or by the
//     publication poll: PendEntering, PendAll): the target table's rows,
//     if any, are the user's, not a copy's, so its copy refuses a target
//     table that holds rows unless the run has --truncate (tablesync's
//     checkEntering), as `tables add` and a first start refuse one. It
//     stays while the table is pending; copying or ready clears it.
//   - A table without a row entered the publication without this
//     replication seeing it (ALTER PUBLICATION ... ADD TABLE without the
//     event trigger, or with it off: PostgreSQL 17's event_triggers =
//     off): the writer copies it anew at its first change
//     (unrecorded.go), tablesync's publication poll if none comes.
//   - source_ident (ready): what the source's catalog said of the table
//     at its copy, or at a publication poll after it without the event
//     trigger (its oid, the publication's entries that publish it, the
//     xmin of the publication's row: SourceIdent); for a table made by a
//     schema-change message, its oid alone. The writer copies anew a
//     table whose changes come under another oid.
//     Every state change clears it; the next poll sets it. Another ident
//     for the same name means the table was dropped and made again,
//     taken out of the publication and added back, or published by
//     options that may have left changes out meanwhile: changes outside
//     the stream, so it is copied anew (install.IdentChange).
const tablesSchema = `
CREATE TABLE IF NOT EXISTS repstream.tables (
	slot text NOT NULL,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	state text NOT NULL CHECK (state IN ('pending', 'copying', 'ready')),
	sync_lsn pg_lsn,
	rows bigint NOT NULL DEFAULT 0,
	bytes bigint NOT NULL DEFAULT 0,
	copied_at timestamptz,
	noticed bool NOT NULL DEFAULT false,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (slot, schema_name, table_name)
);
ALTER TABLE repstream.tables ADD COLUMN IF NOT EXISTS source_ident text;
ALTER TABLE repstream.tables ADD COLUMN IF NOT EXISTS source_types text;
ALTER TABLE repstream.tables ADD COLUMN IF NOT EXISTS entering bool NOT NULL DEFAULT false;`

// Table sync states (repstream.tables.state).
const (
	TablePending = "pending"
	TableCopying = "copying"
	TableReady   = "ready"
)

// Records reports whether syncs (a slot's rows of repstream.tables) has
// one for table t.
func Records(syncs []TableSync, t schema.TableName) bool {
	return slices.ContainsFunc(syncs, func(s TableSync) bool { return s.Schema == t.Schema && s.Name == t.Name })
}

// TableSync is one row of repstream.tables.
type TableSync struct {
	Schema, Name string
	State        string     // TablePending, TableCopying or TableReady
	SyncLSN      change.LSN // the copy's snapshot position (ready tables); 0 before
	Rows, Bytes  int64      // what the copy wrote
	CopiedAt     time.Time  // when the copy ended (zero before)
	Noticed      bool       // a running engine filters the pending table
	SourceIdent  string     // ready, without the event trigger: the source's identity of the table as a poll last saw it ("": not yet)
	Entering     bool       // pending: it enters the slot's replication for the first time (PendEntering): the target's rows are the user's
}

// String returns schema.table.
func (t TableSync) String() string { return t.Schema + "." + t.Name }

// LoadTableSyncs returns the slot's table states, ordered by name. Without
// the state table (an older target) it returns none.
func LoadTableSyncs(ctx context.Context, conn *pgx.Conn, slot string) ([]TableSync, error) {
	var exists, ident, entering bool // ident, entering: a target a version before that column made, not started since
	if err := conn.QueryRow(ctx, `SELECT to_regclass('repstream.tables') IS NOT NULL,
	EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('repstream.tables') AND attname = 'source_ident' AND NOT attisdropped),
	EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('repstream.tables') AND attname = 'entering' AND NOT attisdropped)`).Scan(&exists, &ident, &entering); err != nil {
		return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
	}
	if !exists {
		return nil, nil
	}
	identCol := "''"
	if ident {
		identCol = "coalesce(source_ident, '')"
	}
	enteringCol := "false"
	if entering {
		enteringCol = "entering"
	}
	rows, err := conn.Query(ctx, `SELECT schema_name, table_name, state, coalesce(sync_lsn, '0/0')::text, rows, bytes, copied_at, noticed, `+identCol+`, `+enteringCol+`
FROM repstream.tables WHERE slot = $1 ORDER BY 1, 2`, slot)
	if err != nil {
		return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
	}
	defer rows.Close()
	var out []TableSync
	for rows.Next() {
		var t TableSync
		var lsn string
		var at *time.Time
		if err := rows.Scan(&t.Schema, &t.Name, &t.State, &lsn, &t.Rows, &t.Bytes, &at, &t.Noticed, &t.SourceIdent, &t.Entering); err != nil {
			return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
		}
		if t.SyncLSN, err = change.ParseLSN(lsn); err != nil {
			return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
		}
		if at != nil {
			t.CopiedAt = *at
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
	}
	return out, nil
}

// SetTableState records a table's state without a copy result (pending,
// copying): its sync LSN and copy figures are cleared. A table that is
// already pending keeps its noticed and entering flags.
func SetTableState(ctx context.Context, conn *pgx.Conn, slot, schemaName, name, state string) error {
	return setTableState(ctx, conn, slot, schemaName, name, state, false)
}

// PendEntering records t pending (SetTableState) as a table entering
// the slot's replication when the slot has no record of it
// (TableSync.Entering: its copy empties the target's rows only with
// --truncate); a table recorded is pended as SetTableState does.
func PendEntering(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName) error {
	return setTableState(ctx, conn, slot, t.Schema, t.Name, TablePending, true)
}

func setTableState(ctx context.Context, conn *pgx.Conn, slot, schemaName, name, state string, entering bool) error {
	_, err := conn.Exec(ctx, `INSERT INTO repstream.tables (slot, schema_name, table_name, state, entering)
VALUES ($1, $2, $3, $4, `+enteringSQL+`)
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = excluded.state, sync_lsn = NULL,
	rows = 0, bytes = 0, copied_at = NULL, updated_at = now(), source_ident = NULL,
	noticed = repstream.tables.noticed AND repstream.tables.state = 'pending' AND excluded.state = 'pending',
	entering = `+keepEntering,
		slot, schemaName, name, state, entering)
	if err != nil {
		return fmt.Errorf("record %s.%s as %s for slot %q: %w", schemaName, name, state, slot, err)
	}
	return nil
}

// keepEntering is the entering flag of a recorded table pended again:
// kept while it stays pending, cleared by its copy.
const keepEntering = `repstream.tables.entering AND repstream.tables.state = 'pending' AND excluded.state = 'pending'`

// enteringSQL is the entering flag of a table the slot does not record,
// pended with $5: not when the slot records another table of its
// partition tree on the target (publish_via_partition_root switched, a
// root or its leaves published instead of the other): its rows came
// through that one, the replication's own. ($1 the slot, $2 and $3 the
// table's schema and name.)
const enteringSQL = `$5 AND NOT EXISTS (
  SELECT 1 FROM pg_catalog.pg_partition_tree(pg_catalog.pg_partition_root(pg_catalog.to_regclass(pg_catalog.quote_ident($2) || '.' || pg_catalog.quote_ident($3)))) p
  JOIN pg_catalog.pg_class c ON c.oid = p.relid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN repstream.tables r ON r.slot = $1 AND r.schema_name = n.nspname::text AND r.table_name = c.relname::text
  WHERE NOT (n.nspname = $2 AND c.relname = $3))`

// PendAll records tables pending in one transaction (SetTableState):
// each is copied anew before its changes are applied again. With
// entering, one the slot does not record yet enters its replication
// (PendEntering); without, the caller knows its target rows to be the
// replication's, or none. Tables recorded for the slot that tables does
// not name are left as they are.
func PendAll(ctx context.Context, conn *pgx.Conn, slot string, tables []schema.TableName, entering bool) error {
	b := &pgx.Batch{}
	for _, t := range tables {
		b.Queue(`INSERT INTO repstream.tables (slot, schema_name, table_name, state, entering)
VALUES ($1, $2, $3, $4, `+enteringSQL+`)
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = 'pending', sync_lsn = NULL,
	rows = 0, bytes = 0, copied_at = NULL, updated_at = now(), source_ident = NULL, noticed = false,
	entering = `+keepEntering, slot, t.Schema, t.Name, TablePending, entering)
	}
	if err := sendTx(ctx, conn, b); err != nil {
		return fmt.Errorf("record the tables of slot %q for a new copy: %w", slot, err)
	}
	return nil
}

// ForgetTable removes a table's sync state: the slot no longer replicates
// it (tablesync's publication poll), and a run without the event trigger
// copies it anew if the stream carries it again (unrecorded.go).
func ForgetTable(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName) error {
	if _, err := conn.Exec(ctx, `DELETE FROM repstream.tables WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND state = 'ready'`,
		slot, t.Schema, t.Name); err != nil {
		return fmt.Errorf("forget the sync state of %s for slot %q: %w", t, slot, err)
	}
	return nil
}

// ForgetPending removes the record of a table added and not yet copied
// (pending), which the source no longer has (tablesync's GoneTables).
func ForgetPending(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName) error {
	if _, err := conn.Exec(ctx, `DELETE FROM repstream.tables WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND state = 'pending'`,
		slot, t.Schema, t.Name); err != nil {
		return fmt.Errorf("forget the pending copy of %s for slot %q: %w", t, slot, err)
	}
	return nil
}

// SetTableReady records that a table's rows were copied from a snapshot
// taken at syncLSN; ident is its source identity read before that
// snapshot (TableSync.SourceIdent; "": unknown, a poll sets it).
func SetTableReady(ctx context.Context, conn *pgx.Conn, slot, schemaName, name string, syncLSN change.LSN, rows, bytes int64, src SourceInfo) error {
	_, err := conn.Exec(ctx, `INSERT INTO repstream.tables (slot, schema_name, table_name, state, sync_lsn, rows, bytes, copied_at, source_ident, source_types)
VALUES ($1, $2, $3, 'ready', $4::pg_lsn, $5, $6, now(), nullif($7, ''), nullif($8, ''))
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = 'ready', sync_lsn = excluded.sync_lsn,
	rows = excluded.rows, bytes = excluded.bytes, copied_at = excluded.copied_at, noticed = false, updated_at = now(), source_ident = excluded.source_ident,
	source_types = excluded.source_types, entering = false`,
		slot, schemaName, name, syncLSN.String(), rows, bytes, src.Ident, src.Types)
	if err != nil {
		return fmt.Errorf("record %s.%s as copied at %s for slot %q: %w", schemaName, name, syncLSN, slot, err)
	}
	return nil
}

// SourceInfo is what the source's catalog says of a published table,
// read before a copy's snapshot: its identity (TableSync.SourceIdent:
// install.PublicationIdents) and its columns' types
// (install.PublicationColumnTypes: "" when not read), which --ddl=relation
// compares with the stream's first description of it (SourceTypes).
type SourceInfo struct {
	Ident, Types string
}

// SourceTypes returns the types of table tn's columns as the target's
// copy of it last took them (install.PublicationColumnTypes' JSON, ""
// when not recorded): the source's catalog before the copy, then each
// description of it in the stream that --ddl=relation followed.
func SourceTypes(ctx context.Context, conn *pgx.Conn, slot string, tn schema.TableName) (string, error) {
	var types *string
	err := conn.QueryRow(ctx, "SELECT source_types FROM repstream.tables WHERE slot = $1 AND schema_name = $2 AND table_name = $3", slot, tn.Schema, tn.Name).Scan(&types)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && types == nil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the recorded column types of %s for slot %q: %w", tn, slot, err)
	}
	return *types, nil
}

// SetSourceTypes records types as SourceTypes of tn.
func SetSourceTypes(ctx context.Context, conn *pgx.Conn, slot string, tn schema.TableName, types string) error {
	if _, err := conn.Exec(ctx, "UPDATE repstream.tables SET source_types = $4 WHERE slot = $1 AND schema_name = $2 AND table_name = $3", slot, tn.Schema, tn.Name, types); err != nil {
		return fmt.Errorf("record the column types of %s for slot %q: %w", tn, slot, err)
	}
	return nil
}

// SetSourceIdent records what the source's catalog said of a ready table
// (TableSync.SourceIdent); a table no longer ready is left as it is.
func SetSourceIdent(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, ident string) error {
	if _, err := conn.Exec(ctx, `UPDATE repstream.tables SET source_ident = $4
WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND state = 'ready'`, slot, t.Schema, t.Name, ident); err != nil {
		return fmt.Errorf("record the source's identity of %s for slot %q: %w", t, slot, err)
	}
	return nil
}

// MarkTablesNoticed records that a running engine filters these pending
// tables (`tables add` waits for it before it publishes them).
func MarkTablesNoticed(ctx context.Context, conn *pgx.Conn, slot string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	_, err := conn.Exec(ctx, `UPDATE repstream.tables SET noticed = true, updated_at = now()
WHERE slot = $1 AND state = 'pending' AND NOT noticed AND schema_name || '.' || table_name = ANY($2)`, slot, names)
	if err != nil {
		return fmt.Errorf("mark pending tables of slot %q noticed: %w", slot, err)
	}
	return nil
}

// SetTableMade records a table that a schema-change message made on the
// source (CREATE TABLE, CREATE TABLE AS, SELECT INTO) as streamed from
// there: ready at lsn, the message's position, with the source oid as its
// identity (the stream carried every row it ever had). A ready record of
// that name (a table dropped before) takes the new one's; one pending or
// copying is left as it is: its copy is coming. oid 0: not known (a
// partition detached into a table of its own), for the publication poll
// to record.
func SetTableMade(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, lsn change.LSN, oid uint32) error {
	ident := ""
	if oid != 0 {
		ident = strconv.FormatUint(uint64(oid), 10)
	}
	_, err := conn.Exec(ctx, `INSERT INTO repstream.tables (slot, schema_name, table_name, state, sync_lsn, source_ident)
VALUES ($1, $2, $3, 'ready', $4::pg_lsn, nullif($5, ''))
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET sync_lsn = excluded.sync_lsn, source_ident = excluded.source_ident,
	rows = 0, bytes = 0, copied_at = NULL, noticed = false, updated_at = now()
WHERE repstream.tables.state = 'ready'`, slot, t.Schema, t.Name, lsn.String(), ident)
	if err != nil {
		return fmt.Errorf("record %s, made on the source at %s, as streamed for slot %q: %w", t, lsn, slot, err)
	}
	return nil
}

// RenameTableRecord moves the ready or pending record of a table renamed
// (or moved to another schema) on the source, which a schema-change
// message said, to its new name: a stale ready or pending record under
// the new name goes. A pending one (its copy still to come: taken up by
// an earlier message, moved into a published schema) is copied under its
// new name; under its old one, which the source no longer has, it waited
// for ever and no run was caught up again. A table not recorded stays
// unrecorded under its new name too, so the writer copies it at its
// first change.
func RenameTableRecord(ctx context.Context, conn *pgx.Conn, slot string, from, to schema.TableName) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM repstream.tables t WHERE slot = $1 AND schema_name = $4 AND table_name = $5 AND state IN ('ready', 'pending')
AND EXISTS (SELECT FROM repstream.tables f WHERE f.slot = $1 AND f.schema_name = $2 AND f.table_name = $3 AND f.state IN ('ready', 'pending'))`,
		slot, from.Schema, from.Name, to.Schema, to.Name)
	b.Queue(`UPDATE repstream.tables SET schema_name = $4, table_name = $5, updated_at = now()
WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND state IN ('ready', 'pending')`, slot, from.Schema, from.Name, to.Schema, to.Name)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %s, renamed %s on the source, for slot %q: %w", from, to, slot, err)
	}
	return nil
}
