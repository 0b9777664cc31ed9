package kafkalog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgoutput"
	"github.com/repstream/repstream/internal/stats"
)

// fakeProducer keeps what is produced and acknowledges it at once.
type fakeProducer struct {
	mu      sync.Mutex
	recs    [][]byte
	commits int // EndTransaction calls

	// txns: a produce outside a Kafka transaction fails, as kgo's does
	// for a transactional client.
	txns    bool
	inTxn   bool
	outside int // records produced outside a transaction

	// flushing, when set, receives a value as Flush starts; Flush then
	// waits for its context or for release to close (the brokers away).
	flushing chan struct{}
	release  chan struct{}
}

func (p *fakeProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	if p.txns && !p.inTxn {
		p.outside++
		p.mu.Unlock()
		if promise != nil {
			promise(r, errors.New("not in a transaction"))
		}
		return
	}
	p.recs = append(p.recs, r.Value)
	p.mu.Unlock()
	if promise != nil {
		promise(r, nil)
	}
}

func (p *fakeProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	var res kgo.ProduceResults
	for _, r := range rs {
		p.Produce(ctx, r, nil)
		res = append(res, kgo.ProduceResult{Record: r})
	}
	return res
}

func (p *fakeProducer) BufferedProduceBytes() int64 { return 0 }

func (p *fakeProducer) ProducerID(context.Context) (int64, int16, error) { return 1, 0, nil }

func (p *fakeProducer) BeginTransaction() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inTxn {
		return errors.New("already in a transaction")
	}
	p.inTxn = true
	return nil
}

func (p *fakeProducer) Flush(ctx context.Context) error {
	if p.flushing == nil {
		return nil
	}
	select {
	case p.flushing <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.release:
		return nil
	}
}

func (p *fakeProducer) EndTransaction(context.Context, kgo.TransactionEndTry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.commits++
	p.inTxn = false
	return nil
}

func (p *fakeProducer) records() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.recs...)
}

// txnWriter feeds w one-row transactions (protocol 1, relation 16384),
// each about 120 bytes of WAL apart, from WAL position at.
type txnWriter struct {
	t    testing.TB
	w    *Writer
	at   change.LSN
	xid  uint32
	rel  bool
	acks []change.LSN
}

func (tw *txnWriter) msg(walStart change.LSN, data []byte) {
	tw.t.Helper()
	var m pgoutput.Message
	if err := pgoutput.Parse(data, false, 1, &m); err != nil {
		tw.t.Fatalf("parse %q: %v", data[0], err)
	}
	if err := tw.w.Message(context.Background(), walStart, data, &m); err != nil {
		tw.t.Fatal(err)
	}
}

func (tw *txnWriter) txn() {
	tw.t.Helper()
	tw.xid++
	start := tw.at
	end := start + 120
	tw.at = end
	begin := []byte{pgoutput.MsgBegin}
	begin = binary.BigEndian.AppendUint64(begin, uint64(end-8))
	begin = binary.BigEndian.AppendUint64(begin, 0)
	begin = binary.BigEndian.AppendUint32(begin, tw.xid)
	tw.msg(start, begin)
	if !tw.rel {
		tw.msg(start, relationMsg(16384, "t"))
		tw.rel = true
	}
	ins := []byte{pgoutput.MsgInsert}
	ins = binary.BigEndian.AppendUint32(ins, 16384)
	ins = append(ins, 'N')
	ins = change.AppendTuple(ins, []byte{change.KindText}, [][]byte{[]byte("a value of some forty bytes, as rows go")})
	tw.msg(start+40, ins)
	commit := []byte{pgoutput.MsgCommit, 0}
	commit = binary.BigEndian.AppendUint64(commit, uint64(end-8))
	commit = binary.BigEndian.AppendUint64(commit, uint64(end))
	commit = binary.BigEndian.AppendUint64(commit, 0)
	tw.msg(end-8, commit)
}

// relationMsg is the Relation message (protocol 1) of table public.name,
// relation id, with one key column id integer.
func relationMsg(id uint32, name string) []byte { return rvRelation(0, id, "public", name) }

