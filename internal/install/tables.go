package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/sequences"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/target"
)

// TablesStart is what PrepareTables needs to know of the start.
type TablesStart struct {
	Slot          string
	Publication   string // its column lists decide what a table has on the target
	Create        bool   // --create-tables: make the missing tables
	RefuseKeyless bool   // repstream made the publication: a table it publishes without a key is refused
	// CopyResumed: the start resumes an initial copy an earlier run
	// began; its ready tables were copied at the slot's consistent point.
	CopyResumed bool
	// SchemaMayLag: resuming a stream that follows schema changes, the
	// target's tables may lag the source's until the stream's pending
	// changes are applied; FollowsDDL: schema changes are followed
	// (--ddl other than false).
	SchemaMayLag, FollowsDDL bool
	// TypesFollowed: the source's event trigger reports a composite
	// type's ALTER TYPE (--ddl=true), so that on a resumed start
	// (SchemaMayLag) a composite that differs inside may be one still in
	// the stream; without it nothing ever makes the target's the source's.
	TypesFollowed bool
	// TrustTableOwners: --trust-table-owners (a domain it makes from the
	// source's definition: target.CheckMadeType).
	TrustTableOwners bool
}

// PrepareTables checks that every published table exists on the target
// (creating it with o.Create) and warns about tables whose updates and
// deletes the source cannot publish. It returns why values cannot travel in
// binary ("" if they can): binary needs every column to have the same
// built-in type on both sides.
//
// Tables are created with what they need — their schema and the
// user-defined types of their columns (enums, composites, domains, ranges,
// dependencies first) — in one target transaction: all of it, or nothing.
//
// What it creates is recorded in undo, to be dropped again if this first
// start fails before its slot exists; created names the tables it made
// that were missing (not those a start made bare and makes again).
func PrepareTables(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName, o TablesStart, undo *Undo, log *slog.Logger) (noBinary string, created []schema.TableName, err error) {
	create, refuseKeyless := o.Create, o.RefuseKeyless
	var missing []*schema.Table
	var again []schema.TableName
	var problems, lagging, keyless []string
	var types startTypes // the target's user-defined types, for their records
	// With a resumed initial copy: the tables copied already, and those a
	// start made bare (--create-tables) whose copy did not complete.
	ready, bare := map[schema.TableName]bool{}, map[schema.TableName]bool{}
	var copying []schema.TableName
	if o.CopyResumed {
		if ready, bare, copying, err = resumedCopy(ctx, tgt, o.Slot); err != nil {
			return "", nil, err
		}
	}
	for _, t := range tables {
		st, err := schema.LoadTable(ctx, src, t.Schema, t.Name)
		if err != nil {
			return "", nil, fmt.Errorf("source table %s: %w", t, err)
		}
		// A column the publication's column list leaves out never
		// reaches the target: not made there, nor looked for.
		cols, err := snapshot.PublishedColumns(ctx, src, o.Publication, t)
		if err != nil {
			return "", nil, err
		}
		if cols != nil {
			st.Columns = slices.DeleteFunc(st.Columns, func(c schema.Column) bool { return !cols[c.Name] })
		}
		if st.ReplicaIdentity == change.IdentityNothing || st.ReplicaIdentity == change.IdentityDefault && len(st.PrimaryKey) == 0 {
			if refuseKeyless {
				keyless = append(keyless, t.String()+": no primary key and no replica identity: published, the source would refuse its UPDATEs and DELETEs (ALTER TABLE "+t.Quoted()+" REPLICA IDENTITY FULL, or add a primary key; or leave it out of --tables)")
			} else {
				log.Warn("source table has no primary key and no replica identity: its UPDATEs and DELETEs fail on the source (ALTER TABLE ... REPLICA IDENTITY FULL)", "table", t.String())
			}
		}
		tt, err := schema.LoadTable(ctx, tgt, t.Schema, t.Name)
		if err == nil && create && bare[t] && stillBare(tt) {
			// Made bare by an earlier start, its copy not complete: the
			// copy starts it again from empty, so it is made again from
			// the source's definition as it is now — which may have
			// changed since — with what is built after its copy.
			again = append(again, t)
			missing = append(missing, st)
			if noBinary == "" {
				noBinary = binaryProblem(st, st)
			}
			continue
		}
		if err == nil {
			// What differs inside a type is one the stream may still
			// bring only with the trigger (a composite's ALTER TYPE):
			// without it, refused on a resumed start too.
			typeProblems, err := schema.TypeProblems(ctx, src, tgt, st, tt)
			if err != nil {
				return "", nil, fmt.Errorf("target table %s: %w", t, err)
			}
			for _, p := range typeProblems {
				if o.SchemaMayLag && o.TypesFollowed {
					lagging = append(lagging, t.String()+": "+p)
				} else {
					problems = append(problems, t.String()+": "+p)
				}
			}
			if err := types.add(ctx, tgt, tt, len(typeProblems) == 0); err != nil {
				return "", nil, err
			}
			for _, p := range schema.Incompatible(st, tt) {
				if o.SchemaMayLag || o.CopyResumed && ready[t] && o.FollowsDDL {
					lagging = append(lagging, t.String()+": "+p)
				} else {
					problems = append(problems, t.String()+": "+p)
				}
			}
			if noBinary == "" {
				noBinary = binaryProblem(st, tt)
			}
			continue
		}
		if !errors.Is(err, schema.ErrTableNotFound) {
			return "", nil, fmt.Errorf("target table %s: %w", t, err)
		}
		if !create {
			return "", nil, fmt.Errorf("table %s is missing on the target: create it, or pass --create-tables", t)
		}
		missing = append(missing, st)
		if noBinary == "" {
			noBinary = binaryProblem(st, st)
		}
	}
	if len(keyless) > 0 {
		return "", nil, fmt.Errorf("tables repstream would publish cannot be replicated as they are:\n  %s", strings.Join(keyless, "\n  "))
	}
	if len(problems) > 0 {
		return "", nil, fmt.Errorf("the target's tables cannot take the source's rows (fix them, or drop them and use --create-tables):\n  %s",
			strings.Join(problems, "\n  "))
	}
	// A table whose copy did not complete and that the source no longer
	// publishes (renamed or dropped there, or taken out of the
	// publication) is left as it is: its copy state stays "copying" (not
	// ready), so that apply skips what the stream still has for it. Said
	// once, here.
	for _, t := range copying {
		if !slices.Contains(tables, t) {
			log.Warn("a table whose copy did not complete is no longer published by the source (renamed or dropped there, or taken out of the publication): it is left on the target part copied and gets no changes; drop it when you no longer need it",
				"table", t.String())
		}
	}
	// A type changed by hand since repstream recorded it is no schema
	// change still in the stream: stopped here, before anything is
	// applied. What was found the source's is recorded.
	if err := types.checkTypeRecords(ctx, src, tgt, o.Slot, o.SchemaMayLag && o.TypesFollowed, log); err != nil {
		return "", nil, err
	}
	if len(lagging) > 0 {
		// Apply stops at the change that cannot be applied, if any.
		log.Warn("the target's tables differ from the source's; schema changes still in the stream may account for it",
			"differences", strings.Join(lagging, "; "))
	}
	if len(missing) > 0 {
		made, err := CreateTables(ctx, src, tgt, missing, again, o.Slot, o.TrustTableOwners, log)
		if err != nil {
			return "", nil, err
		}
		undo.CreatedTables(tgt, o.Slot, made)
		var names []schema.TableName
		for _, st := range missing {
			t := schema.TableName{Schema: st.Schema, Name: st.Name}
			names = append(names, t)
			if !slices.Contains(again, t) {
				created = append(created, t)
			}
		}
		if err := recordAddedTypes(ctx, tgt, o.Slot, names); err != nil {
			return "", nil, err
		}
	}
	return noBinary, created, nil
}

