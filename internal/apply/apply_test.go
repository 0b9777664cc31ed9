package apply

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

var (
	relKV = &change.Relation{ID: 1, Namespace: "public", Name: "kv", ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "k", Key: true}, {Name: "v"}}}
	relFull = &change.Relation{ID: 2, Namespace: "public", Name: "full", ReplicaIdentity: change.IdentityFull,
		Columns: []change.Column{{Name: "a"}, {Name: "b"}}}
)

// simTxn is one generated source transaction: the keys it writes, or a barrier.
type simTxn struct {
	end     change.LSN
	keys    []int
	barrier bool
}

func (t simTxn) conflicts(o simTxn) bool {
	if t.barrier || o.barrier {
		return true
	}
	for _, a := range t.keys {
		for _, b := range o.keys {
			if a == b {
				return true
			}
		}
	}
	return false
}

func tuple(vals ...string) change.Tuple {
	kinds := make([]byte, len(vals))
	bs := make([][]byte, len(vals))
	for i, v := range vals {
		kinds[i] = change.KindText
		bs[i] = []byte(v)
	}
	return change.AppendTuple(nil, kinds, bs)
}

// fakeApply is the world the workers write to: it records when each source
// transaction (identified by its end LSN) starts executing and commits, and
// checks the ordering rules at those moments.
type fakeApply struct {
	t       *testing.T
	txns    []simTxn
	index   map[change.LSN]int
	r       *rand.Rand
	full    bool
	wm      *Watermark
	mu      sync.Mutex
	commits []change.LSN        // commit order
	done    map[change.LSN]bool // committed
	errs    []string

	failRate float64 // fraction of commits that fail as deadlocked
	failed   int
	groups   int // successful commits (target transactions)
}

func (f *fakeApply) failf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// depsCommitted checks that every earlier conflicting transaction committed
// or runs earlier in the same target transaction (inGroup).
func (f *fakeApply) depsCommitted(end change.LSN, when string, inGroup map[change.LSN]bool) {
	i := f.index[end]
	for j := 0; j < i; j++ {
		if f.txns[j].conflicts(f.txns[i]) && !f.done[f.txns[j].end] && !inGroup[f.txns[j].end] {
			f.failf("txn %d %s before txn %d it depends on committed", i, when, j)
		}
	}
}

type fakeWriter struct {
	f       *fakeApply
	started map[change.LSN]bool
}

func (w *fakeWriter) Begin(context.Context) error {
	w.started = map[change.LSN]bool{}
	return nil
}

func (w *fakeWriter) Write(_ context.Context, c *change.Change) error {
	end := c.LSN + 1 // the generator puts each change at its txn's end - 1
	if !w.started[end] {
		w.f.mu.Lock()
		w.f.depsCommitted(end, "started", w.started)
		w.f.mu.Unlock()
		w.started[end] = true
	}
	return nil
}

