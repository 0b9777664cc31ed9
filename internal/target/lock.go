package target

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// The apply lock closes a window in exactly-once after a crash of the engine:
// a target backend that had already received a COMMIT from a killed engine
// still completes it, possibly after the next engine read the progress
// record — which would then apply that transaction again. So every session
// that writes applied transactions holds a shared advisory lock keyed by the
// slot for its whole life (a backend releases it only when it exits, after
// finishing what it received), and an engine takes the lock exclusively
// before it reads the progress record.

// applyLockKey is the advisory lock key of a slot's apply sessions.
func applyLockKey(slot string) int64 {
	h := fnv.New64a()
	h.Write([]byte("repstream apply " + slot))
	return int64(h.Sum64())
}

// HoldApplyLock marks conn as an apply session of slot until it closes.
func HoldApplyLock(ctx context.Context, conn *pgx.Conn, slot string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", applyLockKey(slot)); err != nil {
		return fmt.Errorf("take the apply lock of slot %q: %w", slot, err)
	}
	return nil
}

// WaitForPreviousApply returns once no session of an earlier run of slot is
// left on the target (they may still be finishing a commit they received),
// or fails after wait: then another engine is applying for the slot.
func WaitForPreviousApply(ctx context.Context, conn *pgx.Conn, slot string, wait time.Duration, log *slog.Logger) error {
	key := applyLockKey(slot)
	start := time.Now()
	for logged := false; ; {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
			return fmt.Errorf("check for a previous run's target sessions of slot %q: %w", slot, err)
		}
		if ok {
			break
		}
		if time.Since(start) > wait {
			return fmt.Errorf("target sessions of another repstream for slot %q are still open after %s: stop it first "+
				"(see pg_stat_activity, application_name repstream-apply.*)", slot, wait)
		}
		if !logged && log != nil {
			log.Info("waiting for target sessions of a previous run to finish", "slot", slot)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		return fmt.Errorf("release the apply lock of slot %q: %w", slot, err)
	}
	return nil
}
