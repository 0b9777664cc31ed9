package queue

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// Options configures a Queue.
type Options struct {
	// Budget is the number of bytes of changes (the sum of
	// change.Change.Size) held in memory. Required, > 0.
	Budget int64
	// SpillDir holds the spill files. It must be private to the process's
	// user: created with mode 0700 if missing, and refused if it exists but
	// is a symbolic link, another user's, or open to group or others (see
	// dir.go). The spill files left in it by a previous run are deleted by
	// New. The directory belongs to this Queue alone: New locks it until
	// Close (dir.go), and refuses one another process or Queue holds
	// locked ([ErrSpillDirInUse]). Default (""): a new temporary
	// directory, deleted by Close. DefaultSpillDir is the engine's default.
	SpillDir string
	// Lock, if set, is SpillDir locked by the caller (LockSpillDir), who
	// holds it beyond this Queue: New takes no lock of its own, and Close
	// leaves it held.
	Lock *SpillDirLock
	// Stats receives the components "queue" and "spill". Default: a private
	// registry.
	Stats *stats.Registry
	// Logger receives the queue's logs (with component=queue). Default: discard.
	Logger *slog.Logger
	// Producer, if set, is the producer's component (capture): it is set
	// Waiting while flow control holds the producer, Busy when released.
	Producer *stats.Component
}

// flowLogInterval rate-limits the log line about flow control.
const flowLogInterval = 10 * time.Second

// Queue holds source transactions between capture and apply.
//
// Invariants:
//
//  1. Memory: used ≤ Budget at all times, whatever the transaction sizes.
//     used is the sum of memBytes over the open and the committed-unreleased
//     transactions. Only the producer increases used, in Add, and only after
//     seeing used+size ≤ Budget; every other change decreases it (Release,
//     Abort, spilling). So a concurrent Release can only make the check more
//     true, and the bound holds without a lock around the check.
//  2. committedMem is the memBytes sum over committed, unreleased
//     transactions; committedMem ≤ used.
//  3. A transaction is wholly in memory (spill == nil) or wholly in its spill
//     file (memBytes == 0). The move happens once, while it is open, and is
//     never undone.
//  4. ready[head:] holds the committed transactions not yet taken, in the
//     order of the Commit calls, which is the source's commit order.
//
// Ownership: the open transactions (the map open and every field of an open
// Txn) belong to the producer goroutine; its calls hold pmu, uncontended
// except against Close, so that Close may run while the producer is blocked. Commit
// publishes a Txn under mu; from then on its changes are immutable and only
// released/memBytes change, under mu. Consumers touch only committed
// transactions. Lock order: pmu, then mu, then relTable.mu.
//
// Deadlock freedom: the producer waits in flow control only while committed
// transactions hold at least Budget/2 > 0 bytes of memory. Those
// transactions are complete: the consumer can apply and release them without
// anything more from the producer, and every Release of memory signals
// roomCh. Once committedMem drops below Budget/2 the producer stops waiting
// and spills instead, and spilling always succeeds in making room (in the
// worst case the transaction being added to spills itself), so Add never
// waits for memory held by open transactions, which only the producer itself
// could free. The consumer's side of the contract: release what it took
// without waiting for later transactions (a consumer holding transactions
// must not block in Next without a timeout while it still holds memory that
// the producer might be waiting for).
type Queue struct {
	budget    int64
	dir       string
	ownDir    bool
	log       *slog.Logger
	create    func(name string) (spillHandle, error) // creates a new spill file in root
	rootMu    sync.RWMutex                           // root is closed (set nil) under the write lock
	root      *os.Root                               // the spill directory, opened and checked once
	lock      *SpillDirLock                          // root locked by New (nil: by the caller, Options.Lock, or an own temporary one)
	bufPool   sync.Pool                              // *[]byte of spillBufSize capacity
	chunkPool sync.Pool                              // *[]change.Change of chunkLen capacity
	readPool  sync.Pool                              // *bufio.Reader of spillBufSize
	rels      relTable

	used         atomic.Int64
	committedMem atomic.Int64
	closed       atomic.Bool
	closedCh     chan struct{} // closed by Close
	roomCh       chan struct{} // capacity 1: signalled when memory is freed
	readyCh      chan struct{} // capacity 1: signalled when a txn becomes ready

	// Producer-owned: used by the producer's calls, which hold pmu (except
	// while Add waits in flow control), and by Close, which takes pmu.
	pmu         sync.Mutex
	open        map[uint32]*Txn
	seq         uint64
	lastFlowLog time.Time

	mu           sync.Mutex
	ready        []*Txn
	head         int
	pendingBytes int64
	heldFiles    map[*Txn]struct{} // committed, unreleased, spilled

	// Statistics (pointers looked up once).
	qc, sc              *stats.Component
	producer            *stats.Component // may be nil
	flowWaits, flowNs   *atomic.Int64
	memGauge            *atomic.Int64
	openGauge, pendGa   *atomic.Int64
	spBytes, spChanges  *atomic.Int64
	spAccounted, spTxns *atomic.Int64
	spRead, spFiles     *atomic.Int64
}

