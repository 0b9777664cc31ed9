package apply

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

func TestTableFilterKeep(t *testing.T) {
	a := &change.Relation{Namespace: "public", Name: "a"} // ready, copied at 0/100
	b := &change.Relation{Namespace: "public", Name: "b"} // pending
	c := &change.Relation{Namespace: "public", Name: "c"} // unknown: applied in full
	d := &change.Relation{Namespace: "other", Name: "a"}  // same name, other schema
	f := NewTableFilter(map[schema.TableName]TableState{
		{Schema: "public", Name: "a"}: {Ready: true, SyncLSN: 0x100},
		{Schema: "public", Name: "b"}: {},
	})
	ins := func(r *change.Relation) *change.Change { return &change.Change{Op: change.OpInsert, Rel: r} }
	cases := []struct {
		name string
		rel  *change.Relation
		end  change.LSN
		keep bool
	}{
		{"ready, ends before the copy's snapshot", a, 0xff, false},
		{"ready, ends exactly at the copy's snapshot (in the copy)", a, 0x100, false},
		{"ready, ends just after the copy's snapshot", a, 0x101, true},
		{"ready, in progress (end unknown)", a, 0, true},
		{"pending, any end", b, 0x1000, false},
		{"pending, in progress", b, 0, false},
		{"unknown table", c, 0x10, true},
		{"other schema, same name", d, 0x10, true},
	}
	for _, tc := range cases {
		got, keep := f.Keep(ins(tc.rel), tc.end)
		if keep != tc.keep {
			t.Errorf("%s: keep = %v, want %v", tc.name, keep, tc.keep)
		}
		if keep && got.Rel != tc.rel {
			t.Errorf("%s: the change was altered", tc.name)
		}
	}
	if got := f.MaxSyncLSN(); got != 0x100 {
		t.Errorf("MaxSyncLSN = %s, want 0/100", got)
	}

	// TRUNCATE of several relations keeps those not skipped.
	tr := &change.Change{Op: change.OpTruncate, TruncateRels: []*change.Relation{a, b, c}}
	got, keep := f.Keep(tr, 0x50)
	if !keep || len(got.TruncateRels) != 1 || got.TruncateRels[0] != c {
		t.Fatalf("truncate a, b, c at 0/50: keep=%v rels=%v", keep, got.TruncateRels)
	}
	if len(tr.TruncateRels) != 3 {
		t.Fatal("Keep changed the original change")
	}
	got, keep = f.Keep(tr, 0x200)
	if !keep || len(got.TruncateRels) != 2 {
		t.Fatalf("truncate a, b, c at 0/200: keep=%v rels=%v", keep, got.TruncateRels)
	}
	if _, keep := f.Keep(&change.Change{Op: change.OpTruncate, TruncateRels: []*change.Relation{a, b}}, 0x50); keep {
		t.Fatal("truncate of skipped tables only was kept")
	}

	// A schema change is skipped when its table — by its new name, or its
	// old one — was copied at or after its end; a pending table gets it.
	newDDL := func(j string) *change.Change {
		c, err := change.NewDDL(1, 1, []byte(j))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ddl := func(name, old string) *change.Change {
		j := `{"tag":"ALTER TABLE","schema":"public","name":"` + name + `"`
		if old != "" {
			j += `,"old":{"schema":"public","name":"` + old + `"}`
		}
		return newDDL(j + "}")
	}
	ddlCases := []struct {
		name string
		c    *change.Change
		end  change.LSN
		keep bool
	}{
		{"ready table, before its copy", ddl("a", ""), 0xff, false},
		{"ready table, at its copy", ddl("a", ""), 0x100, false},
		{"ready table, after its copy", ddl("a", ""), 0x101, true},
		{"ready table, in progress", ddl("a", ""), 0, true},
		{"renamed from a ready table, before its copy", ddl("a_new", "a"), 0xff, false},
		{"renamed to a ready table, before its copy", ddl("a", "zz"), 0xff, false},
		{"pending table", ddl("b", ""), 0x10, true},
		{"unknown table", ddl("c", ""), 0x10, true},
		{"message without a table name: left to the writer", newDDL(`{"tag":"ALTER TABLE"}`), 0x10, true},
		{"message not parsed: left to the writer", &change.Change{Op: change.OpDDL, LSN: 1}, 0x10, true},
		{"undescribed change to a ready table before its copy: left to the writer",
			newDDL(`{"tag":"ALTER TABLE","schema":"public","name":"a","error":"permission denied"}`), 0xff, true},
	}
	for _, tc := range ddlCases {
		if _, keep := f.Keep(tc.c, tc.end); keep != tc.keep {
			t.Errorf("schema change, %s: keep = %v, want %v", tc.name, keep, tc.keep)
		}
	}

	// Put makes a pending table ready; a nil filter keeps everything.
	f.Put(schema.TableName{Schema: "public", Name: "b"}, TableState{Ready: true, SyncLSN: 0x300})
	if _, keep := f.Keep(ins(b), 0x300); keep {
		t.Error("b ready at 0/300: change ending at 0/300 kept")
	}
	if _, keep := f.Keep(ins(b), 0x301); !keep {
		t.Error("b ready at 0/300: change ending at 0/301 skipped")
	}
	if f.MaxSyncLSN() != 0x300 {
		t.Errorf("MaxSyncLSN = %s, want 0/300", f.MaxSyncLSN())
	}
	var none *TableFilter
	if _, keep := none.Keep(ins(a), 1); !keep {
		t.Error("nil filter skipped a change")
	}
}

// quiesceWriter wraps fakeWriter: it counts target transactions in flight
// and records the end LSN of every change written.
type quiesceWriter struct {
	fakeWriter
	inFlight *atomic.Int64
	mu       *sync.Mutex
	written  map[change.LSN]int
}

func (w *quiesceWriter) Begin(ctx context.Context) error {
	w.inFlight.Add(1)
	return w.fakeWriter.Begin(ctx)
}

func (w *quiesceWriter) Write(ctx context.Context, c *change.Change) error {
	w.mu.Lock()
	w.written[c.LSN+1]++
	w.mu.Unlock()
	return w.fakeWriter.Write(ctx, c)
}

func (w *quiesceWriter) CommitLSN(ctx context.Context, applied []change.LSN) (change.LSN, error) {
	defer w.inFlight.Add(-1)
	return w.fakeWriter.CommitLSN(ctx, applied)
}

// TestApplierQuiesceAndTableFilter: Quiesce runs its function only when no
// target transaction is in flight, nothing is dispatched while it runs, and
// the run goes on after it; a table made ready at L by the function has its
// changes in transactions ending at or below L skipped, later ones written.
// Time is virtual (synctest): the pause comes once a quarter of the stream
// is produced, and while it lasts every other goroutine runs until it blocks
// before the commits are counted again.
func TestApplierQuiesceAndTableFilter(t *testing.T) {
	synctest.Test(t, testApplierQuiesceAndTableFilter)
}

func testApplierQuiesceAndTableFilter(t *testing.T) {
	const n = 400
	txns := make([]simTxn, n)
	index := map[change.LSN]int{}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range txns {
		txns[i].end = change.LSN(1000 * (i + 1))
		index[txns[i].end] = i
		txns[i].keys = []int{r.IntN(30)}
	}
	wm := NewWatermark(0)
	f := &fakeApply{t: t, txns: txns, index: index, r: rand.New(rand.NewPCG(5, 6)), full: true, wm: wm, done: map[change.LSN]bool{}}
	q, err := queue.New(queue.Options{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var inFlight atomic.Int64
	var mu sync.Mutex
	written := map[change.LSN]int{}
	filter := NewTableFilter(map[schema.TableName]TableState{{Schema: "public", Name: "kv"}: {}}) // pending: nothing written
	a, err := New(Options{
		Writer: target.WriterOptions{Slot: "test"}, Parallelism: 4, CommitOrder: config.CommitFull, GroupMaxTxns: 5, GroupMaxBytes: 1 << 20,
		Watermark: wm, Stats: stats.NewRegistry(), Tables: filter, Quiesce: true,
		NewWriter: func(context.Context, int, *stats.Component) (Writer, func(), error) {
			return &quiesceWriter{fakeWriter: fakeWriter{f: f}, inFlight: &inFlight, mu: &mu, written: written}, func() {}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx, q) }()
	produced, quarter := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(produced)
		for i, tx := range txns {
			produce(ctx, t, q, wm, uint32(i+1), tx)
			if i == n/4 {
				close(quarter)
			}
			if i%10 == 0 {
				time.Sleep(200 * time.Microsecond)
			}
		}
	}()
	<-quarter
	var syncLSN change.LSN
	err = a.Quiesce(ctx, func(context.Context) error {
		if k := inFlight.Load(); k != 0 {
			t.Errorf("Quiesce: %d target transactions in flight", k)
		}
		f.mu.Lock()
		before := len(f.commits)
		f.mu.Unlock()
		// Everything else runs until it blocks: a dispatch while paused
		// would show as a commit or a transaction in flight.
		synctest.Wait()
		f.mu.Lock()
		after := len(f.commits)
		f.mu.Unlock()
		if after != before || inFlight.Load() != 0 {
			t.Errorf("Quiesce: apply went on while paused (%d commits, then %d)", before, after)
		}
		// Made ready at an LSN beyond everything applied so far, as the
		// engine's copy does (its snapshot is taken now).
		syncLSN = change.LSN(1000*(after+50) + 500)
		filter.Put(schema.TableName{Schema: "public", Name: "kv"}, TableState{Ready: true, SyncLSN: syncLSN})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-produced
	for wm.Low() < txns[n-1].end {
		select {
		case err := <-errc:
			t.Fatalf("applier stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("timed out")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-errc
	if syncLSN == 0 || syncLSN > txns[n-1].end {
		t.Fatalf("the test paused too late (sync LSN %s)", syncLSN)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tx := range txns {
		got, want := written[tx.end], 0
		if tx.end > syncLSN {
			want = 1
		}
		if got != want {
			t.Fatalf("txn ending at %s (sync LSN %s): written %d times, want %d", tx.end, syncLSN, got, want)
		}
	}
	if len(f.commits) != n {
		t.Fatalf("%d transactions committed, want %d", len(f.commits), n)
	}
}

// TestTableFilterConcurrentPuts: apply workers take tables up at once;
// none of their Puts (or Drops) is lost to another's.
func TestTableFilterConcurrentPuts(t *testing.T) {
	f := NewTableFilter(nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				tn := schema.TableName{Schema: "s", Name: fmt.Sprintf("w%d_%d", w, i)}
				f.Put(tn, TableState{})
				if i%2 == 1 {
					f.Drop(tn)
				}
			}
		}()
	}
	wg.Wait()
	if n := len(f.states()); n != 4*250 {
		t.Fatalf("%d states, want %d: concurrent Puts or Drops were lost", n, 4*250)
	}
}
