package target

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

func items(t *testing.T, r *stats.Registry, name string) (int64, int64) {
	t.Helper()
	cs, _ := r.Snapshot().Component(name)
	return cs.Items, cs.Bytes
}

// TestAdaptChunk: a COPY that takes the target longer than copyChunkTime
// shrinks the next ones to what it takes in that time (not below
// minCopyChunk); fast full ones double it again up to CopyFlushBytes.
func TestAdaptChunk(t *testing.T) {
	w := NewWriter(nil, WriterOptions{})
	if w.copyChunk != firstCopyChunk {
		t.Fatalf("first chunk %d, want %d", w.copyChunk, firstCopyChunk)
	}
	w.adaptChunk(1<<20, 4*time.Second) // 256 KiB/s
	if w.copyChunk != 256<<10 {
		t.Errorf("after 1 MiB in 4 s: chunk %d, want 256 KiB", w.copyChunk)
	}
	w.adaptChunk(256<<10, 10*time.Minute) // a lock held for 10 minutes
	if w.copyChunk != minCopyChunk {
		t.Errorf("after 10 minutes: chunk %d, want %d", w.copyChunk, minCopyChunk)
	}
	w.adaptChunk(1000, time.Millisecond) // a small COPY says little
	if w.copyChunk != minCopyChunk {
		t.Errorf("after a small fast COPY: chunk %d, want %d", w.copyChunk, minCopyChunk)
	}
	for range 10 {
		w.adaptChunk(w.copyChunk, 10*time.Millisecond)
	}
	if w.copyChunk != DefaultCopyFlushBytes {
		t.Errorf("after fast full COPYs: chunk %d, want %d", w.copyChunk, DefaultCopyFlushBytes)
	}
}

// TestWriterCountsInsertsWhenSent: an insert buffered as a COPY row is not
// counted while it waits in the buffer (it has not reached the target:
// copyOut counts it once its COPY completes; TestCopyOutInChunks); an
// update is counted once queued in the pipeline. Buffering stays
// allocation-free.
func TestWriterCountsInsertsWhenSent(t *testing.T) {
	reg := stats.NewRegistry()
	ins := &change.Change{Op: change.OpInsert, Rel: benchRel(), New: tup(benchValues(1)...)}
	w := benchWriter(t, ins)
	w.st = reg.Component("apply.0")
	ctx := context.Background()
	if err := w.Write(ctx, ins); err != nil {
		t.Fatal(err)
	}
	if n, _ := items(t, reg, "apply.0"); n != 0 {
		t.Errorf("a buffered COPY row counted (%d items) before it was sent", n)
	}
	tb := w.copies.dirty[0]
	if tb.size != int64(ins.Size()) {
		t.Errorf("buffered size %d, want %d", tb.size, ins.Size())
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := w.insert(ctx, ins); err != nil {
			t.Fatal(err)
		}
	}); allocs > 0 {
		t.Errorf("insert allocates %.1f times", allocs)
	}
	if len(tb.ends) != len(tb.lsns) || tb.ends[len(tb.ends)-1] != len(tb.rows) {
		t.Errorf("row ends %v for %d rows of %d bytes", tb.ends, len(tb.lsns), len(tb.rows))
	}

	upd := &change.Change{Op: change.OpUpdate, Rel: benchRel(), New: tup(benchValues(1)...)}
	w = benchWriter(t, upd)
	w.st = reg.Component("apply.1")
	if err := w.Write(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if n, b := items(t, reg, "apply.1"); n != 1 || b != int64(upd.Size()) {
		t.Errorf("a queued update: %d items, %d bytes counted; want 1, %d", n, b, upd.Size())
	}
}

// TestCopyOutInChunks: a flush larger than the Writer's COPY chunk goes in
// several COPY statements of whole rows in one target transaction, each
// counted once it completes; a duplicate key in a later chunk names its
// own row. Text and binary.
func TestCopyOutInChunks(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.c (id int PRIMARY KEY, v text); CREATE TABLE public.b (id int PRIMARY KEY, v int)`)
	for _, binary := range []bool{false, true} {
		table, chunk := "c", 1000 // bytes: about ten rows per COPY
		if binary {
			table, chunk = "b", 200
		}
		r := rel("public", table, change.IdentityDefault, "*id", "v")
		if binary {
			r.Columns[0].TypeOID, r.Columns[1].TypeOID = 23, 23 // int4
		}
		row := func(id int) *change.Change {
			if binary {
				return &change.Change{Op: change.OpInsert, LSN: e.lsn(), Rel: r, New: change.Tuple(change.AppendTuple(nil, []byte{change.KindBinary, change.KindBinary}, [][]byte{be32(id), be32(id)}))}
			}
			return e.ins(r, strconv.Itoa(id), strings.Repeat("x", 90))
		}
		reg := stats.NewRegistry()
		w := NewWriter(e.conn, WriterOptions{Slot: "s1", InsertRowsMax: -1, Binary: binary, Stats: reg.Component("w")})
		w.copyChunk = chunk
		var cs []*change.Change
		for id := 1; id <= 100; id++ {
			cs = append(cs, row(id))
		}
		e.mustApply(w, cs...)
		cs0, _ := reg.Snapshot().Component("w")
		if got := e.count(`SELECT count(*) FROM ` + table); got != 100 || cs0.Items != 100 || cs0.Counters["flushes"] < 5 {
			t.Errorf("binary %v: %d rows on the target, %d counted in %d flushes; want 100, 100, several", binary, got, cs0.Items, cs0.Counters["flushes"])
		}

		// Row 190 of a second transaction exists: the conflict names it.
		e.mustApply(w, row(190))
		w.copyChunk = chunk
		cs = cs[:0]
		for id := 101; id <= 200; id++ {
			cs = append(cs, row(id))
		}
		err := e.apply(w, nil, cs...)
		ce, ok := AsConflict(err)
		if !ok || ce.Kind != InsertExists || ce.LSN != cs[89].LSN {
			t.Errorf("binary %v: err = %v (conflict %+v), want insert_exists at %s", binary, err, ce, cs[89].LSN)
		}
		_ = w.Rollback(e.ctx)
		if n := e.count(`SELECT count(*) FROM ` + table); n != 101 {
			t.Errorf("binary %v: %d rows after the failed transaction, want 101", binary, n)
		}
	}
}

func be32(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
