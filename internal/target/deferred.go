package target

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
)

// deferredSchema creates repstream.deferred_ddl: what is still to be built
// on a table --create-tables made, once its rows are copied — its primary
// key, its replica identity, its other indexes, in that order. The copy
// then writes a bare heap: maintaining a primary key row by row cost more
// than building it after (3M rows of `repstream bench initial-copy`'s
// ic_orders, one COPY: 3.7–3.9 s and 408 MB of WAL with the key, 1.9–2.2 s
// and 219 MB without it, plus 1.1 s and 59 MB to build it). Kept on the
// target, not in the run, so that a copy interrupted before its end still
// gets them from the run that completes it.
//
// Only a start makes tables bare (engine.createTargetTables with a slot):
// nothing streams before its copies are done and built. `tables add` makes
// them whole, as a running engine applies schema changes to a pending table.
//
// Invariants: the rows of a table are written in the target transaction
// that creates it and deleted in the one that builds them (BuildDeferred),
// so a table listed has none of them. A table is marked ready only after
// its build has committed (snapshot.Options.AfterCopy), and streaming starts
// only once every listed table of the slot is built (BuildAllDeferred); so
// no change is applied to a bare table. Dropping the slot's state
// (DropState) builds what is listed first, so that no bare table outlives
// its record.
const deferredSchema = `
CREATE TABLE IF NOT EXISTS repstream.deferred_ddl (
	slot text NOT NULL,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	seq int NOT NULL,
	sql text NOT NULL,
	PRIMARY KEY (slot, schema_name, table_name, seq)
);`

// DeferDDL records stmts, to be run on table t of slot once its rows are
// copied, in the caller's transaction (the one that creates t).
func DeferDDL(ctx context.Context, tx pgx.Tx, slot string, t schema.TableName, stmts []string) error {
	// A record left by a table of that name that is gone (dropped by hand,
	// or by a failed start's undo) is replaced.
	if err := ForgetDeferred(ctx, tx, slot, t); err != nil {
		return fmt.Errorf("record what to build on %s after its copy: %w", t, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO repstream.deferred_ddl (slot, schema_name, table_name, seq, sql)
SELECT $1, $2, $3, n - 1, s FROM unnest($4::text[]) WITH ORDINALITY AS u(s, n)`, slot, t.Schema, t.Name, stmts); err != nil {
		return fmt.Errorf("record what to build on %s after its copy: %w", t, err)
	}
	return nil
}

// DeferredTables returns the tables of slot with something deferred, by
// name: made bare by a start, their copy not yet complete (or its build not
// yet run).
func DeferredTables(ctx context.Context, conn *pgx.Conn, slot string) ([]schema.TableName, error) {
	rows, err := conn.Query(ctx, `SELECT DISTINCT schema_name, table_name FROM repstream.deferred_ddl WHERE slot = $1 ORDER BY 1, 2`, slot)
	if err != nil {
		return nil, fmt.Errorf("read what to build on the target's tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schema.TableName, error) {
		var t schema.TableName
		err := r.Scan(&t.Schema, &t.Name)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read what to build on the target's tables: %w", err)
	}
	return tables, nil
}

// ForgetDeferred deletes what is deferred on table t of slot, in tx.
func ForgetDeferred(ctx context.Context, tx pgx.Tx, slot string, t schema.TableName) error {
	_, err := tx.Exec(ctx, `DELETE FROM repstream.deferred_ddl WHERE slot = $1 AND schema_name = $2 AND table_name = $3`, slot, t.Schema, t.Name)
	return err
}

// BuildDeferred runs what is deferred on table t of slot, and forgets it,
// in one transaction on conn: all of it or none. A table that no longer
// exists on the target is forgotten. Nothing deferred: nothing done.
func BuildDeferred(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, log *slog.Logger) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("build the keys and indexes of %s: %w", t, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	rows, err := tx.Query(ctx, `SELECT sql FROM repstream.deferred_ddl WHERE slot = $1 AND schema_name = $2 AND table_name = $3 ORDER BY seq`,
		slot, t.Schema, t.Name)
	if err != nil {
		return fmt.Errorf("read what to build on %s: %w", t, err)
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read what to build on %s: %w", t, err)
	}
	if len(stmts) == 0 {
		return nil
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.Quoted()).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s on the target: %w", t, err)
	}
	took := make([]time.Duration, len(stmts))
	if exists {
		for i, sql := range stmts {
			began := time.Now()
			log.Info("building on the target after the copy", "table", t.String(), "sql", sql) // an index of a large table takes a while
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("build on %s after its copy (%s): %w; fix what the statement needs on the target and run again "+
					"(or, to go without it, delete it from repstream.deferred_ddl)", t, sql, err)
			}
			took[i] = time.Since(began)
		}
	} else {
		log.Warn("a table whose keys and indexes were to be built after its copy is gone from the target: nothing built", "table", t.String())
	}
	if err := ForgetDeferred(ctx, tx, slot, t); err != nil {
		return fmt.Errorf("record the keys and indexes of %s as built: %w", t, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("build the keys and indexes of %s: %w", t, err)
	}
	if exists {
		for i, sql := range stmts {
			log.Info("built on the target after the copy", "table", t.String(), "sql", sql, "elapsed", took[i].Round(time.Millisecond))
		}
	}
	return nil
}

// BuildAllDeferred builds what is deferred on every table of slot
// (BuildDeferred): before streaming, for the tables no copy built (a start
// with --snapshot=false copies none).
func BuildAllDeferred(ctx context.Context, conn *pgx.Conn, slot string, log *slog.Logger) error {
	tables, err := DeferredTables(ctx, conn, slot)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if err := BuildDeferred(ctx, conn, slot, t, log); err != nil {
			return err
		}
	}
	return nil
}
