package target

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/provision"
)

// Connect opens an apply connection to the target. The session runs with
// session_replication_role = replica (triggers and foreign-key checks off, as
// native logical replication applies), the value format of
// pgdsn.SetValueFormat (DateStyle ISO, ...) so that the source's text values
// mean the same thing on the target, and the given application_name.
//
// Setting session_replication_role needs a superuser (or, on PostgreSQL 15+,
// a role granted SET on it); a refusal is reported as such. Error messages
// name host, port and database, never the password. A schema repstream that
// another role could use (provision.CheckSchema) is refused.
func Connect(ctx context.Context, dsn, appName string) (*pgx.Conn, error) {
	return ConnectWatched(ctx, dsn, appName, nil)
}

// ConnectWatched is Connect with the connection watched for a silent link
// by watch (LinkWatch), if not nil.
func ConnectWatched(ctx context.Context, dsn, appName string, watch *LinkWatch) (*pgx.Conn, error) {
	cfg, err := pgdsn.ParsePgx(dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to target: %w", err)
	}
	if watch != nil {
		watch.install(cfg)
	}
	where := pgdsn.Describe(&cfg.Config)
	rp := cfg.RuntimeParams
	if appName != "" {
		rp["application_name"] = appName
	}
	// Row-level security that applies to the role would hide rows from
	// apply's updates and deletes and from the copy's checks: a statement
	// it would filter fails instead (pgerr.RowSecurity).
	rp["row_security"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to target %s: %w", where, err)
	}
	if _, err := conn.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("connect to target %s: set session_replication_role: %w", where, pgerr.ReplicationRolePrivilege(cfg.User).Explain(err))
	}
	// Every session checks, before it reads or calls anything there, that
	// no other role could have put its code into the schema repstream.
	if _, err := provision.CheckSchema(ctx, conn, "target"); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("connect to target %s: %w", where, err)
	}
	if watch != nil {
		watch.register(conn)
	}
	return conn, nil
}
