package kafkalog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgoutput"
	"github.com/repstream/repstream/internal/stats"
)

// Decoder takes the slot's messages a Reader reads (capture.Decoder).
type Decoder interface {
	Message(ctx context.Context, walStart change.LSN, data []byte) error
	Close()
}

// ErrTrimmed: the offset to read from is no longer in the topic (its
// retention removed it).
var ErrTrimmed = errors.New("no longer in the topic")

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	Brokers Cluster
	Topic   string
	From    int64 // the offset to read from (ResumeOffset of the last run, or the topic's start)
	// Slot and Publication are what the EPOCH markers must name.
	Slot, Publication string
	// Source identifies the apply's source: an EPOCH marker of another
	// source stops the Reader (Epoch.SameSource; what is unknown is not
	// compared).
	Source Source
	// Applied reports whether the transaction ending at end is applied on
	// the target: a transaction whose first records the Reader did not
	// read (it starts after them) must be.
	Applied func(end change.LSN) bool
	// AppliedBelow: every transaction whose commit record starts before
	// it is applied on the target (the applied low watermark at the
	// start). Such a transaction is dropped at its Begin, as one whose
	// start was not read, instead of being decoded only to be dropped at
	// its commit: a new target reads the whole topic, most of it older
	// than its copy. 0: none.
	AppliedBelow change.LSN
	// NewDecoder makes the decoder of a capture session's messages.
	// binary: the values are in pgoutput's binary format (Header.Binary);
	// after: the end LSN of the last transaction committed before the
	// session's first message (earlier sessions', as far as known), which
	// a transaction applied eagerly in this session must wait for
	// (capture.Options.LastCommit).
	NewDecoder func(proto int, binary bool, e *Epoch, after change.LSN) (Decoder, error)
	// AbortInProgress drops what the queue holds of transactions not
	// committed: a new capture session sends them again from their start.
	AbortInProgress func() (int, error)
	Logger          *slog.Logger
	// Stats is the "kafka" component: counters records, bytes,
	// fetch_errors, applied_skipped_txns (AppliedBelow); gauges
	// next_offset, end_offset, lag_records.
	Stats *stats.Component
}

// midBlock is skipXid for a stream block the first record read starts
// inside of: which transaction it belongs to is not known.
const midBlock = ^uint32(0)

// Reader reads a slot's topic (apply --kafka) and feeds the slot's
// messages to a Decoder: records of an older capture session than one
// already seen are dropped, an EPOCH marker drops the transactions the
// previous session left open, messages of a transaction whose start came
// before the first offset read are dropped (it must be applied already),
// and fragments are put together. ResumeOffset says where a later run
// must start reading for a given applied low watermark.
type Reader struct {
	o   ReaderOptions
	log *slog.Logger
	pts *resumePoints
	dec Decoder
	asm Assembler
	msg pgoutput.Message

	epoch    uint32
	proto    int
	binary   bool // the session's values are binary
	started  bool
	inStream bool
	// fragFrom: the offset of the first fragment of the message being put
	// together (asm.Active).
	fragFrom int64
	// whole: a data record or a message's first fragment has been read
	// (before, fragments of a message begun earlier are dropped).
	whole bool
	// skipXid: the transaction being dropped (its start was not read), or 0.
	skipXid uint32
	curXid  uint32 // open non-streamed transaction
	// lastCommit is the end LSN of the last commit read, in any session
	// (NewDecoder's after).
	lastCommit change.LSN
	inTxn      bool
	// rels holds, per relation OID, the last Relation message outside a
	// stream that the decoder took (reset with the decoder, and when a
	// streamed transaction commits: its relations become the decoder's).
	// The Writer repeats it in every transaction; one the same as the last
	// is not passed on: a new one makes the decoder a new version of the
	// relation, which apply takes for a schema change — a barrier, every
	// transaction applied alone.
	rels map[uint32][]byte

	offset, high atomic.Int64 // the next offset to read; the topic's end
	big          atomic.Bool  // the last record read was of a catch-up's size

	cRecords, cBytes, cFetchErrors *atomic.Int64
	cAppliedSkipped                *atomic.Int64 // transactions dropped at their Begin (AppliedBelow)
	gNext, gEnd, gLag              *atomic.Int64
}

