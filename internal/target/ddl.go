package target

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
)

// Schema changes, applied in the target transaction of the source
// transaction that made them, at their position among its rows:
//
//   - an OpDDL change (the source's event trigger) is diffed against the
//     target table (schema.AlterSQL) — or creates / drops the table;
//   - with WriterOptions.RelationDDL (no event trigger), the first change
//     of a new relation version diffs it against its previous version
//     (change.Relation.Previous) and the target table
//     (schema.RelationAlterSQL), before the change is planned; an added
//     column gets, on the existing rows, what the source's catalog says
//     they got (WriterOptions.AddedColumn, relationAdd).
//
// Everything buffered is sent first, so the DDL sits exactly between the
// rows before and after it. The coordinator applies such transactions
// alone (a barrier), so no other worker holds the table meanwhile.
//
// Plans are cached per *change.Relation, and pgoutput describes a table
// anew (a new *change.Relation) after every change to its definition: the
// changes after a DDL never use a plan made before it, on any worker. The
// writer that applies the DDL also forgets its plans and COPY buffer of the
// table (forget), so nothing of the old definition survives there either.

// ddl applies one schema-change message and records, in its target
// transaction, the types it leaves on the target (recordTypesAfter).
func (w *Writer) ddl(ctx context.Context, c *change.Change) error {
	if err := w.applyDDL(ctx, c); err != nil {
		return err
	}
	if err := w.recordTypesAfter(ctx, c.DDL); err != nil {
		return fmt.Errorf("apply schema change %q of %s at %s: %w", c.DDL.Tag, schema.NameFromDDL(&c.DDL.Table), c.LSN, err)
	}
	return nil
}

// applyDDL applies one schema-change message.
func (w *Writer) applyDDL(ctx context.Context, c *change.Change) error {
	msg := c.DDL // parsed once, by capture (change.NewDDL)
	if msg == nil {
		return fmt.Errorf("apply schema change at %s: the message was not parsed", c.LSN)
	}
	if err := msg.Check(); err != nil {
		return fmt.Errorf("apply schema change at %s: %w", c.LSN, err)
	}
	tn := schema.NameFromDDL(&msg.Table)
	fail := func(err error) error {
		return fmt.Errorf("apply schema change %q of %s at %s: %w", msg.Tag, tn, c.LSN, err)
	}
	if msg.Error != "" {
		return fail(fmt.Errorf("the source's event trigger could not describe the table (%s): make the change on the target yourself, then restart", msg.Error))
	}
	if msg.Unlogged {
		return fail(errors.New("the source set the table UNLOGGED: its changes are no longer written to the WAL, so they cannot be replicated " +
			"and the target would fall behind without a word; set it LOGGED again on the source (repstream then copies it anew), " +
			"or go on without it: `repstream errors skip --lsn` with this transaction's commit LSN (the target keeps the table as it is now)"))
	}
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	if err := w.ensureBegun(ctx); err != nil {
		return fail(err)
	}
	// Every schema change runs DDL: the event triggers that would fire
	// for it are looked at again, each time (a superuser may have made
	// one, or given its function away, since the last).
	if err := CheckEventTriggers(ctx, w.conn, w.opts.TrustTableOwners); err != nil {
		return fail(err)
	}
	// A type changed by hand on the target since repstream recorded it
	// would be taken into the record by this change: stopped here.
	if err := w.checkTypeRecords(ctx, tn); err != nil {
		return fail(err)
	}
	if pc := msg.Partition; pc != nil {
		if err := pc.Check(); err != nil {
			return fail(err)
		}
		return w.partition(ctx, c, msg, pc)
	}
	if msg.Enum != nil {
		if err := w.enumChanged(ctx, msg.Enum, tn, c.LSN); err != nil {
			return fail(err)
		}
		return nil
	}
	if msg.Composite != nil {
		if err := w.compositeChanged(ctx, msg.Composite, tn, c.LSN); err != nil {
			return fail(err)
		}
		return nil
	}
	msg = w.sentColumns(msg)
	defer w.forget(tn)
	madeAhead := false
	if msg.Creates() {
		madeAhead = w.ahead.created(tn) // made from its rows' description (ctas.go): reconciled below
	}
	if msg.Dropped {
		if err := w.exec(ctx, "DROP TABLE IF EXISTS "+tn.Quoted()); err != nil {
			if pgerr.Is(err, pgerr.DependentObjectsExist) {
				// The source's CASCADE, if any, dropped only what the
				// source had; what depends on it here is the target's own.
				err = fmt.Errorf("%w (%s): objects only the target has depend on the table, and repstream never drops with CASCADE: "+
					"drop them or their dependency (a foreign key, a view) on the target, then restart", err, pgerr.Detail(err))
			}
			return fail(err)
		}
		w.log.Info("dropped table on the target, as on the source", "table", tn, "lsn", c.LSN)
		return nil
	}
	if err := w.ensureTypes(ctx, msg, c.LSN); err != nil {
		return fail(err)
	}
	if err := w.checkColumnTypes(ctx, msg); err != nil {
		return fail(err)
	}
	if err := w.checkGenerated(ctx, msg); err != nil {
		return fail(err)
	}
	cur, err := schema.LoadTable(ctx, w.conn, tn.Schema, tn.Name)
	if errors.Is(err, schema.ErrTableNotFound) && msg.Old != nil && schema.NameFromDDL(msg.Old) != tn {
		// Renamed (or moved to another schema) on the source.
		defer w.forget(schema.NameFromDDL(msg.Old))
		cur, err = schema.LoadTable(ctx, w.conn, msg.Old.Schema, msg.Old.Name)
	}
	switch {
	case errors.Is(err, schema.ErrTableNotFound) && msg.Creates():
		for _, sql := range schema.CreateSQLFromDDL(&msg.Table) {
			if err := w.exec(ctx, sql); err != nil {
				return fail(fmt.Errorf("create the table on the target (%s): %w", sql, err))
			}
		}
		w.log.Info("created table on the target, as on the source", "table", tn, "lsn", c.LSN)
		if err := CheckOwners(ctx, w.conn, []schema.TableName{tn}, w.opts.TrustTableOwners); err != nil {
			return fail(err)
		}
		return w.recordMade(ctx, msg, c.LSN, fail)
	case errors.Is(err, schema.ErrTableNotFound) && w.entersPublication(msg):
		if later, ok, err := w.copiedLater(ctx, msg, c.LSN); err != nil {
			return fail(err)
		} else if ok {
			w.log.Info("a table entered the publication here, and was copied since under its later name, from a snapshot after this change: nothing to do",
				"table", tn, "copied_as", later, "lsn", c.LSN)
			return nil
		}
		return w.takeUp(ctx, msg, c.LSN, fail)
	case errors.Is(err, schema.ErrTableNotFound):
		return fail(fmt.Errorf("%w on the target: create (or rename) it there as on the source, then restart", err))
	case err != nil:
		return fail(err)
	}
	if err := w.checkOwner(ctx, cur.TableName()); err != nil {
		return fail(err)
	}
	if msg.Creates() && !madeAhead && w.publishes(msg) && w.opts.CopyUnrecorded {
		// The target has the table already, but no record of it for this
		// replication: made by a start's --create-tables from the
		// source's catalog as it is now (later than this message, whose
		// rows and schema changes are still to come), or by hand. Either
		// way the stream since its creation does not fit it: copied anew
		// (its rows before the copy's snapshot, and the schema changes,
		// are skipped).
		state, err := tableState(ctx, w.conn, w.opts.Slot, tn)
		if err != nil {
			return fail(err)
		}
		if state == "" {
			return w.takeUp(ctx, msg, c.LSN, fail)
		}
	}
	copyAnew, err := w.alter(ctx, cur, msg, c.LSN)
	if err != nil {
		return fail(err)
	}
	// What the change added (a default, a column of a domain) is code
	// the next row runs: looked at again, in this transaction.
	if err := CheckOwners(ctx, w.conn, []schema.TableName{tn}, w.opts.TrustTableOwners); err != nil {
		return fail(err)
	}
	if copyAnew || msg.RewroteByExpression() && w.publishes(msg) {
		// ALTER COLUMN ... TYPE ... USING: the source's rows hold what its
		// expression made of them, which no message carries (the rewrite
		// is not in the stream either): copied anew. So is a column added
		// with values computed for each row.
		return w.takeUp(ctx, msg, c.LSN, fail)
	}
	if w.entersPublication(msg) && !msg.Creates() {
		// Moved into a published schema, or set LOGGED, with a table of
		// that name on the target: it was not the source's replicated one
		// (the stream never carried its rows). Copied anew. (A table
		// whose previous definition the source's trigger lost, Old nil
		// after a crash of the source, is copied anew too: costly, not
		// wrong.)
		return w.takeUp(ctx, msg, c.LSN, fail)
	}
	if msg.Creates() {
		return w.recordMade(ctx, msg, c.LSN, fail)
	}
	if old := cur.TableName(); old != tn && w.opts.CopyUnrecorded {
		if err := RenameTableRecord(ctx, w.conn, w.opts.Slot, old, tn); err != nil {
			return fail(err)
		}
		delete(w.recorded, old)
	}
	return nil
}

