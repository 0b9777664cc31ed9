// Package slotstatus is `repstream status`: a slot's positions, read from
// the source (the slot) and the target (repstream's record of it), and the
// verdict for scripts — healthy, or why the slot cannot serve the next run.
//
// Files:
//
//	doc.go     this overview
//	status.go  SlotStatus, Status, Format: the positions, for people and for --format json; readTarget: what the target records (its progress, its copies, whether an apply is connected)
//	health.go  SlotMissingError, Verdict, SlotStatus.Check, readSlotHealth: the verdict
//	kafka.go   KafkaStatus, AddKafka: a target's place in the slot's topic (status --kafka): caught up by LSN against the topic's last commit, its lag, stale for --max-inactive, a copy stopped with its apply (copyStopped); Place, CopyState: what status prints of it; TargetInTopic: the same for check --kafka
package slotstatus
