// Package schema introspects PostgreSQL catalogs for the tables repstream
// replicates. The same code serves the source (resolving the user's table
// patterns, describing tables for the initial copy and for creating them on
// the target) and the target (matching source columns to target columns by
// name before applying changes).
//
// Every function takes a Querier, which *pgx.Conn and pgx.Tx both satisfy,
// so introspection can run inside a snapshot transaction.
//
// Files:
//
//	schema.go   Table, LoadTable: a table as one catalog sees it; Incompatible (the target table against the source's)
//	convert.go  SilentConversion: a source type a target column would store changed without an error
//	names.go    TableName: a schema-qualified name, quoting and order
//	types.go    UserType: the user-defined types a table's columns need, read, compared (Structure: canonical text) and made
//	typecheck.go TypeProblems: a target column whose user-defined type (of the source's name or another) differs inside from the source's (attributes, a domain's base, a range's subtype, an array of a domain); BaseType: a type through its domains and arrays
//	ddl.go      CreateTableSQL and what --create-tables makes besides
//	alter.go    AlterSQL, RelationAlterSQL: the statements that follow a schema change; TypesChanged
//	added.go    AddedValue: what the source's existing rows got for a column added (--ddl=relation)
//	ddlmsg.go   a schema-change message's definition as a Table
//	partmsg.go  partition messages: hash partitions, bounds
//	pubspec.go  --tables patterns: schemas and tables
package schema
