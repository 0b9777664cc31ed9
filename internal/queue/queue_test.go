package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
)

func TestNewValidatesAndCleansStaleFiles(t *testing.T) {
	if _, err := New(Options{Budget: 0}); err == nil {
		t.Fatal("budget 0 accepted")
	}
	dir := privateTempDir(t)
	stale := filepath.Join(dir, "txn-7-1.spill")
	other := filepath.Join(dir, "keep.txt")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	q, err := New(Options{Budget: 1 << 20, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale spill file survived New: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("non-spill file removed: %v", err)
	}

	// Default spill directory: created by New, removed by Close.
	q2, err := New(Options{Budget: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := q2.SpillDir()
	if _, err := os.Stat(d); err != nil {
		t.Fatal(err)
	}
	if err := q2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("own spill dir survived Close: %v", err)
	}
}

func TestInMemoryCommitOrder(t *testing.T) {
	q := newTestQueue(t, 1<<20)
	// A normal transaction between stream blocks of two streamed ones; the
	// streamed 20 commits first, the empty streamed 40 commits last.
	var want = map[uint32][]*change.Change{}
	add := func(xid uint32, c *change.Change) {
		mustAdd(t, q.Queue, xid, c)
		want[xid] = append(want[xid], c)
	}
	add(20, insert(relA, 20, 1, 10))
	add(30, insert(relA, 31, 2, 10)) // subxact 31 of 30
	q.Begin(10)
	add(10, update(relB, 0, 3, 10))
	add(10, truncate(0, 4, relA, relB))
	mustCommit(t, q.Queue, 10)
	add(20, insert(relB, 20, 5, 10))
	mustCommit(t, q.Queue, 20)
	add(30, insert(relA, 30, 6, 10))
	mustCommit(t, q.Queue, 30)
	mustCommit(t, q.Queue, 40)

	if n, b := q.Pending(); n != 4 || b != q.MemoryBytes() {
		t.Fatalf("Pending = %d, %d; want 4, %d", n, b, q.MemoryBytes())
	}
	if got := q.counter("queue", "txns_committed_pending"); got != 0 {
		t.Fatalf("counter txns_committed_pending exists: %d", got)
	}
	if got := q.gauge("queue", "txns_committed_pending"); got != 4 {
		t.Fatalf("gauge txns_committed_pending %d", got)
	}
	for _, xid := range []uint32{10, 20, 30, 40} {
		txn := mustNext(t, q.Queue)
		if txn.Info.Xid != xid || txn.Spilled() {
			t.Fatalf("got txn %d (spilled %v), want %d in memory", txn.Info.Xid, txn.Spilled(), xid)
		}
		checkTxn(t, txn, want[xid])
		txn.Release()
		txn.Release() // idempotent
	}
	if q.MemoryBytes() != 0 || q.gauge("queue", "memory_bytes") != 0 {
		t.Fatalf("memory after release: %d / gauge %d", q.MemoryBytes(), q.gauge("queue", "memory_bytes"))
	}
	if _, ok := q.TryNext(); ok {
		t.Fatal("TryNext on an empty queue")
	}
	if q.counter("spill", "txns") != 0 {
		t.Fatal("spilled with a large budget")
	}
}

func TestSpillRoundTrip(t *testing.T) {
	const budget = 16 << 10
	q := newTestQueue(t, budget)
	var want []*change.Change
	for i := uint64(1); i <= 400; i++ {
		var c *change.Change
		switch i % 4 {
		case 0:
			c = insert(relA, 7, i, int(i%200))
		case 1:
			c = update(relB, 8, i, 50)
		case 2:
			c = truncate(7, i, relB, relA, relB)
		case 3:
			c = &change.Change{Op: change.OpDelete, Xid: 7, LSN: change.LSN(i), Rel: relB, OldKind: 'O', Old: tuple(i, 30)}
		}
		mustAdd(t, q.Queue, 7, c)
		want = append(want, c)
		if q.MemoryBytes() > budget {
			t.Fatalf("memory %d over budget", q.MemoryBytes())
		}
	}
	// One change bigger than the writer's buffer goes to the file unbuffered.
	big := insert(relA, 7, 401, spillBufSize+1000)
	mustAdd(t, q.Queue, 7, big)
	want = append(want, big)
	want = append(want, insert(relA, 7, 402, 5))
	mustAdd(t, q.Queue, 7, want[len(want)-1])
	mustCommit(t, q.Queue, 7)

	txn := mustNext(t, q.Queue)
	if !txn.Spilled() {
		t.Fatal("transaction over budget not spilled")
	}
	if q.MemoryBytes() != 0 {
		t.Fatalf("spilled txn holds %d bytes of memory", q.MemoryBytes())
	}
	files := spillFiles(t, q.Queue)
	if len(files) != 1 || q.gauge("spill", "files") != 1 {
		t.Fatalf("spill files %v, gauge %d", files, q.gauge("spill", "files"))
	}
	checkTxn(t, txn, want)
	if q.counter("spill", "changes") != int64(len(want)) || q.counter("spill", "txns") != 1 {
		t.Fatalf("spill counters: changes %d txns %d", q.counter("spill", "changes"), q.counter("spill", "txns"))
	}
	written, accounted := q.counter("spill", "bytes"), q.counter("spill", "accounted_bytes")
	if fi, err := os.Stat(files[0]); err != nil || fi.Size() != written {
		t.Fatalf("file size %v (%v), bytes counter %d", fi.Size(), err, written)
	}
	if accounted != txn.Bytes() || float64(written) > 1.2*float64(accounted) {
		t.Fatalf("spill wrote %d bytes for %d accounted (txn %d)", written, accounted, txn.Bytes())
	}
	if got := q.counter("spill", "read_bytes"); got != 2*written {
		t.Fatalf("read_bytes %d after two passes over %d", got, written)
	}
	// Stopping an iteration early is fine and closes the file.
	for range txn.Changes() {
		break
	}
	txn.Release()
	if files := spillFiles(t, q.Queue); len(files) != 0 || q.gauge("spill", "files") != 0 {
		t.Fatalf("files after release: %v, gauge %d", files, q.gauge("spill", "files"))
	}
	for _, err := range txn.Changes() {
		if !errors.Is(err, ErrReleased) {
			t.Fatalf("reading a released txn: %v", err)
		}
	}
}

func TestSubxactAbort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
		spill  bool
	}{
		{"memory", 1 << 20, false},
		{"disk", 2000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newTestQueue(t, tc.budget)
			const top = 100
			var want []*change.Change
			var abortedBytes int64
			for i := uint64(1); i <= 60; i++ {
				sub := uint32(top + i%3) // 100 (top), 101, 102
				c := insert(relA, sub, i, 40)
				mustAdd(t, q.Queue, top, c)
				if sub != 101 {
					want = append(want, c)
				} else {
					abortedBytes += int64(c.Size())
				}
			}
			before := q.MemoryBytes()
			if err := q.Abort(top, 101); err != nil {
				t.Fatal(err)
			}
			if err := q.Abort(top, 999); err != nil { // a subxact without changes
				t.Fatal(err)
			}
			if !tc.spill && q.MemoryBytes() != before-abortedBytes {
				t.Fatalf("memory %d after abort, was %d", q.MemoryBytes(), before)
			}
			// Changes after the abort still come out.
			c := insert(relA, 102, 61, 40)
			mustAdd(t, q.Queue, top, c)
			want = append(want, c)
			mustCommit(t, q.Queue, top)
			txn := mustNext(t, q.Queue)
			if txn.Spilled() != tc.spill {
				t.Fatalf("spilled %v, want %v", txn.Spilled(), tc.spill)
			}
			checkTxn(t, txn, want)
			txn.Release()
			if q.MemoryBytes() != 0 {
				t.Fatalf("memory %d after release", q.MemoryBytes())
			}
		})
	}
}

