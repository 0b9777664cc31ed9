package pgerr

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Code is a SQLSTATE: five characters, the first two naming the class.
type Code string

// Class is a code's first two characters ("40" transaction rollback).
func (c Code) Class() string {
	if len(c) < 2 {
		return ""
	}
	return string(c[:2])
}

// The codes repstream acts on.
const (
	// Class 08: connection exception.
	ConnectionException       Code = "08000"
	ConnectionDoesNotExist    Code = "08003"
	ConnectionFailure         Code = "08006"
	CannotConnectNow          Code = "57P03" // the server is starting up or in recovery
	AdminShutdown             Code = "57P01"
	CrashShutdown             Code = "57P02"
	TooManyConnections        Code = "53300"
	ConfigurationLimit        Code = "53400" // e.g. no free replication origin state
	InsufficientPrivilege     Code = "42501"
	InvalidPassword           Code = "28P01"
	InvalidAuthorization      Code = "28000"
	UndefinedTable            Code = "42P01"
	UndefinedObject           Code = "42704"
	ObjectInUse               Code = "55006" // a replication slot held by another session
	ObjectNotInPrerequisite   Code = "55000"
	DeadlockDetected          Code = "40P01"
	SerializationFailure      Code = "40001"
	UniqueViolation           Code = "23505"
	ExclusionViolation        Code = "23P01"
	DiskFull                  Code = "53100"
	QueryCanceled             Code = "57014"
	IdleSessionTimeout        Code = "57P05"
	ReadOnlySQLTransaction    Code = "25006"
	ProgramLimitExceeded      Code = "54000"
	FeatureNotSupported       Code = "0A000"
	InvalidTextRepresentation Code = "22P02"
	UndefinedColumn           Code = "42703"
	DatatypeMismatch          Code = "42804"
	NotNullViolation          Code = "23502"
	ForeignKeyViolation       Code = "23503"
	CheckViolation            Code = "23514"
	InvalidCatalogName        Code = "3D000" // database does not exist
	InvalidParameterValue     Code = "22023"
	LockNotAvailable          Code = "55P03" // lock_timeout, or NOWAIT
	DependentObjectsExist     Code = "2BP01" // DROP without CASCADE: other objects depend on it
	UndefinedFunction         Code = "42883"
)

// CodeOf returns err's SQLSTATE, or "" when err carries no server error.
func CodeOf(err error) Code {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	return Code(pgErr.Code)
}

// Is reports whether err carries a server error with one of codes.
func Is(err error, codes ...Code) bool {
	c := CodeOf(err)
	if c == "" {
		return false
	}
	for _, k := range codes {
		if c == k {
			return true
		}
	}
	return false
}

// SlotInUse reports whether err says a replication slot is active for
// another session (a walsender that has not noticed its client is gone).
func SlotInUse(err error) bool { return Is(err, ObjectInUse) }

// PermissionDenied reports an insufficient-privilege error.
func PermissionDenied(err error) bool { return Is(err, InsufficientPrivilege) }

// RowSecurity reports a query refused because row-level security would
// have filtered it (a session with row_security = off: "query would be
// affected by row-level security policy").
func RowSecurity(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == string(InsufficientPrivilege) && strings.Contains(pe.Message, "row-level security")
}

// TxnConflict reports a deadlock or serialization failure: the transaction
// was chosen as a victim and succeeds when run again.
func TxnConflict(err error) bool { return Is(err, DeadlockDetected, SerializationFailure) }

// UniqueConflict reports a unique or exclusion violation.
func UniqueConflict(err error) bool { return Is(err, UniqueViolation, ExclusionViolation) }

// TruncateRefused reports a TRUNCATE (or the lock it needs) refused for a
// reason that leaves the table as it was and a plain INSERT or COPY still
// possible: a foreign key of another table references it (feature not
// supported), the role lacks the TRUNCATE privilege, or the lock was not
// had within lock_timeout.
func TruncateRefused(err error) bool {
	return Is(err, FeatureNotSupported, InsufficientPrivilege, LockNotAvailable)
}

// Detail returns the server's DETAIL of err ("" for none), which names
// what the message does not: for a TRUNCATE refused by a foreign key, the
// referencing table.
func Detail(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Detail
	}
	return ""
}

