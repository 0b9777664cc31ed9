package engine

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// noteUnbuiltIndexes sets the engine's indexes_not_built gauge
// (repstream_indexes_not_built) to the number of the source's indexes
// --create-tables could not build on the target that are still missing
// there (target.UnbuiltIndexes). A failure to read them is logged: the
// gauge keeps its value.
func (e *Engine) noteUnbuiltIndexes(ctx context.Context, tgt *pgx.Conn) {
	if e.stats == nil {
		return
	}
	unbuilt, err := target.UnbuiltIndexes(ctx, tgt, e.cfg.Slot)
	if err != nil {
		e.log.Warn("cannot count the indexes not built on the target", "err", err)
		return
	}
	e.stats.Component(stats.CompEngine).Gauge(stats.GaugeIndexesNotBuilt).Store(int64(len(unbuilt)))
}
