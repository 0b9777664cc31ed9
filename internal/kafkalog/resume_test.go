package kafkalog

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgoutput"
)

// Resuming a reader at the offsets ResumeOffset gives, and schema renames
// inside streamed transactions, through a Writer, a Reader and capture's
// own Decoder (protocol 2).

// ---- message builders (protocol 2) ----

func rvBegin(commit, xid uint32) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'B'}, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, xid)
}

func rvCommit(commit, end uint32) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'C', 0}, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

func rvStreamStart(xid uint32, first bool) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'S'}, xid)
	if first {
		return append(b, 1)
	}
	return append(b, 0)
}

func rvStreamCommit(xid, commit, end uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'c'}, xid)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

func rvStreamAbort(xid, sub uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'A'}, xid)
	return binary.BigEndian.AppendUint32(b, sub)
}

// rvRelation: relation id, schema.name, one key column id int4; xid != 0: in a stream.
func rvRelation(xid, id uint32, schema, name string) []byte {
	b := []byte{'R'}
	if xid != 0 {
		b = binary.BigEndian.AppendUint32(b, xid)
	}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, schema+"\x00"+name+"\x00d"...)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 1)
	b = append(b, "id\x00"...)
	b = binary.BigEndian.AppendUint32(b, 23)
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
}

func rvInsert(xid, id uint32, val string) []byte {
	b := []byte{'I'}
	if xid != 0 {
		b = binary.BigEndian.AppendUint32(b, xid)
	}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, 'N')
	return change.AppendTuple(b, []byte{change.KindText}, [][]byte{[]byte(val)})
}