// New returns an empty queue.
func New(opts Options) (*Queue, error) {
	if opts.Budget <= 0 {
		return nil, fmt.Errorf("new queue: budget %d: must be positive", opts.Budget)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stats == nil {
		opts.Stats = stats.NewRegistry()
	}
	q := &Queue{
		budget:    opts.Budget,
		dir:       opts.SpillDir,
		log:       opts.Logger.With(slog.String("component", "queue")),
		closedCh:  make(chan struct{}),
		roomCh:    make(chan struct{}, 1),
		readyCh:   make(chan struct{}, 1),
		open:      make(map[uint32]*Txn),
		heldFiles: make(map[*Txn]struct{}),
	}
	if q.dir == "" {
		d, err := os.MkdirTemp("", "repstream-spill-")
		if err != nil {
			return nil, spillErrorf("new queue: create spill directory: %w", err)
		}
		q.dir, q.ownDir = d, true
		if q.root, err = privateDir(d); err != nil {
			os.RemoveAll(d)
			return nil, fmt.Errorf("new queue: %w", err)
		}
	} else {
		var err error
		if q.root, err = openSpillDir(q.dir); err != nil {
			return nil, fmt.Errorf("new queue: %w", err)
		}
		if err := q.takeLock(opts.Lock); err != nil {
			q.root.Close()
			return nil, fmt.Errorf("new queue: %w", err)
		}
		n, err := removeStale(q.root, q.dir, q.log)
		if err != nil {
			q.root.Close()
			q.lock.Close()
			return nil, fmt.Errorf("new queue: %w", err)
		}
		if n > 0 {
			q.log.Info("removed stale spill files", slog.Int("files", n), slog.String("dir", q.dir))
		}
	}
	root := q.root
	q.create = func(name string) (spillHandle, error) {
		return root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	}
	q.bufPool.New = func() any { b := make([]byte, 0, spillBufSize); return &b }
	q.chunkPool.New = func() any { c := make([]change.Change, 0, chunkLen); return &c }
	q.readPool.New = func() any { return bufio.NewReaderSize(nil, spillBufSize) }

	q.qc = opts.Stats.Component("queue")
	q.sc = opts.Stats.Component("spill")
	q.flowWaits = q.qc.Counter("flow_control_waits")
	q.flowNs = q.qc.Counter("flow_control_ns")
	q.memGauge = q.qc.Gauge("memory_bytes")
	q.openGauge = q.qc.Gauge("txns_in_progress")
	q.pendGa = q.qc.Gauge("txns_committed_pending")
	q.spBytes = q.sc.Counter("bytes")
	q.spChanges = q.sc.Counter("changes")
	q.spAccounted = q.sc.Counter("accounted_bytes")
	q.spTxns = q.sc.Counter("txns")
	q.spRead = q.sc.Counter("read_bytes")
	q.spFiles = q.sc.Gauge("files")
	q.qc.SetState(stats.Idle)
	q.producer = opts.Producer
	return q, nil
}

// takeLock locks the opened spill directory until Close, or checks that
// held (the caller's) is that directory.
func (q *Queue) takeLock(held *SpillDirLock) error {
	if held == nil {
		var err error
		q.lock, err = lockRoot(q.root, filepath.Clean(q.dir))
		return err
	}
	same, err := held.same(q.root)
	if err != nil {
		return spillErrorf("spill directory %s: %w", q.dir, err)
	}
	if !same {
		return spillErrorf("spill directory %s is not the directory locked (%s)", q.dir, held.Dir())
	}
	return nil
}

// Budget returns the memory budget in bytes.
func (q *Queue) Budget() int64 { return q.budget }

// MemoryBytes returns the accounted bytes held in memory now (never more than
// the budget).
func (q *Queue) MemoryBytes() int64 { return q.used.Load() }

// SpillDir returns the directory of the spill files.
func (q *Queue) SpillDir() string { return q.dir }

// Begin opens the non-streamed transaction xid (a Begin message). If xid is
// already open, which only a protocol anomaly causes, its changes are
// discarded first: the server sends a transaction again from its start.
func (q *Queue) Begin(xid uint32) {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.closed.Load() {
		return
	}
	if t := q.open[xid]; t != nil {
		q.log.Warn("begin of a transaction already open: discarding its changes",
			slog.Uint64("xid", uint64(xid)), slog.Int("changes", t.n))
		if err := q.drop(t); err != nil {
			q.log.Error("discard transaction", slog.Any("err", err))
		}
	}
	q.openTxn(xid)
}

func (q *Queue) openTxn(xid uint32) *Txn {
	t := &Txn{q: q, xid: xid}
	q.open[xid] = t
	q.openGauge.Store(int64(len(q.open)))
	return t
}

// Add appends c to the open transaction xid (the Begin's xid or the stream's
// top-level xid; a streamed transaction is opened by its first Add). c is
// copied by value and the memory of its tuples and relations now belongs to
// the queue. Add may spill, and may block in flow control until the consumer
// releases memory or ctx is done. If it returns an error nothing was added; it
// can be retried (after a ctx deadline; a spill file error names the file).
func (q *Queue) Add(ctx context.Context, xid uint32, c *change.Change) error {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.closed.Load() {
		return ErrClosed
	}
	t := q.open[xid]
	if t == nil {
		t = q.openTxn(xid)
	}
	size := int64(c.Size())
	if t.spill != nil {
		return q.addSpilled(t, c, size)
	}
	var waitStart time.Time
	defer func() {
		if !waitStart.IsZero() {
			q.flowNs.Add(int64(time.Since(waitStart)))
			q.qc.SetState(stats.Idle)
			if q.producer != nil {
				q.producer.SetState(stats.Busy)
			}
		}
	}()
	for {
		if used := q.used.Load(); used+size <= q.budget {
			q.addMem(t, c, size)
			return nil
		}
		if size > q.budget || q.committedMem.Load()*2 < q.budget {
			break
		}
		// Flow control: committed transactions hold at least half the budget;
		// the consumer will free it.
		if waitStart.IsZero() {
			waitStart = time.Now()
			q.flowWaits.Add(1)
			q.qc.SetState(stats.Waiting)
			if q.producer != nil {
				q.producer.SetState(stats.Waiting)
			}
			if waitStart.Sub(q.lastFlowLog) >= flowLogInterval {
				q.lastFlowLog = waitStart
				txns, bytes := q.Pending()
				q.log.Info("flow control: waiting for apply to release memory",
					slog.Int64("memory_bytes", q.used.Load()), slog.Int64("budget", q.budget),
					slog.Int64("committed_bytes", q.committedMem.Load()),
					slog.Int("pending_txns", txns), slog.Int64("pending_bytes", bytes))
			}
		}
		q.pmu.Unlock() // let Close run
		select {
		case <-q.roomCh:
		case <-ctx.Done():
		case <-q.closedCh:
		}
		q.pmu.Lock()
		if q.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("add to txn %d: flow control: %w", xid, err)
		}
	}
	return q.spillUntilFits(t, c, size)
}

