// Package tablesync owns the per-table sync positions (repstream.tables,
// target/tables.go): a table copied at its own snapshot — the rest of an
// interrupted initial copy, a table added with `tables add` or a wider
// --tables — is copied from the exported snapshot of a temporary slot,
// whose consistent point L is the table's sync LSN. Apply skips the table's
// changes in source transactions ending at or below L and applies the later
// ones (apply.TableFilter).
//
// A Syncer holds what the copies need (the configuration, the logger, the
// stats registry, the engine's AfterCopy); the engine makes one and calls
// it at start, while it streams (Watch, with apply's Pause injected) and
// before a run that caught up ends. `tables add` (AddTables) records the
// tables it adds pending there and `tables list` (ListTables) reads it.
//
// Files:
//
//	doc.go        this overview
//	tablesync.go  Syncer, New, Options: the tables copied at their own snapshot (syncTables; one added while running checked as `tables add` checks it: checkAdded; one entering the replication otherwise, whose target table holds rows, refused without --truncate: checkEntering), ResumeCopy, SyncPending, GivePendingUp (a pending table the source no longer has), LoadFilter, MarkCopying, RecordCopied
//	watch.go      Pause, Watch: the tables `tables add` records, copied while the engine runs (apply paused)
//	publication.go the publication poll (config.PublicationPoll): what it publishes (every mode); without the event trigger, its tables against the recorded ones and their source identities (FollowIdents), PendUnrecorded; CopyMade (a table a resumed start made: dropped on the target since, or new to it); with it, CheckDDLTriggers (each poll) and TriggersAtStart (each start): the triggers off, or touched since the target last saw them working, and pendUnseen (a published table not recorded once apply has passed where the poll first saw it: added in a session with the trigger off), recordMadeByEarlier (a replication an earlier version ran)
//	usertypes.go  followTypes, FollowTypes: without the event trigger, an enum or composite type a table holds altered on the source (each poll against the poll before; the first and the end of a run against the target's): the run stops, the table recorded pending
//	tables.go     EmptyCopied, CheckReady
//	add.go        AddTables: `tables add` (the checks: install.CheckAddable)
//	list.go       ListTables, TableRow: `tables list`
package tablesync
