package capture

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

// Synthetic pgoutput messages (protocol 3), just enough for routing tests.
func msgStreamStart(xid uint32, first bool) []byte {
	b := []byte{'S'}
	b = binary.BigEndian.AppendUint32(b, xid)
	if first {
		return append(b, 1)
	}
	return append(b, 0)
}

func msgStreamStop() []byte { return []byte{'E'} }

func msgRelation(xid, relid uint32) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint32(b, relid)
	b = append(b, "public\x00t\x00"...)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 1)
	b = append(b, "id\x00"...)
	b = binary.BigEndian.AppendUint32(b, 23)
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
}

func msgInsert(xid, relid uint32, v string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint32(b, relid)
	b = append(b, 'N')
	return change.AppendTuple(b, []byte{change.KindText}, [][]byte{[]byte(v)})
}

func msgStreamCommit(xid uint32, commit, end uint64) []byte {
	b := []byte{'c'}
	b = binary.BigEndian.AppendUint32(b, xid)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, commit)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, 0)
}

type fakeQueue struct{ added map[uint32]int }

func (q *fakeQueue) Begin(uint32) {}
func (q *fakeQueue) Add(_ context.Context, xid uint32, _ *change.Change) error {
	q.added[xid]++
	return nil
}
func (q *fakeQueue) Commit(change.TxnInfo) error { return nil }
func (q *fakeQueue) Abort(uint32, uint32) error  { return nil }

type fakeAcker struct{}

func (fakeAcker) Register(change.LSN) {}
func (fakeAcker) Observe(change.LSN)  {}
func (fakeAcker) Flush() change.LSN   { return 1 }
func (fakeAcker) Pending() int        { return 0 }

type fakeEager struct {
	busy  bool
	added map[uint32]int
}

func (e *fakeEager) TryTake(_ context.Context, xid uint32, _, _ change.LSN) (bool, error) {
	if e.busy {
		return false, nil
	}
	e.busy = true
	return true, nil
}
func (e *fakeEager) Chunk(context.Context, uint32, change.LSN) error { return nil }
func (e *fakeEager) Add(_ context.Context, xid uint32, _ *change.Change) error {
	e.added[xid]++
	return nil
}
func (e *fakeEager) Abort(context.Context, uint32, uint32) error { return nil }

// TestStreamNeverSplit: a streamed transaction whose first chunk went to the
// queue (Eager was busy) stays in the queue when Eager frees up before its
// next chunk — it is never split between the queue and Eager.
func TestStreamNeverSplit(t *testing.T) {
	q := &fakeQueue{added: map[uint32]int{}}
	eg := &fakeEager{added: map[uint32]int{}}
	c, err := New(Options{Queue: q, Acker: fakeAcker{}, Eager: eg})
	if err != nil {
		t.Fatal(err)
	}
	c.proto = 3
	ctx := context.Background()
	const w, y, rel = 100, 200, 16384
	feed := func(msgs ...[]byte) {
		t.Helper()
		for _, m := range msgs {
			if err := c.handle(ctx, 1, m); err != nil {
				t.Fatalf("handle %q: %v", m[0], err)
			}
		}
	}
	feed(msgStreamStart(w, true), msgRelation(w, rel), msgInsert(w, rel, "1"), msgStreamStop())     // W: eager
	feed(msgStreamStart(y, true), msgRelation(y, rel), msgInsert(y, rel, "2"), msgStreamStop())     // Y: eager busy → queue
	feed(msgStreamCommit(w, 10, 20))                                                                // W commits
	eg.busy = false                                                                                 // ... and Eager frees up
	feed(msgStreamStart(y, false), msgInsert(y, rel, "3"), msgInsert(y, rel, "4"), msgStreamStop()) // Y's second chunk
	if eg.added[w] != 1 || eg.added[y] != 0 || q.added[y] != 3 || q.added[w] != 0 {
		t.Fatalf("eager got W %d, Y %d; queue got W %d, Y %d; want 1, 0, 0, 3", eg.added[w], eg.added[y], q.added[w], q.added[y])
	}
}