func (q *Queue) addMem(t *Txn, c *change.Change, size int64) {
	t.changes.append(c, &q.chunkPool)
	t.n++
	t.bytes += size
	t.memBytes += size
	used := q.used.Add(size)
	if invariants && used > q.budget {
		panic(fmt.Sprintf("queue: memory %d over budget %d", used, q.budget))
	}
	q.memGauge.Store(used)
	q.qc.Add(1, size)
}

func (q *Queue) addSpilled(t *Txn, c *change.Change, size int64) error {
	n, err := t.spill.append(c, size)
	if err != nil {
		return fmt.Errorf("add to spilled txn %d: %w", t.xid, err)
	}
	t.n++
	t.bytes += size
	q.qc.Add(1, size)
	q.countSpill(1, n, size)
	return nil
}

func (q *Queue) countSpill(changes, written int, accounted int64) {
	q.sc.Add(int64(changes), int64(written))
	q.spChanges.Add(int64(changes))
	q.spBytes.Add(int64(written))
	q.spAccounted.Add(accounted)
}

// spillUntilFits spills the largest open transaction until c fits in memory,
// or spills t itself and appends c to its file.
func (q *Queue) spillUntilFits(t *Txn, c *change.Change, size int64) error {
	for {
		victim := t
		for _, o := range q.open {
			if o != t && o.spill == nil && o.memBytes > victim.memBytes+size {
				victim = o
			}
		}
		if err := q.spillTxn(victim); err != nil {
			return fmt.Errorf("add to txn %d: %w", t.xid, err)
		}
		if victim == t {
			return q.addSpilled(t, c, size)
		}
		if q.used.Load()+size <= q.budget {
			q.addMem(t, c, size)
			return nil
		}
	}
}

