package queue

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files")

// memHandle is an in-memory spillHandle.
type memHandle struct{ b []byte }

func (m *memHandle) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}
func (m *memHandle) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (m *memHandle) Truncate(n int64) error { m.b = m.b[:n]; return nil }
func (m *memHandle) Close() error           { return nil }

func newBufPool() *sync.Pool {
	return &sync.Pool{New: func() any { b := make([]byte, 0, spillBufSize); return &b }}
}

// testRels returns a relation table holding relA (ref 1) and relB (ref 2).
func testRels() *relTable {
	rt := &relTable{}
	rt.ref(relA)
	rt.ref(relB)
	return rt
}

func goldenChanges() []*change.Change {
	return []*change.Change{
		{Op: change.OpInsert, LSN: 0x16B374D848, Rel: relA,
			New: change.Tuple(change.AppendTuple(nil, []byte{change.KindText, change.KindText}, [][]byte{[]byte("1"), []byte("hello")}))},
		{Op: change.OpUpdate, Xid: 731, LSN: 0x16B374D9A0, Rel: relB, OldKind: 'O',
			Old: change.Tuple(change.AppendTuple(nil, []byte{change.KindText}, [][]byte{[]byte("old")})),
			New: change.Tuple(change.AppendTuple(nil, []byte{change.KindUnchanged}, nil))},
		{Op: change.OpDelete, Xid: 732, LSN: 0x16B374DA00, Rel: relA, OldKind: 'K',
			Old: change.Tuple(change.AppendTuple(nil, []byte{change.KindText, change.KindNull}, [][]byte{[]byte("1"), nil}))},
		{Op: change.OpTruncate, LSN: 0x16B374DB00, TruncateRels: []*change.Relation{relB, relA},
			TruncateOpts: change.TruncateCascade},
		mustDDL(0x16B374DC00, 733, `{"tag":"ALTER TABLE","schema":"public","name":"a"}`),
	}
}

func mustDDL(lsn change.LSN, xid uint32, content string) *change.Change {
	c, err := change.NewDDL(lsn, xid, []byte(content))
	if err != nil {
		panic(err)
	}
	return c
}

func encodeAll(t testing.TB, rt *relTable, cs []*change.Change) []byte {
	t.Helper()
	h := &memHandle{}
	w := newSpillWriter("mem", h, nil, rt, newBufPool())
	for _, c := range cs {
		if _, err := w.append(c, int64(c.Size())); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	return h.b
}

func decodeAll(name string, data []byte, rels []*change.Relation, each func(c *change.Change, rec []byte) error) error {
	r := spillReader{name: name, r: bytes.NewReader(data), remain: int64(len(data)), rels: rels}
	for {
		off := r.off
		c, n, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(c, data[off:off+int64(n)]); err != nil {
			return err
		}
	}
}

func TestSpillFormatGolden(t *testing.T) {
	rt := testRels()
	cs := goldenChanges()
	data := encodeAll(t, rt, cs)
	got := []byte(hex.Dump(data))
	path := filepath.Join("testdata", "spill_records.golden")
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("spill encoding changed (run with -update if intended):\n%s\nwant:\n%s", got, want)
	}
	// The record frame as documented: length, then CRC of the payload.
	if n := le32(data); int(n) != fixedSize+len(cs[0].New) {
		t.Fatalf("first record length %d", n)
	}
	i := 0
	err = decodeAll("golden", data, rt.snapshot(), func(c *change.Change, _ []byte) error {
		if d := sameChange(c, cs[i]); d != "" {
			t.Fatalf("change %d: %s", i, d)
		}
		i++
		return nil
	})
	if err != nil || i != len(cs) {
		t.Fatalf("decoded %d changes: %v", i, err)
	}
	var accounted int
	for _, c := range cs {
		accounted += c.Size()
	}
	if len(data) > accounted {
		t.Fatalf("%d bytes written for %d accounted", len(data), accounted)
	}
}

func FuzzSpillReader(f *testing.F) {
	golden := encodeAll(f, testRels(), goldenChanges())
	f.Add(golden)
	f.Add(golden[:len(golden)-1])
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 'I'})
	bad := bytes.Clone(golden)
	bad[20] ^= 1
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		rt := testRels()
		err := decodeAll("fuzz", data, rt.snapshot(), func(c *change.Change, rec []byte) error {
			// A record that decodes encodes back to the same bytes.
			again := encodeAll(t, rt, []*change.Change{c})
			if !bytes.Equal(again, rec) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, rec)
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not marked corrupt: %v", err)
		}
	})
}