// resumedCopy reads, for a start that resumes slot's initial copy, the
// tables copied already (ready), those a start made bare (--create-tables)
// whose copy did not complete (bare), and those being copied.
func resumedCopy(ctx context.Context, tgt *pgx.Conn, slot string) (ready, bare map[schema.TableName]bool, copying []schema.TableName, err error) {
	ready, bare = map[schema.TableName]bool{}, map[schema.TableName]bool{}
	syncs, err := target.LoadTableSyncs(ctx, tgt, slot)
	if err != nil {
		return nil, nil, nil, err
	}
	deferred, err := target.TablesToBuild(ctx, tgt, slot)
	if err != nil {
		return nil, nil, nil, err
	}
	// The user's tables set aside for the copy are not bare tables
	// a start made: never made again.
	setAside, err := target.SetAsideTables(ctx, tgt, slot)
	if err != nil {
		return nil, nil, nil, err
	}
	deferred = slices.DeleteFunc(deferred, func(t schema.TableName) bool { return slices.Contains(setAside, t) })
	for _, s := range syncs {
		t := schema.TableName{Schema: s.Schema, Name: s.Name}
		ready[t] = s.State == target.TableReady
		bare[t] = !ready[t] && slices.Contains(deferred, t)
		if s.State == target.TableCopying {
			copying = append(copying, t)
		}
	}
	return ready, bare, copying, nil
}

