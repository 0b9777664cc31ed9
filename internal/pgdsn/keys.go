package pgdsn

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A connection string's keys. pgconn.ParseConfig passes every key it does
// not know to the server as a run-time parameter, so a typo (`prot=5433`,
// `?sslmod=require`) is not an error there: it either vanishes into the
// startup packet or fails later with a server message that does not say it
// was a typo. checkKeys rejects such keys before anything connects, naming
// the closest valid one.
//
// Which run-time parameters a server accepts cannot be known offline (it
// depends on the version and the extensions loaded), so a key is accepted
// when it is a libpq connection keyword, a pgx option, or one of the common
// server parameters in serverParams; anything else is an error. A parameter
// outside the list can still be set through `options` (`options=-c name=value`).

// libpqKeywords are libpq's connection keywords (PostgreSQL 18,
// https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS).
var libpqKeywords = []string{
	"host", "hostaddr", "port", "dbname", "user", "password", "passfile",
	"require_auth", "channel_binding", "connect_timeout", "client_encoding",
	"options", "application_name", "fallback_application_name", "keepalives",
	"keepalives_idle", "keepalives_interval", "keepalives_count",
	"tcp_user_timeout", "replication", "gssencmode", "sslmode",
	"sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword",
	"sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni",
	"requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
	"min_protocol_version", "max_protocol_version", "krbsrvname", "gsslib",
	"gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
	"scram_client_key", "scram_server_key", "oauth_issuer", "oauth_client_id",
	"oauth_client_secret", "oauth_scope",
}

// pgxKeys are the keys pgx understands besides libpq's.
var pgxKeys = []string{
	"database", "servicefile", "krbspn", "statement_cache_capacity",
	"description_cache_capacity", "default_query_exec_mode",
}

// serverParams are the server run-time parameters (GUCs) accepted as DSN
// keys: the ones people commonly set per connection. Documented in README.md
// ("Connection strings").
var serverParams = []string{
	"search_path", "timezone", "datestyle", "intervalstyle", "extra_float_digits",
	"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout",
	"idle_session_timeout", "work_mem", "maintenance_work_mem", "temp_buffers",
	"synchronous_commit", "role", "default_transaction_isolation",
	"default_transaction_read_only", "standard_conforming_strings", "bytea_output", "array_nulls", "xmloption",
	"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
	"jit", "log_min_duration_statement", "log_statement", "wal_sender_timeout",
	"logical_decoding_work_mem", "lc_messages", "lc_monetary", "lc_numeric", "lc_time",
}

// validKeys is every accepted key, sorted.
var validKeys = func() []string {
	all := slices.Concat(libpqKeywords, pgxKeys, serverParams)
	slices.Sort(all)
	return slices.Compact(all)
}()

// UnknownKeyError is a connection string key that is neither a libpq
// keyword nor an accepted server parameter.
type UnknownKeyError struct {
	Key     string // as written
	Closest string // the most similar valid key, "" when none is close
}

func (e *UnknownKeyError) Error() string {
	msg := fmt.Sprintf("unknown connection parameter %q", e.Key)
	if e.Closest != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", e.Closest)
	}
	return msg + "; other server settings go in options='-c name=value'"
}

// checkKeys returns an error for every key of params (the run-time
// parameters pgconn took from the connection string and the environment)
// that is not valid. Server parameter names are case-insensitive.
func checkKeys(params map[string]string) error {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var errs []error
	for _, k := range keys {
		if _, ok := slices.BinarySearch(validKeys, strings.ToLower(k)); ok {
			continue
		}
		errs = append(errs, &UnknownKeyError{Key: k, Closest: closest(strings.ToLower(k))})
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid connection string: %w", errors.Join(errs...))
}

// closest returns the valid key nearest to k in edit distance, if it is
// near enough to be a plausible typo (at most a third of its length, at
// least 2 edits allowed), or a valid key that k is a prefix of.
func closest(k string) string {
	best, bestD := "", 1<<30
	for _, v := range validKeys {
		if d := editDistance(k, v); d < bestD {
			best, bestD = v, d
		}
	}
	if bestD <= max(2, len(k)/3) {
		return best
	}
	for _, v := range validKeys {
		if len(k) >= 3 && strings.HasPrefix(v, k) {
			return v
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
