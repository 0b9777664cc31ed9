package engine

import "github.com/repstream/repstream/internal/config"

// eagerWithConflicts reports whether eager apply may run with this conflict
// handling: not with --on-error park (a transaction applied while in
// progress is not kept in the queue, so it could not be parked), and not
// while skip requests are pending (the transaction to skip might be taken
// eagerly before its LSN is known).
func (e *Engine) eagerWithConflicts(onError config.OnError, skipRequests int) bool {
	switch {
	case e.checkLocal:
		e.log.Info("eager apply is off: with --origin none and track_commit_timestamp on the target, each change is checked against the target's own writes by its transaction's commit time, "+
			"which a transaction still in progress does not have yet: large transactions are applied at their commit", "component", "engine")
		return false
	case onError == config.OnErrorPark:
		e.log.Info("eager apply is off with --on-error park: large transactions are applied at their commit, where they can be parked", "component", "engine")
		return false
	case skipRequests > 0:
		e.log.Info("eager apply is off for this run: transactions are to be skipped on request", "component", "engine", "skip_requests", skipRequests)
		return false
	}
	return true
}