// copiedLater returns the name under which the table msg describes (by
// its source oid) is recorded ready from a copy at or after lsn: the copy
// holds this change and those after it. A start that found the table
// published under its later name (renamed after it entered the
// publication, while no engine ran) copied it under that name; taking it
// up again under this one left a record pending for ever, under a name
// the source no longer has, and an empty table on the target.
func (w *Writer) copiedLater(ctx context.Context, msg *ddlmsg.Message, lsn change.LSN) (schema.TableName, bool, error) {
	var t schema.TableName
	if msg.OID == 0 || !w.opts.CopyUnrecorded {
		return t, false, nil
	}
	err := w.conn.QueryRow(ctx, `SELECT schema_name, table_name FROM repstream.tables
WHERE slot = $1 AND state = 'ready' AND sync_lsn >= $2::pg_lsn AND split_part(source_ident, '/', 1) = $3`,
		w.opts.Slot, lsn.String(), strconv.FormatUint(uint64(msg.OID), 10)).Scan(&t.Schema, &t.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, false, nil
	}
	if err != nil {
		return t, false, fmt.Errorf("look for a later copy of the table: %w", err)
	}
	return t, true, nil
}

// checkTakenNames refuses a column the source added under a name the
// target table has already (schema.TakenNames) when the target's rows do
// not all hold what the source gave its existing rows: AlterSQL would
// make the column the source's and leave those values, the source's rows
// and the target's then differing without a word. Where they all do (the
// column added on the target first, as the source did), or the table is
// empty, the change goes on.
func (w *Writer) checkTakenNames(ctx context.Context, cur *schema.Table, msg *ddlmsg.Message) error {
	for _, t := range schema.TakenNames(cur, msg) {
		cond := t.Differs
		if cond == "" {
			cond = "true"
		}
		var differs bool
		if err := w.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+cur.TableName().Quoted()+" WHERE "+cond+")").Scan(&differs); err != nil {
			return fmt.Errorf("compare column %q of %s with the source's: %w", t.Column, cur.TableName(), err)
		}
		if differs {
			return fmt.Errorf("%w: column %q was added on the source, where its existing rows got %s, but the target table has a column %q already (of its own, or added there first) whose rows hold other values: "+
				"repstream does not overwrite them; rename the target's column (repstream then adds the source's), or give its rows the source's values, then restart",
				schema.ErrTargetMismatch, t.Column, t.Source, t.Column)
		}
	}
	return nil
}

// recordMade records a table the message made on the source as streamed
// from here (SetTableMade), when the writer copies unrecorded tables and
// the run's publication publishes it: its first change then finds it
// recorded, and one that entered the publication without such a message
// does not.
func (w *Writer) recordMade(ctx context.Context, msg *ddlmsg.Message, lsn change.LSN, fail func(error) error) error {
	if !w.opts.CopyUnrecorded || w.opts.Publication != "" && !msg.Publishes(w.opts.Publication) {
		return nil
	}
	if err := SetTableMade(ctx, w.conn, w.opts.Slot, schema.NameFromDDL(&msg.Table), lsn, msg.OID); err != nil {
		return fail(err)
	}
	return nil
}