func TestWholeAbort(t *testing.T) {
	q := newTestQueue(t, 4000)
	for i := uint64(1); i <= 100; i++ {
		mustAdd(t, q.Queue, 5, insert(relA, 5, i, 100))
		mustAdd(t, q.Queue, 6, insert(relA, 6, i, 10))
	}
	if len(spillFiles(t, q.Queue)) == 0 {
		t.Fatal("nothing spilled")
	}
	if err := q.Abort(5, 5); err != nil {
		t.Fatal(err)
	}
	if err := q.Abort(6, 0); err != nil {
		t.Fatal(err)
	}
	if err := q.Abort(77, 77); err != nil { // unknown: ignored
		t.Fatal(err)
	}
	if files := spillFiles(t, q.Queue); len(files) != 0 {
		t.Fatalf("files after abort: %v", files)
	}
	if q.MemoryBytes() != 0 || q.gauge("queue", "txns_in_progress") != 0 || q.gauge("spill", "files") != 0 {
		t.Fatalf("memory %d, in progress %d, files %d after abort", q.MemoryBytes(),
			q.gauge("queue", "txns_in_progress"), q.gauge("spill", "files"))
	}
	if _, ok := q.TryNext(); ok {
		t.Fatal("aborted transaction delivered")
	}
	// A streamed xid seen again after a whole abort starts afresh.
	c := insert(relA, 5, 1000, 1)
	mustAdd(t, q.Queue, 5, c)
	mustCommit(t, q.Queue, 5)
	txn := mustNext(t, q.Queue)
	checkTxn(t, txn, []*change.Change{c})
	txn.Release()
}

