package capture

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/repstream/repstream/internal/rawsock"
)

// Waking the reader costs the walsender: every pgoutput message is a send()
// of its own, and on a socket the client waits on (Go's netpoller keeps
// every socket in its epoll set, so that is always), each one runs the
// wake-up — the epoll callback, waking the poller thread — in the
// walsender's context, which the woken reader then preempts. With one-row
// transactions that is three wake-ups per transaction, a quarter of the
// walsender's CPU (perf: sock_def_readable, finish_task_switch under send).
//
// lowWater stops that while the stream is busy: it raises the socket's
// receive low-water mark (SO_RCVLOWAT), below which the kernel queues what
// arrives without waking anybody, so that a reader that has caught up with
// the walsender sleeps until the mark has gathered and then takes it in one
// read. A read returns what is there at once whatever the mark (only
// waiting is affected), so nothing that has arrived waits for the mark;
// what could is the tail of a burst smaller than the mark: a wait with the
// mark raised is bounded by lowWaterWait, after which the mark drops to one
// byte and the read takes the tail — so a burst's last messages are at most
// lowWaterWait late, and a quiet stream is never held back at all.
//
// Busy is measured over windows of at least busyWindow: busyReads reads
// that returned data, or coalesceBig bytes (a reader that keeps up with a
// walsender reads a message or two at a time, so no single read is large;
// a live stream of 1,000 one-row transactions a second is 3 reads per
// window). The mark is what the last window's rate brings in markSpan,
// within [minMark, maxMark], so that a wait normally ends at the mark, not
// at lowWaterWait, also when the walsender is slow (a loaded machine).
//
// A stream that is not busy — a steady 1,000 transactions a second — still
// woke the reader for nearly every message: the walsender sends a
// transaction's messages a few microseconds apart and the reader, on the
// other CPU, wakes for the first and reads them one or two at a time (4.5
// reads with data and 4 empty ones per ten-message transaction, measured
// with strace on `repstream bench fly`), then once more for the keepalive
// the walsender sends when it goes to wait — although a transaction cannot
// be applied before its COMMIT. So lowWater also follows the transactions
// (handled, from the capture loop) and hints a mark when a read would wait:
//
//   - between transactions, betweenMark: more than a keepalive (23 bytes
//     on the wire) and less than any transaction (a BEGIN and a COMMIT
//     alone are 107), so a keepalive alone wakes nobody and the next
//     transaction's first messages do, however small it is;
//   - inside a transaction, what is left of the smallest of the last
//     txnRing transactions, at most minMark, so that the reader wakes once
//     the rest of it is in, with the wait bounded by txnHintWait (its
//     messages come microseconds apart): a transaction smaller than all of
//     the last txnRing is at most txnHintWait late.
//
// A steady stream of small transactions — each COMMIT less than gatherWait
// after the one before (Options.GatherWait, the engine's --group-wait) — is
// gathered between transactions: the hint there is minMark, bounded by
// gatherWait, so that the reader wakes once per gatherWait for the
// transactions that came in it rather than once per transaction, and the
// walsender is not preempted by a woken reader at each one; the
// transactions of a read are then one target transaction. Measured on
// `repstream bench fly --rate 1000`, the engine's, the walsender's and the
// target backends' CPU all fell (total 1.59× native's without it to 1.14×);
// the price is up to gatherWait (plus the timers' millisecond) more
// latency: p50 commit → visible 2.5 ms instead of 1.2 (native 0.7). While
// it gathers (Capture.Gathers) the apply side does not wait for more again
// (apply/linger.go): both waiting doubled the latency for no CPU. A
// transaction after a quiet spell (a gap longer than gatherWait) is not
// held: the hint is betweenMark. Nor is a fast stream
// gathered — one whose last window brought minMark or more in markSpan, as
// a backlog of one-row transactions that is not busy by the read count
// (they come whole, 80 bytes each): gathering it read 40% less often but
// cost the walsender, which bounds that backlog, 7% more CPU on average
// (five rounds against four).
//
// Hints are for a stream that is not busy: while the busy mark is raised
// they are not used. (Used under it, with transactions of 100 rows, they
// cost the walsender 15–30% more CPU on a conditions backlog: waits for a
// large rest timed out and threw away the busy mark.) A wait for a hint
// that times out turns hints off until the next BEGIN or COMMIT and leaves
// the window alone.
//
// Invariants: the mark is the busy mark when that is raised (when a window
// was busy, following the rate of each window while raised), else the hint,
// else one byte; a wait with the busy mark that times out drops it to one
// byte and clears it (a new window must be busy to raise it again); a wait
// with a hint that times out drops the mark to one byte and turns hints
// off until the next BEGIN or COMMIT; while the mark is raised the socket's
// read deadline is the earlier of the capture loop's deadline (outer) and
// the wait's bound (lowWaterWait, txnHintWait for a hint inside a
// transaction, gatherWait for a gathering one) after the read began, and
// outer otherwise; a gathering hint is only given between transactions, on
// a slow stream whose last COMMIT came less than gatherWait after the one
// before.
type lowWater struct {
	conn   net.Conn
	raw    syscall.RawConn
	raised bool
	raises int       // times raised (tests)
	mark   int       // the mark set on the socket
	outer  time.Time // the capture loop's read deadline
	wait   time.Duration
	// hintWait bounds a wait for a hint inside a transaction.
	hintWait time.Duration

	// The current window: its start (Unix nanoseconds), the reads in it
	// that returned data and their bytes; want is the mark the last window
	// asks for (0: not busy).
	winStart           int64
	winReads, winBytes int
	want               int

	// Transactions (handled): inside one, its bytes so far (since its
	// BEGIN); the sizes of the last txnRing (ring, txns of them set);
	// hintOff after a wait for a hint timed out.
	inTxn   bool
	txnSize int
	ring    [txnRing]int
	txns    int
	hintOff bool

	// Gathering a steady stream (gatherWait > 0): the time of the last
	// COMMIT handled and the gap before it (Unix nanoseconds).
	gatherWait time.Duration
	lastCommit int64
	commitGap  int64
	// slow: the last window brought less than minMark in markSpan.
	slow bool
	// gathers is published for Capture.Gathers (nil: nobody asks): from a
	// read between transactions, whether it gathers (unchanged by reads
	// inside a transaction), false while the busy mark is raised.
	gathers *atomic.Bool
}

