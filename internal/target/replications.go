package target

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Replications lists the slots whose state the target holds (registered
// in repstream.replications, or with a progress row), sorted; none when
// the target has no repstream state. conn comes from Connect, which has
// checked that the schema repstream can be trusted.
func Replications(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var progress, registry bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('repstream.progress') IS NOT NULL, to_regclass('repstream.replications') IS NOT NULL`).
		Scan(&progress, &registry); err != nil {
		return nil, fmt.Errorf("look up repstream's state on the target: %w", err)
	}
	if !progress {
		return nil, nil
	}
	q := `SELECT slot FROM repstream.progress`
	if registry {
		q += ` UNION SELECT slot FROM repstream.replications`
	}
	var slots []string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(array_agg(slot ORDER BY slot), '{}') FROM (`+q+`) s`).Scan(&slots); err != nil {
		return nil, fmt.Errorf("list the replications on the target: %w", err)
	}
	return slots, nil
}
