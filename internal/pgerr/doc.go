// Package pgerr is the one home of repstream's knowledge of PostgreSQL
// errors: the SQLSTATE codes the engine acts on, by name; which errors a
// retry can cure (a transaction conflict, a lost connection) and which are
// fatal; the data classes of the conflicts --on-error handles; the
// privilege an operation lacks and the statement that grants it; and the
// parsing of an error's context (Where) line, which names the COPY line and
// column or the statement parameter the server could not read.
//
// It is a leaf: it imports pgx's pgconn and nothing of repstream, so the
// source side and the target side share it without importing each other.
//
// SQLSTATE codes: https://www.postgresql.org/docs/current/errcodes-appendix.html
//
// Files:
//
//	doc.go           this overview
//	pgerr.go         Code and the named codes; CodeOf, Is, ConnectionLost, Transient, TxnConflict, TruncateRefused, ...; ErrSilentLink, ErrSourceStopping; Where, CopyWhere, Param
//	conflict.go      RowMissing, RowsMany (repstream.expect_row's codes); DataClass, ClassifyData, ClassOf; DetailKey, Message
//	privilege.go     Privilege and its constructors (SelectPrivilege, WritePrivilege, ...), Explain, Missing, PrivilegeError, QuoteName
//	pgerr_test.go    CopyWhere, Param (FuzzWhere), the classifiers, Transient, TruncateRefused, Privilege.Explain
//	conflict_test.go ClassifyData, DetailKey
package pgerr
