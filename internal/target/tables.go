package target

import (
	"context"
	"fmt"
	"slices"
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
//     after L.
//   - A table without a row was copied with the slot's initial copy by a
//     version that kept no per-table state, or streams without a copy
//     (--snapshot=false): all its changes are applied.
//   - source_ident (without the event trigger): what the source's catalog
//     said of the ready table at a publication poll after its copy (its
//     oid, the publication's entries that publish it, the xmin of the
//     publication's row: SourceIdent).
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
ALTER TABLE repstream.tables ADD COLUMN IF NOT EXISTS source_ident text;`

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
}

// String returns schema.table.
func (t TableSync) String() string { return t.Schema + "." + t.Name }

// LoadTableSyncs returns the slot's table states, ordered by name. Without
// the state table (an older target) it returns none.
func LoadTableSyncs(ctx context.Context, conn *pgx.Conn, slot string) ([]TableSync, error) {
	var exists, ident bool // ident: a target a version before source_ident made, not started since
	if err := conn.QueryRow(ctx, `SELECT to_regclass('repstream.tables') IS NOT NULL,
	EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('repstream.tables') AND attname = 'source_ident' AND NOT attisdropped)`).Scan(&exists, &ident); err != nil {
		return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
	}
	if !exists {
		return nil, nil
	}
	identCol := "''"
	if ident {
		identCol = "coalesce(source_ident, '')"
	}
	rows, err := conn.Query(ctx, `SELECT schema_name, table_name, state, coalesce(sync_lsn, '0/0')::text, rows, bytes, copied_at, noticed, `+identCol+`
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
		if err := rows.Scan(&t.Schema, &t.Name, &t.State, &lsn, &t.Rows, &t.Bytes, &at, &t.Noticed, &t.SourceIdent); err != nil {
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
// already pending keeps its noticed flag.
func SetTableState(ctx context.Context, conn *pgx.Conn, slot, schemaName, name, state string) error {
	_, err := conn.Exec(ctx, `INSERT INTO repstream.tables (slot, schema_name, table_name, state)
VALUES ($1, $2, $3, $4)
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = excluded.state, sync_lsn = NULL,
	rows = 0, bytes = 0, copied_at = NULL, updated_at = now(), source_ident = NULL,
	noticed = repstream.tables.noticed AND repstream.tables.state = 'pending' AND excluded.state = 'pending'`,
		slot, schemaName, name, state)
	if err != nil {
		return fmt.Errorf("record %s.%s as %s for slot %q: %w", schemaName, name, state, slot, err)
	}
	return nil
}

// PendAll records tables pending in one transaction (SetTableState):
// each is copied anew before its changes are applied again. Tables
// recorded for the slot that tables does not name are left as they are.
func PendAll(ctx context.Context, conn *pgx.Conn, slot string, tables []schema.TableName) error {
	b := &pgx.Batch{}
	for _, t := range tables {
		b.Queue(`INSERT INTO repstream.tables (slot, schema_name, table_name, state)
VALUES ($1, $2, $3, 'pending')
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = 'pending', sync_lsn = NULL,
	rows = 0, bytes = 0, copied_at = NULL, updated_at = now(), source_ident = NULL, noticed = false`, slot, t.Schema, t.Name)
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

// SetTableReady records that a table's rows were copied from a snapshot
// taken at syncLSN; ident is its source identity read before that
// snapshot (TableSync.SourceIdent; "": unknown, a poll sets it).
func SetTableReady(ctx context.Context, conn *pgx.Conn, slot, schemaName, name string, syncLSN change.LSN, rows, bytes int64, ident string) error {
	_, err := conn.Exec(ctx, `INSERT INTO repstream.tables (slot, schema_name, table_name, state, sync_lsn, rows, bytes, copied_at, source_ident)
VALUES ($1, $2, $3, 'ready', $4::pg_lsn, $5, $6, now(), nullif($7, ''))
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = 'ready', sync_lsn = excluded.sync_lsn,
	rows = excluded.rows, bytes = excluded.bytes, copied_at = excluded.copied_at, noticed = false, updated_at = now(), source_ident = excluded.source_ident`,
		slot, schemaName, name, syncLSN.String(), rows, bytes, ident)
	if err != nil {
		return fmt.Errorf("record %s.%s as copied at %s for slot %q: %w", schemaName, name, syncLSN, slot, err)
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
