package kafkalog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgoutput"
	"github.com/repstream/repstream/internal/stats"
)

// Defaults of WriterOptions.
const (
	DefaultMaxRecord   = 900 << 10 // under the broker's default message.max.bytes (1 MiB)
	DefaultMaxInFlight = 64 << 20
	// DefaultBatchBytes: a record that reaches this size at a transaction
	// boundary is produced at once; a smaller one waits up to
	// DefaultLinger for the transactions that follow, unless none came in
	// the DefaultLinger before that boundary either (a quiet stream: the
	// wait would most likely gather nothing). 5 ms is Kafka's own
	// producer default (linger.ms, since Kafka 4.0): at 1,000 transactions
	// a second it costs the capture, the apply and the brokers a fifth to a
	// third less CPU than 1 ms did, and the commit → visible p99 less
	// (docs/bench/README.md).
	DefaultBatchBytes = 64 << 10
	DefaultLinger     = 5 * time.Millisecond
	// While the capture is more than DefaultCatchUpDistance of WAL behind
	// the source's (SourceWAL), its transactions are old already and
	// records are larger and fewer: a record is produced at a boundary
	// once it holds DefaultCatchUpBytes, else at most DefaultCatchUpLinger
	// later. Every record and every produce request costs the brokers
	// (and each reader) about as much as a hundred kilobytes of data.
	DefaultCatchUpDistance = 4 << 20
	DefaultCatchUpBytes    = 512 << 10
	DefaultCatchUpLinger   = 50 * time.Millisecond
)

// Producer is what a Writer needs of its client (*kgo.Client: NewProducer,
// transactional).
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
	BufferedProduceBytes() int64
	ProducerID(ctx context.Context) (int64, int16, error)
	BeginTransaction() error
	Flush(ctx context.Context) error
	EndTransaction(ctx context.Context, commit kgo.TransactionEndTry) error
}

// WriterOptions configure a Writer.
type WriterOptions struct {
	Client Producer // a producer: acks=all, transactional (NewProducer)
	Topic  string
	Epoch  uint32 // this capture session's (Start sets it and writes its marker)
	Proto  uint8  // the slot's pgoutput protocol version
	Binary bool   // the slot streams values in binary (Header.Binary)
	// LastCommit is the end LSN of the last transaction the topic holds
	// (Tail): a transaction whose commit comes before it is in the topic
	// already and is not written again.
	LastCommit change.LSN
	// Acked is called (on the client's goroutine) with the end LSN of each
	// transaction once every record of it is acknowledged by the brokers,
	// or at once for one skipped as already in the topic.
	Acked       func(end change.LSN)
	MaxRecord   int           // bytes of a record's value at most (DefaultMaxRecord)
	MaxInFlight int64         // bytes produced and not yet acknowledged at most (DefaultMaxInFlight)
	BatchBytes  int           // DefaultBatchBytes
	Linger      time.Duration // DefaultLinger
	// While catching up (SourceWAL): DefaultCatchUpDistance,
	// DefaultCatchUpBytes, DefaultCatchUpLinger.
	CatchUpDistance int64
	CatchUpBytes    int
	CatchUpLinger   time.Duration
	CommitEvery     time.Duration // how often the Kafka transaction is committed (CommitEvery)
	Logger          *slog.Logger
	// Stats is the "kafka" component: counters records, bytes, acked_records,
	// waits_ns (waiting for the brokers to acknowledge: flow control);
	// gauge unacked_bytes.
	Stats *stats.Component
}