func TestLargestTransactionSpills(t *testing.T) {
	q := newTestQueue(t, 10_000)
	for i := uint64(1); i <= 30; i++ {
		mustAdd(t, q.Queue, 1, insert(relA, 1, i, 220)) // ~30 × 331 = 9.9 KB
	}
	small := insert(relA, 2, 100, 400)
	mustAdd(t, q.Queue, 2, small)
	if !q.open[1].Spilled() || q.open[2].Spilled() {
		t.Fatalf("spilled: big %v small %v; want the big one only", q.open[1].Spilled(), q.open[2].Spilled())
	}
	if q.MemoryBytes() != int64(small.Size()) {
		t.Fatalf("memory %d, want %d", q.MemoryBytes(), small.Size())
	}
	// A change larger than the whole budget spills its own transaction.
	huge := insert(relA, 3, 200, 20_000)
	mustAdd(t, q.Queue, 3, huge)
	if !q.open[3].Spilled() || q.open[2].Spilled() {
		t.Fatal("huge change did not spill its own transaction")
	}
	if n, err := q.AbortInProgress(); err != nil || n != 3 {
		t.Fatalf("AbortInProgress = %d, %v", n, err)
	}
	if q.MemoryBytes() != 0 || len(spillFiles(t, q.Queue)) != 0 {
		t.Fatal("AbortInProgress left memory or files")
	}
}

// TestFlowControl runs in virtual time (synctest): "blocks" means the Add
// goroutine is durably blocked (synctest.Wait), not that it was slow.
func TestFlowControl(t *testing.T) { synctest.Test(t, testFlowControl) }

func testFlowControl(t *testing.T) {
	const budget = 10_000
	q := newTestQueue(t, budget)
	// Committed transactions hold more than half the budget.
	for xid := uint32(1); xid <= 4; xid++ {
		q.Begin(xid)
		mustAdd(t, q.Queue, xid, insert(relA, 0, uint64(xid), 2000))
		mustCommit(t, q.Queue, xid)
	}
	held := q.MemoryBytes()
	if held*2 < budget {
		t.Fatalf("setup: committed %d", held)
	}
	// The open transaction fills the rest.
	q.Begin(9)
	for q.MemoryBytes()+1000 <= budget {
		mustAdd(t, q.Queue, 9, insert(relA, 0, 100, 800))
	}
	lenBefore := q.open[9].Len()
	c := insert(relA, 0, 101, 900)

	// Honours ctx: returns its error, adds nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	start := time.Now()
	err := q.Add(ctx, 9, c)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add under flow control: %v", err)
	}
	if time.Since(start) < 40*time.Millisecond {
		t.Fatal("Add returned before its deadline")
	}
	if q.open[9].Len() != lenBefore || q.open[9].Spilled() {
		t.Fatal("failed Add changed the transaction")
	}
	if q.counter("queue", "flow_control_waits") != 1 || q.counter("queue", "flow_control_ns") < int64(40*time.Millisecond) {
		t.Fatalf("flow control counters: waits %d ns %d", q.counter("queue", "flow_control_waits"), q.counter("queue", "flow_control_ns"))
	}

	// Blocks until the consumer releases.
	done := make(chan error, 1)
	go func() { done <- q.Add(context.Background(), 9, c) }()
	select { // an hour of virtual time
	case err := <-done:
		t.Fatalf("Add did not block: %v", err)
	case <-time.After(time.Hour):
	}
	txn := mustNext(t, q.Queue)
	txn.Release()
	synctest.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("Add still blocked after Release")
	}
	if q.open[9].Spilled() || q.open[9].Len() != lenBefore+1 {
		t.Fatal("change not added in memory after flow control")
	}
	if q.MemoryBytes() > budget {
		t.Fatalf("memory %d over budget", q.MemoryBytes())
	}

	// Close ends a flow-control wait.
	for q.MemoryBytes()+1000 <= budget {
		mustAdd(t, q.Queue, 9, insert(relA, 0, 100, 800))
	}
	go func() { done <- q.Add(context.Background(), 9, c) }()
	synctest.Wait()
	if len(done) != 0 {
		t.Fatal("Add did not wait for room")
	}
	q.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
}