// stillBare reports whether a target table is as a start made it for its
// copy: an ordinary table with no primary key. (A table by that name that
// has one is not the one the record was made for: made again by hand.)
func stillBare(t *schema.Table) bool {
	return !t.Partitioned && len(t.PrimaryKey) == 0
}

// CreateTables creates tables on the target, with their schemas and
// the user-defined types they need, in one transaction. A type the target
// already has must be compatible (schema.UserType.Incompatible); a type of
// an extension needs the extension on the target. It returns what it made.
// The tables in again exist and are dropped first, in the same transaction:
// bare tables of this slot whose copy did not complete, made again.
//
// With a slot (a start: nothing streams before its copies are done and
// built), a table is made bare — no primary key, no other index, the
// default replica identity — and what it lacks is recorded for slot in the
// same transaction (target.DeferBuild), to be built once its rows are copied
// (target.BuildAfterCopy). Without (`tables add`: a running engine applies
// schema changes to a pending table before its copy), it is made with its
// primary key and replica identity, and the caller builds its other indexes.
func CreateTables(ctx context.Context, src, tgt *pgx.Conn, tables []*schema.Table, again []schema.TableName, slot string, trust bool, log *slog.Logger) (made Created, err error) {
	types, exts, err := schema.TypesFor(ctx, src, tables)
	if err != nil {
		return made, fmt.Errorf("--create-tables: %w", err)
	}
	if err := checkExtensions(ctx, tgt, exts); err != nil {
		return made, err
	}
	tx, err := tgt.Begin(ctx)
	if err != nil {
		return made, fmt.Errorf("--create-tables: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if len(again) > 0 {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '30s'"); err != nil {
			return made, fmt.Errorf("--create-tables: %w", err)
		}
	}
	for _, t := range again {
		if _, err := tx.Exec(ctx, "DROP TABLE "+t.Quoted()); err != nil {
			return made, fmt.Errorf("--create-tables: make %s again (made bare by an earlier start, its copy did not complete, and it is copied again from empty): drop it: %w", t, err)
		}
		log.Info("making the table again from the source's definition: its copy did not complete", "table", t)
	}
	m := &maker{tx: tx, made: &made, schemas: map[string]bool{}, trust: trust}
	if err := m.types(ctx, types); err != nil {
		return made, err
	}
	if err := m.sequences(ctx, src, tables); err != nil {
		return made, err
	}
	for _, st := range tables {
		if err := m.ensureSchema(ctx, st.Schema); err != nil {
			return made, err
		}
		if slot != "" {
			if err := createBare(ctx, src, tx, st, slot); err != nil {
				return made, err
			}
		} else {
			if _, err := tx.Exec(ctx, schema.CreateTableSQL(st)); err != nil {
				return made, fmt.Errorf("create table %s on the target: %w", st.TableName(), err)
			}
			for _, sql := range schema.ReplicaIdentitySQL(st) {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return made, fmt.Errorf("set the replica identity of %s on the target: %w", st.TableName(), err)
				}
			}
		}
		made.add("table "+st.TableName().String(), "DROP TABLE "+st.TableName().Quoted())
		made.tables = append(made.tables, st.TableName())
	}
	if err := tx.Commit(ctx); err != nil {
		return made, fmt.Errorf("--create-tables: commit: %w", err)
	}
	for _, c := range made.what {
		log.Info("created on the target", "what", c)
	}
	return made, nil
}

// checkExtensions fails unless the target has every extension whose types
// the tables to create use.
func checkExtensions(ctx context.Context, tgt *pgx.Conn, exts []schema.ExtensionNeeded) error {
	for _, x := range exts {
		var ok bool
		if err := tgt.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = $1)", x.Extension).Scan(&ok); err != nil {
			return fmt.Errorf("--create-tables: look up extension %s on the target: %w", x.Extension, err)
		}
		if !ok {
			return fmt.Errorf("--create-tables: %w: type %s comes from extension %s, which the target lacks: CREATE EXTENSION %s on the target",
				schema.ErrExtensionType, x.Type, x.Extension, change.QuoteIdent(x.Extension))
		}
	}
	return nil
}

