package target

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/schema"
)

// benchWriter returns a Writer without a connection whose plan for rel is
// cached and whose update statement is marked prepared, so modify and insert
// run their in-memory part only.
func benchWriter(b testing.TB, c *change.Change) *Writer {
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
	w.state = txnOpen // BEGIN as good as sent: nothing queues it
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
		if len(w.pipe.items) >= 1000 {
			w.pipe.reset()
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
		if len(w.copies.dirty) > 0 && len(w.copies.dirty[0].rows) > 1<<20 {
			w.discard()
		}
	}
}

// benchConn returns an apply connection (Connect) to a new database of the
// shared test cluster, with ddl run and the progress state created; it skips
// the benchmark in -short mode.
func benchConn(b *testing.B, ddl string) *pgx.Conn {
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
	b.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, ddl); err != nil {
		b.Fatal(err)
	}
	if err := EnsureState(ctx, conn); err != nil {
		b.Fatal(err)
	}
	return conn
}

// BenchmarkWriterApply applies inserts, then updates, to a real target
// (one commit per 10,000 changes) and reports rows per second.
func BenchmarkWriterApply(b *testing.B) {
	ctx := context.Background()
	conn := benchConn(b, `CREATE TABLE bench (id int PRIMARY KEY, a text, b text, c text, d timestamptz, e int[], f bool, g float8)`)
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

// BenchmarkWriterSmallTxn applies fly-shaped transactions to a real target,
// one target transaction each (what a lone small source transaction gets):
// an UPDATE of an account, then inserts into three tables (1, 4 and 1 rows),
// and the applied-LSN record. It measures the fixed cost of a small
// transaction: round trips, statements the server parses, COPY set-up.
func BenchmarkWriterSmallTxn(b *testing.B) {
	conn := benchConn(b, `
CREATE TABLE acc (id int PRIMARY KEY, balance numeric, updated timestamptz);
INSERT INTO acc SELECT g, 0, now() FROM generate_series(1, 1000) g;
CREATE TABLE ord (id bigint PRIMARY KEY, acc int, amount numeric, at timestamptz);
CREATE TABLE item (ord bigint, line int, product int, qty int, price numeric, PRIMARY KEY (ord, line));
CREATE TABLE audit (id bigint PRIMARY KEY, ord bigint, note text)`)
	acc := rel("public", "acc", change.IdentityDefault, "*id", "balance", "updated")
	ord := rel("public", "ord", change.IdentityDefault, "*id", "acc", "amount", "at")
	item := rel("public", "item", change.IdentityDefault, "*ord", "*line", "product", "qty", "price")
	audit := rel("public", "audit", change.IdentityDefault, "*id", "ord", "note")
	lsn := change.LSN(0x1000000)
	i := 0
	// apply: what apply's workers use (one INSERT per table, the WAL
	// position read by durability); plain: the defaults.
	for _, v := range []struct {
		name string
		opts WriterOptions
	}{{"plain", WriterOptions{}}, {"apply", WriterOptions{MultiRowInserts: true, DeferPosition: true}}} {
		b.Run(v.name, func(b *testing.B) {
			v.opts.Slot, v.opts.Logger = "bench", slog.New(slog.DiscardHandler)
			pid := conn.PgConn().PID()
			cpu := backendCPU(pid)
			benchSmallTxns(b, NewWriter(conn, v.opts), &i, &lsn, acc, ord, item, audit)
			b.ReportMetric(float64((backendCPU(pid)-cpu).Microseconds())/float64(b.N), "server-µs/op")
		})
	}
}

func benchSmallTxns(b *testing.B, w *Writer, ip *int, lp *change.LSN, acc, ord, item, audit *change.Relation) {
	ctx := context.Background()
	const ts = "2026-11-22 10:00:00+00"
	i, lsn := *ip, *lp
	defer func() { *ip, *lp = i, lsn }()
	b.ReportAllocs()
	for b.Loop() {
		i++
		id := strconv.Itoa(i)
		a := strconv.Itoa(i%1000 + 1)
		txn := []*change.Change{
			{Op: change.OpUpdate, Rel: acc, New: tup(a, id+".25", ts)},
			{Op: change.OpInsert, Rel: ord, New: tup(id, a, id+".25", ts)},
			{Op: change.OpInsert, Rel: item, New: tup(id, "1", a, "1", "9.99")},
			{Op: change.OpInsert, Rel: item, New: tup(id, "2", a, "2", "19.99")},
			{Op: change.OpInsert, Rel: item, New: tup(id, "3", a, "3", "5.50")},
			{Op: change.OpInsert, Rel: item, New: tup(id, "4", a, "1", "100.00")},
			{Op: change.OpInsert, Rel: audit, New: tup(id, id, "order "+id+" for account "+a)},
		}
		if err := w.Begin(ctx); err != nil {
			b.Fatal(err)
		}
		for _, ch := range txn {
			lsn += 0x40
			ch.LSN = lsn
			if err := w.Write(ctx, ch); err != nil {
				b.Fatal(err)
			}
		}
		lsn += 0x40
		if err := w.Commit(ctx, []change.LSN{lsn}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txns/s")
}

// BenchmarkWriterInsertRows applies transactions of k inserts into one table
// (the conditions table's shape), sent as INSERT statements in the commit's
// pipeline or by COPY: where the two cross is what DefaultInsertRowsMax is
// set from.
func BenchmarkWriterInsertRows(b *testing.B) {
	ctx := context.Background()
	conn := benchConn(b, `CREATE TABLE cond (id bigint PRIMARY KEY, ch int, since timestamptz, till timestamptz, v float8, r real, f int)`)
	r := rel("public", "cond", change.IdentityDefault, "*id", "ch", "since", "till", "v", "r", "f")
	id, lsn := 0, change.LSN(0x1000000)
	pid := conn.PgConn().PID()
	for _, k := range []int{1, 4, 8, 16, 32, 64, 128} {
		for _, how := range []struct {
			name  string
			max   int
			multi bool
		}{{"insert", 1 << 20, false}, {"multi-row", 1 << 20, true}, {"copy", -1, false}} {
			b.Run(fmt.Sprintf("rows=%d/%s", k, how.name), func(b *testing.B) {
				w := NewWriter(conn, WriterOptions{Slot: "bench", InsertRowsMax: how.max, MultiRowInserts: how.multi, Logger: slog.New(slog.DiscardHandler)})
				cpu := backendCPU(pid)
				defer func() {
					b.ReportMetric(float64((backendCPU(pid)-cpu).Microseconds())/float64(b.N*k), "server-µs/row")
				}()
				ch := &change.Change{Op: change.OpInsert, Rel: r}
				for b.Loop() {
					if err := w.Begin(ctx); err != nil {
						b.Fatal(err)
					}
					for range k {
						id++
						lsn += 0x40
						ch.LSN = lsn
						ch.New = tup(strconv.Itoa(id), "7", "2026-11-22 10:00:00+00", "2026-11-22 11:00:00+00", "0.5", "0.25", "0")
						if err := w.Write(ctx, ch); err != nil {
							b.Fatal(err)
						}
					}
					if err := w.Commit(ctx, []change.LSN{lsn}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*k), "µs/row")
			})
		}
	}
}

// backendCPU returns the CPU time (user + system) the backend pid has used,
// from /proc/<pid>/stat (Linux; 0 elsewhere): the server's share of a
// benchmark, which wall time on a loaded machine hides.
func backendCPU(pid uint32) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may contain spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state): utime is field 14, stime 15
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond // USER_HZ 100
}
