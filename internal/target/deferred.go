package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/pgerr"

	"github.com/repstream/repstream/internal/schema"
)

// afterCopySchema creates repstream.deferred_ddl: what is still to be built
// on a table --create-tables made, once its rows are copied — its primary
// key, its replica identity, its other indexes, in that order. The copy
// then writes a bare heap: maintaining a primary key row by row cost more
// than building it after (3M rows of `repstream bench initial-copy`'s
// ic_orders, one COPY: 3.7–3.9 s and 408 MB of WAL with the key, 1.9–2.2 s
// and 219 MB without it, plus 1.1 s and 59 MB to build it). Kept on the
// target, not in the run, so that a copy interrupted before its end still
// gets them from the run that completes it.
//
// Only a start makes tables bare (install.CreateTables with a slot):
// nothing streams before its copies are done and built. `tables add` makes
// them whole, as a running engine applies schema changes to a pending table.
//
// Invariants: the rows of a table are written in the target transaction
// that creates it and deleted in the one that builds them (BuildAfterCopy),
// so a table listed has none of them. A table is marked ready only after
// its build has committed (snapshot.Options.AfterCopy), and streaming starts
// only once every listed table of the slot is built (BuildAllAfterCopy); so
// no change is applied to a bare table. Dropping the slot's state
// (DropState) builds what is listed first, so that no bare table outlives
// its record.
//
// The table keeps the name it got when it held only what a bare table's
// copy deferred ("deferred DDL"): renaming it would need a migration of the
// state of every existing target. The code says what it holds: keys and
// indexes built after a table's copy (DeferBuild, BuildAfterCopy,
// BuildAllAfterCopy) and, since the initial copy into the user's tables,
// a user table's keys and indexes set aside for the copy (SetAside).
const afterCopySchema = `
CREATE TABLE IF NOT EXISTS repstream.deferred_ddl (
	slot text NOT NULL,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	seq int NOT NULL,
	sql text NOT NULL,
	PRIMARY KEY (slot, schema_name, table_name, seq)
);
ALTER TABLE repstream.deferred_ddl ADD COLUMN IF NOT EXISTS index_name text;
ALTER TABLE repstream.deferred_ddl ADD COLUMN IF NOT EXISTS restore boolean NOT NULL DEFAULT false;
ALTER TABLE repstream.deferred_ddl ADD COLUMN IF NOT EXISTS after_all boolean NOT NULL DEFAULT false;
CREATE TABLE IF NOT EXISTS repstream.unbuilt_indexes (
	slot text NOT NULL,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	index_name text NOT NULL,
	sql text NOT NULL,
	error text NOT NULL,
	failed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (slot, schema_name, table_name, index_name)
);`

// A secondary index of the source (deferred_ddl.index_name set; NULL for
// the keys) that the target cannot build — an expression calling a
// function only the source has, an operator class or collation the target
// lacks — is not needed to replicate: the build goes on without it,
// logging a warning that names it and the error, and records it in
// repstream.unbuilt_indexes, which `tables list`, `repstream check` and
// the repstream_indexes_not_built gauge report until the index exists on
// the target (made by hand from the recorded statement) or the slot is
// dropped. A key (primary key, replica identity index) that cannot be
// built stops the build: updates and deletes find their rows by it.

