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

// lowWater keeps the reader from being woken for every message the
// walsender sends (each wake-up runs in the walsender's context). While the
// stream is busy — a window of busyWindow saw busyReads reads with data or
// coalesceBig bytes — it raises the socket's receive low-water mark
// (SO_RCVLOWAT) to what the last window's rate brings in markSpan, within
// [minMark, maxMark]; a read returns what is there at once, and a wait with
// the mark raised is bounded by lowWaterWait, after which the mark drops to
// one byte and clears. Otherwise it follows the transactions (handled) and
// hints a mark for a read that would wait: betweenMark between transactions
// (more than a keepalive's 23 bytes, less than any transaction's 107: a
// keepalive alone wakes nobody), inside one what is left of the smallest
// of the last txnRing transactions, bounded by txnHintWait; a hint that
// times out turns hints off until the next BEGIN or COMMIT. A slow steady
// stream (COMMITs less than gatherWait apart) is gathered: between
// transactions the hint is minMark bounded by gatherWait. While the mark is
// raised, the read deadline is the earlier of the capture loop's and the
// wait's bound. Measurements: docs/performance.md.
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