func (w *fakeWriter) CommitLSN(_ context.Context, applied []change.LSN) (change.LSN, error) {
	w.f.mu.Lock()
	d := time.Duration(w.f.r.IntN(300)) * time.Microsecond
	w.f.mu.Unlock()
	time.Sleep(d) // shuffle the workers
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	if w.f.failRate > 0 && w.f.r.Float64() < w.f.failRate {
		w.f.failed++
		return 0, fmt.Errorf("commit: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
	}
	group := map[change.LSN]bool{}
	for _, end := range applied {
		w.f.depsCommitted(end, "committed", group)
		group[end] = true
		if low := w.f.wm.Low(); low >= end {
			w.f.failf("watermark %s passed txn %s before it committed", low, end)
		}
		w.f.done[end] = true
		w.f.commits = append(w.f.commits, end)
	}
	w.f.groups++
	return 0, nil
}

func (w *fakeWriter) Rollback(context.Context) error { return nil }

// TestApplierOrdering runs the real coordinator and workers over randomized
// transaction mixes with fake writers: no transaction starts or commits
// before one it depends on, commit order "full" is source order, the
// watermark never passes an unapplied transaction, and every transaction is
// applied exactly once.
func TestApplierOrdering(t *testing.T) {
	modes := []struct {
		parallelism int
		order       config.CommitOrder
	}{{1, "full"}, {4, "full"}, {4, "dependent"}, {8, "dependent"}}
	for _, mode := range modes {
		for seed := uint64(1); seed <= 8; seed++ {
			t.Run(fmt.Sprintf("p%d-%s-seed%d", mode.parallelism, mode.order, seed), func(t *testing.T) {
				t.Parallel()
				runOrdering(t, seed, mode.parallelism, mode.order, 0)
			})
		}
	}
}

// TestApplierRetriesDeadlocks makes the target abort 10% of the commits as
// deadlocked: each such group is applied again, and the ordering rules and
// exactly-once still hold.
func TestApplierRetriesDeadlocks(t *testing.T) {
	for _, order := range []config.CommitOrder{config.CommitFull, config.CommitDependent} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("p4-%s-seed%d", order, seed), func(t *testing.T) {
				t.Parallel()
				f := runOrdering(t, seed, 4, order, 0.1)
				if f.failed == 0 {
					t.Fatal("no commit failed: the test did not test retries")
				}
			})
		}
	}
}

func runOrdering(t *testing.T, seed uint64, parallelism int, order config.CommitOrder, failRate float64) *fakeApply {
	r := rand.New(rand.NewPCG(seed, 7))
	n := 300 + r.IntN(300)
	keyspace := 5 + r.IntN(40)
	txns := make([]simTxn, n)
	index := map[change.LSN]int{}
	for i := range txns {
		txns[i].end = change.LSN(1000 * (i + 1))
		index[txns[i].end] = i
		if r.IntN(40) == 0 {
			txns[i].barrier = true
			continue
		}
		for k := 0; k < 1+r.IntN(4); k++ {
			txns[i].keys = append(txns[i].keys, r.IntN(keyspace))
		}
	}
	wm := NewWatermark(0)
	f := &fakeApply{t: t, txns: txns, index: index, r: rand.New(rand.NewPCG(seed, 9)), full: order == "full", wm: wm, done: map[change.LSN]bool{}, failRate: failRate}
	opts := Options{
		Writer: target.WriterOptions{Slot: "test"}, Parallelism: parallelism, CommitOrder: order,
		GroupMaxTxns: 1 + r.IntN(8), GroupMaxBytes: 1 << 20, Watermark: wm, Stats: stats.NewRegistry(),
	}
	if seed%2 == 0 {
		// Catch-up grouping on and off by turns: groups wait to fill.
		var calls atomic.Int64
		opts.Behind = func() bool { return calls.Add(1)/7%2 == 0 }
		opts.CatchUpWait = 3 * time.Millisecond
	}
	run := startApplier(t, f, opts)
	ctx := run.ctx

	for i, tx := range txns {
		produce(ctx, t, run.q, wm, uint32(i+1), tx)
		if r.IntN(10) == 0 {
			time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
		}
	}
	run.waitLow(t, wm, txns[n-1].end)
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.errs[:min(len(f.errs), 5)] {
		t.Error(e)
	}
	if len(f.commits) != n {
		t.Fatalf("%d commits for %d transactions", len(f.commits), n)
	}
	if f.full {
		for i, end := range f.commits {
			if end != txns[i].end {
				t.Fatalf("commit order full: commit %d is txn %s, want %s", i, end, txns[i].end)
			}
		}
	}
	return f
}

