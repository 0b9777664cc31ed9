package engine

import (
	"strconv"

	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// declareSeries creates, at the start of Run, the registry entries behind
// every labelled counter the shipped alerts and dashboard use (deploy/), so
// that /metrics exports them at 0 from the first scrape: an alert on
// increase(...) sees the first event, which a series born with it at 1
// hides. They are the conflict counter of every kind (target.
// ConflictKinds), and the pipeline's stages and workers known from the
// configuration — capture, queue, spill, coordinator, the apply workers,
// eager apply — each idle until it starts. The initial copy's per-table
// series come with their table's copy.
func (e *Engine) declareSeries() {
	for _, name := range []string{"capture", "queue", "spill", "coordinator"} {
		e.stats.Component(name)
	}
	for i := range max(e.cfg.ApplyParallelism, 1) {
		e.stats.Component("apply." + strconv.Itoa(i))
	}
	if e.cfg.Eager {
		e.stats.Component("eager")
	}
	conflicts := e.stats.Component(stats.CompConflicts)
	for _, k := range target.ConflictKinds() {
		conflicts.Counter(string(k))
	}
}
