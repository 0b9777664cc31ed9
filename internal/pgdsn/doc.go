// Package pgdsn is the one connection helper shared by the source and the
// target side: it parses a user's connection string with repstream's
// defaults (a connect timeout; the session settings that fix how values are
// written and read as text, a safe search_path, JIT off: SetValueFormat),
// turns parse errors into ones that never repeat the string (it may hold a
// password), and names a server in messages without its password. A key
// that is neither a libpq keyword nor an accepted server parameter is an
// error naming the closest valid key (keys.go).
//
// Files:
//
//	doc.go           this overview
//	pgdsn.go         Parse (pgconn), ParsePgx (pgx), SetValueFormat, SafeSearchPath, Describe, RedactError
//	keys.go          the accepted keys (libpq, pgx, server parameters), UnknownKeyError, checkKeys and the closest key by edit distance
//	pgdsn_test.go    timeouts, redacted errors, unknown keys, the pinned search_path and jit
//	password_test.go the password sources (passfile, PGPASSFILE, ~/.pgpass, PGPASSWORD) reach both parsers
package pgdsn