const (
	lowWaterWait = 2 * time.Millisecond // the longest wait with the mark raised
	busyWindow   = time.Millisecond     // the window busy is measured over
	busyReads    = 16                   // reads with data in a window: busy
	markSpan     = time.Millisecond     // the mark: bytes the stream brings in this
	minMark      = 4 << 10              // bounds of the raised mark
	maxMark      = 128 << 10

	betweenMark = 100                    // the mark between transactions (see above)
	txnRing     = 16                     // inside one, the hint follows the smallest of this many
	hintSlack   = 64                     // and leaves room for a message read in part
	minHint     = 128                    // a smaller hint is not worth a system call
	txnHintWait = 250 * time.Microsecond // the longest wait for a hint inside a transaction
)

// newLowWater returns nil when conn is not a TCP socket (a Unix socket, a
// test's pipe); the reader then naps after large reads instead.
func newLowWater(conn net.Conn) *lowWater {
	type netConner interface{ NetConn() net.Conn } // *tls.Conn, *rawsock.Conn
	under := conn
	for {
		nc, ok := under.(netConner)
		if !ok {
			break
		}
		under = nc.NetConn()
	}
	// TCP only: a Unix socket wakes its reader at every send whatever
	// the mark.
	sc, ok := under.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	lw := &lowWater{conn: conn, raw: raw, wait: lowWaterWait, hintWait: txnHintWait, slow: true}
	if err := lw.setMark(1); err != nil {
		return nil
	}
	return lw
}

func (lw *lowWater) setMark(n int) error {
	if n == lw.mark {
		return nil
	}
	var serr error
	err := lw.raw.Control(func(fd uintptr) {
		serr = rawsock.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	})
	if err == nil {
		err = serr
	}
	if err == nil {
		lw.mark = n
	}
	return err
}

// setDeadline is the capture loop's read deadline.
func (lw *lowWater) setDeadline(t time.Time) error {
	lw.outer = t
	if lw.raised {
		return nil // the next read sets the earlier of the two
	}
	return lw.conn.SetReadDeadline(t)
}

// read reads through r (the connection, maybe behind pgconn's background
// reader) at now (Unix nanoseconds), with the mark the last window asked
// for; when a wait with the mark raised times out before outer, the mark
// drops and the read takes whatever is there. It then accounts the read to
// the window (at the time done returns).
func (lw *lowWater) read(r func([]byte) (int, error), p []byte, now func() int64) (int, error) {
	var hint int
	var hintBound time.Duration
	if lw.want == 0 { // a busy stream has its mark: no hints
		hint, hintBound = lw.hint()
	}
	switch {
	case lw.want > 0:
		lw.publish(false)
	case !lw.inTxn: // inside a transaction, as it was between
		lw.publish(lw.gatherHint())
	}
	mark := max(lw.want, hint, 1)
	if mark != lw.mark {
		if err := lw.setMark(mark); err != nil {
			return 0, err
		}
		switch {
		case mark > 1 && !lw.raised:
			lw.raises++
			lw.raised = true
		case mark == 1 && lw.raised:
			// The hint ended: wait like a quiet stream.
			lw.raised = false
			if err := lw.conn.SetReadDeadline(lw.outer); err != nil {
				return 0, err
			}
		}
	}
	if !lw.raised {
		n, err := r(p)
		lw.account(now(), n)
		return n, err
	}
	bound := lw.wait
	if hint > 0 {
		bound = hintBound
	}
	start := now()
	inner := time.Unix(0, start).Add(bound)
	if !lw.outer.IsZero() && lw.outer.Before(inner) {
		inner = lw.outer
	}
	if err := lw.conn.SetReadDeadline(inner); err != nil {
		return 0, err
	}
	n, err := r(p)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || inner.Equal(lw.outer) {
		lw.account(now(), n)
		return n, err
	}
	// The stream slowed: take the tail now and wait like a quiet stream;
	// after a busy mark, start a new window (a hint's wait leaves the
	// window as it is).
	if err := lw.setMark(1); err != nil {
		return n, err
	}
	if hint == 0 {
		lw.want = 0
		lw.winStart, lw.winReads, lw.winBytes = now(), 0, 0
	} else {
		lw.hintOff = true
	}
	lw.raised, lw.mark = false, 1
	if err := lw.conn.SetReadDeadline(lw.outer); err != nil {
		return n, err
	}
	if n == 0 {
		n, err = r(p)
	}
	lw.account(now(), n)
	return n, err
}