// NewReader returns a Reader; Run reads.
func NewReader(o ReaderOptions) *Reader {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stats == nil {
		o.Stats = stats.NewRegistry().Component("kafka")
	}
	r := &Reader{o: o, log: o.Logger.With("component", "kafka"), pts: newResumePoints(o.From)}
	r.offset.Store(o.From)
	st := o.Stats
	r.cRecords, r.cBytes, r.cFetchErrors = st.Counter("records"), st.Counter("bytes"), st.Counter("fetch_errors")
	r.cAppliedSkipped = st.Counter("applied_skipped_txns")
	r.gNext, r.gEnd, r.gLag = st.Gauge("next_offset"), st.Gauge("end_offset"), st.Gauge("lag_records")
	r.gNext.Store(o.From)
	return r
}

// ResumeOffset is the offset a later run reads from when every
// transaction ending at or below low is applied.
func (r *Reader) ResumeOffset(low change.LSN) int64 { return r.pts.resume(low) }

// Position returns the next offset to read and the topic's end offset as
// last seen: their difference is this target's lag in records.
func (r *Reader) Position() (next, end int64) { return r.offset.Load(), r.high.Load() }

// bigRecord: a record at least this large was written by a capture
// catching up a backlog (DefaultCatchUpBytes), or holds part of a large
// transaction.
const bigRecord = DefaultCatchUpBytes / 2

// Behind reports whether this target reads a backlog: more than a few
// hundred records wait to be read, or the last record read was large and
// more follow it. Safe for concurrent use.
func (r *Reader) Behind() bool {
	next, end := r.Position()
	return end-next > 256 || end > next && r.big.Load()
}

// CheckStart checks that From is in the topic.
func CheckStart(ctx context.Context, adm *kadm.Client, topic string, from int64) error {
	start, end, err := Offsets(ctx, adm, topic)
	if err != nil {
		return err
	}
	if from < start {
		return fmt.Errorf("%w: topic %s starts at offset %d, and this target must read from offset %d", ErrTrimmed, topic, start, from)
	}
	if from > end {
		return fmt.Errorf("topic %s ends at offset %d, and this target has read up to offset %d: the topic was deleted and made again", topic, end, from)
	}
	return nil
}

// Run reads until ctx ends or an error.
func (r *Reader) Run(ctx context.Context) error {
	defer func() {
		if r.dec != nil {
			r.dec.Close()
		}
	}()
	cl, err := kgo.NewClient(r.o.Brokers.opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.o.Topic: {0: kgo.NewOffset().At(r.o.From)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()), kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20),
		kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r.log.Info("reading the topic", "topic", r.o.Topic, "from_offset", r.o.From)
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			switch {
			case errors.Is(fe.Err, kerr.OffsetOutOfRange):
				return fmt.Errorf("%w: topic %s, offset %d", ErrTrimmed, r.o.Topic, r.offset.Load())
			case errors.Is(fe.Err, kerr.UnknownTopicOrPartition), errors.Is(fe.Err, kerr.UnknownTopicID):
				return fmt.Errorf("topic %s is gone (deleted?) at offset %d: %w", r.o.Topic, r.offset.Load(), fe.Err)
			case errors.Is(fe.Err, context.Canceled), errors.Is(fe.Err, kgo.ErrClientClosed):
				return ctx.Err()
			default:
				r.cFetchErrors.Add(1)
				r.log.Warn("reading the topic: retrying", "topic", r.o.Topic, "offset", r.offset.Load(), "err", fe.Err)
			}
		}
		var ferr error
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.HighWatermark > 0 {
				r.high.Store(p.HighWatermark)
			}
			for _, rec := range p.Records {
				if ferr != nil {
					return
				}
				if rec.Attrs.IsControl() {
					// A marker of the capture's Kafka transactions:
					// passed over, so that the position reaches the
					// topic's end.
					r.passed(rec.Offset + 1)
					continue
				}
				if ferr = r.record(ctx, rec); ferr == nil {
					r.consumed(rec)
				}
			}
		})
		next, end := r.Position()
		r.gNext.Store(next)
		r.gEnd.Store(end)
		r.gLag.Store(max(end-next, 0))
		if ferr != nil {
			return ferr
		}
	}
}

// passed notes that the records before offset next are read.
func (r *Reader) passed(next int64) {
	r.offset.Store(next)
	if r.asm.Active() {
		next = r.fragFrom
	}
	r.pts.read(next)
}