// spillTxn moves the in-memory changes of the open transaction t to a new
// spill file; from then on its changes go to the file. On error t is as it was.
func (q *Queue) spillTxn(t *Txn) error {
	q.seq++
	name := fmt.Sprintf("txn-%d-%d.spill", t.xid, q.seq)
	path := filepath.Join(q.dir, name)
	h, err := q.create(name)
	if err != nil {
		return spillErrorf("spill txn %d: create %s: %w", t.xid, path, err)
	}
	q.spFiles.Add(1)
	w := newSpillWriter(path, h, q.removeFile, &q.rels, &q.bufPool)
	written := 0
	t.changes.all(func(c *change.Change) bool {
		var n int
		n, err = w.append(c, int64(c.Size()))
		written += n
		return err == nil
	})
	if err != nil {
		if derr := w.discard(); derr != nil {
			q.log.Error("discard spill file", slog.Any("err", derr))
		}
		q.spFiles.Add(-1)
		return fmt.Errorf("spill txn %d: %w", t.xid, err)
	}
	freed := t.memBytes
	t.changes.reset(&q.chunkPool)
	t.memBytes = 0
	t.spill = w
	q.memGauge.Store(q.used.Add(-freed))
	q.spTxns.Add(1)
	q.countSpill(t.n, written, freed)
	q.log.Debug("spilled transaction", slog.Uint64("xid", uint64(t.xid)), slog.Int("changes", t.n),
		slog.Int64("bytes", freed), slog.String("file", path))
	return nil
}

// Commit hands the open transaction info.Xid (normal or streamed) to the
// consumer, after every transaction committed before it. A transaction that
// had no changes is handed over empty, so that its end LSN is seen. For a
// spilled transaction Commit writes what is buffered and closes the file; if
// that fails the transaction stays open and Commit may be retried.
func (q *Queue) Commit(info change.TxnInfo) error {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.closed.Load() {
		return ErrClosed
	}
	t := q.open[info.Xid]
	if t == nil {
		t = &Txn{q: q, xid: info.Xid}
	}
	if t.spill != nil {
		if err := t.spill.finish(); err != nil {
			return fmt.Errorf("commit txn %d: %w", info.Xid, err)
		}
		t.size = t.spill.off
	}
	delete(q.open, info.Xid)
	q.openGauge.Store(int64(len(q.open)))
	t.Info = info
	q.committedMem.Add(t.memBytes)

	q.mu.Lock()
	q.ready = append(q.ready, t)
	q.pendingBytes += t.bytes
	if t.spill != nil {
		q.heldFiles[t] = struct{}{}
	}
	q.pendGa.Store(int64(len(q.ready) - q.head))
	q.mu.Unlock()
	q.qc.AddTxns(1)
	signal(q.readyCh)
	return nil
}

// Abort handles a Stream Abort: subxid == xid (or 0) drops the whole open
// transaction xid and deletes its spill file; otherwise exactly the changes
// with Change.Xid == subxid are dropped. Unknown transactions are ignored.
func (q *Queue) Abort(xid, subxid uint32) error {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.closed.Load() {
		return ErrClosed
	}
	t := q.open[xid]
	if t == nil {
		return nil
	}
	if subxid == 0 || subxid == xid {
		if err := q.drop(t); err != nil {
			return fmt.Errorf("abort txn %d: %w", xid, err)
		}
		return nil
	}
	if t.spill != nil {
		st := t.spill.subs[subxid]
		if st == nil {
			return nil
		}
		if t.aborted == nil {
			t.aborted = make(map[uint32]struct{})
		}
		t.aborted[subxid] = struct{}{}
		t.n -= st.n
		t.bytes -= st.bytes
		delete(t.spill.subs, subxid)
		t.spill.lastSt = nil
		return nil
	}
	removed, freed := t.changes.removeXid(subxid, &q.chunkPool)
	t.n -= removed
	t.bytes -= freed
	t.memBytes -= freed
	if freed > 0 {
		q.memGauge.Store(q.used.Add(-freed))
	}
	return nil
}

