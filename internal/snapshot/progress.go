package snapshot

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
)

// Each table of the copy reports to its own component, "copy:schema.table"
// (stats.CopyPrefix): items and bytes are the rows and COPY bytes copied so
// far, counted as they stream; gauges rows_estimate and bytes_estimate are
// pg_class's figures (reltuples, relpages, summed over partitions) when the
// table's copy starts, and done is 1 once it is complete. The monitoring
// (progress log, /metrics, the live page) reads them.

// tableProgress returns the table's copy component, creating it.
func tableProgress(reg *stats.Registry, t schema.TableName) *stats.Component {
	return reg.Component(stats.CopyPrefix + t.String())
}

// estimateTable records the planner's size of t (summed over partitions) as
// the copy's estimate; a failure only leaves the estimate at 0.
func estimateTable(ctx context.Context, src *pgx.Conn, t schema.TableName, st *stats.Component) error {
	var rows, size int64
	err := src.QueryRow(ctx, `SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint,
			coalesce(sum(c.relpages::bigint), 0) * current_setting('block_size')::bigint
		FROM pg_catalog.pg_class c
		WHERE c.oid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::regclass) UNION SELECT $1::regclass)`, t.Quoted()).Scan(&rows, &size)
	if err != nil {
		return fmt.Errorf("estimate the size of %s: %w", t, err)
	}
	st.Gauge(stats.GaugeRowsEstimate).Store(rows)
	st.Gauge(stats.GaugeBytesEstimate).Store(size)
	return nil
}
