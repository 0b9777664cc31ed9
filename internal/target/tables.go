package target

import (
	"context"
	"fmt"
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
);`

// Table sync states (repstream.tables.state).
const (
	TablePending = "pending"
	TableCopying = "copying"
	TableReady   = "ready"
)

// TableSync is one row of repstream.tables.
type TableSync struct {
	Schema, Name string
	State        string     // TablePending, TableCopying or TableReady
	SyncLSN      change.LSN // the copy's snapshot position (ready tables); 0 before
	Rows, Bytes  int64      // what the copy wrote
	CopiedAt     time.Time  // when the copy ended (zero before)
	Noticed      bool       // a running engine filters the pending table
}

// String returns schema.table.
func (t TableSync) String() string { return t.Schema + "." + t.Name }

// LoadTableSyncs returns the slot's table states, ordered by name. Without
// the state table (an older target) it returns none.
func LoadTableSyncs(ctx context.Context, conn *pgx.Conn, slot string) ([]TableSync, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('repstream.tables') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("load table states of slot %q: %w", slot, err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := conn.Query(ctx, `SELECT schema_name, table_name, state, coalesce(sync_lsn, '0/0')::text, rows, bytes, copied_at, noticed
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
		if err := rows.Scan(&t.Schema, &t.Name, &t.State, &lsn, &t.Rows, &t.Bytes, &at, &t.Noticed); err != nil {
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
	rows = 0, bytes = 0, copied_at = NULL, updated_at = now(),
	noticed = repstream.tables.noticed AND repstream.tables.state = 'pending' AND excluded.state = 'pending'`,
		slot, schemaName, name, state)
	if err != nil {
		return fmt.Errorf("record %s.%s as %s for slot %q: %w", schemaName, name, state, slot, err)
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
// taken at syncLSN.
func SetTableReady(ctx context.Context, conn *pgx.Conn, slot, schemaName, name string, syncLSN change.LSN, rows, bytes int64) error {
	_, err := conn.Exec(ctx, `INSERT INTO repstream.tables (slot, schema_name, table_name, state, sync_lsn, rows, bytes, copied_at)
VALUES ($1, $2, $3, 'ready', $4::pg_lsn, $5, $6, now())
ON CONFLICT (slot, schema_name, table_name) DO UPDATE SET state = 'ready', sync_lsn = excluded.sync_lsn,
	rows = excluded.rows, bytes = excluded.bytes, copied_at = excluded.copied_at, noticed = false, updated_at = now()`,
		slot, schemaName, name, syncLSN.String(), rows, bytes)
	if err != nil {
		return fmt.Errorf("record %s.%s as copied at %s for slot %q: %w", schemaName, name, syncLSN, slot, err)
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
