package target

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// Tables made by CREATE TABLE ... AS and SELECT INTO. The command writes the
// new table's rows before the source's event trigger fires
// (ddl_command_end), so in the transaction its rows come before the
// schema-change message that describes the table. The first row of a table
// the target lacks creates it from the row's Relation message (column names
// and types, the replica-identity key), in the target transaction; the
// CREATE TABLE AS / SELECT INTO message that follows finds it and brings it
// to the source's definition (schema.AlterSQL). A transaction that ends
// without that message — the table was missing on the target for another
// reason — fails at commit naming the table, and nothing of it stays.
// Savepoints (eager apply) keep the set as it was when they were set.

// aheadTables are the tables created from a Relation message in the
// current transaction, awaiting their CREATE message.
type aheadTables struct {
	open  map[schema.TableName]bool
	saved []aheadSave
}

type aheadSave struct {
	name string
	open map[schema.TableName]bool
}

func (a *aheadTables) reset() { a.open, a.saved = nil, a.saved[:0] }

func (a *aheadTables) savepoint(name string) {
	a.saved = append(a.saved, aheadSave{name: name, open: maps.Clone(a.open)})
}

func (a *aheadTables) rollbackTo(name string) {
	for i := len(a.saved) - 1; i >= 0; i-- {
		if a.saved[i].name == name {
			a.open = maps.Clone(a.saved[i].open)
			a.saved = a.saved[:i+1]
			return
		}
	}
}

// created takes note of the CREATE message of tn; it reports whether
// this transaction created tn ahead of it.
func (a *aheadTables) created(tn schema.TableName) bool {
	ahead := a.open[tn]
	delete(a.open, tn)
	return ahead
}

// check fails while a table created ahead has not had its CREATE message.
func (a *aheadTables) check() error {
	if len(a.open) == 0 {
		return nil
	}
	var names []string
	for tn := range a.open {
		names = append(names, tn.String())
	}
	slices.Sort(names)
	return fmt.Errorf("the transaction has rows of %s, which the target lacks, and no CREATE TABLE AS or SELECT INTO of it followed: create the table on the target as it is on the source, then restart (with several targets of one slot through Kafka and no event trigger on the source, --ddl=relation, a table another target's `repstream tables add` published: run `repstream tables add` of it for this target too, then start this apply again)", strings.Join(names, ", "))
}

// createAhead creates the table of rel, which the target lacks, from rel
// (createFromRelation) and expects its CREATE message in the transaction.
func (w *Writer) createAhead(ctx context.Context, rel *change.Relation) (*schema.Table, error) {
	tn := schema.TableName{Schema: rel.Namespace, Name: rel.Name}
	tab, err := w.createFromRelation(ctx, rel)
	if err != nil {
		return nil, fmt.Errorf("rows of %s, which the target lacks, before its schema-change message (CREATE TABLE AS, SELECT INTO): %w", tn, err)
	}
	if w.ahead.open == nil {
		w.ahead.open = map[schema.TableName]bool{}
	}
	w.ahead.open[tn] = true
	w.log.Info("created table on the target from the description of its first rows (CREATE TABLE AS or SELECT INTO: its definition follows them)", "table", tn)
	return tab, nil
}

// createFromRelation creates the table rel describes on the target: its
// columns (built-in types only: a type's OID means nothing on the target),
// NOT NULL and a primary key on the replica-identity key when that is the
// default one, the replica identity.
func (w *Writer) createFromRelation(ctx context.Context, rel *change.Relation) (*schema.Table, error) {
	tn := schema.TableName{Schema: rel.Namespace, Name: rel.Name}
	next, err := w.relColumns(ctx, rel)
	if err != nil {
		return nil, err
	}
	if err := w.flushAll(ctx); err != nil {
		return nil, err
	}
	if err := w.ensureBegun(ctx); err != nil {
		return nil, err
	}
	if err := w.nameUserTypes(ctx, rel, next, func(int) bool { return true }); err != nil {
		return nil, err
	}
	nt := &schema.Table{Schema: tn.Schema, Name: tn.Name, ReplicaIdentity: rel.ReplicaIdentity}
	for i, c := range next {
		if c.Type == "" || rel.Columns[i].TypeOID == 0 {
			return nil, fmt.Errorf("create %s on the target from its description: column %q has a type that is not built in: create the table on the target yourself", tn, c.Name)
		}
		key := rel.Columns[i].Key
		nt.Columns = append(nt.Columns, schema.Column{Name: c.Name, Type: c.Type, NotNull: key})
		if key {
			nt.IdentityKey = append(nt.IdentityKey, c.Name)
		}
	}
	if rel.ReplicaIdentity == change.IdentityDefault {
		nt.PrimaryKey = nt.IdentityKey
	}
	stmts := append([]string{schema.CreateSchemaSQL(tn.Schema), schema.CreateTableSQL(nt)}, schema.ReplicaIdentitySQL(nt)...)
	if err := w.execDDL(ctx, tn, stmts); err != nil {
		return nil, err
	}
	return schema.LoadTable(ctx, w.conn, tn.Schema, tn.Name)
}