// alter makes the target table cur what msg describes: moved to its
// schema (SET SCHEMA, ALTER SCHEMA ... RENAME: the schema may be new to the
// target), then schema.AlterSQL's statements. A default evaluated per row
// (random(), an identity) is refused by AlterSQL unless the target table
// is empty; when the source rewrote the table for it (msg.Rewrote) and
// the run's publication publishes it, the column is added as to an empty
// table and copyAnew says that the table must be copied anew: the
// values the source computed for its rows are in no message.
func (w *Writer) alter(ctx context.Context, cur *schema.Table, msg *ddlmsg.Message, lsn change.LSN) (copyAnew bool, err error) {
	tn := schema.NameFromDDL(&msg.Table)
	if cur.Schema != tn.Schema {
		if err := w.exec(ctx, schema.CreateSchemaSQL(tn.Schema)); err != nil {
			return false, err
		}
	}
	if err := w.checkTakenNames(ctx, cur, msg); err != nil {
		return false, err
	}
	stmts, err := schema.AlterSQL(cur, msg, false)
	if errors.Is(err, schema.ErrVolatileDefault) {
		var empty bool
		if qerr := w.conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+cur.TableName().Quoted()+")").Scan(&empty); qerr != nil {
			return false, qerr
		}
		copyAnew = !empty && msg.Rewrote() && w.publishes(msg)
		if copyAnew {
			// Its rows are copied anew: emptied first, so that the
			// source's per-row default is not evaluated here, as the
			// target's role, for rows about to be replaced.
			if err := emptyTable(ctx, w.conn, cur.TableName()); err != nil {
				return false, err
			}
		}
		if empty || copyAnew {
			stmts, err = schema.AlterSQL(cur, msg, true)
		}
	}
	if err != nil {
		return false, err
	}
	restore, err := w.sourceSession(ctx, msg)
	if err != nil {
		return false, err
	}
	for _, sql := range stmts {
		if err := w.exec(ctx, sql); err != nil {
			return false, fmt.Errorf("%s: %w", sql, err)
		}
	}
	if restore != "" {
		if err := w.exec(ctx, restore); err != nil {
			return false, err
		}
	}
	w.log.Info("applied schema change", "table", tn, "command", msg.Tag, "statements", len(stmts), "lsn", lsn)
	return copyAnew, nil
}

// sourceSession gives the target transaction, for the statements of a
// message that changed a column's type, the source session's settings
// that the command's casts read (ddlmsg.SessionSettings: a timestamp
// made timestamptz under the source's TimeZone, a date made text under
// its DateStyle): the target's rows then convert as the source's did.
// lc_monetary only when a money column is retyped (the target may lack
// the source's locale). It returns the SQL that sets them back.
func (w *Writer) sourceSession(ctx context.Context, msg *ddlmsg.Message) (restore string, err error) {
	if len(msg.Session) == 0 || !msg.Retyped() {
		return "", nil
	}
	money := false
	for _, c := range msg.Columns {
		money = money || c.TypeOID == moneyOID
	}
	for _, c := range msg.Old.Columns {
		money = money || c.TypeOID == moneyOID
	}
	var names []string
	for _, n := range ddlmsg.SessionSettings {
		if _, ok := msg.Session[n]; ok && (n != "lc_monetary" || money) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	if err := w.ensureBegun(ctx); err != nil {
		return "", err
	}
	set := func(values map[string]string) string {
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = "pg_catalog.set_config(" + schema.QuoteLiteral(n) + ", " + schema.QuoteLiteral(values[n]) + ", true)"
		}
		return "SELECT " + strings.Join(parts, ", ")
	}
	now := make(map[string]string, len(names))
	for _, n := range names {
		var v string
		if err := w.conn.QueryRow(ctx, "SELECT pg_catalog.current_setting($1)", n).Scan(&v); err != nil {
			return "", fmt.Errorf("read the target session's %s: %w", n, err)
		}
		now[n] = v
	}
	if err := w.exec(ctx, set(msg.Session)); err != nil {
		return "", fmt.Errorf("take the source session's settings for its casts (%v): %w", msg.Session, err)
	}
	return set(now), nil
}

// enumAdded gives the target's enum type typ (labels have) the labels the
// source added (ALTER TYPE ... ADD VALUE: labels want), each at its place
// in the source's order, so that values sort alike on both sides. Labels
// the target has that the source lacks, or has in another order, stop
// the run: which one was renamed, or where one goes, cannot be told. The
// source's transaction cannot use a label it added (PostgreSQL refuses
// it until the commit), and a schema change's transaction is applied
// alone: no row of it comes in the target transaction that adds it.
func (w *Writer) enumAdded(ctx context.Context, typ string, have, want []string, table schema.TableName, lsn change.LSN) error {
	j := 0
	for _, l := range want {
		if j < len(have) && have[j] == l {
			j++
		}
	}
	if j < len(have) {
		return fmt.Errorf("enum type %s of %s: the source's labels are now %q, the target's %q: which label was renamed, or where one goes, cannot be told; make the target's labels the source's (ALTER TYPE ... RENAME VALUE, ADD VALUE), then restart",
			typ, table, want, have)
	}
	for i, l := range want {
		if slices.Contains(have, l) {
			continue
		}
		sql := "ALTER TYPE " + typ + " ADD VALUE " + schema.QuoteLiteral(l)
		switch {
		case i > 0:
			sql += " AFTER " + schema.QuoteLiteral(want[i-1])
		case len(have) > 0:
			sql += " BEFORE " + schema.QuoteLiteral(have[0])
		}
		if err := w.exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		w.log.Info("added an enum label on the target, as on the source", "type", typ, "label", l, "lsn", lsn)
		have = slices.Insert(have, i, l)
	}
	return nil
}

// ensureTypes makes on the target the user-defined types (enums, domains,
// composites, ranges, with what they need) that msg's columns have and
// the target lacks: a CREATE TYPE is not a schema change of a table, and
// no message carries it, but the table's CREATE or ADD COLUMN that uses
// it does (WriterOptions.SourceTypes reads their definitions on the
// source). A type the target has under that name is taken as it is.
func (w *Writer) ensureTypes(ctx context.Context, msg *ddlmsg.Message, lsn change.LSN) error {
	if w.opts.SourceTypes == nil || msg.Dropped {
		return nil
	}
	var oids []uint32
	var names []string
	for _, c := range msg.Columns {
		oids, names = append(oids, c.TypeOID), append(names, c.Type)
	}
	return w.makeTypes(ctx, oids, names, lsn)
}

