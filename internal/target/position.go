package target

import (
	"math"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
)

// UnreadPosition is what CommitLSN returns with WriterOptions.DeferPosition:
// the transaction committed, and its WAL position was not read. Any
// pg_current_wal_insert_lsn() the caller reads after CommitLSN returned is
// at or after the commit record (apply's durability reads it with the flush
// position it polls anyway): one statement less in every commit's pipeline.
const UnreadPosition = change.LSN(math.MaxUint64)

// committed reports whether the command tags after a commit's queued
// statements say COMMIT committed: the COMMIT's tag is the last one, or the
// one before the WAL position's SELECT (deferred: none).
func committed(tail []pgconn.CommandTag, deferred bool) bool {
	i := len(tail) - 2
	if deferred {
		i = len(tail) - 1
	}
	return i >= 0 && tail[i].String() != "ROLLBACK"
}