func newTestWriter(t testing.TB, p *fakeProducer, linger time.Duration) *txnWriter {
	tw := &txnWriter{t: t, at: 0x1000000}
	tw.w = NewWriter(WriterOptions{Client: p, Topic: "repstream.s", Proto: 1, Linger: linger, CatchUpLinger: linger,
		Acked: func(end change.LSN) { tw.acks = append(tw.acks, end) }})
	// As if a transaction had just gone: the first is not one of a quiet
	// stream (produced at once, whatever the linger).
	tw.w.lastBoundary = time.Now()
	return tw
}

// TestWriterCatchUpRecords: a stream far behind the source's WAL
// (SourceWAL) goes in records of CatchUpBytes, a stream near it in
// records of BatchBytes; every transaction is acknowledged once, in order,
// and the records hold every frame.
func TestWriterCatchUpRecords(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sourceWAL func(at change.LSN) change.LSN
		min, max  int
	}{
		{"unknown", func(change.LSN) change.LSN { return 0 }, DefaultBatchBytes, DefaultBatchBytes + 1024},
		{"near", func(at change.LSN) change.LSN { return at + 1<<20 }, DefaultBatchBytes, DefaultBatchBytes + 1024},
		{"far behind", func(at change.LSN) change.LSN { return at + 64<<20 }, DefaultCatchUpBytes, DefaultCatchUpBytes + 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProducer{}
			// A linger that never fires: records are produced by size.
			tw := newTestWriter(t, p, time.Hour)
			const txns = 20000
			for range txns {
				tw.w.SourceWAL(tc.sourceWAL(tw.at))
				tw.txn()
			}
			tw.w.Close()
			recs := p.records()
			if len(recs) < 2 {
				t.Fatalf("%d records", len(recs))
			}
			frames := 0
			for i, r := range recs {
				if i < len(recs)-1 && (len(r) < tc.min || len(r) > tc.max) {
					t.Errorf("record %d of %d: %d bytes, want %d to %d", i, len(recs), len(r), tc.min, tc.max)
				}
				h, body, err := ParseHeader(r)
				if err != nil || h.Kind != KindData {
					t.Fatalf("record %d: %+v %v", i, h, err)
				}
				if err := Frames(body, func(Frame) error { frames++; return nil }); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
			}
			// Begin, insert, commit per transaction, and the Relation
			// message once per record.
			if want := 3*txns + len(recs); frames != want {
				t.Errorf("%d frames, want %d", frames, want)
			}
			if len(tw.acks) != txns {
				t.Fatalf("%d transactions acknowledged, want %d", len(tw.acks), txns)
			}
			for i := 1; i < len(tw.acks); i++ {
				if tw.acks[i] <= tw.acks[i-1] {
					t.Fatalf("acknowledgement %d (%s) not after %s", i, tw.acks[i], tw.acks[i-1])
				}
			}
		})
	}
}

// TestWriterLinger: while the stream is live, a transaction whose commit
// comes Linger or more after the one before (a quiet stream) is produced
// at once; one that follows another more closely waits up to Linger after
// its commit, gathering those that come meanwhile. While the stream is
// far behind the source, every record waits CatchUpLinger.
func TestWriterLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProducer{}
		tw := &txnWriter{t: t, at: 0x1000000}
		tw.w = NewWriter(WriterOptions{Client: p, Topic: "repstream.s", Proto: 1, Acked: func(change.LSN) {}})
		defer tw.w.Close()
		// after waits d, then checks that want records were produced.
		after := func(d time.Duration, want int, when string) {
			t.Helper()
			time.Sleep(d)
			synctest.Wait()
			if n := len(p.records()); n != want {
				t.Fatalf("%s: %d records, want %d", when, n, want)
			}
		}
		tw.txn()
		after(0, 1, "a first transaction") // t = 0
		tw.txn()
		after(time.Millisecond, 1, "a second one at once, 1 ms after") // t = 1 ms
		tw.txn()                                                       // gathered with the second
		after(DefaultLinger-time.Millisecond-time.Microsecond, 1, "before the second's linger ends")
		after(time.Microsecond, 2, "once the second's linger ends") // t = 5 ms
		if frames := countFrames(t, p.records()[1]); frames != 2*3+1 {
			t.Errorf("the second record holds %d frames, want two transactions' 6 and a Relation message", frames)
		}
		after(time.Millisecond, 2, "")                     // t = 6 ms: 5 ms after the last commit
		tw.txn()                                           // quiet again
		after(0, 3, "a transaction Linger after the last") // produced at once

		tw.w.SourceWAL(tw.at + 64<<20)
		after(time.Second, 3, "")
		tw.txn()
		after(DefaultCatchUpLinger-time.Microsecond, 3, "catching up, before the catch-up linger ends")
		after(time.Microsecond, 4, "catching up, once the catch-up linger ends")
	})
}