func rvLogical(xid uint32, transactional bool, prefix, content string) []byte {
	b := []byte{'M'}
	if xid != 0 {
		b = binary.BigEndian.AppendUint32(b, xid)
	}
	if transactional {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, 0x80)
	b = append(b, prefix...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

// ---- a Writer fed as capture feeds it ----

type rvWire struct {
	t        *testing.T
	w        *Writer
	p        *fakeProducer
	inStream bool
	at       change.LSN
}

func newRVWire(t *testing.T, maxRecord int) *rvWire {
	p := &fakeProducer{}
	w := NewWriter(WriterOptions{Client: p, Topic: "repstream.s", Proto: 2, MaxRecord: maxRecord, Linger: time.Hour, CatchUpLinger: time.Hour})
	w.o.Epoch = 1
	w.lastBoundary = time.Now() // records fill by size: no quiet stream (boundary)
	return &rvWire{t: t, w: w, p: p, at: 0x1000}
}

func (x *rvWire) send(data []byte) {
	x.t.Helper()
	var m pgoutput.Message
	if err := pgoutput.Parse(data, x.inStream, 2, &m); err != nil {
		x.t.Fatalf("parse %q: %v", data[0], err)
	}
	switch m.Type {
	case 'S':
		x.inStream = true
	case 'E':
		x.inStream = false
	}
	x.at += 10
	if err := x.w.Message(context.Background(), x.at, data, &m); err != nil {
		x.t.Fatal(err)
	}
}

func (x *rvWire) records() [][]byte {
	x.w.Close()
	return x.p.records()
}

// ---- a Reader with capture's real Decoder ----

type rvQueue struct {
	log []string
}

func (q *rvQueue) Begin(xid uint32) { q.log = append(q.log, fmt.Sprintf("begin %d", xid)) }
func (q *rvQueue) Add(_ context.Context, xid uint32, c *change.Change) error {
	name := "?"
	if c.Rel != nil {
		name = c.Rel.Namespace + "." + c.Rel.Name
	}
	q.log = append(q.log, fmt.Sprintf("add %d %s %s", xid, c.Op, name))
	return nil
}
func (q *rvQueue) Commit(info change.TxnInfo) error {
	q.log = append(q.log, fmt.Sprintf("commit %d end %d", info.Xid, info.EndLSN))
	return nil
}
func (q *rvQueue) Abort(xid, sub uint32) error {
	q.log = append(q.log, fmt.Sprintf("abort %d/%d", xid, sub))
	return nil
}

// rvKey signs the schema-change messages of these tests, as a capture
// does for the topic (the decoder checks them with its public key,
// rvKeys).
var (
	rvKey  = ddlmsg.TopicKey(bytes.Repeat([]byte{7}, ddlmsg.KeyLen))
	rvKeys = map[string]ed25519.PublicKey{ddlmsg.KeyFingerprint(rvKey.Public().(ed25519.PublicKey)): rvKey.Public().(ed25519.PublicKey)}
)

// rvSigned is json as a capture writes it to the topic, emitted in
// top-level transaction xid.
func rvSigned(xid uint32, json string) string {
	return string(ddlmsg.SignTopic(rvKey, xid, []byte(json)))
}

type rvAcker struct{}

func (rvAcker) Register(change.LSN) {}
func (rvAcker) Observe(change.LSN)  {}
func (rvAcker) Flush() change.LSN   { return 1 }
func (rvAcker) Pending() int        { return 0 }

func newRVReader(from int64, applied func(change.LSN) bool, q *rvQueue) *Reader {
	return NewReader(ReaderOptions{Topic: "repstream.s", Slot: "s", Publication: "p", From: from,
		Applied: applied,
		NewDecoder: func(proto int, bin bool, _ *Epoch, _ change.LSN) (Decoder, error) {
			return capture.NewDecoder(capture.Options{Publication: "p", Binary: bin, DDLMessages: true, TopicKeys: rvKeys, Queue: q, Acker: rvAcker{}}, proto)
		},
		AbortInProgress: func() (int, error) { return 0, nil }})
}

// read feeds recs[from:] to r, recording what it did; stops at the first error.
func readAll(r *Reader, recs [][]byte, from int) error {
	for i := from; i < len(recs); i++ {
		if err := r.record(context.Background(), &kgo.Record{Value: recs[i], Offset: int64(i)}); err != nil {
			return err
		}
		r.consumed(&kgo.Record{Value: recs[i], Offset: int64(i)})
	}
	return nil
}

// replay reads recs from offset from with a new reader whose target has
// what applied says, and returns it and what its decoder queued.
func replay(t *testing.T, recs [][]byte, from int64, applied func(change.LSN) bool) (*Reader, string) {
	t.Helper()
	q := &rvQueue{}
	r := newRVReader(from, applied, q)
	if err := readAll(r, recs, int(from)); err != nil {
		t.Fatalf("a reader from offset %d: %v", from, err)
	}
	return r, strings.Join(q.log, "; ")
}

func none(change.LSN) bool { return false }

func kinds(recs [][]byte) string {
	var s []string
	for i, v := range recs {
		h, body, _ := ParseHeader(v)
		if h.Kind != KindData {
			s = append(s, fmt.Sprintf("%d:%c", i, h.Kind))
			continue
		}
		var fs []string
		_ = Frames(body, func(f Frame) error { fs = append(fs, string(f.Data[0])); return nil })
		s = append(s, fmt.Sprintf("%d:[%s]", i, strings.Join(fs, "")))
	}
	return strings.Join(s, " ")
}

// TestReaderResumeMidBlock: a resume point (the first record of an open
// streamed transaction X) whose record starts with the tail of another
// streamed transaction Y's block, holding an in-stream Relation message;
// Y is committed and applied. The record says it starts inside a block
// (Header.InStream), and a reader starting there drops the block's rest:
// it took the in-stream Relation for an outside one and stopped, at every
// restart.
func TestReaderResumeMidBlock(t *testing.T) {
	x := newRVWire(t, 400)
	const Y, X = 700, 800
	// Y's block: rows of a (fill a record), then a first row of b.
	x.blockOverRecords(Y)
	// X's first block right after (the walsender streams the largest ones in a row).
	x.send(rvStreamStart(X, true))
	x.send(rvRelation(X, 16384, "public", "a"))
	x.send(rvInsert(X, 16384, "x row"))
	x.send([]byte{'E'})
	x.send(rvStreamCommit(Y, 0x5000, 0x5010))
	recs := x.records()
	r, _ := replay(t, recs, 0, none)
	from := r.ResumeOffset(0x5010) // Y applied, X open
	if h, _, _ := ParseHeader(recs[from]); from == 0 || !h.InStream {
		t.Fatalf("resume offset %d (records %s): want a record that starts inside Y's block", from, kinds(recs))
	}
	_, got := replay(t, recs, from, func(end change.LSN) bool { return end <= 0x5010 })
	if !strings.Contains(got, "add 800 insert public.a") || strings.Contains(got, " 700 ") {
		t.Fatalf("second run: %s; want X's row and nothing of Y", got)
	}
}

// TestReaderResumeMidFragment: a large non-transactional logical message
// (messages 'true' in DDL-trigger mode) goes as fragments; while the Reader
// is between two of them no transaction is open, and ResumeOffset was the
// next fragment, where a later run stopped, at every restart. Now it is
// the message's first fragment; and a reader started inside fragments (an
// offset stored before) drops them.
func TestReaderResumeMidFragment(t *testing.T) {
	x := newRVWire(t, 400)
	x.send(rvBegin(0x2000, 5))
	x.send(rvRelation(0, 16384, "public", "a"))
	x.send(rvInsert(0, 16384, "r"))
	x.send(rvCommit(0x2000, 0x2010))
	x.send(rvLogical(0, false, "app.audit", strings.Repeat("z", 1500)))
	x.send(rvBegin(0x3000, 6))
	x.send(rvInsert(0, 16384, "s"))
	x.send(rvCommit(0x3000, 0x3010))
	recs := x.records()
	// The first run reads up to the second fragment (offset 2), then the persister asks.
	r, _ := replay(t, recs[:3], 0, none)
	from := r.ResumeOffset(0x2010)
	if h, body, _ := ParseHeader(recs[from]); h.Kind != KindFragment {
		t.Fatalf("resume offset %d (records %s): want the first fragment", from, kinds(recs))
	} else if fr, _ := ParseFragment(body); fr.Offset != 0 {
		t.Fatalf("resume offset %d: a fragment at %d of its message, want its first", from, fr.Offset)
	}
	for _, at := range []int64{from, from + 1} {
		if _, got := replay(t, recs, at, func(end change.LSN) bool { return end <= 0x2010 }); !strings.Contains(got, "commit 6") {
			t.Fatalf("a run from offset %d: %s; want the transaction after the message", at, got)
		}
	}
}

const renameMsg = `{"tag":"ALTER SCHEMA","schema":"app2","name":"a","oid":16384,"pubs":["p"],"xid":901,"old":{"schema":"app","name":"a","oid":16384,"pubs":["p"]}}`

// TestRenameRolledBackToSavepoint: in streamed transaction X, a savepoint
// (subtransaction 901) renames app to app2 and is rolled back (STREAM
// ABORT X/901); X touches app.a no more and commits, and pgoutput need not
// describe app.a again. The next transaction's row of app.a goes to app.a,
// for a reader reading on and for one starting at its record: the Writer
// and the decoder forget a rename with its subtransaction (they renamed
// the table for good at X's commit).
func TestRenameRolledBackToSavepoint(t *testing.T) {
	const X = 900
	msgs := [][]byte{
		rvBegin(0x2000, 5), rvRelation(0, 16384, "app", "a"), rvInsert(0, 16384, "t0"), rvCommit(0x2000, 0x2010),
		rvStreamStart(X, true), rvRelation(X, 16384, "app", "a"), rvInsert(X, 16384, "x1"),
		rvLogical(X, true, change.DDLPrefix, rvSigned(X, renameMsg)), rvInsert(X, 16384, "x2 in app2.a"), []byte{'E'},
		rvStreamAbort(X, 901),
		rvStreamCommit(X, 0x3000, 0x3010),
		rvBegin(0x4000, 7), rvInsert(0, 16384, "t1 into app.a on the source"), rvCommit(0x4000, 0x4010),
	}
	// Through Kafka.
	x := newRVWire(t, 1<<20)
	for _, m := range msgs {
		x.send(m)
	}
	recs := x.records()
	if _, got := replay(t, recs, 0, none); !strings.Contains(got, "add 7 insert app.a") {
		t.Errorf("a reader reading on: %s; want transaction 7's row in app.a", got)
	}
	// And a fresh reader starting at the last transaction's record (a new
	// record: the Writer repeats its Relation message).
	x2 := newRVWire(t, 1<<20)
	for i, m := range msgs {
		if i == 12 {
			x2.cut()
		}
		x2.send(m)
	}
	recs2 := x2.records()
	if _, got := replay(t, recs2, int64(len(recs2)-1), func(end change.LSN) bool { return end <= 0x3010 }); !strings.Contains(got, "add 7 insert app.a") {
		t.Errorf("a reader from the last record: %s; want transaction 7's row in app.a", got)
	}
}

// blockOverRecords sends a first stream block of streamed transaction y
// longer than a record of 400 bytes: rows of public.a, then public.b
// described and a row of it near the block's end.
func (x *rvWire) blockOverRecords(y uint32) {
	x.send(rvStreamStart(y, true))
	x.send(rvRelation(y, 16384, "public", "a"))
	for range 6 {
		x.send(rvInsert(y, 16384, "a row of table a, forty bytes or so....."))
	}
	x.send(rvRelation(y, 16385, "public", "b"))
	x.send(rvInsert(y, 16385, "b row"))
	x.send([]byte{'E'})
}

// cut produces the record being filled: the next message starts a record.
func (x *rvWire) cut() {
	x.w.bmu.Lock()
	x.w.flush()
	x.w.bmu.Unlock()
}

// TestStreamCommitRedescribes: streamed X renames schema app to app2 and
// commits; T2 (before X's commit, in the same record) touched app.a; T3,
// after X's commit in that record, must get the Relation message under the
// new names: a reader resuming at that record (X applied, T3 not) decoded
// T3's row as app.a.
func TestStreamCommitRedescribes(t *testing.T) {
	const X = 900
	rename := strings.Replace(renameMsg, `"xid":901`, `"xid":900`, 1)
	x := newRVWire(t, 1<<20)
	for _, m := range [][]byte{rvBegin(0x2000, 5), rvRelation(0, 16384, "app", "a"), rvInsert(0, 16384, "t0"), rvCommit(0x2000, 0x2010)} {
		x.send(m)
	}
	x.cut()
	for _, m := range [][]byte{rvStreamStart(X, true), rvRelation(X, 16384, "app", "a"), rvInsert(X, 16384, "x1"),
		rvLogical(X, true, change.DDLPrefix, rvSigned(X, rename)), rvInsert(X, 16384, "x2 in app2.a"), []byte{'E'}} {
		x.send(m)
	}
	x.cut()
	for _, m := range [][]byte{rvBegin(0x3000, 6), rvInsert(0, 16384, "t2 into app.a"), rvCommit(0x3000, 0x3010),
		rvStreamCommit(X, 0x3100, 0x3110),
		rvBegin(0x4000, 7), rvInsert(0, 16384, "t3 into app2.a on the source"), rvCommit(0x4000, 0x4010)} {
		x.send(m)
	}
	recs := x.records()
	r, got := replay(t, recs, 0, none)
	if !strings.Contains(got, "add 7 insert app2.a") {
		t.Errorf("a reader reading on: %s; want transaction 7's row in app2.a", got)
	}
	// The persister: X and T2 applied, T3 not yet (still open, or committed above low).
	r.pts.mu.Lock()
	r.pts.open[7] = 2 // as if T3's commit had not been read yet
	r.pts.committed = r.pts.committed[:len(r.pts.committed)-1]
	r.pts.mu.Unlock()
	from := r.ResumeOffset(0x3110)
	if _, got := replay(t, recs, from, func(end change.LSN) bool { return end <= 0x3110 }); !strings.Contains(got, "add 7 insert app2.a") {
		t.Errorf("a reader resumed at offset %d: %s; want transaction 7's row in app2.a", from, got)
	}
}

// TestReaderResumeMidBlockAborted: as TestReaderResumeMidBlock, but Y is
// rolled back and the open transaction is an ordinary one (T) committed
// right after Y's block, in the same record.
func TestReaderResumeMidBlockAborted(t *testing.T) {
	x := newRVWire(t, 500)
	const Y = 700
	x.send(rvBegin(0x900, 5))
	x.send(rvRelation(0, 16384, "public", "a"))
	x.send(rvInsert(0, 16384, "t0"))
	x.send(rvCommit(0x900, 0x910))
	x.blockOverRecords(Y)
	x.send(rvBegin(0x3000, 6))
	x.send(rvInsert(0, 16384, "T"))
	x.send(rvCommit(0x3000, 0x3010))
	x.send(rvStreamAbort(Y, Y))
	recs := x.records()
	r, _ := replay(t, recs, 0, none)
	from := r.ResumeOffset(0x910) // T not applied yet
	if _, got := replay(t, recs, from, func(end change.LSN) bool { return end <= 0x910 }); !strings.Contains(got, "add 6 insert public.a; commit 6") {
		t.Fatalf("second run from offset %d: %s; want T's row", from, got)
	}
}

// TestReaderForgedDDL: a schema-change message whose signature does not
// verify (its JSON altered after signing: a record another producer wrote
// to the topic) stops the reader with ErrCorrupt, naming the topic, the
// offset, the LSN and the transaction; nothing of its transaction is
// queued. The same message signed is taken.
func TestReaderForgedDDL(t *testing.T) {
	const ddl = `{"tag":"ALTER TABLE","schema":"app","name":"a","oid":16384,"pubs":["p"]}`
	rec := func(content string) [][]byte {
		var body []byte
		for i, m := range [][]byte{rvBegin(0x2000, 5), rvRelation(0, 16384, "app", "a"),
			rvLogical(0, true, change.DDLPrefix, content), rvInsert(0, 16384, "after"), rvCommit(0x2000, 0x2010)} {
			body = AppendFrame(body, Frame{WALStart: change.LSN(0x1f00 + i), Data: m})
		}
		return [][]byte{append(AppendHeader(nil, Header{Kind: KindData, Epoch: 1, LastCommit: 0x2010, Proto: 2}), body...)}
	}
	q := &rvQueue{}
	if err := readAll(newRVReader(0, none, q), rec(rvSigned(5, ddl)), 0); err != nil {
		t.Fatalf("a signed schema-change message: %v", err)
	}
	if log := strings.Join(q.log, "; "); !strings.Contains(log, "add 5 schema change") || !strings.Contains(log, "commit") {
		t.Fatalf("a signed schema-change message: queued %q", log)
	}
	forged := rvSigned(5, ddl)[:len(rvSigned(5, ddl))-len(ddl)] + `{"tag":"DROP TABLE","dropped":true,"schema":"app","name":"a","oid":16384,"pubs":["p"]}`
	q = &rvQueue{}
	err := readAll(newRVReader(0, none, q), rec(forged), 0)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ddlmsg.ErrNotSigned) {
		t.Fatalf("a forged schema-change message: %v, want ErrCorrupt", err)
	}
	for _, s := range []string{"topic repstream.s offset 0 (LSN 0/1F02)", "xid 5", "not a repstream record"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q: %v", s, err)
		}
	}
	if log := strings.Join(q.log, "; "); strings.Contains(log, "schema change") || strings.Contains(log, "commit") {
		t.Errorf("a forged schema-change message: queued %q", log)
	}
}