// maker makes, in CreateTables's transaction tx, what the tables need
// before them, recording each thing it makes in made.
type maker struct {
	tx      pgx.Tx
	made    *Created
	schemas map[string]bool // the schemas looked up (and made) already
	trust   bool            // --trust-table-owners: target.CheckMadeType
}

// ensureSchema makes schema s on the target unless it exists.
func (m *maker) ensureSchema(ctx context.Context, s string) error {
	if m.schemas[s] {
		return nil
	}
	m.schemas[s] = true
	var have bool
	if err := m.tx.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL", change.QuoteIdent(s)).Scan(&have); err != nil {
		return fmt.Errorf("look up schema %s on the target: %w", s, err)
	}
	if have {
		return nil
	}
	if _, err := m.tx.Exec(ctx, schema.CreateSchemaSQL(s)); err != nil {
		return fmt.Errorf("create schema %s on the target: %w", s, err)
	}
	m.made.add("schema "+s, "DROP SCHEMA "+change.QuoteIdent(s))
	return nil
}

// types makes the user-defined types the target lacks (dependencies
// first); one it has must be compatible.
func (m *maker) types(ctx context.Context, types []*schema.UserType) error {
	for _, u := range types {
		have, err := schema.LoadType(ctx, m.tx, u.Schema, u.Name)
		if err != nil {
			return fmt.Errorf("look up type %s on the target: %w", u, err)
		}
		if have != nil {
			if why := u.Incompatible(have); why != "" {
				return fmt.Errorf("--create-tables: type %s exists on the target but differs from the source's: %s", u, why)
			}
			continue
		}
		if err := m.ensureSchema(ctx, u.Schema); err != nil {
			return err
		}
		if _, err := m.tx.Exec(ctx, u.CreateSQL()); err != nil {
			if pgerr.Is(err, pgerr.UndefinedFunction) {
				return fmt.Errorf("create type %s on the target: %w: its definition calls a function the target lacks (repstream makes types, not functions): create the function on the target as the source has it, then start again", u, err)
			}
			return fmt.Errorf("create type %s on the target: %w", u, err)
		}
		if err := target.CheckMadeType(ctx, m.tx, u, m.trust); err != nil {
			return fmt.Errorf("--create-tables: %w", err)
		}
		m.made.add("type "+u.String(), u.DropSQL())
	}
	return nil
}

// sequences makes the sequences the columns' defaults draw from (serial),
// before the tables; identity columns make their own.
func (m *maker) sequences(ctx context.Context, src *pgx.Conn, tables []*schema.Table) error {
	names := make([]schema.TableName, len(tables))
	for i, st := range tables {
		names[i] = st.TableName()
	}
	seqs, err := sequences.Used(ctx, src, names)
	if err != nil {
		return fmt.Errorf("--create-tables: %w", err)
	}
	for _, seq := range seqs {
		sql, identity, err := sequences.CreateSQL(ctx, src, seq)
		if err != nil {
			return fmt.Errorf("--create-tables: %w", err)
		}
		if identity {
			continue
		}
		if err := m.ensureSchema(ctx, seq.Schema); err != nil {
			return err
		}
		if _, err := m.tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create sequence %s on the target: %w", seq, err)
		}
		m.made.add("sequence "+seq.String(), "DROP SEQUENCE IF EXISTS "+seq.Quoted()) // gone with its table if owned by it
	}
	return nil
}

// createBare creates st without its keys and indexes in tx, and records
// them for slot, to be built after its copy.
func createBare(ctx context.Context, src *pgx.Conn, tx pgx.Tx, st *schema.Table, slot string) error {
	bare := *st
	bare.PrimaryKey = nil
	if _, err := tx.Exec(ctx, schema.CreateTableSQL(&bare)); err != nil {
		return fmt.Errorf("create table %s on the target: %w", st.TableName(), err)
	}
	var keys []string
	if pk := schema.PrimaryKeySQL(st); pk != "" {
		keys = append(keys, pk)
	}
	keys = append(keys, schema.ReplicaIdentitySQL(st)...)
	indexes, err := schema.IndexesSQL(ctx, src, st)
	if err != nil {
		return err
	}
	return target.DeferBuild(ctx, tx, slot, st.TableName(), keys, indexes)
}

