package capture

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
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
// the walsender sleeps until lowWaterBytes have gathered and then takes
// them in one read. A read returns what is there at once whatever the mark
// (only waiting is affected), so nothing that has arrived waits for the
// mark; what could is the tail of a burst smaller than the mark: a wait
// with the mark raised is bounded by lowWaterWait, after which the mark
// drops to one byte and the read takes the tail — so a burst's last
// messages are at most lowWaterWait late, and a quiet stream (no large read
// since) is never held back at all.
//
// Invariants: the mark is raised once the stream is busy (coalesceBig bytes
// within busyWindow: a reader that keeps up reads a few hundred bytes at a
// time, so no single read is large), lowered when a wait with it raised
// times out, and one byte otherwise; while it is raised
// the socket's read deadline is the earlier of the capture loop's deadline
// (outer) and lowWaterWait after the read began, and outer otherwise.
type lowWater struct {
	conn   net.Conn
	raw    syscall.RawConn
	raised bool
	raises int       // times raised (tests)
	outer  time.Time // the capture loop's read deadline
	bytes  int
	wait   time.Duration
	now    func() time.Time
}

const (
	lowWaterBytes = 32 << 10             // the raised mark
	lowWaterWait  = 5 * time.Millisecond // the longest wait with the mark raised
	busyWindow    = time.Millisecond     // coalesceBig bytes read within it: busy
)

// newLowWater returns nil when conn is not a TCP socket (a Unix socket, a
// test's pipe); the reader then naps after large reads instead.
func newLowWater(conn net.Conn) *lowWater {
	type netConner interface{ NetConn() net.Conn } // *tls.Conn
	under := conn
	if nc, ok := conn.(netConner); ok {
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
	lw := &lowWater{conn: conn, raw: raw, bytes: lowWaterBytes, wait: lowWaterWait, now: time.Now}
	if err := lw.setMark(1); err != nil {
		return nil
	}
	return lw
}

func (lw *lowWater) setMark(n int) error {
	var serr error
	err := lw.raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	})
	if err == nil {
		err = serr
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
// reader). The mark goes up when the stream is busy and stays up until a
// wait with it times out before outer: then it drops (the caller sees
// raised false), and the read takes whatever is there.
func (lw *lowWater) read(r func([]byte) (int, error), p []byte, busy bool) (int, error) {
	if busy && !lw.raised {
		if err := lw.setMark(lw.bytes); err != nil {
			return 0, err
		}
		lw.raised = true
		lw.raises++
	}
	if !lw.raised {
		return r(p)
	}
	inner := lw.now().Add(lw.wait)
	if !lw.outer.IsZero() && lw.outer.Before(inner) {
		inner = lw.outer
	}
	if err := lw.conn.SetReadDeadline(inner); err != nil {
		return 0, err
	}
	n, err := r(p)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || inner.Equal(lw.outer) {
		return n, err
	}
	// The stream slowed: take the tail now and wait like a quiet stream.
	if err := lw.setMark(1); err != nil {
		return n, err
	}
	lw.raised = false
	if err := lw.conn.SetReadDeadline(lw.outer); err != nil {
		return n, err
	}
	if n > 0 {
		return n, nil
	}
	return r(p)
}

// useLowWater switches the reader from napping to the low-water mark when
// the connection allows it.
func (c *Capture) useLowWater(conn net.Conn) {
	if os.Getenv("REPSTREAM_LOWAT") == "0" { // TEMP experiment knob
		return
	}
	if lw := newLowWater(conn); lw != nil {
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
