package pgdsn

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/rawsock"
)

// DefaultConnectTimeout bounds connection attempts whose DSN sets no
// connect_timeout: a server that accepts and never answers must not hang us.
const DefaultConnectTimeout = 15 * time.Second

// Parse parses dsn into a pgconn configuration (for a replication or raw
// protocol connection), with DefaultConnectTimeout when it sets none and the
// value format of SetValueFormat.
func Parse(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, RedactError(err)
	}
	SetValueFormat(cfg.RuntimeParams)
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if err := checkKeys(cfg.RuntimeParams); err != nil {
		return nil, err
	}
	cfg.DialFunc = rawsock.Dial(cfg.DialFunc)
	return cfg, nil
}

// ParsePgx parses dsn into a pgx configuration, with DefaultConnectTimeout
// when it sets none and the value format of SetValueFormat.
func ParsePgx(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, RedactError(err)
	}
	SetValueFormat(cfg.RuntimeParams)
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if err := checkKeys(cfg.RuntimeParams); err != nil {
		return nil, err
	}
	cfg.DialFunc = rawsock.Dial(cfg.DialFunc)
	return cfg, nil
}

// SetValueFormat fixes, in a connection's startup parameters, the session
// settings that decide how values are written as text: DateStyle ISO (under
// the server's own "SQL, DMY", 05/11/2026 would be read as 11 May
// elsewhere), IntervalStyle postgres, extra_float_digits 3 (shortest exact
// floats whatever the server's setting), bytea_output hex, lc_monetary C
// and UTF8. Every
// session that reads or writes replicated values as text uses it: the
// walsender (pgoutput's text values), the initial copy's source and target
// sessions, the apply sessions — a server's or database's own settings then
// never change a value on its way; so do the catalog sessions (column
// defaults and CHECKs are deparsed with DateStyle too). Parse and ParsePgx
// apply it to every connection repstream opens.
func SetValueFormat(rp map[string]string) {
	rp["datestyle"] = "ISO"
	rp["intervalstyle"] = "postgres"
	rp["extra_float_digits"] = "3"
	rp["bytea_output"] = "hex"
	rp["lc_monetary"] = "C" // money's text form follows it ("1.234,56 €" under de_DE)
	rp["client_encoding"] = "UTF8"
	// Every name repstream's own statements use is either pg_catalog's
	// or written with its schema. A schema on the search_path where
	// another role may create (public, "$user") would let that role
	// shadow a built-in with a closer match — unnest(text[]) over
	// pg_catalog's unnest(anyarray), an aggregate, an operator — and run
	// its code as repstream's role (a superuser, often): nothing is
	// searched there (TestSearchPathHijack). A DSN's search_path is
	// overridden.
	rp["search_path"] = SafeSearchPath
	// Literals repstream writes into its statements (a column's default,
	// an enum label) would end early at a backslash with this off, as a
	// database's owner may set it for every session there
	// (TestStandardConformingStringsOff); schema.QuoteLiteral is safe
	// either way, this keeps every other literal so too.
	rp["standard_conforming_strings"] = "on"
	// And how text is read back: with array_nulls off an array's NULL
	// element is read as the string "NULL"; with xmloption document an
	// XML fragment (content, which the source took) is refused. A
	// database's owner may set either for every session there
	// (TestTargetInputSettings).
	rp["array_nulls"] = "on"
	rp["xmloption"] = "content"
	// repstream's catalog queries (recursive over pg_depend, pg_type and
	// pg_inherits) are cheap but estimated dear, above jit_above_cost:
	// compiling one took 150 ms on an idle server and over 500 ms on a
	// busy one, for a 10 ms query, at every table's first change in every
	// apply worker. Nothing repstream runs gains from JIT (row changes,
	// COPY, small catalog reads).
	rp["jit"] = "off"
}

// SafeSearchPath is the search_path of every session repstream opens:
// pg_catalog, and the session's own temporary schema last (so that no
// temporary object shadows anything either).
const SafeSearchPath = "pg_catalog, pg_temp"

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
