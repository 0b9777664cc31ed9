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