// BenchmarkWriteSet is the coordinator's per-change work on a conditions-like
// stream (7 columns, a bigint key, binary values, groups of 10,000 inserts):
// hashing the key and recording it in the dependency tracker.
func BenchmarkWriteSet(b *testing.B) {
	rel := &change.Relation{ID: 9, Namespace: "public", Name: "conditions", ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true}, {Name: "channel"}, {Name: "since"}, {Name: "till"}, {Name: "value"}, {Name: "error"}, {Name: "status"}}}
	const group = 10000
	changes := make([]change.Change, group)
	kinds := []byte{change.KindBinary, change.KindBinary, change.KindBinary, change.KindBinary, change.KindBinary, change.KindBinary, change.KindBinary}
	for i := range changes {
		vals := [][]byte{make([]byte, 8), make([]byte, 4), make([]byte, 8), make([]byte, 8), make([]byte, 8), make([]byte, 4), make([]byte, 2)}
		binary.BigEndian.PutUint64(vals[0], uint64(i))
		changes[i] = change.Change{Op: change.OpInsert, Rel: rel, New: change.AppendTuple(nil, kinds, vals)}
	}
	h := newKeyHasher(false)
	t := newDepTracker()
	var keys []uint64
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		seq++
		keys = keys[:0]
		for i := range changes {
			// New keys every group, as in an insert-only stream.
			binary.BigEndian.PutUint64(changes[i].New[7:], seq*group+uint64(i))
			keys, _ = h.appendKeys(keys, &changes[i])
		}
		t.add(seq, keys, false, max(seq, 3)-3)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*group), "ns/change")
}

// TestDepTrackerExact feeds the tracker random write sets over a small key
// space (so keys repeat across and within groups), with commits trailing by
// a random distance and occasional barriers, and checks every answer against
// a brute-force model: the dependencies are exactly the last uncommitted
// writer of each key plus an uncommitted last barrier, and repeats is true
// exactly when a key occurs twice in the group.
func TestDepTrackerExact(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		tr := newDepTracker()
		if seed%2 == 0 {
			tr.rotateAt = 1 + rng.IntN(200) // turn generations over often
		}
		last := map[uint64]uint64{}
		var lastBarrier, committed uint64
		keySpace := uint64(1 + rng.IntN(50000))
		for seq := uint64(1); seq <= 3000; seq++ {
			committed = max(committed, seq-1-uint64(rng.IntN(6)))
			committed = min(committed, seq-1)
			if rng.IntN(200) == 0 {
				deps, all, rep := tr.add(seq, nil, true, committed)
				if deps != nil || !all || rep {
					t.Fatalf("seed %d seq %d: barrier got deps %v all %v repeats %v", seed, seq, deps, all, rep)
				}
				lastBarrier = seq
				clear(last)
				continue
			}
			keys := make([]uint64, rng.IntN(40))
			for i := range keys {
				keys[i] = rng.Uint64N(keySpace)
			}
			want := map[uint64]bool{}
			if lastBarrier > committed {
				want[lastBarrier] = true
			}
			seen := map[uint64]bool{}
			wantRep := false
			for _, k := range keys {
				if seen[k] {
					wantRep = true
				} else if s, ok := last[k]; ok && s > committed {
					want[s] = true
				}
				seen[k] = true
			}
			deps, all, rep := tr.add(seq, keys, false, committed)
			got := map[uint64]bool{}
			for _, d := range deps {
				if d > committed {
					got[d] = true
				}
			}
			if all || rep != wantRep || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed %d seq %d (committed %d): deps %v repeats %v, want %v repeats %v", seed, seq, committed, got, rep, want, wantRep)
			}
			for _, k := range keys {
				last[k] = seq
			}
		}
	}
}

