package capture

import (
	"io"
	"sync/atomic"
	"time"
)

// coalescingReader sits under the replication connection's read buffer.
// After a large read (a backlog, or a burst) it naps busyNap before the next
// one, so that the kernel gathers more of the stream and the next read
// carries it in one system call. Reading back to back instead, the reader
// holds the socket while the sender's segments arrive, and the sender — the
// walsender, the one process a backlog cannot go faster than — pays for it:
// its socket lock is contended and each segment is delivered in its
// context. A small read never naps, so a quiet stream gets no latency.
// What it saves the walsender, measured: docs/performance.md.
type coalescingReader struct {
	r   io.Reader
	big bool // the last read was large: the sender is busy

	// Published for the capture loop, which may look while pgconn's
	// background reader is inside Read: reads done, and when the last
	// returned (Unix nanoseconds), and when one last returned bytes
	// (silent-link detection: a read that timed out is not an answer).
	reads        atomic.Uint64
	lastNano     atomic.Int64
	lastDataNano atomic.Int64
	sleep        func(time.Duration)
	now          func() time.Time
	// onRead, if set, is called with true before a read (and its nap) and
	// false after: capture's busy time is the time outside reads.
	onRead func(reading bool)
	// lw, once the stream has started on a socket, replaces the nap with a
	// receive low-water mark (lowat.go).
	lw *lowWater
}

const (
	coalesceBig = 16 << 10         // a read of at least this is "large"
	busyNap     = time.Millisecond // nap after a large read
)

func newCoalescingReader(r io.Reader) *coalescingReader {
	return &coalescingReader{r: r, sleep: time.Sleep, now: time.Now}
}

func (c *coalescingReader) Read(p []byte) (int, error) {
	if c.onRead != nil {
		c.onRead(true)
		defer c.onRead(false)
	}
	var n int
	var err error
	if c.lw != nil {
		var now int64
		n, err = c.lw.read(c.r.Read, p, func() int64 { now = c.now().UnixNano(); return now })
		c.publish(now, n)
		return n, err
	} else {
		if c.big {
			c.sleep(busyNap)
		}
		n, err = c.r.Read(p)
	}
	c.big = n >= coalesceBig
	c.publish(c.now().UnixNano(), n)
	return n, err
}

// publish records a read that returned n bytes at now for the capture loop.
func (c *coalescingReader) publish(now int64, n int) {
	c.lastNano.Store(now)
	if n > 0 {
		c.lastDataNano.Store(now)
	}
	c.reads.Add(1)
}
