package target

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgerr"
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

// EndPreviousApply terminates the target backends that still hold slot's
// apply lock: sessions of an earlier attempt of this engine whose link went
// silent, which the server keeps — with their open transactions and row
// locks — until it notices the client is gone, possibly hours later. Only
// the engine's own reconnect calls it: a fresh start waits for them
// instead (WaitForPreviousApply), since they might belong to another
// engine. Terminating a backend cannot split a commit: it either completed
// (and its progress record is there) or it rolls back. A backend that may
// not be terminated (another role) is left to WaitForPreviousApply.
func EndPreviousApply(ctx context.Context, conn *pgx.Conn, slot string, log *slog.Logger) error {
	key := uint64(applyLockKey(slot))
	rows, err := conn.Query(ctx, `SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.state, ''),
			coalesce(pg_terminate_backend(l.pid), false)
		FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
		  AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		  AND l.pid <> pg_backend_pid()`, int64(key>>32), int64(key&0xffffffff))
	if err != nil {
		return fmt.Errorf("end the previous apply sessions of slot %q: %w", slot, err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int32
		var app, state string
		var ended bool
		if err := rows.Scan(&pid, &app, &state, &ended); err != nil {
			return fmt.Errorf("end the previous apply sessions of slot %q: %w", slot, err)
		}
		if log != nil {
			log.Info("ended a target session left by the lost connection", "component", "engine", "pid", pid,
				"application_name", app, "state", state, "terminated", ended)
		}
	}
	if err := rows.Err(); err != nil {
		if pgerr.PermissionDenied(err) {
			return nil // left to WaitForPreviousApply
		}
		return fmt.Errorf("end the previous apply sessions of slot %q: %w", slot, err)
	}
	return nil
}

// ApplyRunning reports whether an apply of slot holds sessions on the
// target now (the shared apply lock is held).
func ApplyRunning(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	return lockHeld(ctx, conn, slot, applyLockKey(slot))
}

// startLockKey is the advisory lock key of a slot's apply starts (Kafka
// mode: HoldStartLock).
func startLockKey(slot string) int64 {
	h := fnv.New64a()
	h.Write([]byte("repstream start " + slot))
	return int64(h.Sum64())
}

// HoldStartLock marks conn as the session of an apply's start until it
// closes: an apply --kafka holds it from its checks through its initial
// copy, until its apply sessions (the apply lock) take over. Shared, so
// it never waits; it only tells a copy under way from one whose apply
// stopped (ApplyConnected).
func HoldStartLock(ctx context.Context, conn *pgx.Conn, slot string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", startLockKey(slot)); err != nil {
		return fmt.Errorf("take the start lock of slot %q: %w", slot, err)
	}
	return nil
}

// ApplyConnected reports whether an apply of slot has a session on the
// target now: its apply sessions (ApplyRunning) or its start's, through
// its initial copy (HoldStartLock).
func ApplyConnected(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	return lockHeld(ctx, conn, slot, applyLockKey(slot), startLockKey(slot))
}

// lockHeld reports whether a session holds one of the advisory locks
// keys in conn's database.
func lockHeld(ctx context.Context, conn *pgx.Conn, slot string, keys ...int64) (bool, error) {
	var held bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		AND ((classid::bigint << 32) | objid::bigint) = ANY ($1) AND granted)`, keys).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("look for the apply sessions of slot %q: %w", slot, err)
	}
	return held, nil
}
