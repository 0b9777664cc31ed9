package pgerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// RowMissing is the SQLSTATE repstream.expect_row raises (target state
// schema): an UPDATE or DELETE that apply sends found no row on the target.
// Class "RS" is not used by PostgreSQL.
const RowMissing Code = "RS001"

// RowsMany is the SQLSTATE repstream.expect_row raises when an UPDATE or
// DELETE that apply sends, matching the change's key, changed more than
// one row on the target (a key that is not unique there).
const RowsMany Code = "RS002"

// LocalNewer is the SQLSTATE repstream.local_older raises: an UPDATE or
// DELETE that apply sends would change a target row that a transaction of
// the target's own (no replication origin) committed after the source
// transaction did — both sides wrote the row at once (two replications in
// opposite directions, --origin none).
const LocalNewer Code = "RS003"

// DataClass is what a data error is about, for conflict handling: the
// error is caused by the rows or values of the target or the change, not by
// the connection, locks or the configuration. Applying the same change again
// fails again until someone mends the target (or skips the change).
type DataClass string

// The data classes. Unique covers unique and exclusion violations (the
// caller tells an insert's from an update's).
const (
	NotData       DataClass = ""
	Unique        DataClass = "unique"
	RowNotFound   DataClass = "row_missing"
	KeyNotUnique  DataClass = "key_not_unique"
	OriginDiffers DataClass = "origin_differs" // the target's own write of the row is newer (LocalNewer)
	Check         DataClass = "check_violation"
	ForeignKey    DataClass = "foreign_key_violation"
	NotNull       DataClass = "not_null_violation"
	ValueProblems DataClass = "data_error" // class 22: a value the target's type or column refuses
)

// ClassifyData returns the data class of err's server error, or NotData
// (no server error, or one a retry, reconnect or configuration change
// cures: connection, deadlock, privileges, missing objects).
func ClassifyData(err error) DataClass {
	return ClassOf(CodeOf(err))
}

// ClassOf is ClassifyData for a SQLSTATE.
func ClassOf(c Code) DataClass {
	switch {
	case c == UniqueViolation || c == ExclusionViolation:
		return Unique
	case c == RowMissing:
		return RowNotFound
	case c == RowsMany:
		return KeyNotUnique
	case c == LocalNewer:
		return OriginDiffers
	case c == CheckViolation:
		return Check
	case c == ForeignKeyViolation:
		return ForeignKey
	case c == NotNullViolation:
		return NotNull
	case c.Class() == "22":
		return ValueProblems
	}
	return NotData
}

// DetailKey returns the key a constraint error's detail names — "(id)=(5)"
// of "Key (id)=(5) already exists." (unique) or "Key (a)=(1) is not present
// in table ..." (foreign key) — or "".
func DetailKey(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	d, ok := strings.CutPrefix(pgErr.Detail, "Key ")
	if !ok {
		return ""
	}
	for _, end := range []string{" already exists.", " conflicts with existing key ", " is not present in table ", " is still referenced from table "} {
		if i := strings.Index(d, end); i >= 0 {
			return d[:i]
		}
	}
	return ""
}

// Message returns the server error's message (with its detail), or
// err.Error() when err carries no server error.
func Message(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err.Error()
	}
	if pgErr.Detail != "" {
		return pgErr.Message + " (" + pgErr.Detail + ")"
	}
	return pgErr.Message
}