// AbortInProgress drops every open transaction (for a reconnect: the server
// sends in-progress transactions again from their start) and returns how many
// there were.
func (q *Queue) AbortInProgress() (int, error) {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.closed.Load() {
		return 0, ErrClosed
	}
	var errs []error
	n := len(q.open)
	for _, t := range q.open {
		if err := q.drop(t); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// drop forgets the open transaction t and its spill file.
func (q *Queue) drop(t *Txn) error {
	delete(q.open, t.xid)
	q.openGauge.Store(int64(len(q.open)))
	if t.memBytes > 0 {
		q.memGauge.Store(q.used.Add(-t.memBytes))
	}
	t.changes.reset(&q.chunkPool)
	t.memBytes = 0
	if t.spill != nil {
		q.spFiles.Add(-1)
		return t.spill.discard()
	}
	return nil
}

// Next returns the next committed transaction in commit order, waiting for
// one until ctx is done or the queue is closed. Safe for concurrent use.
func (q *Queue) Next(ctx context.Context) (*Txn, error) {
	for {
		if t, ok := q.TryNext(); ok {
			return t, nil
		}
		select {
		case <-q.readyCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.closedCh:
			if t, ok := q.TryNext(); ok {
				return t, nil
			}
			return nil, ErrClosed
		}
	}
}

// TryNext returns the next committed transaction if there is one. Safe for
// concurrent use.
func (q *Queue) TryNext() (*Txn, bool) {
	q.mu.Lock()
	if q.head == len(q.ready) {
		q.mu.Unlock()
		return nil, false
	}
	t := q.ready[q.head]
	q.ready[q.head] = nil
	q.head++
	if q.head == len(q.ready) {
		q.ready, q.head = q.ready[:0], 0
	} else if q.head >= 1024 && q.head*2 >= len(q.ready) {
		n := copy(q.ready, q.ready[q.head:])
		clear(q.ready[n:])
		q.ready, q.head = q.ready[:n], 0
	}
	q.pendingBytes -= t.bytes
	left := len(q.ready) - q.head
	q.pendGa.Store(int64(left))
	q.mu.Unlock()
	if left > 0 {
		signal(q.readyCh) // pass the wake-up on to another consumer
	}
	return t, true
}

// Pending returns the number and accounted bytes of the committed
// transactions not yet taken.
func (q *Queue) Pending() (txns int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) - q.head, q.pendingBytes
}

// release is Txn.Release.
func (q *Queue) release(t *Txn) {
	q.mu.Lock()
	if t.released {
		q.mu.Unlock()
		return
	}
	t.released = true
	mem := t.memBytes
	t.memBytes = 0
	t.changes.reset(&q.chunkPool)
	_, hasFile := q.heldFiles[t]
	delete(q.heldFiles, t)
	q.mu.Unlock()
	if mem > 0 {
		q.committedMem.Add(-mem)
		q.memGauge.Store(q.used.Add(-mem))
		signal(q.roomCh)
	}
	if hasFile {
		q.spFiles.Add(-1)
		if err := t.spill.discard(); err != nil {
			q.log.Error("discard spill file", slog.String("file", t.spill.path), slog.Any("err", err))
		}
	}
}

// removeFile deletes the spill file name from the spill directory, through
// the directory's descriptor.
func (q *Queue) removeFile(name string) error {
	q.rootMu.RLock()
	defer q.rootMu.RUnlock()
	if q.root == nil {
		return ErrClosed
	}
	return q.root.Remove(name)
}

// Close deletes the spill files of every transaction still held (open,
// pending or taken but not released) and, if New created it, the spill
// directory. It may run while the producer and consumers still run: blocked
// Next and Add calls, and later calls, return ErrClosed. Transactions in
// memory stay readable; spilled ones no longer are.
func (q *Queue) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(q.closedCh)
	var errs []error
	q.pmu.Lock() // waits for a producer call in progress; a flow-control wait lets go
	for _, t := range q.open {
		if err := q.drop(t); err != nil {
			errs = append(errs, err)
		}
	}
	q.pmu.Unlock()
	q.mu.Lock()
	for t := range q.heldFiles {
		if err := t.spill.discard(); err != nil {
			errs = append(errs, err)
		}
		q.spFiles.Add(-1)
	}
	clear(q.heldFiles)
	q.mu.Unlock()
	q.rootMu.Lock()
	if err := q.root.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close spill directory %s: %w", q.dir, err))
	}
	q.root = nil
	q.rootMu.Unlock()
	if q.ownDir {
		if err := os.RemoveAll(q.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove spill directory %s: %w", q.dir, err))
		}
	}
	if err := q.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("unlock spill directory %s: %w", q.dir, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close queue: %w", err)
	}
	return nil
}

// signal posts a wake-up on a capacity-1 channel without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
