package capture

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgoutput"
)

func msgCommit(commit, end uint64) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, commit)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, 0)
}

func msgOrigin(name string) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'O'}, 0)
	return append(append(b, name...), 0)
}

func msgStreamAbort(xid, subxid uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'A'}, xid)
	return binary.BigEndian.AppendUint32(b, subxid)
}

// Outside a stream a Relation and an Insert carry no xid.
func msgRelationTop(relid uint32) []byte { return append([]byte{'R'}, msgRelation(0, relid)[5:]...) }
func msgInsertTop(relid uint32, v string) []byte {
	return append([]byte{'I'}, msgInsert(0, relid, v)[5:]...)
}

type commitQueue struct {
	fakeQueue
	committed []uint32
	aborted   []uint32
}

func (q *commitQueue) Commit(info change.TxnInfo) error {
	q.committed = append(q.committed, info.Xid)
	return nil
}

func (q *commitQueue) Abort(xid, _ uint32) error {
	q.aborted = append(q.aborted, xid)
	return nil
}

// TestOriginFilter: with --origin none on a source without pgoutput's
// origin option (PostgreSQL 14, 15), a transaction whose BEGIN (or first
// STREAM START) is followed by an Origin message reaches neither the
// queue nor eager apply, but its commit does (empty: the watermark moves
// past it); its Relation messages are kept; transactions without an
// origin, and every transaction with --origin any, pass whole.
func TestOriginFilter(t *testing.T) {
	const rel = 16384
	run := func(t *testing.T, skip bool) (*commitQueue, *fakeEager) {
		q := &commitQueue{fakeQueue: fakeQueue{added: map[uint32]int{}}}
		eg := &fakeEager{added: map[uint32]int{}}
		c, err := New(Options{Queue: q, Acker: fakeAcker{}, Eager: eg})
		if err != nil {
			t.Fatal(err)
		}
		c.proto = 3
		c.origins.on = skip
		feed := func(msgs ...[]byte) {
			t.Helper()
			for _, m := range msgs {
				if err := c.handle(context.Background(), 1, m); err != nil {
					t.Fatalf("handle %q: %v", m[0], err)
				}
			}
		}
		// 10: replicated, not streamed; its Relation describes rel for 11.
		feed(msgBegin(10), msgOrigin("repstream_s_0"), msgRelationTop(rel), msgInsertTop(rel, "1"), msgInsertTop(rel, "2"), msgCommit(100, 110))
		feed(msgBegin(11), msgInsertTop(rel, "3"), msgCommit(200, 210))
		// 20 (replicated) and 21 (local) stream interleaved; 20 aborts a
		// subtransaction and commits, 22 (replicated) aborts.
		feed(msgStreamStart(20, true), msgOrigin("pg_16385"), msgRelation(20, rel), msgInsert(20, rel, "4"), msgStreamStop())
		feed(msgStreamStart(21, true), msgRelation(21, rel), msgInsert(21, rel, "5"), msgStreamStop())
		feed(msgStreamStart(20, false), msgInsert(20, rel, "6"), msgStreamStop(), msgStreamAbort(20, 25))
		feed(msgStreamStart(22, true), msgOrigin("repstream_s_1"), msgRelation(22, rel), msgInsert(22, rel, "7"), msgStreamStop())
		feed(msgStreamStart(21, false), msgInsert(21, rel, "8"), msgStreamStop())
		feed(msgStreamCommit(20, 300, 310), msgStreamAbort(22, 22), msgStreamCommit(21, 400, 410))
		// A later stream under xid 20 without an origin passes: nothing of
		// the first one is left.
		feed(msgStreamStart(20, true), msgRelation(20, rel), msgInsert(20, rel, "9"), msgStreamStop(), msgStreamCommit(20, 500, 510))
		// And a transaction after a replicated one is not left out.
		feed(msgBegin(12), msgOrigin("x"), msgInsertTop(rel, "10"), msgCommit(600, 610), msgBegin(13), msgInsertTop(rel, "11"), msgCommit(700, 710))
		return q, eg
	}
	t.Run("none", func(t *testing.T) {
		q, eg := run(t, true)
		if got := q.added[10] + q.added[12] + q.added[22] + eg.added[22]; got != 0 {
			t.Errorf("replicated transactions: %d changes queued or applied eagerly, want 0", got)
		}
		// 20's first stream was replicated, its second life (a new
		// transaction with the xid) is not: 1 change ("9").
		if q.added[20]+eg.added[20] != 1 {
			t.Errorf("xid 20: %d changes, want 1 (the later transaction's)", q.added[20]+eg.added[20])
		}
		if q.added[11] != 1 || q.added[13] != 1 || q.added[21]+eg.added[21] != 2 {
			t.Errorf("local transactions: 11 %d, 13 %d, 21 %d changes, want 1, 1, 2", q.added[11], q.added[13], q.added[21]+eg.added[21])
		}
		if want := []uint32{10, 11, 20, 21, 20, 12, 13}; !equalXids(q.committed, want) {
			t.Errorf("commits %v, want %v (the replicated ones empty)", q.committed, want)
		}
	})
	t.Run("any", func(t *testing.T) {
		q, eg := run(t, false)
		if q.added[10] != 2 || q.added[12] != 1 || q.added[22]+eg.added[22] != 1 || q.added[20]+eg.added[20] != 3 {
			t.Errorf("with --origin any every change passes: 10 %d, 12 %d, 22 %d, 20 %d, want 2, 1, 1, 3",
				q.added[10], q.added[12], q.added[22]+eg.added[22], q.added[20]+eg.added[20])
		}
	})
}

type countingSink struct{ rows, commits int }

func (s *countingSink) Message(_ context.Context, _ change.LSN, _ []byte, m *pgoutput.Message) error {
	switch m.Type {
	case pgoutput.MsgInsert, pgoutput.MsgUpdate, pgoutput.MsgDelete, pgoutput.MsgTruncate, pgoutput.MsgMessage:
		s.rows++
	case pgoutput.MsgCommit, pgoutput.MsgStreamCommit:
		s.commits++
	}
	return nil
}
func (s *countingSink) Err() error { return nil }

// TestOriginFilterRaw: capture --kafka with --origin none before
// PostgreSQL 16 writes no row change of a transaction with an origin to
// the topic, and its commit still.
func TestOriginFilterRaw(t *testing.T) {
	const rel = 16384
	sink := &countingSink{}
	c, err := New(Options{Raw: sink, Acker: fakeAcker{}})
	if err != nil {
		t.Fatal(err)
	}
	c.proto = 3
	c.origins.on = true
	for _, m := range [][]byte{
		msgBegin(10), msgOrigin("repstream_0"), msgRelationTop(rel), msgInsertTop(rel, "1"), msgCommit(100, 110),
		msgBegin(11), msgInsertTop(rel, "2"), msgInsertTop(rel, "3"), msgCommit(200, 210),
		msgStreamStart(20, true), msgOrigin("repstream_1"), msgRelation(20, rel), msgInsert(20, rel, "4"), msgStreamStop(), msgStreamCommit(20, 300, 310),
	} {
		if err := c.handle(context.Background(), 1, m); err != nil {
			t.Fatalf("handle %q: %v", m[0], err)
		}
	}
	if sink.rows != 2 || sink.commits != 3 {
		t.Errorf("the topic got %d row changes and %d commits, want 2 (the local transaction's) and 3", sink.rows, sink.commits)
	}
}

func equalXids(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
