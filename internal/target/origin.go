package target

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/repstream/repstream/internal/pgerr"
)

// Replication origins mark the target transactions that carry replicated
// changes, as native subscriptions mark theirs: a capture of the target
// with --origin none (pgoutput's origin option, or capture's own filter)
// passes them over, so that two replications in opposite directions do not
// send each change back and forth for ever.
//
// On PostgreSQL 14 to 18 an origin is active in one session at a time
// (pg_replication_origin_session_setup fails with "already active" in
// another), so each session that writes replicated rows takes one of its
// slot's origins, repstream_<slot>_<n>: the first not in use, made when
// there is none. Their progress (pg_replication_origin_xact_setup) is not
// kept: what the target has is what repstream.applied and
// repstream.progress say, in the same transaction as the data, and a slot's
// transactions are spread over several origins. `repstream drop` removes
// them (DropOrigins).

// OriginPrefix begins the name of every replication origin repstream makes
// on a target.
const OriginPrefix = "repstream_"

// maxOrigins bounds a slot's origins: more sessions than this write
// without one.
const maxOrigins = 256

// OriginName is the name of a slot's n-th origin.
func OriginName(slot string, n int) string { return fmt.Sprintf("%s%s_%d", OriginPrefix, slot, n) }

// OriginsAllowed reports whether the role of q may mark its sessions with
// replication origins (a superuser, or EXECUTE granted on
// pg_replication_origin_create and pg_replication_origin_session_setup).
func OriginsAllowed(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT pg_catalog.has_function_privilege('pg_catalog.pg_replication_origin_create(text)', 'EXECUTE')
	AND pg_catalog.has_function_privilege('pg_catalog.pg_replication_origin_session_setup(text)', 'EXECUTE')`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up the target role's rights on replication origins: %w", err)
	}
	return ok, nil
}

// OriginsWithout says what a target role that may not use replication
// origins means (OriginsAllowed false): logged at start, reported by check.
const OriginsWithout = "the target role may not use replication origins: repstream's writes on the target are not marked as replicated, and a capture of this target passes them on, also with --origin none (two replications in opposite directions would loop); make it a superuser or GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text), pg_replication_origin_session_setup(text), pg_replication_origin_drop(text) TO it"

// capacityWarned: the warning that sessions write without an origin for
// want of origin state was logged once.
var capacityWarned atomic.Bool

// UseOrigin marks every later transaction of conn with one of slot's
// replication origins, making it if it does not exist, and returns its
// name. It returns "" without an error when the role may not use origins
// (the start said so: OriginsWithout) or when the server has no free
// origin state (warned once: max_replication_slots before PostgreSQL 18,
// max_active_replication_origins since).
func UseOrigin(ctx context.Context, conn *pgx.Conn, slot string, log *slog.Logger) (string, error) {
	for n := 0; n < maxOrigins; n++ {
		name := OriginName(slot, n)
		for made := false; ; made = true {
			_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_session_setup($1)`, name)
			switch {
			case err == nil:
				return name, nil
			case pgerr.PermissionDenied(err):
				return "", nil
			case pgerr.Is(err, pgerr.ObjectInUse):
				// Active in another session: the next one.
			case pgerr.Is(err, pgerr.UndefinedObject) && !made:
				if err := createOrigin(ctx, conn, name); err != nil {
					return "", err
				}
				continue
			case pgerr.Is(err, pgerr.ConfigurationLimit):
				if log != nil && !capacityWarned.Swap(true) {
					log.Warn("no free replication origin state on the target: this session's writes are not marked as replicated, and a capture of this target passes them on, also with --origin none; raise max_replication_slots (PostgreSQL 14-17) or max_active_replication_origins (18+) on the target",
						"component", "target", "origin", name, "err", err)
				}
				return "", nil
			default:
				return "", fmt.Errorf("set up replication origin %q on the target: %w", name, err)
			}
			break
		}
	}
	return "", nil
}

// createOrigin makes origin name, unless another session just did.
func createOrigin(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_create($1)`, name)
	if err != nil && !pgerr.UniqueConflict(err) {
		return fmt.Errorf("create replication origin %q on the target: %w", name, err)
	}
	return nil
}

// DropOrigins removes slot's replication origins (repstream drop); none
// made, or a role that may not, is no error: it returns how many it
// dropped.
func DropOrigins(ctx context.Context, conn *pgx.Conn, slot string) (int, error) {
	for n := 0; n < maxOrigins; n++ {
		name := OriginName(slot, n)
		_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_drop($1)`, name)
		switch {
		case err == nil:
		case pgerr.Is(err, pgerr.UndefinedObject) || pgerr.PermissionDenied(err):
			return n, nil
		default:
			return n, fmt.Errorf("drop replication origin %q on the target: %w", name, err)
		}
	}
	return maxOrigins, nil
}
