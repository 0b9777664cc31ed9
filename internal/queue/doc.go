// Package queue is the stage between capture and apply: it holds the changes
// of source transactions, accounted in bytes against one memory budget,
// spilling transactions that do not fit to files, and hands committed
// transactions to the apply side in commit order.
//
// # Producer and consumers
//
// One goroutine (capture) is the producer: it calls [Queue.Begin], [Queue.Add],
// [Queue.Commit], [Queue.Abort] and [Queue.AbortInProgress]. Several transactions
// can be in progress at once: protocol v2 interleaves stream blocks of
// different xids, and a normal Begin…Commit transaction can arrive between
// stream blocks. A streamed transaction has no Begin: its first Add opens it.
//
// Any number of goroutines (apply) are consumers: [Queue.Next],
// [Queue.TryNext], [Queue.Pending], and per transaction [Txn.Changes] and
// [Txn.Release].
//
// # Memory budget and spilling
//
// Every change is accounted [change.Change.Size] bytes from Add until its
// transaction is released by the consumer, aborted, or spilled. Add keeps a
// change in memory if it fits; otherwise, when committed transactions hold at
// least half the budget, it waits for the consumer to release them (flow
// control); otherwise it spills the largest in-progress transaction to its
// file (possibly the one being added to) until the change fits. A spilled
// transaction stays spilled: its later changes go straight to its file. See
// [Queue] for the invariants and why the flow-control wait always ends.
//
// # Spill file format
//
// One file per spilled transaction, named txn-<xid>-<seq>.spill in the spill
// directory, is a sequence of records; all integers are little-endian:
//
//	record:
//	+--------------+----------------------+------------------------+
//	| length : u32 | crc32c(payload) : u32 | payload : length bytes |
//	+--------------+----------------------+------------------------+
//
//	payload (31 fixed bytes, then the variable parts):
//	 off size field
//	   0    1 op            'I' 'U' 'D' 'T' 'M' (schema change: its JSON is the new tuple's one text value)
//	   1    1 oldKind       0, 'K' or 'O'
//	   2    1 truncateOpts  change.TruncateCascade | change.TruncateRestartIdentity
//	   3    4 xid           Change.Xid (the subtransaction, or 0)
//	   7    8 lsn           Change.LSN
//	  15    4 rel           relation reference (below), 0 = none
//	  19    4 oldLen        bytes of the old tuple (0 = no old tuple)
//	  23    4 newLen        bytes of the new tuple (0 = no new tuple)
//	  27    4 nTrunc        number of truncated relations
//	  31      old tuple     pgoutput TupleData, exactly as received
//	          new tuple     pgoutput TupleData, exactly as received
//	          nTrunc × u32  relation references of a TRUNCATE
//
// A relation reference is 1 + the index of the *change.Relation in a table
// owned by the Queue. The table only grows (relations are immutable and few),
// so a change read back points at the very same *change.Relation it was
// added with. The length must cover exactly the fixed part and the variable
// parts it announces, the CRC (Castagnoli) must match, the tuples must be
// well-formed and the references must exist: otherwise reading fails with an
// error wrapping [ErrCorrupt] that names the file and the record's offset.
//
// The overhead is 39 bytes per change against at least
// [change.ChangeOverhead] accounted bytes, so a spill file is never larger
// than the accounted bytes of the changes it holds. Files live only as long as
// their transaction: [Txn.Release], [Queue.Abort] and [Queue.Close] delete
// them, and [New] deletes the spill files (txn-<xid>-<seq>.spill, regular
// files) left in the directory by a previous run (the directory belongs to
// one Queue, which holds it locked: below).
//
// # Spill directory
//
// The spill directory must be private to the process's user: created 0700
// when missing, refused when it exists as a symbolic link, another user's,
// or with any group or other permission. It is opened once and used through
// that descriptor; a spill file is created O_EXCL, mode 0600, and read back
// through the descriptor it was written with, never reopened by name. The
// directory is locked (flock) from [New] to [Queue.Close], or for longer by
// the caller ([LockSpillDir], Options.Lock: the engine, for its whole run):
// a second process or Queue using it is refused at once
// ([ErrSpillDirInUse]), and [RemoveSpillDir] leaves it alone. Every
// error of the directory or its files matches [ErrSpill]: a local fault,
// which the engine does not retry. See dir.go for the rules and
// [DefaultSpillDir] for the default.
//
// # Statistics
//
// Component "queue": items/bytes added, transactions committed, state Waiting
// during flow control, counters "flow_control_waits" and "flow_control_ns",
// gauges "memory_bytes", "txns_in_progress", "txns_committed_pending".
// Component "spill": items/bytes = changes and bytes written to spill files,
// counters "changes", "bytes" (written), "accounted_bytes" (of the spilled
// changes), "txns", "read_bytes", gauge "files".
package queue