// countFrames returns how many frames the data record rec holds.
func countFrames(t *testing.T, rec []byte) int {
	t.Helper()
	h, body, err := ParseHeader(rec)
	if err != nil || h.Kind != KindData {
		t.Fatalf("record: %+v %v", h, err)
	}
	n := 0
	if err := Frames(body, func(Frame) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReaderBehind: a backlog is more than 256 records to read, or a
// catch-up's large record read with more to come.
func TestReaderBehind(t *testing.T) {
	for _, tc := range []struct {
		next, end int64
		big       bool
		want      bool
	}{
		{100, 100, false, false},
		{100, 356, false, false},
		{100, 357, false, true},
		{100, 100, true, false}, // the last record read was large, nothing follows
		{100, 101, true, true},
		{100, 101, false, false},
	} {
		var r Reader
		r.offset.Store(tc.next)
		r.high.Store(tc.end)
		r.big.Store(tc.big)
		if got := r.Behind(); got != tc.want {
			t.Errorf("next %d, end %d, big %v: Behind %v, want %v", tc.next, tc.end, tc.big, got, tc.want)
		}
	}
}

// formatDecoder records the sessions a Reader starts and the messages it
// passes on.
type formatDecoder struct {
	sessions *[]string
	msgs     *int
}

func (d formatDecoder) Message(context.Context, change.LSN, []byte) error { *d.msgs++; return nil }
func (d formatDecoder) Close()                                            {}

// TestReaderValueFormat: the Reader makes each capture session's decoder
// with the value format its records carry (binary or text, from the
// header); a record of the same epoch in another format is refused as
// corrupt, naming topic and offset.
func TestReaderValueFormat(t *testing.T) {
	var sessions []string
	msgs := 0
	r := NewReader(ReaderOptions{Topic: "repstream.s", Slot: "s", Publication: "p",
		NewDecoder: func(proto int, binary bool, e *Epoch, _ change.LSN) (Decoder, error) {
			sessions = append(sessions, fmt.Sprintf("proto %d binary %v marker %v", proto, binary, e != nil))
			return formatDecoder{&sessions, &msgs}, nil
		},
		AbortInProgress: func() (int, error) { return 0, nil },
	})
	ctx := context.Background()
	marker := func(epoch uint32, binary bool) []byte {
		v := AppendHeader(nil, Header{Kind: KindEpoch, Epoch: epoch, Proto: 2, Binary: binary})
		return AppendEpoch(v, Epoch{Start: 0x100, Slot: "s", Publication: "p"})
	}
	begin := []byte{pgoutput.MsgBegin, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}
	data := func(epoch uint32, binary bool) []byte {
		v := AppendHeader(nil, Header{Kind: KindData, Epoch: epoch, Proto: 2, Binary: binary})
		return AppendFrame(v, Frame{WALStart: 0x200, Data: begin})
	}
	for i, v := range [][]byte{marker(1, true), data(1, true), marker(2, false), data(2, false)} {
		if err := r.record(ctx, &kgo.Record{Value: v, Offset: int64(i)}); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	want := []string{"proto 2 binary true marker true", "proto 2 binary false marker true"}
	if !slices.Equal(sessions, want) || msgs != 2 {
		t.Fatalf("sessions %q, messages %d; want %q, 2", sessions, msgs, want)
	}
	err := r.record(ctx, &kgo.Record{Value: data(2, true), Offset: 4})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset 4") {
		t.Fatalf("a binary record in a text epoch: %v", err)
	}
}

// relDecoder knows the relations it was described and refuses a change
// of another (as capture's decoder does).
type relDecoder struct {
	known   map[uint32]bool
	inserts int
}

func (d *relDecoder) Message(_ context.Context, walStart change.LSN, data []byte) error {
	var m pgoutput.Message
	if err := pgoutput.Parse(data, false, 1, &m); err != nil {
		return err
	}
	switch m.Type {
	case pgoutput.MsgRelation:
		d.known[m.Relation.ID] = true
	case pgoutput.MsgInsert:
		if !d.known[m.RelID] {
			return fmt.Errorf("change at %s of relation %d that was never described", walStart, m.RelID)
		}
		d.inserts++
	}
	return nil
}
func (d *relDecoder) Close() {}

// TestReaderRelationOfAnAppliedTransaction: a reader that starts at a
// record holding the end of a transaction begun in an earlier record (it
// is applied: a restart resumes at the next one's Begin) drops that
// transaction's messages but takes the Relation messages among them: the
// Writer does not repeat one in the record for the transactions after it.
func TestReaderRelationOfAnAppliedTransaction(t *testing.T) {
	p := &fakeProducer{}
	tw := newTestWriter(t, p, time.Hour)
	tw.w.o.MaxRecord = 600
	insert := func(at change.LSN, id uint32) {
		ins := binary.BigEndian.AppendUint32([]byte{pgoutput.MsgInsert}, id)
		ins = append(ins, 'N')
		ins = change.AppendTuple(ins, []byte{change.KindText}, [][]byte{[]byte("a value of some forty bytes, as rows go")})
		tw.msg(at, ins)
	}
	// T: inserts into a (a record's worth), then into b, whose Relation
	// message pgoutput sends inside T, in the second record.
	tw.xid++
	tEnd := tw.at + 2000
	begin := binary.BigEndian.AppendUint64([]byte{pgoutput.MsgBegin}, uint64(tEnd-8))
	begin = binary.BigEndian.AppendUint64(begin, 0)
	tw.msg(tw.at, binary.BigEndian.AppendUint32(begin, tw.xid))
	tw.msg(tw.at, relationMsg(16384, "a"))
	for i := range 8 {
		insert(tw.at+change.LSN(100*(i+1)), 16384)
	}
	tw.msg(tw.at+900, relationMsg(16385, "b"))
	insert(tw.at+950, 16385)
	commit := binary.BigEndian.AppendUint64([]byte{pgoutput.MsgCommit, 0}, uint64(tEnd-8))
	commit = binary.BigEndian.AppendUint64(commit, uint64(tEnd))
	tw.msg(tEnd-8, binary.BigEndian.AppendUint64(commit, 0))
	// U: one insert into b (pgoutput does not describe b again).
	begin = binary.BigEndian.AppendUint64([]byte{pgoutput.MsgBegin}, uint64(tEnd+100-8))
	begin = binary.BigEndian.AppendUint64(begin, 0)
	tw.msg(tEnd, binary.BigEndian.AppendUint32(begin, tw.xid+1))
	insert(tEnd+40, 16385)
	commit = binary.BigEndian.AppendUint64([]byte{pgoutput.MsgCommit, 0}, uint64(tEnd+100-8))
	commit = binary.BigEndian.AppendUint64(commit, uint64(tEnd+100))
	tw.msg(tEnd+100-8, binary.BigEndian.AppendUint64(commit, 0))
	tw.w.Close()
	recs := p.records()
	if len(recs) != 2 {
		t.Fatalf("%d records, want T over two and U in the second", len(recs))
	}
	dec := &relDecoder{known: map[uint32]bool{}}
	r := NewReader(ReaderOptions{Topic: "repstream.s", Slot: "s", Publication: "p", From: 1,
		Applied:         func(end change.LSN) bool { return end <= tEnd },
		NewDecoder:      func(int, bool, *Epoch, change.LSN) (Decoder, error) { return dec, nil },
		AbortInProgress: func() (int, error) { return 0, nil }})
	if err := r.record(context.Background(), &kgo.Record{Value: recs[1], Offset: 1}); err != nil {
		t.Fatal(err)
	}
	if dec.inserts != 1 {
		t.Fatalf("%d inserts decoded, want U's one (T's are dropped)", dec.inserts)
	}
}

// TestReaderAppliedBelow: transactions whose commit record starts below
// AppliedBelow are dropped at their Begin (counted), the rest decoded; the
// Relation message of a dropped one still reaches the decoder, which the
// later transactions need.
func TestReaderAppliedBelow(t *testing.T) {
	p := &fakeProducer{}
	tw := newTestWriter(t, p, time.Hour)
	for range 5 {
		tw.txn() // the first carries the Relation message
	}
	tw.w.Close()
	recs := p.records()
	// The third transaction's commit record starts at 0x1000000+3*120-8.
	below := change.LSN(0x1000000 + 3*120 - 8)
	dec := &relDecoder{known: map[uint32]bool{}}
	st := stats.NewRegistry().Component("kafka")
	r := NewReader(ReaderOptions{Topic: "repstream.s", Slot: "s", Publication: "p", AppliedBelow: below, Stats: st,
		Applied:         func(end change.LSN) bool { return end <= below },
		NewDecoder:      func(int, bool, *Epoch, change.LSN) (Decoder, error) { return dec, nil },
		AbortInProgress: func() (int, error) { return 0, nil }})
	for i, v := range recs {
		if err := r.record(context.Background(), &kgo.Record{Value: v, Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if dec.inserts != 3 {
		t.Errorf("%d inserts decoded, want those of the 3 transactions from the third", dec.inserts)
	}
	if n := st.Counter("applied_skipped_txns").Load(); n != 2 {
		t.Errorf("applied_skipped_txns %d, want 2", n)
	}
}

// TestWriterCommitsItsTransactions: after Start (which fences and opens a
// Kafka transaction), every record goes inside a Kafka transaction while
// the Writer commits every CommitEvery, with the linger timer flushing
// meanwhile; Close commits the last. Nothing is produced outside one.
func TestWriterCommitsItsTransactions(t *testing.T) {
	p := &fakeProducer{txns: true}
	tw := &txnWriter{t: t, at: 0x1000000}
	tw.w = NewWriter(WriterOptions{Client: p, Topic: "repstream.s", Proto: 1, Linger: 100 * time.Microsecond,
		CommitEvery: 2 * time.Millisecond, Acked: func(end change.LSN) { tw.acks = append(tw.acks, end) }})
	if err := tw.w.Start(t.Context(), TailInfo{Empty: true}, Epoch{Slot: "s"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		tw.txn()
		if i%100 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	tw.w.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outside > 0 {
		t.Fatalf("%d records produced outside a Kafka transaction", p.outside)
	}
	if p.commits < 3 {
		t.Fatalf("%d commits, want several (every 2 ms, and at Close)", p.commits)
	}
	if p.inTxn {
		t.Fatal("Close left the Kafka transaction open")
	}
	if len(tw.acks) != 2000 {
		t.Fatalf("%d transactions acknowledged, want 2000", len(tw.acks))
	}
	if err := tw.w.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records, %d commits", len(p.recs), p.commits)
}

// TestWriterMessageWhileCommitWaits: while a commit waits for the brokers
// to acknowledge (they are away), Message gives up at its context's
// deadline having done nothing, as the capture expects (it sends the
// slot its status and tries again), instead of waiting for the brokers.
func TestWriterMessageWhileCommitWaits(t *testing.T) {
	p := &fakeProducer{txns: true, flushing: make(chan struct{}, 1), release: make(chan struct{})}
	tw := &txnWriter{t: t, at: 0x1000000}
	tw.w = NewWriter(WriterOptions{Client: p, Topic: "repstream.s", Proto: 1, CommitEvery: time.Millisecond})
	if err := tw.w.Start(t.Context(), TailInfo{Empty: true}, Epoch{Slot: "s"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.flushing:
	case <-time.After(10 * time.Second):
		t.Fatal("no commit began")
	}
	begin := []byte{pgoutput.MsgBegin}
	begin = binary.BigEndian.AppendUint64(begin, 0x1000100)
	begin = binary.BigEndian.AppendUint64(begin, 0)
	begin = binary.BigEndian.AppendUint32(begin, 1)
	var m pgoutput.Message
	if err := pgoutput.Parse(begin, false, 1, &m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := tw.w.Message(ctx, 0x1000000, begin, &m)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
		t.Fatalf("Message during a commit waiting for the brokers: %v after %s, want its deadline", err, time.Since(t0))
	}
	close(p.release) // the brokers are back
	tw.msg(0x1000000, begin)
	tw.w.Close()
	if err := tw.w.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestReaderSessionAfter: each capture session's decoder is told the last
// commit before the session (capture.Options.LastCommit, which a
// transaction applied eagerly in it waits for): its marker's, or the last
// commit read in an earlier session, whichever is later. Before, a new
// session's decoder started from none, and eager apply took its first
// streamed transaction ahead of earlier sessions' transactions the target
// did not have yet: one updating a row it held waited for it for ever.
func TestReaderSessionAfter(t *testing.T) {
	marker := func(epoch uint32, last change.LSN) []byte {
		v := AppendHeader(nil, Header{Kind: KindEpoch, Epoch: epoch, LastCommit: last, Proto: 1})
		return AppendEpoch(v, Epoch{Slot: "s", Publication: "p"})
	}
	p := &fakeProducer{}
	tw := newTestWriter(t, p, time.Hour)
	tw.w.o.Epoch = 1
	for range 3 {
		tw.txn()
	}
	tw.w.Close()
	lastRead := tw.at // the third transaction's end
	recs := append([][]byte{marker(1, 0)}, p.records()...)
	recs = append(recs, marker(2, lastRead+4096), marker(3, 0))
	var afters []change.LSN
	dec := &relDecoder{known: map[uint32]bool{}}
	r := NewReader(ReaderOptions{Topic: "repstream.s", Slot: "s", Publication: "p",
		Applied: func(change.LSN) bool { return false },
		NewDecoder: func(_ int, _ bool, _ *Epoch, after change.LSN) (Decoder, error) {
			afters = append(afters, after)
			return dec, nil
		},
		AbortInProgress: func() (int, error) { return 0, nil }})
	for i, v := range recs {
		if err := r.record(context.Background(), &kgo.Record{Value: v, Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	want := []change.LSN{0, lastRead + 4096, lastRead}
	if !slices.Equal(afters, want) {
		t.Errorf("the sessions' decoders were told %v, want %v", afters, want)
	}
}

// flushTxns feeds n transactions to tw and produces the record holding
// them, as the linger timer does.
func (tw *txnWriter) flushTxns(n int) {
	for range n {
		tw.txn()
	}
	tw.w.bmu.Lock()
	tw.w.flush()
	tw.w.bmu.Unlock()
}

// BenchmarkWriterRecord: the capture's side of a record at fly's 1,000
// transactions a second (about 6 one-row transactions a record, the
// brokers acknowledging each at once): per record.
func BenchmarkWriterRecord(b *testing.B) {
	p := &fakeProducer{}
	tw := newTestWriter(b, p, time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		tw.flushTxns(6)
		if len(p.recs) > 1000 {
			p.recs = p.recs[:0]
			tw.acks = tw.acks[:0]
		}
	}
}

// BenchmarkReaderRecord: the apply's side of such a record (the Reader,
// its decoder counting messages): per record.
func BenchmarkReaderRecord(b *testing.B) {
	p := &fakeProducer{}
	tw := newTestWriter(b, p, time.Hour)
	for range 200 {
		tw.flushTxns(6)
	}
	recs := p.records()
	var r *Reader
	msgs := 0
	i := 0
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if i%len(recs) == 0 {
			r = NewReader(ReaderOptions{Topic: "repstream.s", Slot: "s", Publication: "p",
				NewDecoder: func(int, bool, *Epoch, change.LSN) (Decoder, error) {
					return formatDecoder{msgs: &msgs}, nil
				},
				AbortInProgress: func() (int, error) { return 0, nil },
			})
		}
		rec := &kgo.Record{Value: recs[i%len(recs)], Offset: int64(i % len(recs))}
		if err := r.record(ctx, rec); err != nil {
			b.Fatal(err)
		}
		r.consumed(rec)
		i++
	}
}
