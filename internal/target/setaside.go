package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
)

// Tables the user made (issue 31). An initial copy into a table that
// already has its primary key and indexes maintains them row by row; a
// table --create-tables makes is copied bare and its keys and indexes are
// built after (afterCopySchema). SetAside gives the user's empty tables
// the same: in one target transaction per table, under an ACCESS
// EXCLUSIVE lock, it reads the definitions of the table's primary key,
// unique and exclusion constraints, other indexes, replica identity index
// and of the foreign keys (of any table, itself included) that reference
// it, drops them, and records in repstream.deferred_ddl (restore) the
// statements that make them again exactly — ALTER TABLE ... ADD
// CONSTRAINT name pg_get_constraintdef, pg_get_indexdef, REPLICA IDENTITY
// USING INDEX — so they are made again under the same names by the copy's
// build (BuildAfterCopy), or, if the run dies first, by the next run, or
// by `repstream drop` (DropState: RestoreSetAside). Foreign keys that
// reference it are made again once every table is copied
// (BuildAllAfterCopy, before streaming: after_all); the table's own foreign
// keys stay (the copy's sessions run with session_replication_role =
// replica: they check nothing during the copy).
//
// A table is left as it is, with a log line saying why, when it has rows
// (never touched), when it is not an ordinary table or is a partition or
// has inheritance children, when the target role does not own it or a
// table whose foreign key references it, or may not create in its schema
// (where its indexes are made again) (SetAside returns those: the caller
// says so once), when one of its indexes is invalid, marked for
// CLUSTER, in a tablespace of its own, commented or has a statistics
// target (what the statements above would not make again), when a foreign
// key referencing it is on a partition or a partitioned table, when its
// lock is not had within setAsideLockTimeout, or when a drop is refused
// (a view that depends on its primary key).

// setAsideLockTimeout bounds the wait for a table's lock: a session
// reading the target table makes the copy leave it as it is.
const setAsideLockTimeout = "5s"

// setAsideIndexes lists the table's indexes (in the order they are made
// again: the primary key first), each with the statement that drops it,
// the one that makes it again, its name (a constraint's is the
// constraint's) and whether it is the replica identity index. Read with
// search_path = pg_catalog: every name in the definitions is qualified.
const setAsideIndexes = `
SELECT CASE WHEN con.oid IS NULL THEN 'DROP INDEX ' || i.indexrelid::regclass::text
            ELSE 'ALTER TABLE ' || $2 || ' DROP CONSTRAINT ' || pg_catalog.quote_ident(con.conname) END,
       CASE WHEN con.oid IS NULL THEN pg_catalog.pg_get_indexdef(i.indexrelid)
            ELSE 'ALTER TABLE ' || $2 || ' ADD CONSTRAINT ' || pg_catalog.quote_ident(con.conname) || ' ' || pg_catalog.pg_get_constraintdef(con.oid) END,
       ic.relname::text, con.contype IS NOT DISTINCT FROM 'p', i.indisreplident
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u', 'x')
WHERE i.indrelid = $1::regclass
ORDER BY con.contype IS NOT DISTINCT FROM 'p' DESC, i.indexrelid`

// setAsideFKs lists the foreign keys that reference the table.
const setAsideFKs = `
SELECT 'ALTER TABLE ' || k.conrelid::regclass::text || ' DROP CONSTRAINT ' || pg_catalog.quote_ident(k.conname),
       'ALTER TABLE ' || k.conrelid::regclass::text || ' ADD CONSTRAINT ' || pg_catalog.quote_ident(k.conname) || ' ' || pg_catalog.pg_get_constraintdef(k.oid),
       k.conname::text
FROM pg_catalog.pg_constraint k
WHERE k.contype = 'f' AND k.confrelid = $1::regclass
ORDER BY k.oid`

