package target

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/schema"
)

// benchWriter returns a Writer without a connection whose plan for rel is
// cached and whose update statement is marked prepared, so modify and insert
// run their in-memory part only.
func benchWriter(b *testing.B, c *change.Change) *Writer {
	rel := c.Rel
	tab := &schema.Table{Schema: rel.Namespace, Name: rel.Name}
	for _, col := range rel.Columns {
		tab.Columns = append(tab.Columns, schema.Column{Name: col.Name})
	}
	w := NewWriter(nil, WriterOptions{CopyFlushBytes: 1 << 30, BatchStatements: 1 << 30})
	p, err := newPlan(rel, tab, nil, false)
	if err != nil {
		b.Fatal(err)
	}
	w.plans[rel] = p
	if c.Op == change.OpUpdate {
		w.newKinds, w.newVals = w.splitTuple(c.New, nil, nil)
		key := p.stmtKey(nil, c.Op, whereNewKey, w.newKinds, nil)
		s := p.buildStmt(c.Op, whereNewKey, w.newKinds, nil)
		s.name = "bench"
		p.stmts[string(key)] = s
	}
	w.inTxn = true
	return w
}

func benchRel() *change.Relation {
	return rel("public", "bench", change.IdentityDefault, "*id", "a", "b", "c", "d", "e", "f", "g")
}

func benchValues(id int) []string {
	return []string{strconv.Itoa(id), "some name", "a longer text value with a\ttab", null,
		"2024-05-01 12:34:56.789+00", "{1,2,3}", "true", "3.14159"}
}

// BenchmarkWriterQueueUpdate measures queueing one UPDATE into the pipeline
// batch: tuple split, statement-cache lookup, parameter binding.
func BenchmarkWriterQueueUpdate(b *testing.B) {
	c := &change.Change{Op: change.OpUpdate, Rel: benchRel(), New: tup(benchValues(1)...)}
	w := benchWriter(b, c)
	ctx := context.Background()
	b.SetBytes(int64(len(c.New)))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.modify(ctx, c); err != nil {
			b.Fatal(err)
		}
		if len(w.items) >= 1000 {
			w.resetBatch()
		}
	}
}

// BenchmarkWriterBufferInsert measures buffering one insert as a COPY row.
func BenchmarkWriterBufferInsert(b *testing.B) {
	c := &change.Change{Op: change.OpInsert, Rel: benchRel(), New: tup(benchValues(1)...)}
	w := benchWriter(b, c)
	ctx := context.Background()
	b.SetBytes(int64(len(c.New)))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.insert(ctx, c); err != nil {
			b.Fatal(err)
		}
		if len(w.dirty) > 0 && len(w.dirty[0].rows) > 1<<20 {
			w.discard()
		}
	}
}

// BenchmarkWriterApply applies inserts, then updates, to a real target
// (one commit per 10,000 changes) and reports rows per second.
func BenchmarkWriterApply(b *testing.B) {
	if testing.Short() {
		b.Skip("integration benchmark")
	}
	c := pgtest.Shared(b, "target")
	db := pgtest.NewDB(b, c)
	ctx := context.Background()
	conn, err := Connect(ctx, c.DSN(db), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE bench (id int PRIMARY KEY, a text, b text, c text, d timestamptz, e int[], f bool, g float8)`); err != nil {
		b.Fatal(err)
	}
	r := benchRel()
	inserted := 0
	for _, op := range []change.Op{change.OpInsert, change.OpUpdate} {
		b.Run(op.String(), func(b *testing.B) {
			if op == change.OpInsert {
				if _, err := conn.Exec(ctx, `TRUNCATE bench`); err != nil {
					b.Fatal(err)
				}
			}
			w := NewWriter(conn, WriterOptions{Logger: slog.New(slog.DiscardHandler)})
			ch := &change.Change{Op: op, Rel: r}
			b.ReportAllocs()
			i := 0
			begin := func() {
				if err := w.Begin(ctx); err != nil {
					b.Fatal(err)
				}
			}
			begin()
			for b.Loop() {
				id := i
				if op == change.OpUpdate {
					id = i % max(inserted, 1)
				}
				ch.New = tup(benchValues(id)...)
				if err := w.Write(ctx, ch); err != nil {
					b.Fatal(err)
				}
				i++
				if i%10000 == 0 {
					if err := w.Commit(ctx, nil); err != nil {
						b.Fatal(err)
					}
					begin()
				}
			}
			if err := w.Commit(ctx, nil); err != nil {
				b.Fatal(err)
			}
			if op == change.OpInsert {
				inserted = i
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