func TestNextContextAndClose(t *testing.T) { synctest.Test(t, testNextContextAndClose) }

func testNextContextAndClose(t *testing.T) {
	q := newTestQueue(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := q.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on empty queue: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := q.Next(context.Background()); done <- err }()
	synctest.Wait()
	if len(done) != 0 {
		t.Fatal("Next on an empty queue did not wait")
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := q.Add(context.Background(), 1, insert(relA, 1, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
}

func TestConcurrentConsumers(t *testing.T) {
	q := newTestQueue(t, 50_000)
	const txns = 2000
	var (
		mu   sync.Mutex
		seen = make(map[uint32]int)
		wg   sync.WaitGroup
		all  = make(chan struct{}) // closed once every transaction was seen
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				txn, err := q.Next(ctx)
				if err != nil {
					return
				}
				n := 0
				for c, err := range txn.Changes() {
					if err != nil || c.Xid != txn.Info.Xid {
						t.Errorf("txn %d: change xid %d, err %v", txn.Info.Xid, c.Xid, err)
						return
					}
					n++
				}
				if n != int(txn.Info.Xid%7)+1 {
					t.Errorf("txn %d: %d changes", txn.Info.Xid, n)
				}
				txn.Release()
				mu.Lock()
				seen[txn.Info.Xid]++
				if len(seen) == txns && seen[txn.Info.Xid] == 1 {
					close(all)
				}
				mu.Unlock()
			}
		}()
	}
	for xid := uint32(1); xid <= txns; xid++ {
		for i := uint32(0); i <= xid%7; i++ {
			mustAdd(t, q.Queue, xid, insert(relA, xid, uint64(i), int(xid%300)))
		}
		mustCommit(t, q.Queue, xid)
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second): // the counts below say what is missing
	}
	cancel()
	wg.Wait()
	for xid := uint32(1); xid <= txns; xid++ {
		if seen[xid] != 1 {
			t.Fatalf("txn %d delivered %d times", xid, seen[xid])
		}
	}
	if q.MemoryBytes() != 0 || len(spillFiles(t, q.Queue)) != 0 {
		t.Fatalf("after all releases: memory %d, files %d", q.MemoryBytes(), len(spillFiles(t, q.Queue)))
	}
}

func TestSpillDirUnwritable(t *testing.T) {
	q := newTestQueue(t, 1000)
	if err := os.RemoveAll(q.SpillDir()); err != nil {
		t.Fatal(err)
	}
	var added int
	var err error
	for i := uint64(1); i <= 20 && err == nil; i++ {
		if err = q.Add(context.Background(), 1, insert(relA, 1, i, 100)); err == nil {
			added++
		}
	}
	if err == nil || !strings.Contains(err.Error(), q.SpillDir()) {
		t.Fatalf("Add with a missing spill dir: %v", err)
	}
	if q.open[1].Len() != added || q.open[1].Spilled() || q.MemoryBytes() > 1000 {
		t.Fatalf("after failed spill: len %d (added %d), spilled %v, memory %d",
			q.open[1].Len(), added, q.open[1].Spilled(), q.MemoryBytes())
	}
}

