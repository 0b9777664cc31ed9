// Package apply takes committed source transactions from the queue and applies
// them to the target: the coordinator groups and schedules them, workers write
// them through target.Writer, and the Watermark turns "applied on the target"
// into the position the replication slot may be acknowledged with.
//
// # Goroutines and ownership
//
//	goroutine        owns                                         talks through
//	coordinator (1)  coordinator: hasher, dependency tracker,      queue Next/TryNext, the work channel,
//	                 the group being built, group numbering        commitLog.committedBelow
//	worker (N)       one apply session (target.Writer on its own   work channel, commitLog wait/markDone,
//	                 connection), its folder                       Watermark.Visible, durability.add, Txn.Release,
//	                                                               Eager.Commit for an eager group, the other
//	                                                               workers' session pids (waitEarlier)
//	eager (1)        one apply session, the eager transaction      items from capture (bounded channel),
//	                                                               Watermark.VisibleLow; Commit from a worker
//	durability (1)   a target connection polling                   Watermark.Done
//	                 pg_current_wal_flush_lsn()
//
// Applier.Run starts the coordinator, the workers and durability under one
// errgroup; the first error cancels them all, and Run returns after every one
// has returned. Eager runs under the engine's errgroup (capture feeds it).
//
// # Files
//
//	apply.go        Options, Applier (Run), workers: wait, apply, retry, commit
//	coordinator.go  grouping, write sets, catch-up fill, dispatch
//	linger.go       the group wait: a group waits a little for more at a steady rate
//	deps.go         keyHasher (write sets), depTracker (last writers), commitLog
//	collapse.go     folding repeated changes to one key within a group
//	conflict.go     data conflicts: one transaction at a time, then stop or park (--on-error); skip requests
//	eager.go        Eager: a large streamed transaction applied before its commit
//	durable.go      durability: Done once the target's WAL is flushed past a commit
//	watermark.go    Watermark: the low watermark acknowledged to the slot
//	tables.go       TableFilter (changes of tables copied at their own snapshot), Quiesce, Eager.Hold
package apply
