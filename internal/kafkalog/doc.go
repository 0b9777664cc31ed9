// Package kafkalog is the record format and the client side of Kafka mode:
// `repstream capture --kafka` writes a replication slot's pgoutput messages
// as records of topic repstream.<slot> (Writer); `repstream apply --kafka`
// reads them back and feeds them to a decoder (Reader).
//
// # Record format
//
// A record's value is an 18-byte header, then a body of the header's kind.
// Integers are big-endian and unsigned.
//
//	offset  size  field
//	0       2     magic "RS"
//	2       1     format version: 2
//	3       1     kind: 'D' frames, 'F' fragment, 'E' epoch marker
//	4       4     epoch: the capture session that wrote the record
//	8       8     last commit: end LSN of the last transaction whose commit is in this record or an earlier one
//	16      1     proto: the pgoutput protocol version of the messages
//	17      1     flags: bit 0 Binary (the values are in pgoutput's binary format); bit 1 InStream (the first message is inside a stream block begun in an earlier record); other bits written 0, ignored
//
// Version 1 records (17 bytes of header, no flags: text values) are read
// as well.
//
// A 'D' body is one or more frames, each one whole pgoutput message:
//
//	0       8     walStart: the WAL position of the message's XLogData
//	8       4     length n, > 0
//	12      n     the message
//
// An 'F' body is one piece of a message too large for a record:
//
//	0       8     walStart
//	8       4     total: the message's length
//	12      4     offset of the chunk in the message
//	16      n     chunk: n > 0, offset+n <= total
//
// An 'E' body (epoch marker) starts a capture session:
//
//	0       8     Start: every transaction ending after it follows the marker
//	8       ...   SystemID, Database, Slot, Publication: each a u16 length and that many bytes
//	end-1   1     flags: bit 0 DDLMessages (repstream.ddl messages captured); other bits written 0, ignored
//
// and its record's Kafka header repstream.database_oid (DatabaseOIDHeader)
// holds the source database's OID, 4 bytes: with SystemID and the name
// it names the source (Epoch.SameSource), which the name does not alone
// (a database dropped and made again under it). A header, not a field of the value:
// an apply of an earlier version refuses a longer marker, and ignores
// headers. A marker without it (an earlier capture's) has OID 0, checked
// by system identifier and name.
//
// A capture session's records all have its value format: one of the same
// epoch in another is refused (ErrCorrupt).
//
// A value that is none of these (too short, another magic, version or
// kind, a truncated or empty frame, a fragment past its total, trailing
// bytes after a marker) is refused with an error wrapping ErrCorrupt.
//
// # Invariants
//
//   - One partition: the topic has exactly one, and records hold the
//     slot's messages in the order it sent them, so transactions in commit
//     order (streamed ones interleaved as pgoutput interleaves them). One
//     idempotent acks=all producer writes them: no gaps, no repeats.
//   - Fencing: the producer is transactional, its id the topic's name; a
//     capture session loads its producer id (Writer.Fence) once it holds
//     the slot and before it reads the tail, so that no earlier capture
//     of the slot (one frozen while this one took the slot) writes after
//     that tail. The Kafka transactions only serve the fence: readers
//     read uncommitted records, and pass over the control records (the
//     commit and abort markers, which take offsets) as Tail does.
//   - A record holds whole frames of one or more transactions: at a
//     transaction boundary (a Commit, Stream Stop, Stream Commit or Stream
//     Abort) it is produced at once when it holds 64 KiB or when no
//     boundary came in the 5 ms before (a quiet stream), else within 5 ms
//     with the transactions that came meanwhile. While the capture is more
//     than 4 MiB of WAL behind the source's position (Writer.SourceWAL,
//     read every quarter second), a backlog, those are 512 KiB and 50 ms:
//     the transactions are old already, and each record and produce
//     request costs the brokers and every reader about as much as a
//     hundred kilobytes of data. Its header's last commit is the end of
//     the newest commit in it or before it.
//   - Self-describing records: before a relation's first change (Insert,
//     Update, Delete, Truncate) in each record and in each stream block,
//     the Writer re-sends the Relation message it last saw for it unless
//     the record (or block) carries one already, so a consumer can start at
//     any record; consumers start at the record of a transaction's Begin,
//     and take the Relation messages (outside streams) of a transaction
//     whose start they did not read: the Writer does not repeat one in the
//     record for the transactions after it. After a schema change message
//     that names a table otherwise (ALTER SCHEMA ... RENAME, which pgoutput
//     does not describe again), the Writer repeats the table's Relation
//     message under its new names: inside a stream, for that streamed
//     transaction and, once it commits, for the ones after it.
//   - Epochs: each capture session first writes an 'E' record, with an
//     epoch above every earlier one (NextEpoch), and stamps every record
//     with it. A consumer drops records of an epoch below one already seen;
//     at a marker it drops what the previous session left open (the new
//     session sends those transactions again from their Begin). A restarted
//     capture skips the transactions whose commit comes before the last
//     commit of the topic's last record (Tail): the topic holds them.
//   - Fragments: a message larger than a record is written as 'F' records
//     in a row, offsets 0 to total, nothing between them; an Assembler puts
//     them back and refuses any other order.
//
// # Resuming
//
// The Reader keeps resumePoints: the first offset of every open
// transaction (the record of its Begin, or of its first Stream Start),
// and the end LSN and first offset of each committed one. ResumeOffset(low)
// is the minimum of the next offset to read, the first offsets of the open
// transactions and those of the committed transactions ending above low
// (the applied low watermark); commits at or below low are forgotten, a
// commit of a transaction never begun is ignored. A later run reads from
// that offset and drops the messages of transactions whose Begin it did
// not read: they must be applied already (else ErrTrimmed).
//
// A new target's first run reads from CopyStart: the record of the last
// commit ending before the capture slot's restart_lsn, read before the
// target's copy began (recorded then: a later run that finishes the copy
// reads from there too). Every transaction that commits after the copy's
// snapshots began at or after that restart_lsn, and the capture writes the
// messages in the order the walsender decodes them, so all of them come
// after that commit; the records' last commit never decreases (a capture
// session never writes a commit the topic holds, and the fence keeps an
// earlier session from writing after a later one), so binary searches
// find it.
//
// Files:
//
//	doc.go      this overview: the record format, its invariants, resuming
//	record.go   the format: Header, Frame, Fragment, Epoch, their Append* encoders and Parse*/Frames decoders, ErrCorrupt; EpochHeaders, ParseEpochRecord (the marker's database OID header); Assembler (fragments put back together)
//	writer.go   Writer (capture --kafka's raw sink): Fence, then the epoch marker (Start) and Kafka transactions committed every CommitEvery; messages batched into records up to each transaction boundary (larger while catching up: SourceWAL), fragments, Relation messages re-sent, Acked once the brokers hold a commit, flow control, its stats; Producer
//	reader.go   Reader (apply --kafka): records to a Decoder (a schema-change message it finds not signed: ErrCorrupt), epochs, transactions whose start was not read dropped, ResumeOffset, Position, its stats; CheckStart
//	copystart.go CopyStart: where a new target's first run reads from (binary searches on the records' last commit); LastEpoch, Source, Epoch.SameSource, CheckSource: the topic's last session read this source (system identifier and database OID); Epoch.SamePublication: an apply's --publication is its
//	lag.go      FirstMissingCommit: the oldest commit of the topic a target lacks, from its offset (status --kafka's lag)
//	offsets.go  resumePoints: the offset a later run reads from for an applied low watermark
//	topic.go    Topic, Brokers, NewProducer (transactional: TxnTimeout, CommitEvery; Compression), NewAdmin, EnsureTopic (TopicInfo.Fits: one partition, not compacted, max.message.bytes ≥ MaxBatchBytes), Offsets, TopicID (a topic made again has another), Tail (past control records), NextEpoch; CheckTransactions (WaitedOut: the coordinator searched for 30 s, not waited for again)
//	access.go   what each half needs of the brokers' ACLs, checked before anything is made: CheckTopicAccess (the Metadata request's authorized operations), CheckTransactionalID (a producer with the capture's transactional id), ErrAccess
//	cluster.go  Cluster (the brokers and how to reach them: every client is made from one; its dialer reads and writes through raw system calls, rawsock), Security (TLS, SASL), NewCluster, EnvPassword
package kafkalog