// Writer writes a slot's messages to the topic as records (capture
// --kafka): it is capture's raw sink (capture.RawSink). Messages are
// appended to the record being filled. At a transaction boundary (a
// commit, the end of a stream block, an abort) the record is produced at
// once if it holds BatchBytes, else at most Linger later, with the
// transactions that came meanwhile (a backlog fills records); a boundary
// that comes Linger or more after the one before (a quiet stream: a lone
// commit) is produced at once. While the capture is far behind the source's WAL
// (SourceWAL), CatchUpBytes and CatchUpLinger take their place: the
// transactions are old already, and fewer, larger records spare the
// brokers and the readers. A full record is produced at once; a message
// larger than a record is produced as fragments, one record each, in a
// row.
//
// Records are self-describing: before the first change of a relation in a
// record (and in each stream block, whose Relation messages belong to its
// transaction), the Writer writes the Relation message it last saw for
// that relation, so that a consumer can start reading at any record.
//
// Fencing: Fence loads the producer's id before the session reads the
// topic's tail, which fences every earlier producer of the topic (the
// transactional id is the topic's name): a capture that was frozen while
// another took the slot cannot write after the newer session's records
// once it wakes; the brokers refuse it, and its session ends. The records go in
// Kafka transactions that only keep the fence: readers read them
// uncommitted, and a transaction is committed every CommitEvery (and at
// Close) so that it does not outlive TxnTimeout.
//
// Invariants: records are produced in message order to partition 0 by one
// idempotent producer, so the brokers hold them in that order without
// gaps or repeats; Acked(end) is called only once the record holding the
// commit of the transaction ending at end (and so every record before it)
// is acknowledged by all in-sync replicas. Message and Err are called from
// one goroutine (capture's); bmu guards the record being filled, and every
// produce after Start, against the linger timer's flush and the commits
// (a produce outside a Kafka transaction would fail); the client's
// callbacks only touch failed.
type Writer struct {
	o WriterOptions

	buf        []byte // the record being filled: header, then frames
	bufInBlock bool   // its first message is inside a stream block begun before it (Header.InStream)
	frames     int
	lastCommit change.LSN
	ends       []change.LSN // commits in buf

	skipping  bool // the current transaction is in the topic already
	inStream  bool
	streamXid uint32
	// Relation messages last seen, without their type byte and in-stream
	// xid: outside streams, and per open streamed transaction (pgoutput's
	// own scoping).
	rels       map[uint32][]byte
	streamRels map[uint32]map[uint32][]byte
	// streamRenames: per open streamed transaction, the renames made in
	// its streamRels (renamed), in order, so that the rollback of the
	// subtransaction that made one undoes it.
	streamRenames map[uint32][]streamRename
	described     map[uint32]bool // relations described in the current record (or stream block)

	bmu   ctxMutex    // the record being filled: Message, the linger timer, the commits
	timer *time.Timer // flushes the record Linger after a boundary
	armed bool        // timer set for the record being filled
	// lastBoundary: when the last boundary came while live (boundary).
	lastBoundary time.Time

	lastStart change.LSN   // the WAL start of the last message appended
	sourceWAL atomic.Int64 // the source's WAL position (SourceWAL); 0: unknown

	inTxn      bool               // a Kafka transaction is open (Fence, until Close commits it)
	stopCommit context.CancelFunc // the committer's (Start)
	committer  chan struct{}      // closed when the committer returns

	mu     sync.Mutex
	failed error

	cRecords, cBytes, cAcked, cWaitNs *atomic.Int64
	gUnacked                          *atomic.Int64
}

// streamRename is a rename of relation id in a streamed transaction's
// Relation messages, made by subtransaction sub: before (nil: the stream
// had none of its own) became after.
type streamRename struct {
	sub, id       uint32
	before, after []byte
}

