// Package pgdsn is the one connection helper shared by the source and the
// target side: it parses a user's connection string with repstream's
// defaults (a connect timeout), turns parse errors into ones that never
// repeat the string (it may hold a password), and names a server in messages
// without its password. A key that is neither a libpq keyword nor an
// accepted server parameter is an error naming the closest valid key
// (keys.go).
package pgdsn

import (
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

// Parse parses dsn into a pgconn configuration (for a replication or raw
// protocol connection), with DefaultConnectTimeout when it sets none.
func Parse(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, RedactError(err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if err := checkKeys(cfg.RuntimeParams); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParsePgx parses dsn into a pgx configuration, with DefaultConnectTimeout
// when it sets none.
func ParsePgx(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, RedactError(err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if err := checkKeys(cfg.RuntimeParams); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Describe names a server for messages, without the password:
// "host=H port=P dbname=D user=U".
func Describe(cfg *pgconn.Config) string {
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
}

// RedactError turns a DSN parse error into one that keeps its cause
// ("invalid port", "cannot parse URL") but never the DSN. Other errors are
// returned as they are.
func RedactError(err error) error {
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