// setAsideReason returns why the table cannot be set aside (NULL: it
// can), and whether that is the target role's privilege.
const setAsideReason = `
SELECT CASE
  WHEN c.relkind <> 'r' THEN 'not an ordinary table'
  WHEN c.relispartition THEN 'a partition'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_inherits h WHERE h.inhparent = c.oid) THEN 'it has inheritance children'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p JOIN pg_catalog.pg_namespace n ON n.nspname = p.schemaname
               WHERE n.oid = c.relnamespace AND p.tablename = c.relname)
    THEN 'a publication of the target database publishes it (the target is a source too: without its key its UPDATEs and DELETEs would fail there, or a replication read would not find its rows)'
  WHEN NOT pg_catalog.pg_has_role(c.relowner, 'USAGE') THEN 'the target role does not own it'
  WHEN NOT pg_catalog.has_schema_privilege(c.relnamespace, 'CREATE')
    THEN 'the target role may not create in its schema (its indexes could not be made again)'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class r ON r.oid = k.conrelid
               WHERE k.contype = 'f' AND k.confrelid = c.oid AND NOT pg_catalog.pg_has_role(r.relowner, 'USAGE'))
    THEN 'the target role does not own a table whose foreign key references it'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (NOT i.indisvalid OR NOT i.indisready))
    THEN 'an index of it is invalid'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisclustered)
    THEN 'an index of it is marked for CLUSTER'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
               WHERE i.indrelid = c.oid AND ic.reltablespace <> 0
                 AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x')))
    THEN 'an index of it is in a tablespace of its own'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_description d WHERE d.classoid = 'pg_catalog.pg_class'::regclass
               AND d.objoid IN (SELECT i.indexrelid FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid))
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_description d JOIN pg_catalog.pg_constraint k ON k.oid = d.objoid
               WHERE d.classoid = 'pg_catalog.pg_constraint'::regclass
                 AND (k.conrelid = c.oid AND k.contype IN ('p', 'u', 'x') OR k.confrelid = c.oid AND k.contype = 'f'))
    THEN 'an index or key of it has a comment'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_index i ON a.attrelid = i.indexrelid
               WHERE i.indrelid = c.oid AND a.attstattarget >= 0)
    THEN 'an index of it has a statistics target'
  WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class r ON r.oid = k.conrelid
               WHERE k.contype = 'f' AND k.confrelid = c.oid AND (r.relkind <> 'r' OR r.relispartition))
    THEN 'a foreign key on a partitioned table or a partition references it'
  END,
  NOT pg_catalog.pg_has_role(c.relowner, 'USAGE')
   OR NOT pg_catalog.has_schema_privilege(c.relnamespace, 'CREATE')
   OR EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class r ON r.oid = k.conrelid
              WHERE k.contype = 'f' AND k.confrelid = c.oid AND NOT pg_catalog.pg_has_role(r.relowner, 'USAGE')),
  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid)
FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`

