package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

type expectedTxn struct {
	xid     uint32
	changes []*change.Change
}

// TestRandomized drives many interleaved streamed and non-streamed
// transactions, subtransaction and whole aborts, through a small budget while a
// concurrent consumer takes, checks and releases them with random delays. It
// checks after every step that memory stays within the budget, and that every
// committed change comes out exactly once, in order, with its content.
func TestRandomized(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 1000
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runRandomized(t, seed, steps)
		})
	}
}

func runRandomized(t *testing.T, seed uint64, steps int) {
	const budget = 64 << 10
	rng := rand.New(rand.NewPCG(seed, 42))
	q := newTestQueue(t, budget)
	rels := []*change.Relation{relA, relB}

	expect := make(chan expectedTxn, steps+100)
	consumerDone := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var delivered atomic.Int64
	progress := make(chan struct{}, 1) // a token after each delivery
	go func() {
		defer close(consumerDone)
		crng := rand.New(rand.NewPCG(seed, 7))
		var held []*Txn
		var wants []expectedTxn
		releaseAll := func() {
			for _, h := range held {
				h.Release()
			}
			held, wants = held[:0], wants[:0]
		}
		for {
			var txn *Txn
			var err error
			if len(held) > 0 {
				var ok bool
				if txn, ok = q.TryNext(); !ok {
					releaseAll()
					continue
				}
			} else if txn, err = q.Next(ctx); err != nil {
				return
			}
			want := <-expect
			if err := verifyTxn(txn, want); err != nil {
				t.Error(err)
				cancel()
				return
			}
			if m := q.MemoryBytes(); m > budget {
				t.Errorf("consumer: memory %d over budget", m)
			}
			delivered.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
			held, wants = append(held, txn), append(wants, want)
			// Re-read what is held, then release it, sometimes after a pause
			// (which makes the producer wait or spill).
			if crng.IntN(4) == 0 {
				continue
			}
			if crng.IntN(8) == 0 {
				time.Sleep(time.Duration(crng.IntN(300)) * time.Microsecond)
			}
			for i, h := range held {
				if err := verifyTxn(h, wants[i]); err != nil {
					t.Error("second read:", err)
				}
			}
			releaseAll()
		}
	}()

	var (
		nextXid  uint32 = 1
		nextSub  uint32 = 1 << 30
		lsn      uint64
		normal   uint32                          // open non-streamed txn, 0 if none
		open     = map[uint32][]*change.Change{} // expected changes of open txns
		subs     = map[uint32][]uint32{}         // subxacts of open streamed txns
		streamed []uint32                        // open streamed xids, in order of opening
		commits  int
	)
	newChange := func(xid uint32) *change.Change {
		lsn++
		n := rng.IntN(300)
		switch r := rng.IntN(1000); {
		case r < 2:
			n = spillBufSize + rng.IntN(50_000) // bigger than the buffer and the budget
		case r < 30:
			n = 5000 + rng.IntN(15_000)
		}
		rel := rels[rng.IntN(2)]
		switch rng.IntN(10) {
		case 0:
			return truncate(xid, lsn, rels[:1+rng.IntN(2)]...)
		case 1, 2:
			return update(rel, xid, lsn, n)
		case 3:
			return &change.Change{Op: change.OpDelete, Xid: xid, LSN: change.LSN(lsn), Rel: rel, OldKind: 'O', Old: tuple(lsn, n)}
		}
		return insert(rel, xid, lsn, n)
	}
	add := func(top, sub uint32) {
		c := newChange(sub)
		if err := q.Add(ctx, top, c); err != nil {
			t.Fatalf("add to %d: %v", top, err)
		}
		open[top] = append(open[top], c)
	}
	commit := func(xid uint32) {
		if err := q.Commit(change.TxnInfo{Xid: xid, EndLSN: change.LSN(lsn), Streamed: xid != normal}); err != nil {
			t.Fatalf("commit %d: %v", xid, err)
		}
		expect <- expectedTxn{xid, open[xid]}
		delete(open, xid)
		delete(subs, xid)
		streamed = slices.DeleteFunc(streamed, func(x uint32) bool { return x == xid })
		commits++
	}
	check := func(step int) {
		if m := q.MemoryBytes(); m > budget {
			t.Fatalf("step %d: memory %d over budget", step, m)
		}
		var openMem int64
		for _, o := range q.open {
			if o.Spilled() && o.memBytes != 0 {
				t.Fatalf("step %d: spilled txn %d holds %d bytes", step, o.xid, o.memBytes)
			}
			openMem += o.memBytes
		}
		if openMem > q.MemoryBytes() {
			t.Fatalf("step %d: open txns hold %d > used %d", step, openMem, q.MemoryBytes())
		}
		wantOpen := len(streamed)
		if normal != 0 {
			wantOpen++
		}
		if len(q.open) != wantOpen || q.gauge("queue", "txns_in_progress") != int64(wantOpen) {
			t.Fatalf("step %d: %d open txns (gauge %d), model has %d", step, len(q.open),
				q.gauge("queue", "txns_in_progress"), wantOpen)
		}
	}

	for step := 0; step < steps; step++ {
		if normal != 0 {
			if rng.IntN(6) == 0 {
				commit(normal)
				normal = 0
			} else {
				add(normal, 0)
			}
			check(step)
			continue
		}
		switch r := rng.IntN(100); {
		case r < 10: // a normal transaction starts
			normal = nextXid
			nextXid++
			q.Begin(normal)
		case r < 65 || len(streamed) == 0: // a stream block
			var xid uint32
			if len(streamed) == 0 || rng.IntN(4) == 0 {
				xid = nextXid
				nextXid++
				streamed = append(streamed, xid)
			} else {
				xid = streamed[rng.IntN(len(streamed))]
			}
			for n := 1 + rng.IntN(20); n > 0; n-- {
				sub := xid
				if rng.IntN(3) == 0 {
					if len(subs[xid]) == 0 || rng.IntN(3) == 0 {
						subs[xid] = append(subs[xid], nextSub)
						nextSub++
					}
					sub = subs[xid][rng.IntN(len(subs[xid]))]
				}
				add(xid, sub)
			}
		case r < 82: // stream commit of the oldest or a random one
			commit(streamed[rng.IntN(len(streamed))])
		case r < 86: // whole stream abort
			xid := streamed[rng.IntN(len(streamed))]
			if err := q.Abort(xid, xid); err != nil {
				t.Fatal(err)
			}
			delete(open, xid)
			delete(subs, xid)
			streamed = slices.DeleteFunc(streamed, func(x uint32) bool { return x == xid })
		default: // subtransaction abort
			xid := streamed[rng.IntN(len(streamed))]
			if len(subs[xid]) == 0 {
				continue
			}
			i := rng.IntN(len(subs[xid]))
			sub := subs[xid][i]
			subs[xid] = slices.Delete(subs[xid], i, i+1)
			if err := q.Abort(xid, sub); err != nil {
				t.Fatal(err)
			}
			open[xid] = slices.DeleteFunc(open[xid], func(c *change.Change) bool { return c.Xid == sub })
		}
		check(step)
	}
	if normal != 0 {
		commit(normal)
	}
	for len(streamed) > 0 {
		commit(streamed[0])
	}
	timeout := time.After(20 * time.Second)
wait:
	for delivered.Load() < int64(commits) {
		select {
		case <-progress:
		case <-consumerDone: // it failed
			break wait
		case <-timeout:
			break wait
		}
	}
	cancel()
	<-consumerDone
	if delivered.Load() != int64(commits) {
		t.Fatalf("delivered %d of %d transactions", delivered.Load(), commits)
	}
	if q.MemoryBytes() != 0 || len(spillFiles(t, q.Queue)) != 0 || q.gauge("spill", "files") != 0 {
		t.Fatalf("at the end: memory %d, files %d, files gauge %d", q.MemoryBytes(),
			len(spillFiles(t, q.Queue)), q.gauge("spill", "files"))
	}
	if q.counter("spill", "txns") == 0 {
		t.Fatal("nothing spilled: the test does not exercise spilling")
	}
	t.Logf("%d txns, %d spilled, %d flow-control waits", commits, q.counter("spill", "txns"), q.counter("queue", "flow_control_waits"))
}

func verifyTxn(txn *Txn, want expectedTxn) error {
	if txn.Info.Xid != want.xid {
		return fmt.Errorf("got txn %d, want %d", txn.Info.Xid, want.xid)
	}
	if txn.Len() != len(want.changes) {
		return fmt.Errorf("txn %d: Len %d, want %d", want.xid, txn.Len(), len(want.changes))
	}
	var bytes int64
	for _, c := range want.changes {
		bytes += int64(c.Size())
	}
	if txn.Bytes() != bytes {
		return fmt.Errorf("txn %d: Bytes %d, want %d", want.xid, txn.Bytes(), bytes)
	}
	i := 0
	for c, err := range txn.Changes() {
		if err != nil {
			return fmt.Errorf("txn %d change %d: %w", want.xid, i, err)
		}
		if i >= len(want.changes) {
			return fmt.Errorf("txn %d: too many changes", want.xid)
		}
		if d := sameChange(c, want.changes[i]); d != "" {
			return fmt.Errorf("txn %d change %d (spilled %v): %s", want.xid, i, txn.Spilled(), d)
		}
		i++
	}
	if i != len(want.changes) {
		return fmt.Errorf("txn %d: %d changes, want %d", want.xid, i, len(want.changes))
	}
	return nil
}
