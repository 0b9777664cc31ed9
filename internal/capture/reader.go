package capture

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// coalescingReader sits under the replication connection's read buffer.
// While the stream is busy — several small reads in a row, each soon after
// the previous one — it waits a fraction of a millisecond before the next
// read so that the kernel can gather more data: one system call and one
// scheduler round trip then carry hundreds of messages instead of a few. At
// low rates (a read that waited, or a large read) it never waits, so it adds
// no latency to a quiet stream.
//
// While it naps, hold (if set) raises the socket's receive low-water mark so
// that the data the sender writes meanwhile does not wake this process:
// every wakeup costs the sender (the walsender) a kernel wake-up of our
// thread per message it sends, and Go's network poller would otherwise be
// woken even though nobody reads.
type coalescingReader struct {
	r        io.Reader
	nap      time.Duration
	small    int       // consecutive small reads
	lastRead time.Time // when the last read returned

	// Published for the capture loop, which may look while pgconn's
	// background reader is inside Read: reads done, and when the last
	// returned (Unix nanoseconds).
	reads    atomic.Uint64
	lastNano atomic.Int64
	sleep    func(time.Duration)
	now      func() time.Time
	hold     func(on bool) // raise (on) or restore the receive low-water mark; nil: none
}

const (
	coalesceSmall = 16 << 10 // a read below this is "small"
	coalesceAfter = 4        // small reads in a row before napping
)

func newCoalescingReader(r io.Reader) *coalescingReader {
	return &coalescingReader{r: r, nap: 300 * time.Microsecond, sleep: time.Sleep, now: time.Now}
}

func (c *coalescingReader) Read(p []byte) (int, error) {
	if c.small >= coalesceAfter && c.now().Sub(c.lastRead) < c.nap {
		if c.hold != nil {
			c.hold(true)
		}
		c.sleep(c.nap)
		if c.hold != nil {
			c.hold(false)
		}
	}
	n, err := c.r.Read(p)
	end := c.now()
	// Little data soon after the previous read (our nap included) means the
	// sender is busy and we are faster than it; a read that came long after
	// the previous one, or that blocked, means the stream is quiet.
	if n > 0 && n < coalesceSmall && end.Sub(c.lastRead) < 3*c.nap {
		c.small++
	} else {
		c.small = 0
	}
	c.lastRead = end
	c.lastNano.Store(end.UnixNano())
	c.reads.Add(1)
	return n, err
}

// holdLowWater returns a coalescingReader.hold for a TCP connection: the
// receive low-water mark (SO_RCVLOWAT) goes up to 1 MiB while held and back
// to 1 byte after; nil for other connections. A failing setsockopt turns it
// off for good (the reader still naps).
func holdLowWater(conn net.Conn) func(bool) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	broken := false
	var val int
	set := func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, val) != nil {
			broken = true
		}
	}
	return func(on bool) {
		if broken {
			return
		}
		val = 1
		if on {
			val = 1 << 20
		}
		if raw.Control(set) != nil {
			broken = true
		}
	}
}
