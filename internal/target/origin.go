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
// leaves them out, so that two replications in opposite directions do not
// send each change back and forth for ever.
//
// On PostgreSQL 14 to 18 an origin is active in one session at a time
// (pg_replication_origin_session_setup fails with "already active" in
// another), so each session that writes replicated rows takes one of a
// pool the replications into the server share, repstream_<n>: the first
// not in use, made when there is none. The pool is the server's, not a
// slot's: an origin holds the server's origin state (max_replication_slots
// of them before PostgreSQL 18, max_active_replication_origins since)
// until it is dropped, so the pool grows only to the most sessions that
// wrote at once, and a target database dropped without `repstream drop`
// leaves nothing behind that the next replication does not use again.
// Their progress (pg_replication_origin_xact_setup) is not kept: what the
// target has is what repstream.applied and repstream.progress say, in the
// same transaction as the data, and one slot's transactions are spread
// over several origins. `repstream drop` removes the origins no session
// uses (DropIdleOrigins).

// OriginPrefix begins the name of every replication origin repstream makes
// on a target: repstream_0, repstream_1, ...
const OriginPrefix = "repstream_"

// useOriginSQL sets up the first origin of the pool that no other session
// has, made if missing (undefined_object; unique_violation: another
// session just made it). Errors caught in a block are not logged by the
// server. Others (insufficient_privilege, configuration_limit_exceeded:
// no free origin state) end it.
const useOriginSQL = `DO $use$
DECLARE
  n int := 0;
  name text;
BEGIN
  WHILE n < 256 LOOP
    name := 'repstream_' || n;
    BEGIN
      PERFORM pg_catalog.pg_replication_origin_session_setup(name);
      RETURN;
    EXCEPTION
      WHEN object_in_use THEN
        n := n + 1;
      WHEN undefined_object THEN
        BEGIN
          PERFORM pg_catalog.pg_replication_origin_create(name);
        EXCEPTION WHEN unique_violation THEN
          NULL;
        END;
    END;
  END LOOP;
  RAISE EXCEPTION USING ERRCODE = 'configuration_limit_exceeded', MESSAGE = 'repstream: 256 replication origins in use';
END
$use$`

// dropIdleOriginsSQL drops the pool's origins no session has (it stops
// after 16 names in a row that do not exist).
const dropIdleOriginsSQL = `DO $drop$
DECLARE
  missing int := 0;
BEGIN
  FOR n IN 0..255 LOOP
    BEGIN
      PERFORM pg_catalog.pg_replication_origin_drop('repstream_' || n);
      missing := 0;
    EXCEPTION
      WHEN object_in_use THEN
        missing := 0;
      WHEN undefined_object THEN
        missing := missing + 1;
    END;
    EXIT WHEN missing >= 16;
  END LOOP;
END
$drop$`

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

// OriginsGrant is what gives a target role that is not a superuser the use
// of replication origins.
const OriginsGrant = "GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text), pg_replication_origin_session_setup(text), pg_replication_origin_drop(text) TO "

// OriginsWithout says what a target role that may not use replication
// origins means (OriginsAllowed false): logged at start, reported by check.
const OriginsWithout = "the target role may not use replication origins: repstream's writes on the target are not marked as replicated, and a capture of this target passes them on, also with --origin none (two replications in opposite directions would loop)"

// Origins is how one replication's target sessions mark their writes
// (Use): one per engine, shared by its sessions, copies and table syncs.
// Marking is best effort (a role that may not, or a server without free
// origin state, writes unmarked, said once) until Require: a replication
// from this target back into the source was seen at start (two in opposite
// directions), so a session whose writes would go back must not write.
type Origins struct {
	log      *slog.Logger
	required atomic.Bool
	warned   atomic.Bool // the want of origin state was logged
}

// NewOrigins returns a best-effort policy logging to log (nil: silent).
func NewOrigins(log *slog.Logger) *Origins { return &Origins{log: log} }

// Require makes every later session that cannot mark its writes an error.
func (o *Origins) Require() { o.required.Store(true) }

// Required reports whether Require was called.
func (o *Origins) Required() bool { return o != nil && o.required.Load() }

// Use marks every later transaction of conn with a replication origin of
// the pool (repstream_<n>) that no other session has, making it if it does
// not exist; it reports whether it did. A role that may not use origins
// (the start said so: OriginsWithout), or a server without free origin
// state (warned once: max_replication_slots before PostgreSQL 18,
// max_active_replication_origins since), is no error unless Required. A nil
// Origins is best effort and silent.
func (o *Origins) Use(ctx context.Context, conn *pgx.Conn) (bool, error) {
	_, err := conn.Exec(ctx, useOriginSQL)
	switch {
	case err == nil:
		return true, nil
	case pgerr.PermissionDenied(err):
		if o.Required() {
			return false, fmt.Errorf("%s; %sit, or make it a superuser: %w", OriginsWithout, OriginsGrant, err)
		}
		return false, nil
	case pgerr.Is(err, pgerr.ConfigurationLimit):
		const limit = "no free replication origin state on the target: raise max_replication_slots (PostgreSQL 14-17) or max_active_replication_origins (18+) on the target, or lower --apply-parallelism and --snapshot-workers"
		if o.Required() {
			return false, fmt.Errorf("%s; this replication's target replicates back into its source, and a session writing without an origin would send its writes back: %w", limit, err)
		}
		if o != nil && o.log != nil && !o.warned.Swap(true) {
			o.log.Warn(limit+"; sessions beyond it write without an origin, and a capture of this target passes their writes on, also with --origin none",
				"component", "target", "err", err)
		}
		return false, nil
	default:
		return false, fmt.Errorf("set up a replication origin on the target: %w", err)
	}
}

// DropIdleOrigins removes the pool's replication origins that no session
// uses (repstream drop; a running replication makes again those it
// needs). A role that may not is no error.
func DropIdleOrigins(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, dropIdleOriginsSQL); err != nil && !pgerr.PermissionDenied(err) {
		return fmt.Errorf("drop the idle replication origins on the target: %w", err)
	}
	return nil
}

// CommitTimestamps reports whether conn's server keeps commit timestamps
// (track_commit_timestamp), which repstream.local_older reads.
func CommitTimestamps(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var on bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('track_commit_timestamp')::bool").Scan(&on); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return on, nil
}
