package provision

import (
	"context"
	"fmt"
)

// Identity says which database of which running server a connection
// reached. Two connections reached the same database when every field is
// equal: the cluster's system identifier alone is shared by a cluster and
// its copies (a base backup made into a new server keeps it, and so do the
// database OIDs), the postmaster's start time tells the running servers
// apart.
type Identity struct {
	SystemID    string // pg_control_system().system_identifier, "" where the role may not read it
	Started     string // pg_postmaster_start_time(), as text
	Port        string // the server's port setting
	DatabaseOID uint32 // the database's OID
	Database    string // current_database()
}

const identitySQL = `
SELECT pg_catalog.pg_postmaster_start_time()::text, pg_catalog.current_setting('port'),
       d.oid, d.datname::text
FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`

// Identify reads the identity of the database q is connected to.
func Identify(ctx context.Context, q Querier) (Identity, error) {
	var id Identity
	if err := q.QueryRow(ctx, identitySQL).Scan(&id.Started, &id.Port, &id.DatabaseOID, &id.Database); err != nil {
		return Identity{}, fmt.Errorf("identify the database: %w", err)
	}
	// Readable by PUBLIC on every supported version unless revoked; without
	// it the start time and port still tell servers apart.
	var canRead bool
	if err := q.QueryRow(ctx, "SELECT pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')").Scan(&canRead); err != nil {
		return Identity{}, fmt.Errorf("identify the database: %w", err)
	}
	if canRead {
		if err := q.QueryRow(ctx, "SELECT system_identifier::text FROM pg_catalog.pg_control_system()").Scan(&id.SystemID); err != nil {
			return Identity{}, fmt.Errorf("identify the database: %w", err)
		}
	}
	return id, nil
}

// Same reports whether a and b are one database of one running server.
func (a Identity) Same(b Identity) bool {
	if a.SystemID != "" && b.SystemID != "" && a.SystemID != b.SystemID {
		return false
	}
	return a.Started == b.Started && a.Port == b.Port && a.DatabaseOID == b.DatabaseOID && a.Database == b.Database
}

// SameDatabase returns an error when src and tgt are connected to the same
// database: repstream would replicate the database into itself (with
// --truncate it would empty the source's tables; without, re-apply its own
// changes for ever). The error names the database and the way out.
func SameDatabase(ctx context.Context, src, tgt Querier) error {
	s, err := Identify(ctx, src)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	t, err := Identify(ctx, tgt)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if !s.Same(t) {
		return nil
	}
	sys := ""
	if s.SystemID != "" {
		sys = ", system identifier " + s.SystemID
	}
	return fmt.Errorf("the source and the target are the same database (%q, OID %d, on the server at port %s%s): "+
		"repstream would replicate it into itself; point --target at another database", s.Database, s.DatabaseOID, s.Port, sys)
}
