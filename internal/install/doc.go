// Package install creates and removes what repstream makes in the
// databases it replicates between, and checks what that needs: on the
// source the publication, the schema-change event trigger (with the
// partitions' triggers) and the privileges of the source role; on the
// target the tables --create-tables makes (bare, their keys and indexes
// deferred to after their copy: target.DeferBuild) and the privileges of the
// target role; the slot (created, looked up); the checks of tables added to
// a replication (CheckAddable: `tables add` itself is package tablesync's)
// and a wider --tables published; the undo of a first start that fails
// before its slot exists; and `repstream drop`.
//
// It builds on provision (the schema repstream, its owner checks and the
// installation lock, which target uses too) and target (the state
// repstream keeps on the target). The engine decides what a start does
// and calls it; the source side (capture) never imports it.
//
// Files:
//
//	doc.go          this overview
//	publication.go  EnsurePublication (from --tables), CheckPublishes, PublicationTables, PublicationIdents (each table's source identity), Publish
//	ddl.go          the event trigger's SQL (its messages signed: repstream.ddl_emit, repstream.ddl_key; topic signatures checked with repstream.ddl_pubkey: PublishTopicKey, TopicKeys, DDLSignedFrom; enum labels: repstream.ddl_types), SourceRole, InstallDDL, DDLSigning, ReleaseDDL, CheckDDLTriggers: schema-change capture on the source
//	eventtriggers.go ensureEventTrigger (an event trigger made or fixed only when it is not as it should be), TriggerDigest: what tells a replication that the triggers may have been off since it last looked
//	partitions.go   the partitions' triggers' SQL (installed with the event trigger; partition_refresh records one command's tree, truncate_leaf a leaf's TRUNCATE), CheckUntrackedPartitions; dropTruncateTriggers (ReleaseDDL: one leaf per short transaction, waits bounded), lockHolders (who holds a lock, for the error)
//	privileges.go   CheckReplicationAttribute, CheckTablePrivileges: least privilege, every missing GRANT named; CheckApplySourceReads: what an apply --kafka's source role reads in the schema repstream (its start, check --kafka)
//	tables.go       PrepareTables (a start's target tables), CreateTables (--create-tables), CheckAddable (`tables add`)
//	typerecords.go  startTypes: a start's check of the target's types against their records (repstream.types: a type changed by hand stops a resume), and their recording; recordAddedTypes (CheckAddable, tables made)
//	add.go          WidenPublication (a wider --tables), WidenCapturePublication (a capture --kafka's); ConnectBoth (`tables add` and `tables list`: package tablesync)
//	slot.go         ConnectSource, CheckSource, LookupSlot, SlotMissing, WaitSlotInactive, CreateSlot
//	setaside.go     SetAsideForCopy, RestoreSetAside: the user's empty tables' keys and indexes set aside for a copy, and made again
//	undo.go         Undo: what a failed first start made, removed again
//	drop.go         Drop: `repstream drop`
package install