// TestMillionChangeTxn pushes one transaction of 1,000,000 changes through a
// 1 MiB budget: memory stays within the budget, the heap stays small, the
// spill file is no bigger than 1.2× the accounted bytes, and every change
// comes back in order.
func TestMillionChangeTxn(t *testing.T) {
	n := 1_000_000
	if testing.Short() || invariants { // the race detector makes this 10× slower
		n = 200_000
	}
	const budget = 1 << 20
	q := newTestQueue(t, budget)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	const heapLimit = 24 << 20
	ctx := context.Background()
	small := insert(relB, 2, 0, 10)
	mustAdd(t, q.Queue, 2, small) // a small concurrent txn stays in memory
	for i := 1; i <= n; i++ {
		if err := q.Add(ctx, 1, insert(relA, 1, uint64(i), 20)); err != nil {
			t.Fatal(err)
		}
		if i%(n/5) == 0 {
			if h := heap(); h > base+heapLimit {
				t.Fatalf("after %d changes: heap %d MiB over a base of %d MiB", i, h>>20, base>>20)
			}
		}
	}
	if q.MemoryBytes() > budget || q.open[2].Spilled() {
		t.Fatalf("memory %d, small txn spilled %v", q.MemoryBytes(), q.open[2].Spilled())
	}
	mustCommit(t, q.Queue, 1)
	mustCommit(t, q.Queue, 2)
	txn := mustNext(t, q.Queue)
	if !txn.Spilled() || txn.Len() != n {
		t.Fatalf("spilled %v, len %d", txn.Spilled(), txn.Len())
	}
	written, accounted := q.counter("spill", "bytes"), q.counter("spill", "accounted_bytes")
	ratio := float64(written) / float64(accounted)
	t.Logf("%d changes: %d MiB accounted, %d MiB written, ratio %.3f", n, accounted>>20, written>>20, ratio)
	if ratio > 1.2 || accounted != txn.Bytes() {
		t.Fatalf("spill wrote %d bytes for %d accounted (txn %d)", written, accounted, txn.Bytes())
	}
	i := 0
	for c, err := range txn.Changes() {
		if err != nil {
			t.Fatal(err)
		}
		i++
		if c.LSN != change.LSN(i) || c.Rel != relA {
			t.Fatalf("change %d: lsn %v rel %v", i, c.LSN, c.Rel)
		}
		if i%(n/4) == 0 {
			if d := sameChange(c, insert(relA, 1, uint64(i), 20)); d != "" {
				t.Fatalf("change %d: %s", i, d)
			}
			if h := heap(); h > base+heapLimit {
				t.Fatalf("reading: heap %d MiB over a base of %d MiB", h>>20, base>>20)
			}
		}
	}
	if i != n {
		t.Fatalf("read %d changes", i)
	}
	txn.Release()
	txn2 := mustNext(t, q.Queue)
	checkTxn(t, txn2, []*change.Change{small})
	txn2.Release()
}

func BenchmarkAddInMemory(b *testing.B) {
	q := newTestQueue(b, 1<<30)
	c := insert(relA, 0, 1, 100)
	ctx := context.Background()
	b.SetBytes(int64(c.Size()))
	b.ReportAllocs()
	xid := uint32(1)
	q.Begin(xid)
	for i := 0; b.Loop(); i++ {
		if err := q.Add(ctx, xid, c); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			mustCommit(b, q.Queue, xid)
			txn, _ := q.TryNext()
			txn.Release()
			xid++
			q.Begin(xid)
		}
	}
}

func BenchmarkSpillWrite(b *testing.B) {
	q := newTestQueue(b, 1<<10)
	c := insert(relA, 1, 1, 200)
	ctx := context.Background()
	mustAdd(b, q.Queue, 1, insert(relA, 1, 1, 2000)) // spills the txn
	b.SetBytes(int64(encodedSize(c)))
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Add(ctx, 1, c); err != nil {
			b.Fatal(err)
		}
	}
	mustCommit(b, q.Queue, 1)
}

func BenchmarkSpillRead(b *testing.B) {
	q := newTestQueue(b, 1<<10)
	for i := 0; i < 50_000; i++ {
		mustAdd(b, q.Queue, 1, insert(relA, 1, uint64(i), 200))
	}
	mustCommit(b, q.Queue, 1)
	txn := mustNext(b, q.Queue)
	defer txn.Release()
	b.SetBytes(txn.size)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for _, err := range txn.Changes() {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != 50_000 {
			b.Fatalf("read %d", n)
		}
	}
}

// FuzzDecodePayload fuzzes the payload decoder behind the CRC, which random
// inputs to FuzzSpillReader rarely get past.
func FuzzDecodePayload(f *testing.F) {
	golden := encodeAll(f, testRels(), goldenChanges())
	_ = decodeAll("seed", golden, testRels().snapshot(), func(_ *change.Change, rec []byte) error {
		f.Add(bytes.Clone(rec[frameHeaderSize:]))
		return nil
	})
	f.Fuzz(func(t *testing.T, p []byte) {
		rt := testRels()
		var c change.Change
		if _, err := decodePayload(p, rt.snapshot(), &c, nil); err != nil {
			return
		}
		again := encodeAll(t, rt, []*change.Change{&c})
		if !bytes.Equal(again[frameHeaderSize:], p) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again[frameHeaderSize:], p)
		}
	})
}
