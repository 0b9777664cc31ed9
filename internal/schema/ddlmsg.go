package schema

import (
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
)

// Schema-change messages: what repstream's event trigger on the source
// (install/ddl.go) emits, inside the transaction that changed a table, as
// pg_logical_emit_message(true, 'repstream.ddl', json) — their wire format
// and their one decoding are package ddlmsg's. Capture turns each into a
// change.OpDDL change carrying the parsed message; apply turns it into the
// statements that make the target table match (AlterSQL, CreateSQLFromDDL).

// NameFromDDL returns the schema-qualified name of a table in a
// schema-change message.
func NameFromDDL(t *ddlmsg.Table) TableName { return TableName{Schema: t.Schema, Name: t.Name} }

// TableFromDDL returns a schema-change message's definition as a Table,
// for CreateTableSQL and ReplicaIdentitySQL.
func TableFromDDL(t *ddlmsg.Table) *Table {
	tab := &Table{Schema: t.Schema, Name: t.Name, PrimaryKey: t.PrimaryKey, Partitioned: t.Kind == "p",
		PrimaryKeyInclude: t.PrimaryKeyInclude, PrimaryKeyDeferrable: t.PrimaryKeyDeferrable}
	if t.Ident != "" {
		tab.ReplicaIdentity = t.Ident[0]
	}
	if tab.ReplicaIdentity == change.IdentityDefault || tab.ReplicaIdentity == change.IdentityIndex {
		tab.IdentityKey = t.PrimaryKey
	}
	for _, c := range t.Columns {
		col := Column{Name: c.Name, Type: c.Type, NotNull: c.NotNull, TypeOID: c.TypeOID}
		if c.Generated != nil {
			col.Generated, col.GenerationExpr = true, *c.Generated
		}
		if c.Default != nil {
			col.HasDefault, col.Default = true, *c.Default
		}
		if c.Identity != "" {
			col.Identity = c.Identity[0]
		}
		tab.Columns = append(tab.Columns, col)
	}
	return tab
}

// CreateSQLFromDDL returns the statements that create the table described by a
// CREATE TABLE message on the target: its schema, the sequences its
// columns own (serial: their defaults draw from them), the table
// (CreateTableSQL) and its replica identity. The column types must exist on
// the target. Secondary indexes are not part of it.
func CreateSQLFromDDL(t *ddlmsg.Table) []string {
	stmts := []string{CreateSchemaSQL(t.Schema)}
	for _, c := range t.Columns {
		if c.Sequence != nil && c.Identity == "" {
			stmts = append(stmts, "CREATE SEQUENCE IF NOT EXISTS "+*c.Sequence)
		}
	}
	tab := TableFromDDL(t)
	stmts = append(stmts, CreateTableSQL(tab))
	stmts = append(stmts, ReplicaIdentitySQL(tab)...)
	for _, c := range t.Columns {
		if c.Sequence != nil && c.Identity == "" {
			stmts = append(stmts, "ALTER SEQUENCE "+*c.Sequence+" OWNED BY "+tab.TableName().Quoted()+"."+change.QuoteIdent(c.Name))
		}
	}
	return stmts
}
