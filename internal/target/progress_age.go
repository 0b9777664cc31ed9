package target

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ProgressAge returns how long ago, by the target's clock, the slot's
// progress record last changed (repstream.progress.updated_at: the last
// time the low watermark rose, the initial copy's state changed or the
// record was made). ok is false when the target has no record for the slot
// (or no repstream state at all).
func ProgressAge(ctx context.Context, conn *pgx.Conn, slot string) (age time.Duration, ok bool, err error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('repstream.progress') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, false, fmt.Errorf("age of the progress of slot %q: %w", slot, err)
	}
	if !exists {
		return 0, false, nil
	}
	var secs float64
	err = conn.QueryRow(ctx, `SELECT extract(epoch FROM now() - updated_at)::float8 FROM repstream.progress WHERE slot = $1`, slot).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("age of the progress of slot %q: %w", slot, err)
	}
	return time.Duration(secs * float64(time.Second)), true, nil
}

// CopyAge returns how long ago, by the target's clock, the record of the
// slot's copies last changed: its progress record (ProgressAge) or one of
// its rows of repstream.tables (a table's copy begun, or done). A copy
// changes nothing else that others can see until it ends, so a copy
// whose record is old is copying a large table, or its apply stopped
// (ApplyConnected tells which). ok as ProgressAge.
func CopyAge(ctx context.Context, conn *pgx.Conn, slot string) (age time.Duration, ok bool, err error) {
	if age, ok, err = ProgressAge(ctx, conn, slot); err != nil || !ok {
		return age, ok, err
	}
	var secs *float64
	if err := conn.QueryRow(ctx, `SELECT CASE WHEN to_regclass('repstream.tables') IS NOT NULL THEN
		(SELECT extract(epoch FROM now() - max(updated_at))::float8 FROM repstream.tables WHERE slot = $1) END`, slot).Scan(&secs); err != nil {
		return 0, false, fmt.Errorf("age of the copy record of slot %q: %w", slot, err)
	}
	if secs != nil {
		age = min(age, time.Duration(*secs*float64(time.Second)))
	}
	return age, true, nil
}