// A full disk surfaces as errors from Add and Commit naming the file; nothing
// is lost, and once there is room again the same calls succeed. The errors
// are local faults (ErrSpill) that the engine must not take for a lost
// connection (pgerr.Transient): checking only that Add failed let a full
// spill disk become an endless reconnect loop unnoticed.
func TestDiskFull(t *testing.T) {
	q := newTestQueue(t, 2000)
	disk := newFullDisk(q.Queue, 1<<30)
	var want []*change.Change
	add := func(c *change.Change) error {
		err := q.Add(context.Background(), 1, c)
		if err == nil {
			want = append(want, c)
		}
		return err
	}
	for i := uint64(1); i <= 20; i++ {
		if err := add(insert(relA, 1, i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if !q.open[1].Spilled() {
		t.Fatal("not spilled")
	}
	disk.setLimit(0)
	var err error
	for i := uint64(21); err == nil && i < 5000; i++ {
		err = add(insert(relA, 1, i, 100))
	}
	localFault := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrSpill) || pgerr.Transient(err) ||
			!strings.Contains(err.Error(), filepath.Join(q.SpillDir(), "txn-1-")) {
			t.Fatalf("%s on a full disk: %v (spill error %v, transient %v)", what, err, errors.Is(err, ErrSpill), pgerr.Transient(err))
		}
	}
	localFault("Add", err)
	localFault("Commit", q.Commit(change.TxnInfo{Xid: 1}))
	if q.open[1].Len() != len(want) {
		t.Fatalf("len %d, want %d", q.open[1].Len(), len(want))
	}
	// A large change fails too, without corrupting the file.
	localFault("large Add", add(insert(relA, 1, 9000, spillBufSize*2)))
	disk.setLimit(1 << 30)
	if err := add(insert(relA, 1, 9001, 10)); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, q.Queue, 1)
	txn := mustNext(t, q.Queue)
	checkTxn(t, txn, want)
	txn.Release()
}

func TestCorruptSpillFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
	}{
		{"flipped byte", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-3] ^= 0x40
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "crc32c"},
		{"truncated", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()-10); err != nil {
				t.Fatal(err)
			}
		}, "shorter"},
		{"bad length", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0x7f}, 0); err != nil {
				t.Fatal(err)
			}
		}, "bad length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newTestQueue(t, 1000)
			for i := uint64(1); i <= 50; i++ {
				mustAdd(t, q.Queue, 1, insert(relA, 1, i, 100))
			}
			mustCommit(t, q.Queue, 1)
			txn := mustNext(t, q.Queue)
			files := spillFiles(t, q.Queue)
			if len(files) != 1 {
				t.Fatalf("files %v", files)
			}
			tc.damage(t, files[0])
			var n int
			var gotErr error
			for _, err := range txn.Changes() {
				if err != nil {
					gotErr = err
					break
				}
				n++
			}
			if !errors.Is(gotErr, ErrCorrupt) || !strings.Contains(gotErr.Error(), files[0]) ||
				!strings.Contains(gotErr.Error(), "offset") || !strings.Contains(gotErr.Error(), tc.want) {
				t.Fatalf("after %d changes: %v", n, gotErr)
			}
			txn.Release()
		})
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	q := newTestQueue(t, 1000)
	for xid := uint32(1); xid <= 3; xid++ {
		for i := uint64(1); i <= 30; i++ {
			mustAdd(t, q.Queue, xid, insert(relA, xid, i, 100))
		}
	}
	mustCommit(t, q.Queue, 1)
	mustCommit(t, q.Queue, 2)
	taken := mustNext(t, q.Queue) // taken, not released
	if len(spillFiles(t, q.Queue)) != 3 {
		t.Fatalf("files %v", spillFiles(t, q.Queue))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if files := spillFiles(t, q.Queue); len(files) != 0 {
		t.Fatalf("files after Close: %v", files)
	}
	taken.Release() // harmless after Close
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}
