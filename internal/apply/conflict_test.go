package apply

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// conflictWriter is a fakeWriter whose target refuses the source
// transactions in bad (an update_missing at commit, as the pipeline
// reports it) and that parks like target.Writer.Park: the transaction
// counts as committed.
type conflictWriter struct {
	fakeWriter
	bad    map[change.LSN]bool
	parked *[]target.Parked
}

func (w *conflictWriter) CommitLSN(ctx context.Context, applied []change.LSN) (change.LSN, error) {
	for _, end := range applied {
		if w.bad[end] {
			return 0, fmt.Errorf("commit: %w", &target.ConflictError{Kind: target.UpdateMissing, Op: change.OpUpdate,
				Table: "public.kv", LSN: end - 1, SQLState: "RS001", Err: &pgconn.PgError{Code: "RS001", Message: "no row"}})
		}
	}
	return w.fakeWriter.CommitLSN(ctx, applied)
}

func (w *conflictWriter) Park(_ context.Context, p target.Parked, applied []change.LSN) (int64, change.LSN, error) {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	end := p.Info.EndLSN
	if !w.bad[end] && p.State != "skipped" {
		f.failf("txn %s parked but the target took it", end)
	}
	f.depsCommitted(end, "parked", nil)
	f.done[end] = true
	f.commits = append(f.commits, end)
	*w.parked = append(*w.parked, p)
	return int64(len(*w.parked)), 0, nil
}