// SetAside sets aside the keys and indexes of the given target tables for
// slot's copy (see above), each that is empty and can be, and returns
// those the target role does not own (left as they are: the caller says
// so). A table with something deferred already (set aside by an earlier
// start whose copy did not complete, or made bare) is skipped.
func SetAside(ctx context.Context, conn *pgx.Conn, slot string, tables []schema.TableName, log *slog.Logger) (notOwned []schema.TableName, err error) {
	for _, t := range tables {
		var listed bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM repstream.deferred_ddl WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND NOT after_all)`,
			slot, t.Schema, t.Name).Scan(&listed); err != nil {
			return nil, fmt.Errorf("set aside the keys and indexes of %s: %w", t, err)
		}
		if listed {
			continue
		}
		privilege, err := setAside(ctx, conn, slot, t, log)
		if err != nil {
			return nil, err
		}
		if privilege {
			notOwned = append(notOwned, t)
		}
	}
	return notOwned, nil
}

// setAside sets aside table t's keys and indexes, in one transaction.
func setAside(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, log *slog.Logger) (privilege bool, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("set aside the keys and indexes of %s: %w", t, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	leave := func(why string) (bool, error) {
		log.Info("copying into the target table with its keys and indexes in place", "table", t.String(), "reason", why)
		return false, nil
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog; SET LOCAL lock_timeout = '"+setAsideLockTimeout+"'"); err != nil {
		return false, fmt.Errorf("set aside the keys and indexes of %s: %w", t, err)
	}
	var reason *string
	var hasIndexes bool
	if err := tx.QueryRow(ctx, setAsideReason, t.Quoted()).Scan(&reason, &privilege, &hasIndexes); err != nil {
		return false, fmt.Errorf("set aside the keys and indexes of %s: %w", t, err)
	}
	if !hasIndexes {
		return false, nil // nothing to set aside
	}
	if reason != nil {
		if privilege {
			return true, nil // said once, by the caller
		}
		return leave(*reason)
	}
	// Under the lock: still empty, and stays so until the copy.
	if why, err := lockEmpty(ctx, tx, t); why != "" || err != nil {
		if err != nil {
			return false, err
		}
		return leave(why)
	}
	indexes, fks, err := readSetAside(ctx, tx, t)
	if err != nil {
		return false, err
	}
	// The statements are read before anything is dropped (the definitions
	// come from the catalog), and recorded in the transaction that drops.
	r := remakeStatements(t, indexes, fks)
	if refused, err := dropSetAside(ctx, tx, t, indexes, fks); refused != "" || err != nil {
		if err != nil {
			return false, err
		}
		return leave(refused)
	}
	if err := r.record(ctx, tx, slot, t); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("set aside the keys and indexes of %s: %w", t, err)
	}
	log.Info("keys and indexes of the target table set aside for the copy: made again as they were once its rows are in",
		"table", t.String(), "indexes", len(indexes), "foreign_keys_referencing", len(fks))
	return false, nil
}

// lockEmpty locks t (ACCESS EXCLUSIVE, for the rest of the transaction)
// and checks it is empty; why says otherwise (or that the lock was not
// had within setAsideLockTimeout) when t is to be left as it is.
func lockEmpty(ctx context.Context, tx pgx.Tx, t schema.TableName) (why string, err error) {
	if _, err := tx.Exec(ctx, "LOCK TABLE ONLY "+t.Quoted()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		if pgerr.Is(err, pgerr.LockNotAvailable) {
			return "its lock was not had within " + setAsideLockTimeout + " (another session uses it)", nil
		}
		return "", fmt.Errorf("set aside the keys and indexes of %s: lock it: %w", t, err)
	}
	var rows bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM ONLY "+t.Quoted()+")").Scan(&rows); err != nil {
		return "", fmt.Errorf("set aside the keys and indexes of %s: %w", t, err)
	}
	if rows {
		return "it has rows", nil
	}
	return "", nil
}

// setAsideDef is a key, an index or a foreign key set aside: the
// statements that drop it and make it again, and its name. Primary: the
// primary key; Ident: the replica identity index (indexes only).
type setAsideDef struct {
	Drop, Make, Name string
	Primary, Ident   bool
}

// readSetAside reads the definitions of t's keys and indexes
// (setAsideIndexes) and of the foreign keys referencing t (setAsideFKs).
func readSetAside(ctx context.Context, tx pgx.Tx, t schema.TableName) (indexes, fks []setAsideDef, err error) {
	qrows, err := tx.Query(ctx, setAsideIndexes, t.Quoted(), t.Quoted())
	if err != nil {
		return nil, nil, fmt.Errorf("read the indexes of %s: %w", t, err)
	}
	indexes, err = pgx.CollectRows(qrows, pgx.RowToStructByPos[setAsideDef])
	if err != nil {
		return nil, nil, fmt.Errorf("read the indexes of %s: %w", t, err)
	}
	qrows, err = tx.Query(ctx, setAsideFKs, t.Quoted())
	if err != nil {
		return nil, nil, fmt.Errorf("read the foreign keys referencing %s: %w", t, err)
	}
	fks, err = pgx.CollectRows(qrows, func(r pgx.CollectableRow) (setAsideDef, error) {
		var d setAsideDef
		err := r.Scan(&d.Drop, &d.Make, &d.Name)
		return d, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the foreign keys referencing %s: %w", t, err)
	}
	return indexes, fks, nil
}

// remakes are the rows of repstream.deferred_ddl that make t's keys and
// indexes again, in parallel slices: the statement, the index name (nil
// for a key or the replica identity: one that fails stops the build) and
// whether it waits until every table is copied.
type remakes struct {
	stmts    []string
	names    []*string
	afterAll []bool
}

// remakeStatements returns the statements that make them again, in order:
// keys (no name: one that fails stops the build), other indexes (named:
// one that fails is recorded as not built), the replica identity; then,
// once every table is copied, the foreign keys.
func remakeStatements(t schema.TableName, indexes, fks []setAsideDef) remakes {
	var r remakes
	var ident string
	for _, d := range indexes {
		sql := d.Make
		if strings.HasPrefix(sql, "CREATE ") {
			sql = strings.Replace(sql, " INDEX ", " INDEX IF NOT EXISTS ", 1)
		}
		r.stmts, r.afterAll = append(r.stmts, sql), append(r.afterAll, false)
		if d.Primary || d.Ident {
			r.names = append(r.names, nil)
		} else {
			r.names = append(r.names, &d.Name)
		}
		if d.Ident {
			ident = d.Name
		}
	}
	if ident != "" {
		r.stmts = append(r.stmts, "ALTER TABLE "+t.Quoted()+" REPLICA IDENTITY USING INDEX "+change.QuoteIdent(ident))
		r.names, r.afterAll = append(r.names, nil), append(r.afterAll, false)
	}
	for _, d := range fks {
		r.stmts, r.names, r.afterAll = append(r.stmts, d.Make), append(r.names, &d.Name), append(r.afterAll, true)
	}
	return r
}

// dropSetAside drops the foreign keys referencing t, then t's keys and
// indexes; refused says which drop the target refused when t is to be left
// as it is (the transaction then rolled back).
func dropSetAside(ctx context.Context, tx pgx.Tx, t schema.TableName, indexes, fks []setAsideDef) (refused string, err error) {
	for _, d := range append(fks, indexes...) {
		if _, err := tx.Exec(ctx, d.Drop); err != nil {
			if !indexDefinitionError(err) && !pgerr.Is(err, pgerr.LockNotAvailable) {
				return "", fmt.Errorf("set aside the keys and indexes of %s (%s): %w", t, d.Drop, err)
			}
			// A view that depends on the primary key, a lock on a table
			// whose foreign key references it: all of it is left.
			return d.Drop + " refused: " + pgerr.Message(err), nil
		}
	}
	return "", nil
}

// record appends r to t's rows of repstream.deferred_ddl (restore), after
// any it has.
func (r remakes) record(ctx context.Context, tx pgx.Tx, slot string, t schema.TableName) error {
	if _, err := tx.Exec(ctx, `INSERT INTO repstream.deferred_ddl (slot, schema_name, table_name, seq, sql, index_name, restore, after_all)
SELECT $1, $2, $3, coalesce((SELECT max(seq) + 1 FROM repstream.deferred_ddl WHERE slot = $1 AND schema_name = $2 AND table_name = $3), 0) + n - 1,
       s, x, true, a
FROM unnest($4::text[], $5::text[], $6::bool[]) WITH ORDINALITY AS u(s, x, a, n)`, slot, t.Schema, t.Name, r.stmts, r.names, r.afterAll); err != nil {
		return fmt.Errorf("record the keys and indexes of %s set aside for the copy: %w", t, err)
	}
	return nil
}

// RestoreSetAside makes again the keys and indexes of the tables of slot
// set aside for a copy that did not complete (SetAside), as they were: a
// run whose copy failed or was stopped, and DropState. Such a table holds
// part of its rows, which the next run's copy would delete: it is emptied
// first, in the transaction that restores it, so that nothing the rows
// break can keep a key or an index from being made. The foreign keys that
// reference set-aside tables come after (lenient: one that rows of a
// table whose copy had completed break is made NOT VALID, logged; else it
// stays listed, for the run that completes the copy).
func RestoreSetAside(ctx context.Context, conn *pgx.Conn, slot string, lenient bool, log *slog.Logger) error {
	tables, err := SetAsideTables(ctx, conn, slot)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tables {
		if err := buildAfterCopy(ctx, conn, slot, t, buildOpts{own: true, empty: true, lenient: lenient}, log); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range tables {
		if err := buildAfterCopy(ctx, conn, slot, t, buildOpts{fks: true, lenient: lenient}, log); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