// account adds a read of n bytes done at now to the window, and closes the
// window once it is busyWindow long.
func (lw *lowWater) account(now int64, n int) {
	if n > 0 {
		lw.winReads++
		lw.winBytes += n
	}
	el := now - lw.winStart
	if el < int64(busyWindow) {
		return
	}
	// A window stays busy while the busy mark is up (a raised hint is not
	// busy: it would turn into a busy mark).
	busy := lw.want > 0
	lw.want = 0
	rate := int64(lw.winBytes) * int64(markSpan) / el
	lw.slow = rate < minMark
	if busy || lw.winReads >= busyReads || lw.winBytes >= coalesceBig {
		lw.want = min(max(int(rate), minMark), maxMark)
	}
	lw.winStart, lw.winReads, lw.winBytes = now, 0, 0
}

// handled accounts a message of n bytes (as on the wire) that the capture
// loop handled; begin, commit: it began or ended a transaction.
func (lw *lowWater) handled(n int, begin, commit bool) {
	switch {
	case begin:
		lw.inTxn, lw.txnSize, lw.hintOff = true, n, false
	case commit && lw.inTxn:
		lw.ring[lw.txns%txnRing] = lw.txnSize + n
		lw.txns++
		lw.inTxn, lw.hintOff = false, false
		if lw.gatherWait > 0 {
			now := time.Now().UnixNano()
			lw.commitGap, lw.lastCommit = now-lw.lastCommit, now
		}
	case lw.inTxn:
		lw.txnSize += n
	}
}

// hint is the mark a wait now should have, and the bound of that wait:
// betweenMark between transactions, what is left of the smallest of the
// last txnRing transactions inside one, at most minMark (0 when too few
// were seen or too little is left), 0 after a wait for a hint timed out.
func (lw *lowWater) hint() (int, time.Duration) {
	if lw.hintOff {
		return 0, 0
	}
	if !lw.inTxn {
		if lw.txns == 0 {
			return 0, 0 // not a stream of transactions (yet)
		}
		if lw.gatherHint() {
			return minMark, lw.gatherWait // a steady stream: gather
		}
		return betweenMark, lw.wait
	}
	if lw.txns < txnRing {
		return 0, 0
	}
	smallest := lw.ring[0]
	for _, u := range lw.ring[1:] {
		smallest = min(smallest, u)
	}
	left := smallest - lw.txnSize - hintSlack
	if left < minHint {
		return 0, 0
	}
	return min(left, minMark), lw.hintWait
}

// gatherHint says whether a wait now gathers a slow steady stream (hint).
func (lw *lowWater) gatherHint() bool {
	return !lw.hintOff && !lw.inTxn && lw.txns > 0 &&
		lw.gatherWait > 0 && lw.commitGap < int64(lw.gatherWait) && lw.slow
}

// publish stores whether capture gathers the stream for Capture.Gathers.
func (lw *lowWater) publish(gathering bool) {
	if lw.gathers != nil && lw.gathers.Load() != gathering {
		lw.gathers.Store(gathering)
	}
}

// useLowWater switches the reader from napping to the low-water mark when
// the connection allows it.
func (c *Capture) useLowWater(conn net.Conn) {
	c.gathers.Store(false)
	if lw := newLowWater(conn); lw != nil {
		lw.gatherWait = c.opts.GatherWait
		lw.gathers = &c.gathers
		c.rd.lw = lw
	}
}

// setDeadline sets the read deadline of the replication connection.
func (c *Capture) setDeadline(conn net.Conn, t time.Time) error {
	if c.rd != nil && c.rd.lw != nil {
		return c.rd.lw.setDeadline(t)
	}
	return conn.SetReadDeadline(t)
}