// DeferBuild records what to build on table t of slot once its rows are
// copied, in the caller's transaction (the one that creates t): keys, the
// statements that make its primary key and replica identity, in order,
// then its secondary indexes.
func DeferBuild(ctx context.Context, tx pgx.Tx, slot string, t schema.TableName, keys []string, indexes []schema.Index) error {
	// A record left by a table of that name that is gone (dropped by hand,
	// or by a failed start's undo) is replaced.
	if err := ForgetBuild(ctx, tx, slot, t); err != nil {
		return fmt.Errorf("record what to build on %s after its copy: %w", t, err)
	}
	stmts, names := slices.Clone(keys), make([]*string, len(keys), len(keys)+len(indexes))
	for _, ix := range indexes {
		stmts = append(stmts, ix.SQL)
		names = append(names, &ix.Name)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO repstream.deferred_ddl (slot, schema_name, table_name, seq, sql, index_name)
SELECT $1, $2, $3, n - 1, s, x FROM unnest($4::text[], $5::text[]) WITH ORDINALITY AS u(s, x, n)`, slot, t.Schema, t.Name, stmts, names); err != nil {
		return fmt.Errorf("record what to build on %s after its copy: %w", t, err)
	}
	return nil
}

// TablesToBuild returns the tables of slot with something still to build,
// by name: made bare by a start, their copy not yet complete (or its build not
// yet run), and the user's tables set aside for the copy (SetAside) whose
// keys and indexes are not yet rebuilt.
func TablesToBuild(ctx context.Context, conn *pgx.Conn, slot string) ([]schema.TableName, error) {
	return tablesToBuild(ctx, conn, `SELECT DISTINCT schema_name, table_name FROM repstream.deferred_ddl WHERE slot = $1 ORDER BY 1, 2`, slot)
}

// SetAsideTables returns the user's tables of slot whose keys and indexes
// were set aside for the copy (SetAside) and are not rebuilt yet: not
// tables a start made bare.
func SetAsideTables(ctx context.Context, conn *pgx.Conn, slot string) ([]schema.TableName, error) {
	return tablesToBuild(ctx, conn, `SELECT DISTINCT schema_name, table_name FROM repstream.deferred_ddl WHERE slot = $1 AND restore ORDER BY 1, 2`, slot)
}

func tablesToBuild(ctx context.Context, conn *pgx.Conn, query, slot string) ([]schema.TableName, error) {
	rows, err := conn.Query(ctx, query, slot)
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

// ForgetBuild deletes what is still to build on table t of slot, in tx.
func ForgetBuild(ctx context.Context, tx pgx.Tx, slot string, t schema.TableName) error {
	_, err := tx.Exec(ctx, `DELETE FROM repstream.deferred_ddl WHERE slot = $1 AND schema_name = $2 AND table_name = $3`, slot, t.Schema, t.Name)
	return err
}

// BuildAfterCopy runs what is deferred on table t of slot, and forgets it,
// in one transaction on conn. A key that cannot be built fails it all; a
// secondary index that cannot be built is left out (each is tried under a
// savepoint), logged and recorded (RecordUnbuilt). A table that no longer
// exists on the target is forgotten. Nothing deferred: nothing done.
//
// The foreign keys of other tables that reference a table set aside for
// the copy (SetAside: after_all) are left for BuildAllAfterCopy, once every
// table is copied: made now, they would wait on the copies of the tables
// they are on.
//
// With a superuser session, an index's code is looked at before it is
// built over the copied rows (probeIndex), unless trust
// (--trust-table-owners).
func BuildAfterCopy(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, trust bool, log *slog.Logger) error {
	return buildAfterCopy(ctx, conn, slot, t, buildOpts{own: true, lenient: true, trust: trust}, log)
}

// buildOpts says what buildAfterCopy builds, and how.
type buildOpts struct {
	// own: only the table's own keys and indexes (the foreign keys
	// referencing it stay listed); fks: only those foreign keys; neither:
	// both.
	own, fks bool
	// empty: the table is emptied first, in the same transaction (a table
	// set aside whose copy did not complete, restored outside a copy:
	// RestoreSetAside).
	empty bool
	// lenient: a foreign key the rows break is made NOT VALID (logged);
	// else it stays listed, to be made by the run that completes the copy.
	lenient bool
	// trust: --trust-table-owners (no probeIndex).
	trust bool
}

// buildAfterCopy is BuildAfterCopy, as o says.
func buildAfterCopy(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, o buildOpts, log *slog.Logger) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("build the keys and indexes of %s: %w", t, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	b := &afterCopyBuild{tx: tx, slot: slot, t: t, o: o, log: log, kept: []string{}}
	if err := b.read(ctx); err != nil {
		return err
	}
	if len(b.stmts) == 0 {
		return nil
	}
	exists, err := b.lookUp(ctx)
	if err != nil {
		return err
	}
	if exists {
		for i := range b.stmts {
			if err := b.build(ctx, i); err != nil {
				return err
			}
		}
	} else {
		log.Warn("a table whose keys and indexes were to be built after its copy is gone from the target: nothing built", "table", t.String())
	}
	// What was read is forgotten, built or not (an index not built is
	// recorded in unbuilt_indexes), but for the foreign keys kept.
	if _, err := tx.Exec(ctx, `DELETE FROM repstream.deferred_ddl WHERE slot = $1 AND schema_name = $2 AND table_name = $3
AND (NOT after_all OR $4) AND (after_all OR NOT $5) AND (index_name IS NULL OR NOT index_name = ANY($6))`,
		slot, t.Schema, t.Name, !o.own, o.fks, b.kept); err != nil {
		return fmt.Errorf("record the keys and indexes of %s as built: %w", t, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("build the keys and indexes of %s: %w", t, err)
	}
	if exists {
		b.logBuilt() // once committed
	}
	return nil
}

// afterCopyStmt is a row of repstream.deferred_ddl: a statement, the name
// of the index or constraint it makes (nil for a key: one that fails stops
// the build) and whether it waited until every table was copied.
type afterCopyStmt struct {
	SQL      string
	Index    *string
	AfterAll bool
}

// afterCopyBuild is buildAfterCopy's transaction tx on table t: the
// statements read, and what became of each, by index in stmts.
type afterCopyBuild struct {
	tx   pgx.Tx
	slot string
	t    schema.TableName
	o    buildOpts
	log  *slog.Logger

	stmts    []afterCopyStmt
	took     []time.Duration
	failed   []error  // statement errors of indexes not built (recorded, logged after the commit)
	notValid []bool   // a foreign key made NOT VALID, or kept listed
	kept     []string // foreign keys left listed (!o.lenient); not nil: ANY(NULL) matches nothing
	super    *bool    // the session's role is a superuser (probeIndex; nil: not looked up yet)
}

// read reads the statements o selects (all: not only the table's own;
// onlyFKs: only the foreign keys), keys and indexes first, in order.
func (b *afterCopyBuild) read(ctx context.Context) error {
	all := !b.o.own
	onlyFKs := b.o.fks
	rows, err := b.tx.Query(ctx, `SELECT sql, index_name, after_all FROM repstream.deferred_ddl
WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND (NOT after_all OR $4) AND (after_all OR NOT $5) ORDER BY after_all, seq`,
		b.slot, b.t.Schema, b.t.Name, all, onlyFKs)
	if err != nil {
		return fmt.Errorf("read what to build on %s: %w", b.t, err)
	}
	b.stmts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[afterCopyStmt])
	if err != nil {
		return fmt.Errorf("read what to build on %s: %w", b.t, err)
	}
	b.took = make([]time.Duration, len(b.stmts))
	b.failed = make([]error, len(b.stmts))
	b.notValid = make([]bool, len(b.stmts))
	return nil
}

// lookUp says whether the table exists on the target, and empties it
// first when o says so.
func (b *afterCopyBuild) lookUp(ctx context.Context) (exists bool, err error) {
	t := b.t
	if err := b.tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.Quoted()).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up %s on the target: %w", t, err)
	}
	if exists && b.o.empty {
		if _, err := b.tx.Exec(ctx, "TRUNCATE ONLY "+t.Quoted()); err != nil {
			return false, fmt.Errorf("empty %s (its copy did not complete) before restoring its keys and indexes: %w", t, err)
		}
		b.log.Info("the copy of a table set aside did not complete: emptied (the next run copies it again) and its keys and indexes restored", "table", t.String())
	}
	return exists, nil
}

// build runs statement i: a key must be built; an index or a foreign key
// is tried under a savepoint (buildIndex).
func (b *afterCopyBuild) build(ctx context.Context, i int) error {
	st := b.stmts[i]
	began := time.Now()
	b.log.Info("building on the target after the copy", "table", b.t.String(), "sql", st.SQL) // an index of a large table takes a while
	if st.Index == nil {
		if _, err := b.tx.Exec(ctx, st.SQL); err != nil {
			return fmt.Errorf("build the key of %s after its copy (%s): %w; replication needs it to find the rows of updates and deletes: "+
				"fix what the statement needs on the target and run again", b.t, st.SQL, err)
		}
		b.took[i] = time.Since(began)
		return nil
	}
	if err := b.buildIndex(ctx, i); err != nil {
		return err
	}
	b.took[i] = time.Since(began)
	return nil
}

// buildIndex tries index (or foreign key) i. A foreign key the rows break
// is kept listed (!o.lenient) or made again NOT VALID; an index not built
// is recorded as unbuilt, one built is no longer.
func (b *afterCopyBuild) buildIndex(ctx context.Context, i int) error {
	st, t := b.stmts[i], b.t
	var err error
	if b.failed[i], err = b.probeIndex(ctx, i); err != nil {
		return fmt.Errorf("look at index %s of %s before it is built (%s): %w", *st.Index, t, st.SQL, err)
	}
	if b.failed[i] == nil {
		if b.failed[i], err = tryIndex(ctx, b.tx, st.SQL); err != nil {
			return fmt.Errorf("build index %s of %s after its copy (%s): %w", *st.Index, t, st.SQL, err)
		}
	}
	brokenFK := b.failed[i] != nil && st.AfterAll && pgerr.Is(b.failed[i], "23503")
	if brokenFK && !b.o.lenient {
		b.log.Warn("a foreign key referencing a table set aside for the copy does not hold for the rows on the target yet: left for the run that completes the copy",
			"table", t.String(), "constraint", *st.Index, "err", b.failed[i])
		b.kept = append(b.kept, *st.Index)
		b.failed[i] = nil
		b.notValid[i] = true
		return nil
	}
	if brokenFK && !strings.HasSuffix(st.SQL, " NOT VALID") {
		if err := b.makeNotValid(ctx, i); err != nil {
			return err
		}
	}
	if b.failed[i] != nil {
		err = RecordUnbuilt(ctx, b.tx, b.slot, t, schema.Index{Name: *st.Index, SQL: st.SQL}, b.failed[i])
	} else {
		_, err = b.tx.Exec(ctx, `DELETE FROM repstream.unbuilt_indexes WHERE slot = $1 AND schema_name = $2 AND table_name = $3 AND index_name = $4`,
			b.slot, t.Schema, t.Name, *st.Index)
	}
	if err != nil {
		return fmt.Errorf("record index %s of %s: %w", *st.Index, t, err)
	}
	return nil
}

// probeIndex looks, with a superuser session and without o.trust, at the
// code index i of the table itself would run (its expressions, predicate,
// operator classes, exclusion operators): building it over the copied
// rows runs that code for each of them, as the table's owner, the target
// role. It is made, in a savepoint rolled back after, on the table emptied
// there (TRUNCATE, undone with it), where nothing is evaluated, and the
// table's code looked at (CheckOwners). Code a role that is not a
// superuser controls (a function of a name it made first on the target)
// is returned as the index's failure: left unbuilt, recorded and logged,
// as an index the target cannot build. So is a table that cannot be
// emptied so (another table's foreign key references it). A foreign key
// of another table (after_all) runs no such code: not probed.
func (b *afterCopyBuild) probeIndex(ctx context.Context, i int) (failed, err error) {
	st := b.stmts[i]
	if b.o.trust || st.AfterAll {
		return nil, nil
	}
	if b.super == nil {
		var super bool
		if err := b.tx.QueryRow(ctx, "SELECT "+superuserSQL).Scan(&super); err != nil {
			return nil, err
		}
		b.super = &super
	}
	if !*b.super {
		return nil, nil
	}
	only, err := Only(ctx, b.tx.Conn(), b.t)
	if err != nil {
		return nil, err
	}
	if _, err := b.tx.Exec(ctx, "SAVEPOINT repstream_probe"); err != nil {
		return nil, err
	}
	failed, err = func() (error, error) {
		if _, err := b.tx.Exec(ctx, "TRUNCATE "+only+b.t.Quoted()); err != nil {
			if !indexDefinitionError(err) {
				return nil, err
			}
			return fmt.Errorf("its code could not be looked at before it ran over the copied rows as the superuser target role: emptying the table for the look failed: %w", err), nil
		}
		buildErr, err := tryIndex(ctx, b.tx, st.SQL)
		if err != nil || buildErr != nil {
			return nil, err // one the target cannot build: tryIndex says so, below
		}
		return CheckOwners(ctx, b.tx.Conn(), []schema.TableName{b.t}, false), nil
	}()
	if _, rerr := b.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT repstream_probe"); rerr != nil && err == nil {
		err = rerr
	}
	if _, rerr := b.tx.Exec(ctx, "RELEASE SAVEPOINT repstream_probe"); rerr != nil && err == nil {
		err = rerr
	}
	return failed, err
}

// makeNotValid makes foreign key i, which the rows copied break (a row
// filter, a table of the target not copied), again NOT VALID: it still
// checks what is written from now on. If that fails too, failed[i] stays.
func (b *afterCopyBuild) makeNotValid(ctx context.Context, i int) error {
	st := b.stmts[i]
	again, err := tryIndex(ctx, b.tx, st.SQL+" NOT VALID")
	if err != nil {
		return fmt.Errorf("make foreign key %s after the copy of %s (%s NOT VALID): %w", *st.Index, b.t, st.SQL, err)
	}
	if again == nil {
		b.notValid[i] = true
		b.log.Warn("a foreign key referencing a table set aside for the copy does not hold for the rows on the target: made again NOT VALID; "+
			"validate it once the rows are right (ALTER TABLE ... VALIDATE CONSTRAINT)", "table", b.t.String(), "constraint", *st.Index, "err", b.failed[i], "sql", st.SQL)
		b.failed[i] = nil
	}
	return nil
}

// logBuilt says, once committed, what was built and what was not.
func (b *afterCopyBuild) logBuilt() {
	for i, st := range b.stmts {
		if b.failed[i] != nil {
			warnUnbuilt(b.log, b.t, *st.Index, st.SQL, b.failed[i])
			continue
		}
		if b.notValid[i] {
			continue
		}
		b.log.Info("built on the target after the copy", "table", b.t.String(), "sql", st.SQL, "elapsed", b.took[i].Round(time.Millisecond))
	}
}

// tryIndex runs the statement that builds a secondary index under a
// savepoint of tx. An error of the statement itself (the target lacks
// what the definition needs, or its data or collation break a unique
// index) is returned as failed, the savepoint rolled back, tx still
// usable; any other error (the connection, a cancel, a lock or resource
// limit: nothing said about the index) as err.
func tryIndex(ctx context.Context, tx pgx.Tx, sql string) (failed, err error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT repstream_index"); err != nil {
		return nil, err
	}
	_, xerr := tx.Exec(ctx, sql)
	if xerr == nil {
		_, err := tx.Exec(ctx, "RELEASE SAVEPOINT repstream_index")
		return nil, err
	}
	if !indexDefinitionError(xerr) {
		return nil, xerr
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT repstream_index"); err != nil {
		return nil, err
	}
	return xerr, nil
}

// indexDefinitionError reports whether a failed index build says that the
// index cannot be built on the target as it is, rather than that the
// session or the server is in trouble: a server error outside the classes
// of connections (08), transaction rollbacks (40), resources (53: disk
// full, out of memory), operator intervention (57: a cancel, a shutdown),
// system (58) and internal errors (XX), or of a lock timeout (55P03).
func indexDefinitionError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return false
	}
	switch pe.Code[:2] {
	case "08", "40", "53", "57", "58", "XX":
		return false
	}
	return pe.Code != "55P03"
}

func warnUnbuilt(log *slog.Logger, t schema.TableName, index, sql string, err error) {
	log.Warn("an index of the source cannot be built on the target: the table is replicated without it; "+
		"make what it needs on the target and create it (`tables list` and `repstream check` list it until it exists)",
		"table", t.String(), "index", index, "err", err, "sql", sql)
}

// RecordUnbuilt records, in q (a transaction or a connection), that index
// of table t could not be built on the target for slot, with why.
func RecordUnbuilt(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, slot string, t schema.TableName, index schema.Index, why error) error {
	_, err := q.Exec(ctx, `INSERT INTO repstream.unbuilt_indexes (slot, schema_name, table_name, index_name, sql, error)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (slot, schema_name, table_name, index_name) DO UPDATE SET sql = excluded.sql, error = excluded.error, failed_at = now()`,
		slot, t.Schema, t.Name, index.Name, index.SQL, why.Error())
	return err
}

// BuildIndexes builds the secondary indexes of table t on conn, outside
// any deferred build (`tables add --create-tables`): one that cannot be
// built is logged, recorded for slot (RecordUnbuilt) and left out.
func BuildIndexes(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName, indexes []schema.Index, log *slog.Logger) error {
	for _, ix := range indexes {
		_, err := conn.Exec(ctx, ix.SQL)
		if err == nil {
			continue
		}
		if !indexDefinitionError(err) {
			return fmt.Errorf("build index %s of %s on the target (%s): %w", ix.Name, t, ix.SQL, err)
		}
		if rerr := RecordUnbuilt(ctx, conn, slot, t, ix, err); rerr != nil {
			return fmt.Errorf("record index %s of %s: %w", ix.Name, t, rerr)
		}
		warnUnbuilt(log, t, ix.Name, ix.SQL, err)
	}
	return nil
}

// UnbuiltIndex is an index of the source that could not be built on the
// target (RecordUnbuilt) and does not exist there now.
type UnbuiltIndex struct {
	Table    schema.TableName `json:"-"`
	Index    string           `json:"index"`
	SQL      string           `json:"sql"`
	Error    string           `json:"error"`
	FailedAt time.Time        `json:"failed_at"`
}

// UnbuiltIndexes lists the indexes recorded for slot as not built whose
// table is still on the target and that are still missing there (one made
// by hand since is no longer listed). No state on the target: none.
func UnbuiltIndexes(ctx context.Context, conn *pgx.Conn, slot string) ([]UnbuiltIndex, error) {
	rows, err := conn.Query(ctx, `
SELECT u.schema_name, u.table_name, u.index_name, u.sql, u.error, u.failed_at
FROM repstream.unbuilt_indexes u
WHERE u.slot = $1
  AND pg_catalog.to_regclass(pg_catalog.quote_ident(u.schema_name) || '.' || pg_catalog.quote_ident(u.table_name)) IS NOT NULL
  AND pg_catalog.to_regclass(pg_catalog.quote_ident(u.schema_name) || '.' || pg_catalog.quote_ident(u.index_name)) IS NULL
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conname = u.index_name AND k.contype = 'f'
    AND k.confrelid = pg_catalog.to_regclass(pg_catalog.quote_ident(u.schema_name) || '.' || pg_catalog.quote_ident(u.table_name)))
ORDER BY 1, 2, 3`, slot)
	if err != nil {
		if pgerr.Is(err, pgerr.UndefinedTable, "3F000") {
			return nil, nil
		}
		return nil, fmt.Errorf("read the indexes not built on the target: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UnbuiltIndex, error) {
		var u UnbuiltIndex
		err := r.Scan(&u.Table.Schema, &u.Table.Name, &u.Index, &u.SQL, &u.Error, &u.FailedAt)
		return u, err
	})
	if err != nil {
		if pgerr.Is(err, pgerr.UndefinedTable, "3F000") {
			return nil, nil
		}
		return nil, fmt.Errorf("read the indexes not built on the target: %w", err)
	}
	return out, nil
}

// BuildAllAfterCopy builds what is deferred on every table of slot
// (BuildAfterCopy), the foreign keys left for the end included: before
// streaming, for the tables no copy built (a start with --snapshot=false
// copies none) and the foreign keys referencing tables set aside.
func BuildAllAfterCopy(ctx context.Context, conn *pgx.Conn, slot string, trust bool, log *slog.Logger) error {
	tables, err := TablesToBuild(ctx, conn, slot)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if err := buildAfterCopy(ctx, conn, slot, t, buildOpts{lenient: true, trust: trust}, log); err != nil {
			return err
		}
	}
	return nil
}