// consumed notes that rec is read: a later run reads again from the
// record after it, or, while a message is being put together from its
// fragments, from its first fragment (a reader cannot start inside one).
func (r *Reader) consumed(rec *kgo.Record) {
	r.passed(rec.Offset + 1)
	r.cRecords.Add(1)
	r.cBytes.Add(int64(len(rec.Value)))
	r.big.Store(len(rec.Value) >= bigRecord)
}

func (r *Reader) record(ctx context.Context, rec *kgo.Record) error {
	h, body, err := ParseHeader(rec.Value)
	if err != nil {
		return fmt.Errorf("topic %s offset %d: %w", r.o.Topic, rec.Offset, err)
	}
	if r.started && h.Epoch < r.epoch {
		r.log.Debug("record of an earlier capture session dropped", "offset", rec.Offset, "epoch", h.Epoch)
		return nil
	}
	var ep *Epoch
	if h.Kind == KindEpoch {
		e, err := ParseEpochRecord(body, rec.Headers)
		if err != nil {
			return fmt.Errorf("topic %s offset %d: %w", r.o.Topic, rec.Offset, err)
		}
		if e.Slot != r.o.Slot || e.Publication != r.o.Publication {
			return fmt.Errorf("topic %s offset %d: written by a capture of slot %q, publication %q; this apply is of slot %q, publication %q",
				r.o.Topic, rec.Offset, e.Slot, e.Publication, r.o.Slot, r.o.Publication)
		}
		if err := e.SameSource(r.o.Topic, "apply", r.o.Source); err != nil {
			return fmt.Errorf("offset %d: %w", rec.Offset, err)
		}
		ep = &e
	}
	if r.started && h.Epoch == r.epoch && ep == nil && (h.Binary != r.binary || int(h.Proto) != r.proto) {
		return fmt.Errorf("topic %s offset %d: %w: epoch %d's records change their protocol or value format (%d, binary %v; were %d, binary %v)",
			r.o.Topic, rec.Offset, ErrCorrupt, h.Epoch, h.Proto, h.Binary, r.proto, r.binary)
	}
	if !r.started || h.Epoch > r.epoch || ep != nil {
		first := !r.started
		if err := r.newSession(h, ep, rec.Offset); err != nil {
			return err
		}
		if first && h.InStream {
			// The first record read starts inside a stream block whose
			// start was not read: its messages (in-stream ones, with an
			// xid) are dropped up to its STREAM STOP.
			r.inStream, r.skipXid = true, midBlock
		}
	}
	wrap := func(err error, walStart change.LSN) error {
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, ddlmsg.ErrNotSigned) && !errors.Is(err, ErrCorrupt) {
			// A schema-change message the decoder found not signed by
			// the source's trigger: the capture writes none, so another
			// producer wrote this record.
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return fmt.Errorf("topic %s offset %d (LSN %s): %w", r.o.Topic, rec.Offset, walStart, err)
	}
	switch h.Kind {
	case KindData:
		r.whole = true
		return Frames(body, func(f Frame) error { return wrap(r.frame(ctx, rec.Offset, f), f.WALStart) })
	case KindFragment:
		fr, err := ParseFragment(body)
		if err != nil {
			return wrap(err, 0)
		}
		if fr.Offset != 0 && !r.asm.Active() && !r.whole {
			// Reading started inside a message's fragments (a resume
			// point stored by an earlier version): that message belongs
			// to what the start skips.
			r.log.Debug("fragment of a message begun before the first record read dropped", "offset", rec.Offset)
			return nil
		}
		r.whole = true
		if fr.Offset == 0 {
			r.fragFrom = rec.Offset
		}
		f, done, err := r.asm.Add(fr)
		if err != nil || !done {
			return wrap(err, fr.WALStart)
		}
		return wrap(r.frame(ctx, rec.Offset, f), f.WALStart)
	}
	return nil
}

