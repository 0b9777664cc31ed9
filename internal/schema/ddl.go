package schema

import (
	"strings"

	"github.com/repstream/repstream/internal/change"
)

// CreateTableSQL returns a CREATE TABLE IF NOT EXISTS statement that
// recreates t's columns (types as format_type prints them), NOT NULL
// constraints and primary key.
//
// Generated columns are recreated as generated columns with their expression
// (GENERATED ALWAYS AS (expr) STORED), so the target computes them itself and
// repstream never writes them. If the expression could not be read, the
// column is omitted: a plain nullable column would silently hold NULLs.
//
// Not recreated: defaults, other constraints and indexes, partitioning (a
// partitioned source table becomes an ordinary target table), and the types
// themselves (user-defined types such as enums must exist on the target).
func CreateTableSQL(t *Table) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS ")
	b.WriteString(t.TableName().Quoted())
	b.WriteString(" (")
	n := 0
	sep := func() {
		if n > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n    ")
		n++
	}
	for _, c := range t.Columns {
		if c.Generated && c.GenerationExpr == "" {
			continue
		}
		sep()
		b.WriteString(change.QuoteIdent(c.Name))
		b.WriteByte(' ')
		b.WriteString(c.Type)
		if c.Generated {
			b.WriteString(" GENERATED ALWAYS AS (")
			b.WriteString(c.GenerationExpr)
			b.WriteString(") STORED")
		}
		if c.NotNull {
			b.WriteString(" NOT NULL")
		}
	}
	if len(t.PrimaryKey) > 0 {
		sep()
		b.WriteString("PRIMARY KEY (")
		for i, k := range t.PrimaryKey {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(change.QuoteIdent(k))
		}
		b.WriteString(")")
	}
	b.WriteString("\n)")
	return b.String()
}

// CreateSchemaSQL returns CREATE SCHEMA IF NOT EXISTS for the named schema.
func CreateSchemaSQL(schema string) string {
	return "CREATE SCHEMA IF NOT EXISTS " + change.QuoteIdent(schema)
}
