package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a loopback port to an upstream
// address. All its methods are safe for concurrent use.
//
// Invariants (kept under mu): links holds every link whose sockets are not
// yet closed; thawed is closed exactly when the proxy is not frozen (a
// Freeze replaces it with an open channel, a Thaw closes it), so a pump
// holding a chunk waits on the thawed channel it read under mu and never
// misses a Thaw; once closed is set no link is added.
type Proxy struct {
	ln     net.Listener
	dial   func(context.Context) (net.Conn, error) // to upstream
	ctx    context.Context                         // canceled by Close: ends dials, waits and the accept loop
	cancel context.CancelFunc

	mu     sync.Mutex
	links  map[*link]struct{}
	thawed chan struct{}
	delay  time.Duration
	refuse bool
	closed bool

	wg sync.WaitGroup // the accept loop and every pump

	accepted  atomic.Int64
	refused   atomic.Int64
	failed    atomic.Int64
	cuts      atomic.Int64
	bytesUp   atomic.Int64
	bytesDown atomic.Int64
}

// Stats are the proxy's counters since Start.
type Stats struct {
	Accepted  int64 // connections accepted and piped to upstream
	Refused   int64 // connections closed at once because of Refuse
	Failed    int64 // connections closed because upstream could not be reached
	Active    int64 // connections open now
	Cut       int64 // connections closed by Cut
	BytesUp   int64 // bytes forwarded from clients to upstream
	BytesDown int64 // bytes forwarded from upstream to clients
}

// Start listens on a free port of 127.0.0.1 and forwards each accepted
// connection to upstream ("host:port"). The proxy closes when ctx ends or
// Close is called.
func Start(ctx context.Context, upstream string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	var d net.Dialer
	return start(ctx, ln, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", upstream)
	}), nil
}

// start runs a proxy on any listener and dialer: the tests use in-memory
// ones (net.Pipe) so that testing/synctest controls time.
func start(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error)) *Proxy {
	pctx, cancel := context.WithCancel(ctx)
	p := &Proxy{
		ln:     ln,
		dial:   dial,
		ctx:    pctx,
		cancel: cancel,
		links:  map[*link]struct{}{},
		thawed: make(chan struct{}),
	}
	close(p.thawed)
	p.wg.Add(2)
	go p.acceptLoop()
	go func() {
		defer p.wg.Done()
		<-pctx.Done()
		p.shutdown()
	}()
	return p
}

// Addr is the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listening port, for key=value DSNs.
func (p *Proxy) Port() string {
	if a, ok := p.ln.Addr().(*net.TCPAddr); ok {
		return strconv.Itoa(a.Port)
	}
	return ""
}

// Cut closes every current connection at once, on both sides, with a TCP
// reset (SO_LINGER 0) so that the peers see an error rather than an orderly
// end of stream. New connections are still accepted. It returns the number
// of connections cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
	p.cuts.Add(int64(len(links)))
	return len(links)
}

// Freeze stops forwarding bytes in both directions on every connection,
// current and new, while keeping the sockets open: the peers see silence,
// not a close. Data read meanwhile is held (one chunk per direction; then
// the proxy stops reading and the senders' socket buffers fill). Freezing a
// frozen proxy does nothing.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // already frozen
	}
}

// Thaw resumes forwarding after Freeze; held data is delivered in order.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// Delay adds d of latency to every chunk forwarded from now on, in either
// direction (0 removes it). A chunk is what one read returned; chunks of a
// direction are delayed one after another, so a stream of many chunks is
// slowed more than d in total.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Refuse makes the proxy close new connections as soon as it accepts them
// (on) or pipe them again (off). Current connections are not touched.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := int64(len(p.links))
	p.mu.Unlock()
	return Stats{
		Accepted:  p.accepted.Load(),
		Refused:   p.refused.Load(),
		Failed:    p.failed.Load(),
		Active:    active,
		Cut:       p.cuts.Load(),
		BytesUp:   p.bytesUp.Load(),
		BytesDown: p.bytesDown.Load(),
	}
}

// Close stops listening, closes every connection (with a reset) and waits
// for the proxy's goroutines. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.cancel()
	p.wg.Wait()
	return nil
}

// shutdown runs once ctx ends: no new link, listener and links closed.
func (p *Proxy) shutdown() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (out of descriptors): try again soon.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			p.refused.Add(1)
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials upstream for one accepted client connection and starts the
// two pumps.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	up, err := p.dial(p.ctx)
	if err != nil {
		p.failed.Add(1)
		reset(client)
		return
	}
	l := &link{p: p, client: client, up: up, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		reset(client)
		reset(up)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)
	p.wg.Add(2)
	go l.pump(up, client, &p.bytesUp)
	go l.pump(client, up, &p.bytesDown)
}

// gate returns the channel that is closed while the proxy is not frozen,
// and the current delay.
func (p *Proxy) gate() (<-chan struct{}, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thawed, p.delay
}

// link is one proxied connection: the client's socket and upstream's.
type link struct {
	p          *Proxy
	client, up net.Conn
	once       sync.Once
	done       chan struct{} // closed when the sockets are closed
	halfClosed atomic.Int32  // directions that ended with an end of stream
}

// close closes both sockets (with a reset when rst) and forgets the link.
func (l *link) close(rst bool) {
	l.once.Do(func() {
		close(l.done)
		if rst {
			reset(l.client)
			reset(l.up)
		} else {
			l.client.Close()
			l.up.Close()
		}
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// pump copies src to dst chunk by chunk, holding each chunk while the
// proxy is frozen and for the current delay. An end of stream from src is
// passed on as a half close of dst; any error closes the link.
func (l *link) pump(dst, src net.Conn, counter *atomic.Int64) {
	defer l.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !l.hold() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				l.close(true)
				return
			}
			counter.Add(int64(n))
		}
		if rerr == nil {
			continue
		}
		if errors.Is(rerr, io.EOF) {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			// The other direction may still carry data (a half close);
			// once it ends too, close the link.
			select {
			case <-l.done:
			default:
				if l.halfClosed.Add(1) == 2 {
					l.close(false)
				}
			}
			return
		}
		l.close(true)
		return
	}
}

// hold waits while the proxy is frozen, then for the delay. It returns
// false when the link was closed meanwhile.
func (l *link) hold() bool {
	for {
		thawed, delay := l.p.gate()
		select {
		case <-l.done:
			return false
		case <-thawed:
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-l.done:
				t.Stop()
				return false
			case <-t.C:
			}
		}
		// A Freeze during the delay holds the chunk too.
		select {
		case <-l.p.currentThawed():
			return true
		default:
		}
	}
}

func (p *Proxy) currentThawed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thawed
}

// reset closes c with SO_LINGER 0: the peer gets a RST, not a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
