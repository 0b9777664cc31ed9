// Package engine runs the replication pipeline for one slot: it checks the
// source and the target, has what the replication needs made when it is
// missing (the publication, the event trigger, the target tables: package
// install), decides from what it found what to do with the slot — create
// it (with the initial copy), resume an interrupted copy, adopt it, or
// refuse (planStart) — and does it, then runs capture → queue → apply until
// it is stopped, fails, or — with --until-caught-up — has applied
// everything that was committed when it started.
//
// Files:
//
//	doc.go        this overview
//	engine.go     Engine, New, run: the start-up's steps (connect and check, the record, the publication, the tables, the plan carried out), stream (one streaming attempt, with the tables' watch: package tablesync, apply's pause injected), createSlot (with the initial copy)
//	plan.go       planStart: what a start does with the slot, a pure function of what it found; resuming
//	ddl.go        ddlMode, setUpDDL: how schema changes are followed (the trigger itself: install/ddl.go); ddlKeyNow: the key that signs its messages, read again; readDDLKey: an apply's key (its source role's grants checked at start: install.CheckApplySourceReads)
//	reconnect.go  runResilient, streamResilient: a transient fault ridden through; resume
//	recorded.go   recordedAcker, persistLoop: what capture acknowledges, the watermark persisted; checkRestoredTarget
//	partitions.go resync, copyPendingAtEnd: partitions attached with rows, copied again
//	relddl.go     addedColumnOnSource: ADD COLUMN's value for rows before it (--ddl=relation)
//	sequences.go  SyncSequences, syncSequencesAtEnd
//	caughtup.go   pushWALPastStop: --until-caught-up's stop reached
//	conflicts.go  eagerWithConflicts
//	indexes.go    noteUnbuiltIndexes
//	monitor.go    Run: the monitor (HTTP, progress, probes: package probe, lag) around run, or around runHalf
//	kafka.go      runHalf: the halves of Kafka mode (package kafkalog): runCapture (capture --kafka: provisionCapture, then the slot into the topic, acknowledged as the brokers hold it, the source's WAL position read beside it: probe.WALLoop), runApply (apply --kafka: waitCaptureSlot, copyForKafka, its own initial copy; streamKafka, the topic into the target, eager apply included; kafkaPersister, the offset recorded with the low watermark); probeBrokers; reseedAdvice; kafkaStatus; kafkaRetriable, kafkaRetry: a passing error of the brokers waited out, also before the first start has reached its servers
//	origin.go     prepareOrigins: at a start, the source recorded on the target (target.SetSource), the target role's rights on replication origins said once, the start's connection marked; refuseLoop: --origin any into a database that replicates into the source is refused, and two directions without track_commit_timestamp on both servers (needCommitTimestamps); prepareLocalChecks: --origin none with commit timestamps on the target checks apply's updates and deletes against the target's own writes
//	progress.go   the progress line and the initial copy's progress
//	series.go     declareSeries: every labelled counter at 0 from the start
//	status.go     Engine.Status, Flushed, ProgressLine: the running engine's positions; Drop (install.Drop)
package engine