// SourceBinaryProblem says why the tables' values cannot travel in binary
// whatever the target ("" if they can): a published column whose type is
// not built in (a capture into Kafka, whose applies check their own
// targets).
func SourceBinaryProblem(ctx context.Context, src *pgx.Conn, tables []schema.TableName) (string, error) {
	for _, t := range tables {
		st, err := schema.LoadTable(ctx, src, t.Schema, t.Name)
		if err != nil {
			return "", fmt.Errorf("source table %s: %w", t, err)
		}
		if why := binaryProblem(st, st); why != "" {
			return why, nil
		}
	}
	return "", nil
}

func binaryProblem(st, tt *schema.Table) string {
	for _, c := range st.Columns {
		if c.Generated {
			continue // not published
		}
		i := tt.Column(c.Name)
		if i < 0 {
			// Not on the target yet (added on the source since: its
			// schema change is still in the stream): its values come in
			// the source's type, which binary must carry too, or every
			// run would stop at them and choose binary again.
			if err := target.BinaryCompatible(c.TypeOID, c.TypeOID); err != nil {
				return fmt.Sprintf("column %q of %s (%s), not on the target yet: %v", c.Name, st.TableName(), c.Type, err)
			}
			continue
		}
		if tt.Columns[i].Generated {
			continue
		}
		if err := target.BinaryCompatible(c.TypeOID, tt.Columns[i].TypeOID); err != nil {
			return fmt.Sprintf("column %q of %s (%s): %v", c.Name, st.TableName(), c.Type, err)
		}
	}
	return ""
}

// CheckAddable checks the tables to add: a key or replica identity on the
// source, a compatible target table (created with create; trust:
// --trust-table-owners, for the types it makes), empty unless truncate.
// A column publication's column list leaves out is neither looked for on
// the target nor made there, as at a start (PrepareTables).
func CheckAddable(ctx context.Context, src, tgt *pgx.Conn, slot, publication string, tables []schema.TableName, create, truncate, trust bool, log *slog.Logger) error {
	var missing []*schema.Table
	var problems []string
	for _, n := range tables {
		st, err := schema.LoadTable(ctx, src, n.Schema, n.Name)
		if err != nil {
			return fmt.Errorf("source table %s: %w", n, err)
		}
		cols, err := snapshot.PublishedColumns(ctx, src, publication, n)
		if err != nil {
			return err
		}
		if cols != nil {
			st.Columns = slices.DeleteFunc(st.Columns, func(c schema.Column) bool { return !cols[c.Name] })
		}
		if st.ReplicaIdentity == change.IdentityNothing || st.ReplicaIdentity == change.IdentityDefault && len(st.PrimaryKey) == 0 {
			problems = append(problems, n.String()+": no primary key and no replica identity on the source (ALTER TABLE ... REPLICA IDENTITY FULL)")
			continue
		}
		tt, err := schema.LoadTable(ctx, tgt, n.Schema, n.Name)
		if errors.Is(err, schema.ErrTableNotFound) {
			if !create {
				problems = append(problems, n.String()+": missing on the target (create it, or pass --create-tables)")
				continue
			}
			missing = append(missing, st)
			continue
		}
		if err != nil {
			return fmt.Errorf("target table %s: %w", n, err)
		}
		typeProblems, err := schema.TypeProblems(ctx, src, tgt, st, tt)
		if err != nil {
			return fmt.Errorf("target table %s: %w", n, err)
		}
		for _, p := range append(schema.Incompatible(st, tt), typeProblems...) {
			problems = append(problems, n.String()+": "+p)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("cannot add:\n  %s", strings.Join(problems, "\n  "))
	}
	if len(missing) > 0 {
		// Made whole, not bare (CreateTables with no slot): a running
		// engine applies schema changes to a pending table before its copy,
		// which would leave deferred statements naming old columns.
		if _, err := CreateTables(ctx, src, tgt, missing, nil, "", trust, log); err != nil {
			return err
		}
		for _, st := range missing {
			defs, err := schema.IndexesSQL(ctx, src, st)
			if err != nil {
				return err
			}
			if err := target.BuildIndexes(ctx, tgt, slot, st.TableName(), defs, log); err != nil {
				return fmt.Errorf("--create-tables: %w", err)
			}
		}
	}
	if err := snapshot.CheckTargets(ctx, tgt, tables, truncate, log); err != nil {
		return err
	}
	// Checked the source's (or made from it): the types its columns
	// hold are recorded where absent (repstream.types).
	return recordAddedTypes(ctx, tgt, slot, tables)
}