// ConnectionLost reports whether err means the connection is gone or the
// server cannot serve it now — the causes a reconnect can cure: a class 08
// error, an administrator or crash shutdown, a server starting up or in
// recovery, too many connections, or a network error below the protocol
// (pgconn's own classification). Authentication, privilege and missing
// objects are not among them, nor is a local file error (an *fs.PathError:
// a full disk, a read-only file system, permissions, EIO), which a bare
// syscall.Errno would otherwise pass for a network error (Errno has the
// Timeout and Temporary methods of net.Error).
func ConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	switch c := CodeOf(err); {
	case c.Class() == "08":
		return true
	case c == AdminShutdown || c == CrashShutdown || c == CannotConnectNow || c == TooManyConnections || c == IdleSessionTimeout:
		return true
	case c != "":
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		// A refused or reset connection attempt; authentication failures
		// carry a SQLSTATE and were handled above.
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		if _, bare := netErr.(syscall.Errno); !bare {
			return true
		}
	}
	return pgconn.SafeToRetry(err)
}

// Where returns the context (Where) lines of err's server error, or nil.
func Where(err error) []string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Where == "" {
		return nil
	}
	return strings.Split(pgErr.Where, "\n")
}

// CopyContext is what a COPY FROM error's context line says:
// "COPY t, line N[, column c][: value]".
type CopyContext struct {
	Line   int    // 1-based data line, 0 when not named
	Column string // "" when not named
}

// CopyWhere parses the COPY context line of err, if any.
func CopyWhere(err error) (CopyContext, bool) {
	for _, ln := range Where(err) {
		if !strings.HasPrefix(ln, "COPY ") {
			continue
		}
		// The quoted value after ": " may itself contain ", line " or
		// ", column ".
		head := ln
		if k := strings.Index(head, ": "); k >= 0 {
			head = head[:k]
		}
		var cc CopyContext
		if i := strings.LastIndex(head, ", line "); i >= 0 {
			digits := head[i+len(", line "):]
			if k := strings.IndexByte(digits, ','); k >= 0 {
				digits = digits[:k]
			}
			if n, err := strconv.Atoi(digits); err == nil && n > 0 {
				cc.Line = n
			}
		}
		if i := strings.Index(head, ", column "); i >= 0 {
			cc.Column = head[i+len(", column "):]
		}
		return cc, true
	}
	return CopyContext{}, false
}

// Param returns the 1-based statement parameter err's context names
// ("unnamed portal parameter $2 = ..."), or 0.
func Param(err error) int {
	for _, ln := range Where(err) {
		_, after, ok := strings.Cut(ln, "parameter $")
		if !ok {
			continue
		}
		end := 0
		for end < len(after) && after[end] >= '0' && after[end] <= '9' {
			end++
		}
		if n, err := strconv.Atoi(after[:end]); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// ErrSilentLink marks a connection that is open but silent: the peer did
// not answer within the configured timeout (a NAT or firewall dropped the
// link's state, a frozen network, a host gone without a reset). The engine
// treats it like a lost connection.
var ErrSilentLink = errors.New("connection open but silent")

// ErrSourceStopping marks a replication connection repstream closed
// because the source is shutting down and waits for it: its walsender
// asks for the client's position again and again until everything sent
// is confirmed, which a target still applying (a long lock, a large
// transaction) would hold up. The engine treats it like a lost
// connection; what was not confirmed is sent again after the restart.
var ErrSourceStopping = errors.New("the source is shutting down and waits for repstream")

// Transient reports whether a reconnect can cure err: a lost connection
// (ConnectionLost), a silent one (ErrSilentLink), or a replication slot
// still held by a walsender that has not yet noticed its client is gone.
// Everything else — authentication, privileges, missing or invalidated
// slots, publications and tables, schema mismatches, a full disk (the
// server's, or a local file error such as a spill file's ENOSPC), bad
// data — is fatal: a retry would fail the same way.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrSilentLink) || errors.Is(err, ErrSourceStopping) || SlotInUse(err) {
		return true
	}
	if Is(err, DiskFull) {
		return false
	}
	return ConnectionLost(err)
}
