// Package schema introspects PostgreSQL catalogs for the tables repstream
// replicates. The same code serves the source (resolving the user's table
// patterns, describing tables for the initial copy and for creating them on
// the target) and the target (matching source columns to target columns by
// name before applying changes).
//
// Every function takes a Querier, which *pgx.Conn and pgx.Tx both satisfy,
// so introspection can run inside a snapshot transaction.
package schema