// makeTypes makes on the target the user-defined types, named names
// there, of source type oids that the target lacks, with the types they
// need (WriterOptions.SourceTypes); built-in ones and those the target
// has are passed over.
func (w *Writer) makeTypes(ctx context.Context, oids []uint32, names []string, lsn change.LSN) error {
	var missing []uint32
	for i, oid := range oids {
		if oid < FirstNormalOID || slices.Contains(missing, oid) {
			continue
		}
		var have bool
		if err := w.conn.QueryRow(ctx, "SELECT pg_catalog.to_regtype($1) IS NOT NULL", names[i]).Scan(&have); err != nil {
			return fmt.Errorf("look up type %s on the target: %w", names[i], err)
		}
		if !have {
			missing = append(missing, oid)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	types, err := w.opts.SourceTypes(ctx, missing)
	if err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	if err := w.ensureBegun(ctx); err != nil {
		return err
	}
	if err := CheckEventTriggers(ctx, w.conn, w.opts.TrustTableOwners); err != nil {
		return err
	}
	for _, t := range types {
		var have bool
		if err := w.conn.QueryRow(ctx, "SELECT pg_catalog.to_regtype($1) IS NOT NULL", change.QuoteIdent(t.Schema)+"."+change.QuoteIdent(t.Name)).Scan(&have); err != nil {
			return fmt.Errorf("look up type %s on the target: %w", t, err)
		}
		if have {
			continue
		}
		for _, sql := range []string{schema.CreateSchemaSQL(t.Schema), t.CreateSQL()} {
			if err := w.exec(ctx, sql); err != nil {
				return fmt.Errorf("make type %s on the target, as the source has it (%s): %w", t, sql, err)
			}
		}
		if err := CheckMadeType(ctx, w.conn, t, w.opts.TrustTableOwners); err != nil {
			return err
		}
		if lsn != 0 {
			w.log.Info("made a type on the target that a schema change's column needs, as the source has it", "type", t.String(), "lsn", lsn)
		} else {
			w.log.Info("made a type on the target that a column in the stream needs, as the source has it", "type", t.String())
		}
	}
	return nil
}

// Only is the ONLY of a statement that reads or empties target table tn's
// own rows: "" for a partitioned table, whose rows are its partitions',
// "ONLY " for an ordinary one, whose inheritance children are not its.
func Only(ctx context.Context, conn *pgx.Conn, tn schema.TableName) (string, error) {
	var partitioned bool
	if err := conn.QueryRow(ctx, "SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = $1::regclass", tn.Quoted()).Scan(&partitioned); err != nil {
		return "", err
	}
	if partitioned {
		return "", nil
	}
	return "ONLY ", nil
}

// emptyTable truncates target table tn (Only), as a copy anew does
// (snapshot.CheckTargets).
func emptyTable(ctx context.Context, conn *pgx.Conn, tn schema.TableName) error {
	only, err := Only(ctx, conn, tn)
	if err != nil {
		return fmt.Errorf("empty %s on the target for its copy anew: %w", tn, err)
	}
	if _, err := conn.Exec(ctx, "TRUNCATE "+only+tn.Quoted()); err != nil {
		return fmt.Errorf("empty %s on the target for its copy anew: %w", tn, err)
	}
	return nil
}

// checkColumnTypes refuses, before a schema change runs, a column of a
// domain (or a domain over one) whose constraints call a function that a
// role that is not a superuser owns, when the target role is a superuser
// (CheckOwners' rule): an ADD COLUMN checks its default against the
// domain as it runs, before the table's code is looked at again.
func (w *Writer) checkColumnTypes(ctx context.Context, msg *ddlmsg.Message) error {
	if w.opts.TrustTableOwners || len(msg.Columns) == 0 {
		return nil
	}
	names := make([]string, len(msg.Columns))
	for i, c := range msg.Columns {
		names[i] = c.Type
	}
	rows, err := w.conn.Query(ctx, untrustedTypesSQL, names)
	if err != nil {
		return fmt.Errorf("look up who owns the code of the column types on the target: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("look up who owns the code of the column types on the target: %w", err)
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; apply as a target role that is not a superuser, have a superuser own that code, or pass --trust-table-owners",
		ErrUntrustedOwner, strings.Join(found, "; "))
}

// checkGenerated refuses, for a superuser target role, a change whose
// generated columns' expressions call a function (or an operator's) a
// role that is not a superuser owns (CheckOwners' rule): adding such a
// column computes it for every row the target table has, as the change
// runs, before the table's code is looked at again. The expressions
// (their functions resolved by name, as the change will) are made on an
// empty temporary table of the message's columns, in a savepoint rolled
// back after; nothing is evaluated there. A look that fails stops the
// change, saying so.
func (w *Writer) checkGenerated(ctx context.Context, msg *ddlmsg.Message) error {
	if w.opts.TrustTableOwners || msg.Creates() {
		return nil // a table made by the change is empty: looked at after (CheckOwners)
	}
	var cols, gens []string
	for _, c := range msg.Columns {
		if c.Generated == nil {
			cols = append(cols, change.QuoteIdent(c.Name)+" "+c.Type)
			continue
		}
		gens = append(gens, "ADD COLUMN "+change.QuoteIdent("repstream_probe_"+c.Name)+" "+c.Type+" GENERATED ALWAYS AS ("+*c.Generated+") STORED")
	}
	return w.probeColumnCode(ctx, cols, gens)
}

// checkAddedGenerated is checkGenerated for the statements of a change
// followed without the event trigger (--ddl=relation: RelationAlterSQL,
// each "ALTER TABLE <tn> ..."): its ADD COLUMN actions, in order, on an
// empty table of the target table's columns, when one adds a generated
// column.
func (w *Writer) checkAddedGenerated(ctx context.Context, tn schema.TableName, stmts []string) error {
	if w.opts.TrustTableOwners {
		return nil
	}
	prefix := "ALTER TABLE " + tn.Quoted() + " "
	var adds []string
	generated := false
	for _, s := range stmts {
		if a, ok := strings.CutPrefix(s, prefix); ok && strings.HasPrefix(a, "ADD COLUMN ") {
			adds = append(adds, a)
			generated = generated || strings.Contains(a, " GENERATED ALWAYS AS (")
		}
	}
	if !generated {
		return nil
	}
	tab, err := schema.LoadTable(ctx, w.conn, tn.Schema, tn.Name)
	if err != nil {
		return err
	}
	cols := make([]string, len(tab.Columns))
	for i, c := range tab.Columns {
		cols[i] = change.QuoteIdent(c.Name) + " " + c.Type
	}
	return w.probeColumnCode(ctx, cols, adds)
}

// probeColumnCode makes, for a superuser session, a temporary table of the
// columns cols ("name type") and applies the ALTER TABLE actions to it,
// in a savepoint rolled back after: empty, nothing is evaluated. It
// returns ErrUntrustedOwner naming the functions (or operators'
// functions) a role that is not a superuser owns that the columns'
// defaults and generation expressions call there; a look that fails is
// an error saying so.
func (w *Writer) probeColumnCode(ctx context.Context, cols, actions []string) error {
	if len(actions) == 0 {
		return nil
	}
	var super bool
	if err := w.conn.QueryRow(ctx, "SELECT "+superuserSQL).Scan(&super); err != nil || !super {
		return err
	}
	if err := w.exec(ctx, "SAVEPOINT repstream_probe"); err != nil {
		return err
	}
	found, lookErr := func() ([]string, error) {
		for _, sql := range []string{
			"CREATE TEMP TABLE repstream_probe (" + strings.Join(cols, ", ") + ")",
			"ALTER TABLE pg_temp.repstream_probe " + strings.Join(actions, ", "),
		} {
			if err := w.exec(ctx, sql); err != nil {
				return nil, fmt.Errorf("look at the generated columns' expressions before they run on the target's rows (%s): %w", sql, err)
			}
		}
		rows, err := w.conn.Query(ctx, `SELECT DISTINCT f.fn || ', owned by ' || pg_catalog.quote_ident(r.rolname)
	FROM pg_catalog.pg_attrdef dep_d JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_attrdef'::regclass AND dep.objid = dep_d.oid
	`+untrustedCallSQL+` AND dep_d.adrelid = 'pg_temp.repstream_probe'::regclass ORDER BY 1`)
		if err != nil {
			return nil, fmt.Errorf("look up who owns the code of the generated columns on the target: %w", err)
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}()
	if err := w.exec(ctx, "ROLLBACK TO SAVEPOINT repstream_probe"); err != nil {
		return err
	}
	if err := w.exec(ctx, "RELEASE SAVEPOINT repstream_probe"); err != nil {
		return err
	}
	if lookErr != nil {
		return lookErr
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: a generated column's expression calls %s, which adding it runs for every row of the target table; "+
		"apply as a target role that is not a superuser, have a superuser own that code, or pass --trust-table-owners",
		ErrUntrustedOwner, strings.Join(found, "; "))
}

// untrustedTypesSQL lists, for a superuser session, the domains among the
// type names $1 and the types they hold (typeTreeSQL: domains' base
// types, arrays' elements, ranges' subtypes, composites' attributes) that
// a role that is not a superuser owns, and the functions (or operators'
// functions) such a role owns that those types' domain constraints or
// the types themselves (a range's subtype_diff) call.
const untrustedTypesSQL = `
WITH RECURSIVE d AS (
	SELECT t.oid FROM unnest($1::text[]) AS u(name)
	JOIN pg_catalog.pg_type t ON t.oid = pg_catalog.to_regtype(u.name)
	WHERE ` + superuserSQL + `
	UNION
	SELECT x.next FROM d JOIN pg_catalog.pg_type y ON y.oid = d.oid
	` + typeTreeSQL + `
)
SELECT DISTINCT ` + typeKindSQL + ` || ' ' || y.oid::regtype::text || ' is owned by ' || quote_ident(r.rolname)
FROM d JOIN pg_catalog.pg_type y ON y.oid = d.oid JOIN pg_catalog.pg_roles r ON r.oid = y.typowner
WHERE NOT (r.rolsuper OR r.rolname = current_user)
UNION ALL
SELECT DISTINCT 'cast (' || k.castsource::regtype::text || ' AS ' || k.casttarget::regtype::text || ') calls ' || p.oid::regprocedure::text || ', owned by ' || quote_ident(r.rolname)
FROM d JOIN pg_catalog.pg_cast k ON (k.castsource = d.oid OR k.casttarget = d.oid) AND d.oid >= 16384
JOIN pg_catalog.pg_proc p ON p.oid = k.castfunc JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
WHERE NOT (r.rolsuper OR r.rolname = current_user)
UNION ALL
SELECT DISTINCT 'constraint ' || quote_ident(k.conname) || ' of domain ' || k.contypid::regtype::text || ' calls ' || f.fn || ', owned by ' || quote_ident(r.rolname)
FROM d JOIN pg_catalog.pg_constraint k ON k.contypid = d.oid
JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_constraint'::regclass AND dep.objid = k.oid
` + untrustedCallSQL + `
UNION ALL
SELECT DISTINCT 'type ' || dep.objid::regtype::text || ' calls ' || f.fn || ', owned by ' || quote_ident(r.rolname)
FROM d JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_type'::regclass AND dep.objid = d.oid
` + untrustedCallSQL

// moneyOID is the built-in type money.
const moneyOID = 790

// publishes: the run's publication publishes msg's table (or the run has
// none of its own to tell by).
func (w *Writer) publishes(msg *ddlmsg.Message) bool {
	return w.opts.Publication == "" || msg.Publishes(w.opts.Publication)
}

// entersPublication: the message makes the run's publication publish a
// table it did not publish before, with rows the stream never carried —
// ALTER TABLE ... SET LOGGED of an unlogged table (the trigger never
// recorded it: msg.Old is nil) or SET SCHEMA into a published schema —
// or publish it through an entry made again (ALTER PUBLICATION ... SET
// TABLE with another row filter or column list): the target's rows were
// chosen by the entry before, so the table is copied anew.
func (w *Writer) entersPublication(msg *ddlmsg.Message) bool {
	pub := w.opts.Publication
	return pub != "" && msg.Publishes(pub) && (msg.Old == nil || !slices.Contains(msg.Old.Pubs, pub) || msg.PubRelRemade(pub) || w.leftPartial(msg))
}

// leftPartial: the message says an ALTER PUBLICATION left the run's
// publication leaving out a kind of change, and the run does not accept
// that (--partial-publication): the stream lacks the table's changes of
// that kind from here on, so it is copied anew — once the publication
// publishes everything again (tablesync refuses to copy before, and the
// run stops).
func (w *Writer) leftPartial(msg *ddlmsg.Message) bool {
	return !w.opts.PartialPublication && slices.Contains(msg.Partial, w.opts.Publication)
}

// takeUp creates a table that enters the publication on the target (if
// it lacks it) and records it pending in the transaction, as `tables add` does: apply
// writes none of its changes until the engine has copied it from a new
// snapshot (tablesync's Watch), and streams it from there.
func (w *Writer) takeUp(ctx context.Context, msg *ddlmsg.Message, lsn change.LSN, fail func(error) error) error {
	tn := schema.NameFromDDL(&msg.Table)
	if _, err := schema.LoadTable(ctx, w.conn, tn.Schema, tn.Name); errors.Is(err, schema.ErrTableNotFound) {
		for _, sql := range schema.CreateSQLFromDDL(&msg.Table) {
			if err := w.exec(ctx, sql); err != nil {
				return fail(fmt.Errorf("create the table on the target (%s): %w", sql, err))
			}
		}
	} else if err != nil {
		return fail(err)
	}
	// A table the slot does not record yet enters its replication: the
	// target's table of that name, if it has rows, is the user's, and
	// its copy empties it only with --truncate (PendEntering). One a
	// CREATE TABLE made on the source is not: its target twin, made by
	// a start's --create-tables or by hand before the CREATE TABLE that
	// is still to come, is copied anew.
	pend := PendEntering
	if msg.Creates() {
		pend = func(ctx context.Context, conn *pgx.Conn, slot string, t schema.TableName) error {
			return SetTableState(ctx, conn, slot, t.Schema, t.Name, TablePending)
		}
	}
	if err := pend(ctx, w.conn, w.opts.Slot, tn); err != nil {
		return fail(err)
	}
	w.markTakenUp(tn)
	if w.leftPartial(msg) {
		w.log.Warn("the publication now leaves out a kind of change (ALTER PUBLICATION ... SET (publish = ...)): the stream lacks those changes from here on, so the table is copied anew once it publishes everything again",
			"table", tn, "publication", w.opts.Publication, "lsn", lsn)
		return nil
	}
	if msg.RewroteByExpression() {
		w.log.Warn("the source's rows were rewritten, perhaps by a USING expression of ALTER COLUMN ... TYPE, which no message carries: the table is copied anew from a new snapshot, then streamed",
			"table", tn, "lsn", lsn)
		return nil
	}
	if msg.Rewrote() && msg.Tag == "ALTER TABLE" {
		w.log.Warn("a column was added on the source with a value computed for each existing row (a volatile default, an identity), which no message carries: the table is copied anew from a new snapshot, then streamed",
			"table", tn, "lsn", lsn)
		return nil
	}
	if msg.PubRelRemade(w.opts.Publication) {
		w.log.Warn("the publication's entry for a table was made again (ALTER PUBLICATION ... SET TABLE with another row filter or column list): the target's rows were chosen by the one before, so it is copied anew from a new snapshot, then streamed",
			"table", tn, "publication", w.opts.Publication, "command", msg.Tag, "lsn", lsn)
		return nil
	}
	if msg.Creates() {
		w.log.Warn("a table made on the source is already on the target, unrecorded (made by a start's --create-tables from the source's catalog as it is now, or by hand): it is copied anew from a new snapshot, then streamed",
			"table", tn, "command", msg.Tag, "lsn", lsn)
		return nil
	}
	if msg.Tag == "ALTER PUBLICATION" {
		w.log.Warn(addedToPublication, "table", tn, "publication", w.opts.Publication, "command", msg.Tag, "lsn", lsn)
		return nil
	}
	w.log.Warn("a table enters the publication with rows the stream does not carry (SET LOGGED, SET SCHEMA into a published schema): created on the target, it is copied from a new snapshot, then streamed",
		"table", tn, "command", msg.Tag, "lsn", lsn)
	return nil
}

// addedToPublication is takeUp's warning for a table added to the
// publication (ALTER PUBLICATION ... ADD TABLE or ADD TABLES IN SCHEMA,
// which `repstream tables add` and a capture started with a wider
// --tables run too).
const addedToPublication = "a table was added to the publication (ALTER PUBLICATION ... ADD TABLE, ADD TABLES IN SCHEMA, `repstream tables add`, or a capture started with a wider --tables): its rows before were never in the stream, so it is copied from a new snapshot (created on the target if it lacks it), then streamed; " +
	"a target table of that name holding rows of its own (one this replication did not record) is emptied for the copy only with --truncate, else the copy stops the run, naming it"

// forget drops the cached plans and COPY buffer of a table (nothing of it
// may be buffered).
func (w *Writer) forget(tn schema.TableName) {
	for rel, p := range w.plans {
		if p.name == tn {
			delete(w.plans, rel)
		}
	}
	if tb := w.copies.tables[tn]; tb != nil && !tb.dirty && !tb.inBatch {
		delete(w.copies.tables, tn)
	}
}

// followRelation is the fallback (WriterOptions.RelationDDL) for a relation
// version the Writer has no plan for: it changes the target table as rel
// differs from its previous version, or creates it from rel when it is
// missing and CreateTables is set. tab and loadErr are what loading the
// target table returned; it returns the table as it is then.
func (w *Writer) followRelation(ctx context.Context, rel *change.Relation, tab *schema.Table, loadErr error) (*schema.Table, error) {
	tn := schema.TableName{Schema: rel.Namespace, Name: rel.Name}
	if errors.Is(loadErr, schema.ErrTableNotFound) && w.opts.CreateTables {
		tab, err := w.createFromRelation(ctx, rel)
		if err == nil {
			w.log.Info("created table on the target from its first description in the stream (--create-tables)", "table", tn)
		}
		return tab, err
	}
	if loadErr != nil {
		return nil, fmt.Errorf("%w on target", loadErr)
	}
	next, err := w.relColumns(ctx, rel)
	if err != nil {
		return nil, err
	}
	var prev []schema.RelColumn
	if rel.Previous != nil {
		if prev, err = w.relColumns(ctx, rel.Previous); err != nil {
			return nil, err
		}
	}
	recorded, err := SourceTypes(ctx, w.conn, w.opts.Slot, tn)
	if err != nil {
		return nil, err
	}
	if rel.Previous == nil {
		// The stream's first description of the table in this session:
		// compared with the types recorded with its copy, or the last
		// description followed, a column retyped while no engine ran (or
		// before this session described the table) is seen as one
		// retyped now.
		if changed := schema.TypesChanged(recorded, rel); len(changed) > 0 {
			prev = slices.Clone(next)
			for i := range prev {
				if slices.Contains(changed, prev[i].Name) {
					prev[i].Type = "(as recorded: another type)"
				}
			}
		}
	}
	onTarget := map[string]bool{}
	for _, c := range tab.Columns {
		onTarget[c.Name] = true
	}
	if err := w.nameUserTypes(ctx, rel, next, func(i int) bool { return !onTarget[next[i].Name] }); err != nil {
		return nil, err
	}
	retyped := schema.RelationRetyped(tab, prev, next)
	perRow := false // a column added with values computed per row (relationAdd)
	if now := schema.RelationTypes(rel); now != recorded {
		// In the transaction that follows it: a barrier (apply's
		// keyHasher), so no other worker writes this row meanwhile.
		if err := w.flushAll(ctx); err != nil {
			return nil, err
		}
		if err := w.ensureBegun(ctx); err != nil {
			return nil, err
		}
		if err := SetSourceTypes(ctx, w.conn, w.opts.Slot, tn, now); err != nil {
			return nil, err
		}
	}
	stmts, err := schema.RelationAlterSQL(tab, prev, next, func(column, typ string) ([]string, error) {
		return w.relationAdd(ctx, tn, column, typ, &perRow)
	})
	if err != nil {
		return nil, err
	}
	if len(stmts) == 0 {
		return tab, nil
	}
	if err := w.execDDL(ctx, tn, stmts); err != nil {
		return nil, err
	}
	w.log.Info("changed the target table as the source's description changed (--ddl=relation)", "table", tn, "statements", len(stmts))
	if (retyped || perRow) && w.opts.CopyUnrecorded {
		// What the source's rows became is not in the stream: a USING
		// expression, or a cast that read the source session's settings
		// (TimeZone, DateStyle), may have made other values than the
		// target's cast; a default evaluated per row gave each its own.
		// Copied anew, as `tables add` copies.
		if err := SetTableState(ctx, w.conn, w.opts.Slot, tn.Schema, tn.Name, TablePending); err != nil {
			return nil, err
		}
		w.markTakenUp(tn)
		delete(w.recorded, tn)
		why := "a column's type changed on the source, and without the event trigger (--ddl=relation) nothing tells what its rows became (a USING expression, the session's TimeZone or DateStyle)"
		if !retyped {
			why = "a column was added on the source with a value computed for each existing row (a volatile default, an identity), which no message carries"
		}
		w.log.Warn(why+": the table is copied anew from a new snapshot, then streamed", "table", tn)
		return nil, errTakenUp
	}
	return schema.LoadTable(ctx, w.conn, tn.Schema, tn.Name)
}

// relationAdd returns the actions that add column (of type typ) to the
// target table tn as the source added it: WriterOptions.AddedColumn tells
// what the source's existing rows got. A default the source evaluated per
// row (random(), an identity) is added as to an empty table; when the
// target table has rows (everything buffered is sent first and the table
// looked at in the transaction), perRow is set: followRelation copies it
// anew.
func (w *Writer) relationAdd(ctx context.Context, tn schema.TableName, column, typ string, perRow *bool) ([]string, error) {
	if w.opts.AddedColumn == nil {
		return nil, errors.New("no connection to the source to learn what its existing rows got: add the column on the target yourself, then restart")
	}
	v, err := w.opts.AddedColumn(ctx, tn, column)
	if err != nil {
		return nil, err
	}
	if v.Sequence != nil && v.Identity == "" && v.Default != nil {
		// A serial: its default draws from a sequence the target lacks.
		if err := w.flushAll(ctx); err != nil {
			return nil, err
		}
		if err := w.ensureBegun(ctx); err != nil {
			return nil, err
		}
		if err := w.exec(ctx, "CREATE SEQUENCE IF NOT EXISTS "+*v.Sequence); err != nil {
			return nil, fmt.Errorf("create the sequence %s of column %q of %s on the target: %w", *v.Sequence, column, tn, err)
		}
	}
	actions, err := schema.RelationAddSQL(column, typ, v, false)
	if !errors.Is(err, schema.ErrVolatileDefault) {
		return actions, err
	}
	if err := w.flushAll(ctx); err != nil {
		return nil, err
	}
	if err := w.ensureBegun(ctx); err != nil {
		return nil, err
	}
	var empty bool
	if qerr := w.conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+tn.Quoted()+")").Scan(&empty); qerr != nil {
		return nil, fmt.Errorf("look for rows in %s on the target: %w", tn, qerr)
	}
	if empty || w.opts.CopyUnrecorded {
		// Not empty: the table is then copied anew (followRelation),
		// emptied first so that the default is not evaluated here for
		// rows about to be replaced.
		if !empty {
			if err := emptyTable(ctx, w.conn, tn); err != nil {
				return nil, err
			}
			*perRow = true // a later column of the change finds it empty
		}
		return schema.RelationAddSQL(column, typ, v, true)
	}
	return nil, fmt.Errorf("%w: add the column on the target yourself with the source's values for the existing rows (e.g. copy them with an UPDATE ... FROM), then restart", err)
}

// execDDL sends everything buffered, then stmts, in the transaction.
func (w *Writer) execDDL(ctx context.Context, tn schema.TableName, stmts []string) error {
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	if err := w.ensureBegun(ctx); err != nil {
		return err
	}
	if err := CheckEventTriggers(ctx, w.conn, w.opts.TrustTableOwners); err != nil {
		return err
	}
	if err := w.checkAddedGenerated(ctx, tn, stmts); err != nil {
		return err
	}
	w.forget(tn)
	for _, sql := range stmts {
		if err := w.exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// nameUserTypes names the user-defined types of cols (rel's columns as
// relColumns named them: "" for those) that need fills in, as the source
// names them (WriterOptions.SourceTypeNames), and makes on the target
// those it lacks, from the source's definitions (makeTypes): a column of
// an enum added on the source, or a table made from its description.
func (w *Writer) nameUserTypes(ctx context.Context, rel *change.Relation, cols []schema.RelColumn, need func(i int) bool) error {
	var idx []int
	var oids []uint32
	var mods []int32
	for i, c := range cols {
		if c.Type == "" && need(i) && rel.Columns[i].TypeOID != 0 {
			idx = append(idx, i)
			oids = append(oids, rel.Columns[i].TypeOID)
			mods = append(mods, rel.Columns[i].TypeMod)
		}
	}
	if len(idx) == 0 || w.opts.SourceTypeNames == nil || w.opts.SourceTypes == nil {
		return nil
	}
	names, err := w.opts.SourceTypeNames(ctx, oids, mods)
	if err != nil {
		return err
	}
	if err := w.makeTypes(ctx, oids, names, change.LSN(0)); err != nil {
		return err
	}
	for k, i := range idx {
		cols[i].Type = names[k]
	}
	return nil
}

// relColumns names rel's column types as the target formats them; a type
// that is not built in gets "" (its OID means nothing on the target).
func (w *Writer) relColumns(ctx context.Context, rel *change.Relation) ([]schema.RelColumn, error) {
	oids := make([]uint32, len(rel.Columns))
	mods := make([]int32, len(rel.Columns))
	for i, c := range rel.Columns {
		oids[i], mods[i] = c.TypeOID, c.TypeMod
	}
	rows, err := w.conn.Query(ctx, `SELECT CASE WHEN o < $3 THEN pg_catalog.format_type(o, m) ELSE '' END
		FROM unnest($1::oid[], $2::int4[]) WITH ORDINALITY AS u(o, m, i) ORDER BY i`, oids, mods, uint32(FirstNormalOID))
	if err != nil {
		return nil, fmt.Errorf("name the column types of %s on the target: %w", rel, err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("name the column types of %s on the target: %w", rel, err)
	}
	out := make([]schema.RelColumn, len(rel.Columns))
	for i, c := range rel.Columns {
		out[i] = schema.RelColumn{Name: c.Name, Type: types[i]}
	}
	return out, nil
}

// enumChanged makes the labels of the target's enum type e (when it has
// that type) the source's after an ALTER TYPE. A label renamed on the
// source (RENAME VALUE) changed every row holding it there, which the
// stream never shows; the target renames its own, by position: the same
// number of labels, in the same order, some named otherwise. Labels added
// on the source (ADD VALUE) are added at their place (enumAdded); a
// difference it cannot tell stops the run now.
func (w *Writer) enumChanged(ctx context.Context, e *ddlmsg.EnumChange, table schema.TableName, lsn change.LSN) error {
	var have []string
	if err := w.conn.QueryRow(ctx, `SELECT coalesce(array_agg(l.enumlabel::text ORDER BY l.enumsortorder), '{}')
FROM pg_catalog.pg_enum l JOIN pg_catalog.pg_type t ON t.oid = l.enumtypid JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = $2`, e.Schema, e.Name).Scan(&have); err != nil {
		return err
	}
	typ := change.QuoteIdent(e.Schema) + "." + change.QuoteIdent(e.Name)
	if len(have) == 0 || slices.Equal(have, e.Labels) {
		return nil
	}
	if len(have) != len(e.Labels) {
		return w.enumAdded(ctx, typ, have, e.Labels, table, lsn)
	}
	for i := range have {
		if have[i] == e.Labels[i] {
			continue
		}
		if slices.Contains(have, e.Labels[i]) {
			return fmt.Errorf("enum type %s of %s: the source's labels are now %q, the target's %q: not renames one by one; make the target's labels the source's, then restart", typ, table, e.Labels, have)
		}
		sql := "ALTER TYPE " + typ + " RENAME VALUE " + schema.QuoteLiteral(have[i]) + " TO " + schema.QuoteLiteral(e.Labels[i])
		if err := w.exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		w.log.Info("renamed an enum label on the target, as on the source", "type", typ, "from", have[i], "to", e.Labels[i], "lsn", lsn)
		have[i] = e.Labels[i]
	}
	return nil
}

// compositeChanged makes the target's composite type ct (when it has
// that type) the source's after an ALTER TYPE: values of it travel as
// text by position, so a target type with its attributes in another
// order or of other types would take the rows that follow into the wrong
// fields. One change at a time, as the source made it: attributes the
// source no longer has are dropped, then those it added are added at
// the end, and one whose type changed is retyped (the source converted
// its values alike); a difference it cannot tell (a rename, an order it cannot reach) stops the run here,
// naming both lists. Nothing is done when the target's type is the
// source's already.
func (w *Writer) compositeChanged(ctx context.Context, ct *ddlmsg.CompositeChange, table schema.TableName, lsn change.LSN) error {
	have, err := schema.LoadType(ctx, w.conn, ct.Schema, ct.Name)
	if err != nil {
		return err
	}
	typ := change.QuoteIdent(ct.Schema) + "." + change.QuoteIdent(ct.Name)
	if have == nil || have.Kind != 'c' {
		return fmt.Errorf("composite type %s, which a column of %s holds, changed on the source, and the target has no composite type of that name: make it as the source's, then restart", typ, table)
	}
	want := make([]schema.TypeField, len(ct.Attrs))
	for i, a := range ct.Attrs {
		want[i] = schema.TypeField{Name: a.Name, Type: a.Type}
	}
	if slices.Equal(have.Attrs, want) {
		return nil
	}
	mismatch := func() error {
		return fmt.Errorf("composite type %s of %s: the source's attributes are now (%s), the target's (%s): values travel by position, and the rows that follow would fill the wrong fields; "+
			"alter the target's type to the source's (ALTER TYPE %s ...), then restart", typ, table, fieldList(want), fieldList(have.Attrs), typ)
	}
	var stmts []string
	wanted := map[string]string{}
	for _, f := range want {
		wanted[f.Name] = f.Type
	}
	var kept []schema.TypeField
	for _, f := range have.Attrs {
		if _, ok := wanted[f.Name]; !ok {
			stmts = append(stmts, "ALTER TYPE "+typ+" DROP ATTRIBUTE "+change.QuoteIdent(f.Name))
			continue
		}
		kept = append(kept, f)
	}
	if len(kept) > len(want) {
		return mismatch()
	}
	for i, f := range kept {
		if f.Name != want[i].Name {
			return mismatch() // another order: a rename, or attributes moved
		}
		if f.Type != want[i].Type {
			// The source converted its values the same way.
			stmts = append(stmts, "ALTER TYPE "+typ+" ALTER ATTRIBUTE "+change.QuoteIdent(f.Name)+" TYPE "+want[i].Type)
		}
	}
	for _, f := range want[len(kept):] {
		stmts = append(stmts, "ALTER TYPE "+typ+" ADD ATTRIBUTE "+change.QuoteIdent(f.Name)+" "+f.Type)
	}
	for _, sql := range stmts {
		if err := w.exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	w.log.Info("altered a composite type on the target, as on the source", "type", typ, "statements", len(stmts), "lsn", lsn)
	return nil
}

// fieldList is a composite type's attributes as SQL writes them.
func fieldList(fs []schema.TypeField) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = change.QuoteIdent(f.Name) + " " + f.Type
	}
	return strings.Join(parts, ", ")
}

// sentColumns is msg with only the columns that the run's publication
// sends of the table, in its new definition and its old one: with a
// column list on the publication's entry (ddlmsg.Table.ColLists), a
// column it leaves out is never on the target (--create-tables does not
// make it), so adding, changing or dropping one changes nothing there.
func (w *Writer) sentColumns(msg *ddlmsg.Message) *ddlmsg.Message {
	if w.opts.Publication == "" {
		return msg
	}
	keep := func(cols []ddlmsg.Column, list []string) []ddlmsg.Column {
		return slices.DeleteFunc(slices.Clone(cols), func(c ddlmsg.Column) bool { return !slices.Contains(list, c.Name) })
	}
	list, listed := msg.ColLists[w.opts.Publication]
	var oldList []string
	oldListed := false
	if msg.Old != nil {
		oldList, oldListed = msg.Old.ColLists[w.opts.Publication]
		if !oldListed && listed && msg.Old.ColLists == nil {
			// Recorded by an earlier version's trigger, which did not
			// say: the list's columns, the others being none of the
			// change's business (nothing is dropped for them).
			oldList, oldListed = list, true
		}
	}
	if !listed && !oldListed {
		return msg
	}
	m := *msg
	if listed {
		m.Columns = keep(msg.Columns, list)
	}
	if oldListed {
		old := *msg.Old
		old.Columns = keep(old.Columns, oldList)
		m.Old = &old
	}
	return &m
}