// newSession starts reading a capture session's records: with its EPOCH
// marker (ep), what the previous one left open is dropped.
func (r *Reader) newSession(h Header, ep *Epoch, offset int64) error {
	if r.started && ep != nil {
		n, err := r.o.AbortInProgress()
		if err != nil {
			return err
		}
		if n > 0 {
			r.log.Info("a new capture session: transactions the last one left open are dropped (they come again whole)", "transactions", n, "offset", offset, "epoch", h.Epoch)
		}
		r.pts.abortOpen()
	}
	if r.dec != nil {
		r.dec.Close()
	}
	after := r.lastCommit
	if ep != nil {
		// The marker's header: the last commit the topic held before
		// this session, read or not.
		after = max(after, h.LastCommit)
	}
	dec, err := r.o.NewDecoder(int(h.Proto), h.Binary, ep, after)
	if err != nil {
		return err
	}
	r.dec, r.epoch, r.proto, r.binary, r.started = dec, h.Epoch, int(h.Proto), h.Binary, true
	r.asm.Reset()
	r.inStream, r.inTxn, r.skipXid = false, false, 0
	r.rels = map[uint32][]byte{}
	return nil
}

// frame tracks where transactions start and end, drops the messages of a
// transaction whose start was not read, and decodes the rest.
func (r *Reader) frame(ctx context.Context, offset int64, f Frame) error {
	if len(f.Data) == 0 {
		return nil
	}
	m := &r.msg
	switch t := f.Data[0]; t {
	case pgoutput.MsgBegin, pgoutput.MsgCommit, pgoutput.MsgStreamStart, pgoutput.MsgStreamStop,
		pgoutput.MsgStreamCommit, pgoutput.MsgStreamAbort:
		m.Reset()
		if err := pgoutput.Parse(f.Data, false, r.proto, m); err != nil {
			return err
		}
		switch t {
		case pgoutput.MsgBegin:
			if m.LSN < r.o.AppliedBelow {
				// The commit record starts before a position the target
				// has everything below, so the transaction ends at or
				// before it: applied. Dropped as one whose start was not
				// read (its Relation messages still go to the decoder).
				r.inTxn = false
				r.cAppliedSkipped.Add(1)
				return nil
			}
			r.inTxn, r.curXid = true, m.Xid
			r.pts.begin(m.Xid, offset)
		case pgoutput.MsgCommit:
			r.lastCommit = max(r.lastCommit, m.EndLSN)
			if !r.inTxn {
				// Its Begin came before the first record read.
				return r.unseen(m.Xid, m.EndLSN)
			}
			r.inTxn = false
			r.pts.commit(r.curXid, m.EndLSN)
		case pgoutput.MsgStreamStart:
			r.inStream = true
			if m.Flags&1 != 0 {
				r.pts.begin(m.Xid, offset)
			} else if !r.pts.isOpen(m.Xid) {
				r.skipXid = m.Xid
				return nil
			}
		case pgoutput.MsgStreamStop:
			r.inStream = false
			if r.skipXid != 0 {
				r.skipXid = 0
				return nil
			}
		case pgoutput.MsgStreamCommit:
			r.lastCommit = max(r.lastCommit, m.EndLSN)
			if !r.pts.isOpen(m.Xid) {
				return r.unseen(m.Xid, m.EndLSN)
			}
			r.pts.commit(m.Xid, m.EndLSN)
			clear(r.rels)
		case pgoutput.MsgStreamAbort:
			if !r.pts.isOpen(m.Xid) {
				return nil
			}
			if m.SubXid == 0 || m.SubXid == m.Xid {
				r.pts.abort(m.Xid)
			}
		}
	default:
		if t == pgoutput.MsgRelation && !r.inStream && len(f.Data) >= 5 {
			// Outside a stream a Relation message describes the relation
			// for what follows, whichever transaction carries it: one of a
			// transaction whose start was not read (applied) is taken too,
			// for the Writer does not repeat it in the record for the
			// transactions after it.
			id := binary.BigEndian.Uint32(f.Data[1:5])
			if bytes.Equal(r.rels[id], f.Data) {
				return nil // the decoder has it
			}
			r.rels[id] = bytes.Clone(f.Data)
			break
		}
		if r.skipXid != 0 || !r.inTxn && !r.inStream {
			return nil // a transaction whose start was not read
		}
	}
	return r.dec.Message(ctx, f.WALStart, f.Data)
}

// unseen checks a transaction whose start came before the first record
// read: it must be applied already.
func (r *Reader) unseen(xid uint32, end change.LSN) error {
	if r.o.Applied(end) {
		return nil
	}
	return fmt.Errorf("%w: transaction %d (ending at %s) began before the first record read, and is not applied on the target", ErrTrimmed, xid, end)
}
