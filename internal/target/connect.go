package target

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultConnectTimeout bounds connection attempts whose DSN sets no
// connect_timeout: a server that accepts and never answers must not hang us.
const DefaultConnectTimeout = 15 * time.Second

// RedactedDSNError turns a DSN parse error into one that keeps its cause
// ("invalid port", "cannot parse URL") but never the DSN (it may hold a
// password).
func RedactedDSNError(err error) error {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err
	}
	msg := pce.Error()
	// pgconn's message is "cannot parse `<dsn>`: <cause>"; keep the cause.
	if i := strings.Index(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	} else if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return fmt.Errorf("invalid connection string: %s", msg)
}

// Connect opens an apply connection to the target. The session runs with
// session_replication_role = replica (triggers and foreign-key checks off, as
// native logical replication applies), DateStyle ISO, IntervalStyle postgres
// and extra_float_digits 3 so that the source's text values mean the same
// thing on the target, and the given application_name.
//
// Setting session_replication_role needs a superuser (or, on PostgreSQL 15+,
// a role granted SET on it); a refusal is reported as such. Error messages
// name host, port and database, never the password.
func Connect(ctx context.Context, dsn, appName string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to target: %w", RedactedDSNError(err))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	where := fmt.Sprintf("host=%s port=%d dbname=%s", cfg.Host, cfg.Port, cfg.Database)
	rp := cfg.RuntimeParams
	rp["datestyle"] = "ISO"
	rp["intervalstyle"] = "postgres"
	rp["extra_float_digits"] = "3"
	rp["client_encoding"] = "UTF8"
	if appName != "" {
		rp["application_name"] = appName
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to target %s: %w", where, err)
	}
	if _, err := conn.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		conn.Close(context.Background())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			return nil, fmt.Errorf("connect to target %s: the apply user must be a superuser "+
				"(or be granted SET on session_replication_role) to disable triggers and foreign-key checks: %w", where, err)
		}
		return nil, fmt.Errorf("connect to target %s: set session_replication_role: %w", where, err)
	}
	return conn, nil
}