func startConflictApplier(t *testing.T, f *fakeApply, opts Options, bad map[change.LSN]bool, parked *[]target.Parked) *applierRun {
	t.Helper()
	q, err := queue.New(queue.Options{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	opts.NewWriter = func(context.Context, int, *stats.Component) (Writer, func(), error) {
		return &conflictWriter{fakeWriter: fakeWriter{f: f}, bad: bad, parked: parked}, func() {}, nil
	}
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

// TestApplierConflicts: groups of several source transactions, a few of
// which the target refuses. With park, exactly those are parked (with their
// kind, table, key and the whole transaction's changes), every other one is
// committed once, the dependency and commit-order rules hold, and the
// watermark passes them all; with stop, the run stops with the first
// refused transaction (commit order full) named by its LSNs, and a skip
// request parks a transaction as skipped instead of applying it.
func TestApplierConflicts(t *testing.T) {
	for _, mode := range []struct {
		name    string
		onError config.OnError
		order   config.CommitOrder
	}{{"park-full", config.OnErrorPark, config.CommitFull}, {"park-dependent", config.OnErrorPark, config.CommitDependent}, {"stop-full", config.OnErrorStop, config.CommitFull}} {
		t.Run(mode.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 5))
			n := 200
			txns := make([]simTxn, n)
			index := map[change.LSN]int{}
			bad := map[change.LSN]bool{}
			for i := range txns {
				txns[i].end = change.LSN(1000 * (i + 1))
				index[txns[i].end] = i
				for k := 0; k < 1+r.IntN(3); k++ {
					txns[i].keys = append(txns[i].keys, r.IntN(30))
				}
				if i%37 == 20 {
					bad[txns[i].end] = true
				}
			}
			skip := txns[150].end
			delete(bad, skip)
			wm := NewWatermark(0)
			f := &fakeApply{t: t, txns: txns, index: index, r: rand.New(rand.NewPCG(3, 9)), full: mode.order == config.CommitFull, wm: wm, done: map[change.LSN]bool{}}
			reg := stats.NewRegistry()
			opts := Options{Writer: target.WriterOptions{Slot: "test"}, Parallelism: 4, CommitOrder: mode.order, GroupMaxTxns: 6, GroupMaxBytes: 1 << 20,
				Watermark: wm, Stats: reg, OnError: mode.onError,
				SkipRequested: func(info change.TxnInfo) bool { return info.EndLSN == skip || info.CommitLSN == skip }}
			var parked []target.Parked
			run := startConflictApplier(t, f, opts, bad, &parked)
			for i, tx := range txns {
				produce(run.ctx, t, run.q, wm, uint32(i+1), tx)
			}
			if mode.onError == config.OnErrorStop {
				var err error
				select {
				case err = <-run.errc:
				case <-run.ctx.Done():
					t.Fatal("the run did not stop")
				}
				ce, ok := target.AsConflict(err)
				first := txns[20].end
				if !ok || ce.EndLSN != first || ce.CommitLSN != first-1 || ce.Key != "(k)=("+fmt.Sprint(txns[20].keys[0])+")" {
					t.Fatalf("stop error = %v (conflict %+v), want the transaction ending at %s", err, ce, first)
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				for _, e := range f.errs[:min(len(f.errs), 5)] {
					t.Error(e)
				}
				if !slices.Equal(f.commits, endsOf(txns[:20])) {
					t.Errorf("committed %d transactions, want the 20 before the conflict", len(f.commits))
				}
				return
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
				t.Fatalf("%d commits and parks for %d transactions", len(f.commits), n)
			}
			if f.full && !slices.Equal(f.commits, endsOf(txns)) {
				t.Errorf("commit order full: not in source order")
			}
			var got []change.LSN
			for _, p := range parked {
				if p.State == "skipped" {
					if p.Info.EndLSN != skip || p.Kind != "skip_lsn" {
						t.Errorf("skipped %+v, want the transaction ending at %s", p.Info, skip)
					}
					continue
				}
				got = append(got, p.Info.EndLSN)
				i := index[p.Info.EndLSN]
				d, err := errqueue.Decode(p.Changes)
				if p.Kind != "update_missing" || p.Table != "public.kv" || p.Key != "(k)=("+fmt.Sprint(txns[i].keys[0])+")" ||
					err != nil || len(d.Changes) != len(txns[i].keys) {
					t.Errorf("parked %+v (%d changes, %v)", p, len(d.Changes), err)
				}
			}
			slices.Sort(got)
			var want []change.LSN
			for end := range bad {
				want = append(want, end)
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("parked %v, want %v", got, want)
			}
			snap, _ := reg.Snapshot().Component("conflicts")
			eq, _ := reg.Snapshot().Component("error_queue")
			if eq.Counters["parked_txns"] != int64(len(want)) || snap.Counters["update_missing"] != int64(len(want)) || eq.Counters["skipped_on_request"] != 1 || len(snap.Counters) != 1 {
				t.Errorf("conflicts counters %v, error_queue %v", snap.Counters, eq.Counters)
			}
		})
	}
}

func endsOf(txns []simTxn) []change.LSN {
	out := make([]change.LSN, len(txns))
	for i, tx := range txns {
		out[i] = tx.end
	}
	return out
}

// TestSkipRequestCarried: the engine's skip requests are consumed when
// asked (target.SkipRequests.Take). A transaction to skip that the
// coordinator met while it filled a group was carried to the next group
// and asked about again: no request any more, so it was applied instead
// of skipped, and nothing said so.
func TestSkipRequestCarried(t *testing.T) {
	n := 60
	txns := make([]simTxn, n)
	index := map[change.LSN]int{}
	for i := range txns {
		txns[i].end = change.LSN(1000 * (i + 1))
		index[txns[i].end] = i
		txns[i].keys = []int{i} // all independent: grouped
	}
	skip := txns[30].end
	wm := NewWatermark(0)
	f := &fakeApply{t: t, txns: txns, index: index, r: rand.New(rand.NewPCG(3, 9)), full: true, wm: wm, done: map[change.LSN]bool{}}
	reqs := target.SkipRequests{skip: true}
	opts := Options{Writer: target.WriterOptions{Slot: "test"}, Parallelism: 1, CommitOrder: config.CommitFull, GroupMaxTxns: 100, GroupMaxBytes: 1 << 20,
		Watermark: wm, Stats: stats.NewRegistry(), OnError: config.OnErrorStop, SkipRequested: reqs.Take}
	var parked []target.Parked
	run := startConflictApplier(t, f, opts, map[change.LSN]bool{}, &parked)
	for i, tx := range txns {
		produce(run.ctx, t, run.q, wm, uint32(i+1), tx)
	}
	run.waitLow(t, wm, txns[n-1].end)
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(parked) != 1 || parked[0].Info.EndLSN != skip || parked[0].State != "skipped" {
		t.Errorf("transaction %s was to be skipped; parked: %+v (it was applied instead)", skip, parked)
	}
}