// TestApplierFillsGroupsWhileBehind: while the source is far ahead
// (Options.Behind), transactions that arrive one by one are gathered into
// one group (up to CatchUpWait); otherwise each goes at once, alone. Time is
// virtual (synctest), so "1 ms apart" and "up to 1 s" are exact.
func TestApplierFillsGroupsWhileBehind(t *testing.T) {
	const n = 30
	run := func(t *testing.T, behind bool) int {
		f, wm := newSequentialFake(t, n)
		txns := f.txns
		ar := startApplier(t, f, Options{
			Writer: target.WriterOptions{Slot: "test"}, Parallelism: 2, CommitOrder: "full", GroupMaxTxns: 1000, GroupMaxBytes: 1 << 20,
			Behind: func() bool { return behind }, CatchUpWait: time.Second,
			Watermark: wm, Stats: stats.NewRegistry(),
		})
		for i, tx := range txns {
			produce(ar.ctx, t, ar.q, wm, uint32(i+1), tx)
			time.Sleep(time.Millisecond)
		}
		ar.waitLow(t, wm, txns[n-1].end)
		_ = ar.stop()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.commits) != n {
			t.Fatalf("behind=%v: %d transactions committed, want %d", behind, len(f.commits), n)
		}
		return f.groups
	}
	synctest.Test(t, func(t *testing.T) {
		if g := run(t, true); g != 1 {
			t.Errorf("behind: %d target transactions for %d source transactions 1 ms apart, want them gathered into 1", g, n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		if g := run(t, false); g != n {
			t.Errorf("not behind: %d target transactions for %d source transactions 1 ms apart, want %d: they waited for each other", g, n, n)
		}
	})
}

// produce hands one generated transaction to the queue as capture does:
// its changes, its end registered in commit order, then the commit.
func produce(ctx context.Context, t *testing.T, q *queue.Queue, wm *Watermark, xid uint32, tx simTxn) {
	t.Helper()
	q.Begin(xid)
	if tx.barrier {
		c := &change.Change{Op: change.OpInsert, LSN: tx.end - 1, Rel: relFull, New: tuple("1", "x")}
		if err := q.Add(ctx, xid, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range tx.keys {
		c := &change.Change{Op: change.OpUpdate, LSN: tx.end - 1, Rel: relKV, New: tuple(strconv.Itoa(k), "v")}
		if err := q.Add(ctx, xid, c); err != nil {
			t.Fatal(err)
		}
	}
	wm.Register(tx.end)
	if err := q.Commit(change.TxnInfo{Xid: xid, CommitLSN: tx.end - 1, EndLSN: tx.end}); err != nil {
		t.Fatal(err)
	}
}

// applierRun is an Applier running over a queue with fake writers.
type applierRun struct {
	ctx    context.Context
	q      *queue.Queue
	errc   chan error
	cancel context.CancelFunc
}

// startApplier runs an Applier with opts over a new queue; its writers are
// fakeWriters recording into f.
func startApplier(t *testing.T, f *fakeApply, opts Options) *applierRun {
	t.Helper()
	opts.NewWriter = func(context.Context, int, *stats.Component) (Writer, func(), error) {
		return &fakeWriter{f: f}, func() {}, nil
	}
	return startApplierWith(t, opts)
}

// startApplierWith runs an Applier with opts (and their NewWriter) over a
// new queue.
func startApplierWith(t *testing.T, opts Options) *applierRun {
	t.Helper()
	q, err := queue.New(queue.Options{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	r := &applierRun{ctx: ctx, q: q, errc: make(chan error, 1), cancel: cancel}
	go func() { r.errc <- a.Run(ctx, q) }()
	return r
}

// stop cancels the run and returns Run's error (nil for the cancellation).
func (r *applierRun) stop() error {
	r.cancel()
	if err := <-r.errc; !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// waitLow waits until the watermark reaches end; it fails the test if the
// applier stops or the run's time runs out first.
func (r *applierRun) waitLow(t *testing.T, wm *Watermark, end change.LSN) {
	t.Helper()
	for wm.Low() < end {
		select {
		case err := <-r.errc:
			t.Fatalf("applier stopped: %v", err)
		case <-r.ctx.Done():
			t.Fatalf("timed out: watermark %s of %s", wm.Low(), end)
		case <-time.After(time.Millisecond):
		}
	}
}