// NewWriter returns a Writer; Start writes its epoch marker.
func NewWriter(o WriterOptions) *Writer {
	if o.MaxRecord <= 0 {
		o.MaxRecord = DefaultMaxRecord
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	if o.Linger <= 0 {
		o.Linger = DefaultLinger
	}
	if o.CatchUpDistance <= 0 {
		o.CatchUpDistance = DefaultCatchUpDistance
	}
	if o.CatchUpBytes <= 0 {
		o.CatchUpBytes = DefaultCatchUpBytes
	}
	if o.CatchUpLinger <= 0 {
		o.CatchUpLinger = DefaultCatchUpLinger
	}
	if o.CommitEvery <= 0 {
		o.CommitEvery = CommitEvery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Acked == nil {
		o.Acked = func(change.LSN) {}
	}
	if o.Stats == nil {
		o.Stats = stats.NewRegistry().Component("kafka")
	}
	w := &Writer{o: o, lastCommit: o.LastCommit, rels: map[uint32][]byte{},
		streamRels: map[uint32]map[uint32][]byte{}, streamRenames: map[uint32][]streamRename{}, described: map[uint32]bool{}}
	w.bmu.init()
	st := o.Stats
	w.cRecords, w.cBytes, w.cAcked, w.cWaitNs = st.Counter("records"), st.Counter("bytes"), st.Counter("acked_records"), st.Counter("waits_ns")
	w.gUnacked = st.Gauge("unacked_bytes")
	return w
}

// Fence loads the producer's id, which fences every earlier producer of
// the topic: their writes from now on are refused. It is called once the
// slot is held, before the topic's tail is read for Start: a capture
// frozen meanwhile can write nothing after that tail. Then it opens the
// Kafka transaction the records go in. Start calls it too: once the
// transaction is open, it does nothing.
func (w *Writer) Fence(ctx context.Context) error {
	if w.inTxn {
		return nil
	}
	if _, _, err := w.o.Client.ProducerID(ctx); err != nil {
		return fmt.Errorf("start the capture's producer on topic %s: %w", w.o.Topic, TxnError(w.o.Topic, err))
	}
	if err := w.o.Client.BeginTransaction(); err != nil {
		return fmt.Errorf("begin a Kafka transaction on topic %s: %w", w.o.Topic, err)
	}
	w.inTxn = true
	return nil
}

// Start writes the session's EPOCH marker and waits until the brokers
// have it: consumers drop what an earlier session left half written. It
// is called once the slot is held (capture.Options.Started), when no
// other capture writes to the topic any more (Fence, which it calls if
// not called yet), with the topic's tail as read then: the session's
// epoch is the next after the tail's, and what the tail holds is not
// written again. The first Start starts the commits (CommitEvery).
func (w *Writer) Start(ctx context.Context, tail TailInfo, e Epoch) error {
	if err := w.Fence(ctx); err != nil {
		return err
	}
	w.bmu.Lock()
	defer w.bmu.Unlock()
	w.o.Epoch = NextEpoch(tail, time.Now())
	w.lastCommit = max(w.lastCommit, tail.LastCommit)
	v := AppendHeader(nil, w.header(KindEpoch))
	v = AppendEpoch(v, e)
	if err := w.o.Client.ProduceSync(ctx, &kgo.Record{Topic: w.o.Topic, Partition: 0, Value: v, Headers: EpochHeaders(e)}).FirstErr(); err != nil {
		return fmt.Errorf("write the epoch marker to topic %s: %w", w.o.Topic, fenced(err))
	}
	if w.committer == nil {
		cctx, cancel := context.WithCancel(context.Background())
		w.stopCommit, w.committer = cancel, make(chan struct{})
		go w.commits(cctx)
	}
	return nil
}

// commits commits the Kafka transaction every CommitEvery until ctx ends.
func (w *Writer) commits(ctx context.Context) {
	defer close(w.committer)
	t := time.NewTicker(w.o.CommitEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.bmu.Lock()
		err := w.commit(ctx, true)
		w.bmu.Unlock()
		if err != nil {
			w.fail(err)
			return
		}
	}
}

// commitFlushWait bounds the wait for the brokers' acknowledgements
// before a commit: a commit that cannot happen within it (the brokers
// away) is tried again at the next, holding the record being filled (and
// so Message) no longer meanwhile.
const commitFlushWait = 5 * time.Second

// commit produces the record being filled, waits (up to commitFlushWait,
// or until ctx ends) for the brokers to acknowledge everything produced,
// commits the Kafka transaction and, if next, opens the next; bmu is
// held. A wait that ends first leaves the transaction open, to be
// committed later; nothing is done once a produce has failed. The commit
// itself is not cancelled (its outcome would be unknown, and the client
// would refuse to produce).
func (w *Writer) commit(ctx context.Context, next bool) error {
	if w.Err() != nil || !w.inTxn {
		return nil
	}
	w.flush()
	fctx, cancel := context.WithTimeout(ctx, commitFlushWait)
	err := w.o.Client.Flush(fctx)
	cancel()
	if err != nil || w.Err() != nil {
		return nil
	}
	if err := w.o.Client.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		return fmt.Errorf("commit the capture's Kafka transaction on topic %s: %w", w.o.Topic, fenced(err))
	}
	if !next {
		w.inTxn = false
		return nil
	}
	if err := w.o.Client.BeginTransaction(); err != nil {
		return fmt.Errorf("begin a Kafka transaction on topic %s: %w", w.o.Topic, err)
	}
	return nil
}

// Fenced says whether err is the brokers refusing the capture's producer:
// a newer producer of the topic fenced it, or they aborted its transaction
// (timed out). Only a new session (a new producer, holding the slot) can
// write again.
func Fenced(err error) bool {
	for _, e := range []error{kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping,
		kerr.TransactionAbortable, kerr.InvalidTxnState} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// fenced explains a refusal of the brokers to the capture's producer.
func fenced(err error) error {
	if Fenced(err) {
		return fmt.Errorf("another capture session of the slot began (this one was frozen or cut off from the source for longer than its wal_sender_timeout, and lost the slot), or the brokers aborted this one's transaction (away for longer than its timeout): this session stops: %w", err)
	}
	return err
}

// Err is the first produce that failed, if any: the run stops on it.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// fail keeps the first failure, which stops the run, and logs it: a run
// that is starting over already (the source lost) would not say it.
func (w *Writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		w.failed = err
		w.o.Logger.Warn("writing to the topic failed", "topic", w.o.Topic, "err", err)
	}
}

// waitRoom waits until fewer than MaxInFlight bytes are unacknowledged;
// it changes nothing, so a deadline can interrupt it.
func (w *Writer) waitRoom(ctx context.Context) error {
	if w.o.Client.BufferedProduceBytes() <= w.o.MaxInFlight {
		return nil
	}
	start := time.Now()
	defer func() { w.cWaitNs.Add(int64(time.Since(start))) }()
	for w.o.Client.BufferedProduceBytes() > w.o.MaxInFlight {
		if err := w.Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// Message writes one message of the slot (capture.RawSink).
func (w *Writer) Message(ctx context.Context, walStart change.LSN, data []byte, m *pgoutput.Message) error {
	if err := w.Err(); err != nil {
		return err
	}
	if err := w.waitRoom(ctx); err != nil {
		return err
	}
	// A commit may hold the record a while (the brokers away): the
	// capture's deadline still ends the wait, as waitRoom's does.
	if err := w.bmu.LockCtx(ctx); err != nil {
		return err
	}
	defer w.bmu.Unlock()
	switch m.Type {
	case pgoutput.MsgBegin:
		// m.LSN is where the commit record starts: before the end of the
		// last commit in the topic, the transaction is there already.
		w.skipping = m.LSN < w.lastCommit
		if w.skipping {
			return nil
		}
	case pgoutput.MsgStreamStart:
		w.inStream, w.streamXid = true, m.Xid
		clear(w.described)
	case pgoutput.MsgCommit, pgoutput.MsgStreamStop, pgoutput.MsgStreamCommit, pgoutput.MsgStreamAbort:
		w.endUnit(walStart, data, m)
		return nil
	case pgoutput.MsgRelation:
		// Kept without the xid an in-stream Relation carries: describe
		// writes it in or out of a stream.
		raw := append([]byte(nil), data[1:]...)
		if w.inStream && w.o.Proto >= 2 {
			raw = raw[4:]
		}
		if w.inStream {
			rs := w.streamRels[w.streamXid]
			if rs == nil {
				rs = map[uint32][]byte{}
				w.streamRels[w.streamXid] = rs
			}
			rs[m.Relation.ID] = raw
		} else {
			w.rels[m.Relation.ID] = raw
		}
		if w.skipping {
			return nil
		}
		w.described[m.Relation.ID] = true
	case pgoutput.MsgInsert, pgoutput.MsgUpdate, pgoutput.MsgDelete:
		if w.skipping {
			return nil
		}
		if err := w.describe(walStart, m.RelID); err != nil {
			return err
		}
	case pgoutput.MsgMessage:
		if m.Name == change.DDLPrefix && m.Flags&pgoutput.MessageTransactional != 0 {
			w.renamed(m.Content)
		}
		if w.skipping {
			return nil
		}
	case pgoutput.MsgTruncate:
		if w.skipping {
			return nil
		}
		for _, id := range m.TruncateRelIDs {
			if err := w.describe(walStart, id); err != nil {
				return err
			}
		}
	default:
		if w.skipping {
			return nil
		}
	}
	w.append(walStart, data)
	return nil
}

// endUnit writes a message that ends a transaction or a stream block (a
// commit, a stream stop, commit or abort) and marks the boundary.
func (w *Writer) endUnit(walStart change.LSN, data []byte, m *pgoutput.Message) {
	switch m.Type {
	case pgoutput.MsgCommit:
		if w.skipping {
			w.skipping = false
			w.o.Acked(m.EndLSN)
			return
		}
		w.append(walStart, data)
		w.lastCommit = m.EndLSN
		w.ends = append(w.ends, m.EndLSN)
		w.boundary()
	case pgoutput.MsgStreamStop:
		w.append(walStart, data)
		w.inStream = false
		clear(w.described) // the block's Relation messages were its transaction's
		w.boundary()
	case pgoutput.MsgStreamCommit:
		for id, r := range w.streamRels[m.Xid] {
			w.rels[id] = r
			// A transaction of this record may have described it
			// otherwise (a rename the stream made).
			delete(w.described, id)
		}
		delete(w.streamRels, m.Xid)
		delete(w.streamRenames, m.Xid)
		if m.EndLSN <= w.lastCommit {
			// In the topic already: the session before wrote more after the
			// tail this session started from was read. Its blocks, written
			// again, are aborted instead.
			abort := binary.BigEndian.AppendUint32([]byte{pgoutput.MsgStreamAbort}, m.Xid)
			w.append(walStart, binary.BigEndian.AppendUint32(abort, m.Xid))
			w.boundary()
			w.o.Acked(m.EndLSN)
			return
		}
		w.append(walStart, data)
		w.lastCommit = m.EndLSN
		w.ends = append(w.ends, m.EndLSN)
		w.boundary()
	case pgoutput.MsgStreamAbort:
		if m.SubXid == 0 || m.SubXid == m.Xid {
			delete(w.streamRels, m.Xid)
			delete(w.streamRenames, m.Xid)
		} else {
			w.undoRenames(m.Xid, m.SubXid)
		}
		w.append(walStart, data)
		w.boundary()
	}
}

// renamed follows a schema change (a repstream.ddl message) that names
// its table otherwise than the table's last Relation message: ALTER SCHEMA
// ... RENAME, after which pgoutput does not describe the table again. The
// Relation message the Writer repeats from here on carries the new names,
// as capture's decoder renames the relation at the message (capture's
// renamed), and is written again before the table's next change: a reader
// that starts after the change reads its tables under their new names.
// Inside a stream the renamed message is the streamed transaction's, like
// a Relation message there (its later stream blocks, and the transactions
// after it once it commits), and is undone with the subtransaction that
// made it (undoRenames). A message it cannot decode is left to
// the applies' decoders, which stop on it.
func (w *Writer) renamed(content []byte) {
	if json, ok := ddlmsg.Strip(content); ok {
		content = json // its signature: checked by capture before it came here
	}
	ch, err := change.NewDDL(0, 0, content)
	if err != nil {
		return
	}
	d := ch.DDL
	raw := w.rels[d.OID]
	if w.inStream {
		if r, ok := w.streamRels[w.streamXid][d.OID]; ok {
			raw = r
		}
	}
	out := renamedRelation(raw, d.Schema, d.Name)
	if out == nil {
		return
	}
	delete(w.described, d.OID)
	if !w.inStream {
		w.rels[d.OID] = out
		return
	}
	rs := w.streamRels[w.streamXid]
	if rs == nil {
		rs = map[uint32][]byte{}
		w.streamRels[w.streamXid] = rs
	}
	sub := d.Xid
	if sub == 0 {
		sub = w.streamXid
	}
	w.streamRenames[w.streamXid] = append(w.streamRenames[w.streamXid], streamRename{sub: sub, id: d.OID, before: rs[d.OID], after: out})
	rs[d.OID] = out
}

// undoRenames undoes, newest first, the renames subtransaction sub of
// streamed transaction xid made, where no later Relation message replaced
// them: the rollback of a savepoint drops a schema change made after it
// (capture's decoder does the same), and pgoutput need not describe the
// table again.
func (w *Writer) undoRenames(xid, sub uint32) {
	rn := w.streamRenames[xid]
	rs := w.streamRels[xid]
	keep := rn[:0]
	for i := len(rn) - 1; i >= 0; i-- {
		r := rn[i]
		if r.sub != sub {
			continue
		}
		if cur, ok := rs[r.id]; ok && bytes.Equal(cur, r.after) {
			if r.before == nil {
				delete(rs, r.id)
			} else {
				rs[r.id] = r.before
			}
		}
	}
	for _, r := range rn {
		if r.sub != sub {
			keep = append(keep, r)
		}
	}
	w.streamRenames[xid] = keep
}

// renamedRelation is raw, a Relation message as the Writer keeps it, under
// the names schema.name; nil if it has those names already or cannot be
// read.
func renamedRelation(raw []byte, schema, name string) []byte {
	if len(raw) < 4 {
		return nil
	}
	// raw: the relation's id (4 bytes), its schema and name (each ended
	// by a NUL), then the rest.
	ns := bytes.IndexByte(raw[4:], 0)
	if ns < 0 {
		return nil
	}
	nameAt := 4 + ns + 1
	n := bytes.IndexByte(raw[nameAt:], 0)
	if n < 0 {
		return nil
	}
	if string(raw[4:4+ns]) == schema && string(raw[nameAt:nameAt+n]) == name {
		return nil
	}
	out := make([]byte, 0, len(raw)+len(schema)+len(name))
	out = append(out, raw[:4]...)
	out = append(append(out, schema...), 0)
	out = append(append(out, name...), 0)
	return append(out, raw[nameAt+n+1:]...)
}

// describe writes the relation's last Relation message unless the
// current unit has described it.
func (w *Writer) describe(walStart change.LSN, id uint32) error {
	if w.described[id] {
		return nil
	}
	raw := w.rels[id]
	if w.inStream {
		if r, ok := w.streamRels[w.streamXid][id]; ok {
			raw = r
		}
	}
	if raw == nil {
		return fmt.Errorf("change at %s for relation OID %d that the slot never described", walStart, id)
	}
	w.described[id] = true
	msg := make([]byte, 0, 5+len(raw))
	msg = append(msg, pgoutput.MsgRelation)
	if w.inStream && w.o.Proto >= 2 {
		msg = binary.BigEndian.AppendUint32(msg, w.streamXid)
	}
	w.append(walStart, append(msg, raw...))
	return nil
}

// append adds one message to the record being filled, producing that
// record first if the message does not fit, or the message as fragments
// if it fits no record.
func (w *Writer) append(walStart change.LSN, data []byte) {
	room := w.o.MaxRecord - headerLen
	if FrameSize(len(data)) > room {
		w.flush()
		chunk := room - fragHeaderLen
		for off := 0; off < len(data); off += chunk {
			end := min(off+chunk, len(data))
			h := w.header(KindFragment)
			h.InStream = w.inStream
			v := AppendHeader(make([]byte, 0, headerLen+fragHeaderLen+end-off), h)
			v = AppendFragment(v, walStart, len(data), off, data[off:end])
			w.produce(v, nil)
		}
		return
	}
	if len(w.buf)+FrameSize(len(data)) > w.o.MaxRecord {
		w.flush()
	}
	if len(w.buf) == 0 {
		size := w.o.BatchBytes
		if w.catchingUp() {
			size = w.o.CatchUpBytes
		}
		w.buf = AppendHeader(make([]byte, 0, size+(4<<10)), w.header(KindData))
		w.bufInBlock = w.inStream && data[0] != pgoutput.MsgStreamStart
		if !w.inStream {
			clear(w.described) // a reader may start at this record
		}
	}
	w.buf = AppendFrame(w.buf, Frame{WALStart: walStart, Data: data})
	w.frames++
	w.lastStart = walStart
}

func (w *Writer) header(kind byte) Header {
	return Header{Kind: kind, Epoch: w.o.Epoch, LastCommit: w.lastCommit, Proto: w.o.Proto, Binary: w.o.Binary}
}

// SourceWAL tells the Writer the source's current WAL position (0:
// unknown); safe to call from any goroutine.
func (w *Writer) SourceWAL(lsn change.LSN) { w.sourceWAL.Store(int64(lsn)) }

// catchingUp says whether the source's WAL is more than CatchUpDistance
// ahead of the last message appended.
func (w *Writer) catchingUp() bool {
	src := w.sourceWAL.Load()
	return src > 0 && src-int64(w.lastStart) > w.o.CatchUpDistance
}

// boundary ends a transaction or a stream block in the record being
// filled: produced now if it holds BatchBytes or the stream was quiet
// (no boundary in the Linger before), else within Linger (while catching
// up: CatchUpBytes, CatchUpLinger, and no quiet rule).
func (w *Writer) boundary() {
	batch, linger := w.o.BatchBytes, w.o.Linger
	quiet := false
	if w.catchingUp() {
		batch, linger = w.o.CatchUpBytes, w.o.CatchUpLinger
	} else {
		// Live: a boundary Linger or more after the one before (a quiet
		// stream) has nothing to wait for.
		now := time.Now()
		quiet = !w.armed && now.Sub(w.lastBoundary) >= linger
		w.lastBoundary = now
	}
	if quiet || len(w.buf) >= batch {
		w.flush()
		return
	}
	if w.armed {
		return
	}
	w.armed = true
	if w.timer == nil {
		w.timer = time.AfterFunc(linger, w.lingerFlush)
		return
	}
	w.timer.Reset(linger)
}

// lingerFlush is the linger timer's: the record waited long enough.
func (w *Writer) lingerFlush() {
	w.bmu.Lock()
	defer w.bmu.Unlock()
	if w.armed {
		w.flush()
	}
}

// Close stops the commits (between two), produces the record being filled
// (the capture stops) and commits the Kafka transaction, waiting up to
// commitFlushWait for the brokers (else the transaction is left open: the
// next session's Fence aborts it, and readers read it all the same); it
// stops the linger timer.
func (w *Writer) Close() {
	if w.committer != nil {
		w.stopCommit()
		<-w.committer
	}
	w.bmu.Lock()
	defer w.bmu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	defer func() { w.armed = false }() // a linger timer that fired meanwhile finds nothing to do
	if !w.inTxn {
		w.flush()
		return
	}
	if err := w.commit(context.Background(), false); err != nil {
		w.o.Logger.Warn("the capture's last Kafka transaction is left open (the next capture session aborts it)", "topic", w.o.Topic, "err", err)
	}
}

// flush produces the record being filled, if it holds anything.
func (w *Writer) flush() {
	if w.armed {
		w.armed = false
		w.timer.Stop()
	}
	if w.frames == 0 {
		return
	}
	// The header's last commit: the newest commit in this record.
	h := w.header(KindData)
	h.InStream = w.bufInBlock
	copy(w.buf, AppendHeader(nil, h))
	var ends []change.LSN
	if len(w.ends) > 0 {
		ends = append(ends, w.ends...)
		w.ends = w.ends[:0]
	}
	w.produce(w.buf, ends)
	w.buf, w.frames = nil, 0
}

func (w *Writer) produce(v []byte, ends []change.LSN) {
	rec := &kgo.Record{Topic: w.o.Topic, Partition: 0, Value: v}
	w.cRecords.Add(1)
	w.cBytes.Add(int64(len(v)))
	w.gUnacked.Store(w.o.Client.BufferedProduceBytes() + int64(len(v)))
	w.o.Client.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		w.cAcked.Add(1)
		if err != nil {
			w.fail(fmt.Errorf("write to topic %s (record of %d bytes, last commit %s): %w", w.o.Topic, len(r.Value), w.lastCommitOf(ends), fenced(err)))
			return
		}
		for _, e := range ends {
			w.o.Acked(e)
		}
	})
}

func (w *Writer) lastCommitOf(ends []change.LSN) string {
	if len(ends) == 0 {
		return "none"
	}
	return ends[len(ends)-1].String()
}

// ctxMutex is a mutex whose Lock can give up when a context ends.
type ctxMutex struct{ ch chan struct{} }

func (m *ctxMutex) init() { m.ch = make(chan struct{}, 1) }

// Lock waits for the mutex.
func (m *ctxMutex) Lock() { m.ch <- struct{}{} }

// LockCtx waits for the mutex until ctx ends (then it returns ctx's error,
// not holding it).
func (m *ctxMutex) LockCtx(ctx context.Context) error {
	select { // a free mutex without selectgo: once per message
	case m.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases the mutex.
func (m *ctxMutex) Unlock() { <-m.ch }
