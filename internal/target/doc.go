// Package target is the target-database side of apply: connecting with the
// session settings apply needs, the progress state that makes apply exactly
// once (repstream.progress and repstream.applied, written in the same target
// transaction as the data), and the Writer that turns captured changes into
// COPY rows for inserts and pipelined prepared statements for updates and
// deletes.
//
// Values are never decoded: pgoutput's values pass straight into COPY rows
// (binary COPY when the stream is binary) and into statement parameters of
// the same format. Text values need the same conventions on both sides,
// which Connect sets (DateStyle ISO, IntervalStyle postgres,
// extra_float_digits 3, UTF8).
//
// Files:
//
//	connect.go    Connect: an apply connection (replica role, text conventions)
//	session.go    OpenSession: an apply session (async commit, apply lock, replication origin) and its Writer
//	origin.go     replication origins: Origins.Use (a session's writes marked with one of a pool the server's replications share, repstream_<n>; required once the target replicates back into the source), OriginsAllowed, DropIdleOrigins, CommitTimestamps
//	lock.go       the per-slot apply lock that closes the crash window of exactly-once; the start lock of an apply --kafka's start and copy (HoldStartLock); ApplyRunning, ApplyConnected
//	lockwait.go   NoteLockWait, ExecNoting: a statement that waits for another session's lock on a target table (a start's emptiness look, a TRUNCATE before a copy) logs who holds it up, after 5 s and every 30 s; the link watch says the same for the apply's statements (linkwatch.go)
//	linkwatch.go  LinkWatch: a call blocked with no byte moving for half --target-timeout makes the watch ask the server what its backend does: working (a lock wait names who holds it up, every 30 s) is left alone; idle, gone, or unreachable closes the connection (pgerr.ErrSilentLink)
//	progress.go   repstream.progress / repstream.applied: the exactly-once record; repstream.replications (Register, Release)
//	tables.go     repstream.tables: each table's sync state per slot (LoadTableSyncs, SetTableState, PendEntering: one not recorded enters the replication, its target rows the user's; PendAll, SetTableReady, SetTableMade, RenameTableRecord)
//	progress_age.go ProgressAge (since the progress record last changed), CopyAge (since the record of the slot's copies last changed): for status
//	replications.go Replications (the slots the target holds state for); TriggerDigest, SetTriggerDigest: the source's schema-change triggers as a slot last saw them working; MadeRecorded, SetMadeRecorded: whether repstream.tables records the tables schema-change messages made (false: registered by an earlier version); SetSource, ReplicationsFrom: each slot's source database, for the loop check
//	writer.go     Writer: options, the transaction's life (Begin, Write, Commit, Rollback)
//	txn.go        txnState: where the transaction stands, BEGIN's placement
//	copybuf.go    inserts buffered as COPY rows per table, sent by COPY or as INSERTs
//	insertrows.go a table's rows as one multi-row INSERT at commit (MultiRowInserts)
//	position.go   UnreadPosition: a commit whose WAL position the caller reads later (DeferPosition)
//	copy.go       COPY row encoding (text and binary) and splitting
//	pipeline.go   the statement pipeline: queued statements, one round trip
//	conflict.go   ConflictError: a change refused for its data, by kind (insert_exists, update_missing, ...)
//	park.go       the error queue's tables, Writer.Park (error queue + applied record), skip requests; repstream.expect_row and repstream.local_older
//	modify.go     updates, deletes and truncates as prepared statements; Writer.SourceCommit (CheckLocalWrites)
//	plan.go       relPlan: per relation, the target table's columns, keys and statements
//	catalog.go    what the Writer reads from the catalog (plans, text-compared columns, folding safety)
//	ddl.go        schema changes: a captured DDL message (its parsed form, change.Change.DDL), or a new Relation version (--ddl=relation); checkGenerated (a generated column's code looked at on an empty probe table before the change computes it for every row); recordMade records a table a message made (SetTableMade), a RENAME moves its record (RenameTableRecord)
//	deferred.go   keys and indexes built after a table's copy, or set aside for it (repstream.deferred_ddl): DeferBuild, BuildAfterCopy; probeIndex: a superuser session first makes an index on the table emptied in a savepoint and looks at its code (CheckOwners), leaving one that runs another role's code unbuilt
//	owners.go     superuserHowSQL, superuserSQL, superuserRights: the session's role has a superuser's rights (a superuser; a member of one, or of pg_execute_server_program or pg_write_server_files; CREATEROLE before 16), which every check here takes for a superuser; CheckOwners: a superuser target role refuses a table in a schema a role that is not a superuser owns (it may drop the table and make its own under the name; public of PostgreSQL 15+: the database's owner), or a table, or a partition of it at any level, whose code (its owner, the functions its defaults, checks, indexes (and their operator classes), partition key, ENABLE ALWAYS/REPLICA triggers and rules call; the types its columns hold, through arrays, ranges, composites and domains (typeTreeSQL), of any kind, and the casts to or from them) a role that is not a superuser controls (--trust-table-owners); OwnerChecks: the tables that passed, shared by a run's writers so each is checked once
//	typerecords.go repstream.types: per slot, the structure of each user-defined type a replicated column holds, as last checked the source's or made so by a schema change (RecordTypes, TablesTypes); TypeDriftError; Writer.checkTypeRecords (before a schema change: a type changed by hand stops it), recordTypesAfter (in its transaction)
//	madetypes.go  CheckMadeType: a superuser target role refuses a domain it made from the source's definition that a role that is not a superuser owns there, whose default or constraints call a function that is not IMMUTABLE (--trust-table-owners)
//	eventtriggers.go CheckEventTriggers: a superuser target role refuses, before it runs DDL there (a start, each schema change, drop, errors), an event trigger whose function a role that is not a superuser owns, if it fires in replica sessions or its owner is not a superuser either (--trust-table-owners)
//	unrecorded.go tables the stream carries that the slot never copied nor saw made, or under a recorded one's name another relation id than the recorded source oid (CopyUnrecorded): recorded pending, copied anew
//	partition.go  partition messages: a partition truncated, attached or detached on the source
//	savepoint.go  savepoints for eager apply's subtransactions
//	errors.go     what an apply error says: retryable, COPY line and column
package target
