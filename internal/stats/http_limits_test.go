package stats

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// serveForTest serves h on a fresh 127.0.0.1 listener with opts until the
// test ends, and returns the address.
func serveForTest(t *testing.T, h http.Handler, opts ServerOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListenerOptions(ctx, ln, h, nil, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeListenerOptions: %v", err)
		}
	})
	return ln.Addr().String()
}

// raiseNoFile raises the soft RLIMIT_NOFILE to at least want (within the
// hard limit) for the test, or skips it.
func raiseNoFile(t *testing.T, want uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= want {
		return
	}
	if lim.Max < want {
		t.Skipf("RLIMIT_NOFILE hard limit %d < %d", lim.Max, want)
	}
	old := lim
	lim.Cur = want
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// serverSockets counts this process's open descriptors that are the
// server's side of a TCP connection to port (their local port), from
// /proc/self/fd and /proc/net/tcp: what the server holds, whatever it
// counts itself.
func serverSockets(t *testing.T, port int) int {
	t.Helper()
	tcp, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	inodes := make(map[string]bool)
	suffix := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(tcp), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasSuffix(f[1], suffix) || f[3] == "0A" { // 0A: LISTEN
			continue
		}
		inodes["socket:["+f[9]+"]"] = true
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && inodes[target] {
			n++
		}
	}
	return n
}

// eventually polls cond every 20 ms until it returns "" or d has passed,
// and returns its last answer.
func eventually(d time.Duration, cond func() string) string {
	deadline := time.Now().Add(d)
	for {
		msg := cond()
		if msg == "" || time.Now().After(deadline) {
			return msg
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeBoundsIdleConnections is issue 27's exhaustion: thousands of idle
// connections, some that made a keep-alive request and some that never
// sent a byte, must neither hold the server's descriptors nor keep
// /healthz from answering.
func TestServeBoundsIdleConnections(t *testing.T) {
	const idle = 3000
	maxConns := DefaultServerOptions().MaxConns
	// The idle connections' client ends, and their server ends should the
	// bound not hold, are all in this process.
	raiseNoFile(t, 2*idle+512)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The default bound on connections, but no timeout that could free a
	// slot while the test runs: only the bound's eviction can make room for
	// the /healthz below, which then answers (no wall-clock bound needed).
	opts := ServerOptions{ReadHeaderTimeout: time.Hour, ReadTimeout: time.Hour, IdleTimeout: time.Hour}
	go func() { done <- ServeListenerOptions(ctx, ln, Handler(NewRegistry(), nil), nil, opts) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	}()

	conns := make([]net.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	peak := 0
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			// A keep-alive request, then nothing: an idle connection.
			if err := keepAliveGet(c, "/healthz"); err != nil {
				t.Fatalf("request on connection %d: %v", i, err)
			}
		}
		if i%250 == 249 {
			peak = max(peak, serverSockets(t, port))
		}
	}
	// The server closes what it evicts at once, but the descriptor goes when
	// the goroutine reading it wakes: allow some in flight (a busy machine).
	if peak > 2*maxConns {
		t.Errorf("the server held %d connections while %d idle ones arrived, want at most about %d", peak, idle, maxConns)
	}

	// The client's timeout only ends a hang.
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz behind %d idle connections: %v", idle, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz behind %d idle connections = %d %q in %v", idle, resp.StatusCode, body, time.Since(start))
	}

	if msg := eventually(5*time.Second, func() string {
		if n := serverSockets(t, port); n > maxConns {
			return fmt.Sprintf("the server holds %d connections, want at most %d", n, maxConns)
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
}

// keepAliveGet sends GET path on c and reads the whole answer, leaving the
// connection open.
func keepAliveGet(c net.Conn, path string) error {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return fmt.Errorf("answer %d, close %v", resp.StatusCode, resp.Close)
	}
	return c.SetDeadline(time.Time{})
}

// closedWithin reports whether the server closes c (its read sees EOF or a
// reset) within d.
func closedWithin(c net.Conn, d time.Duration) error {
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			return nil // an in-memory pipe the server closed already
		}
		return err
	}
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return nil
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("still open after %v", d)
	case err == nil:
		return errors.New("read a byte from an idle connection")
	}
	return err
}

// TestServeTimeouts: a keep-alive connection idle for IdleTimeout, one that
// never sends a request and one that sends its headers too slowly are all
// closed by the server, each within the timeout. Time is virtual
// (synctest; the connections are in-memory pipes), so the bound is exact.
func TestServeTimeouts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		ln := newPipeListener()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- ServeListenerOptions(ctx, ln, Handler(NewRegistry(), nil), nil, ServerOptions{
				ReadHeaderTimeout: timeout, ReadTimeout: timeout, IdleTimeout: timeout,
			})
		}()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ServeListenerOptions: %v", err)
			}
		}()

		keepAlive, silent, slow := ln.dial(), ln.dial(), ln.dial()
		defer keepAlive.Close()
		defer silent.Close()
		defer slow.Close()
		start := time.Now()
		if err := keepAliveGet(keepAlive, "/healthz"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(slow, "GET /healthz HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]net.Conn{"idle keep-alive": keepAlive, "silent": silent, "slow headers": slow} {
			if err := closedWithin(c, time.Hour); err != nil {
				t.Errorf("%s connection: %v", name, err)
			}
			if d := time.Since(start); d > timeout {
				t.Errorf("%s connection closed after %v, want within %v", name, d, timeout)
			}
		}
	})
}

// pipeListener is a net.Listener of in-memory pipes (net.Pipe), for
// servers run in virtual time; dial makes a connection to it.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestServeConnCapKeepsServing: at the bound, a new connection closes the
// longest idle one, never one serving a request, and is refused only when
// all are serving.
func TestServeConnCapKeepsServing(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 2), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	mux := http.NewServeMux()
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "released")
	})
	mux.Handle("/", Handler(NewRegistry(), nil))
	// A client reads its answer before the server marks the connection
	// idle: wait for the server's StateIdle before the next connection.
	idled := make(chan struct{}, 16)
	addr := serveForTest(t, mux, ServerOptions{MaxConns: 2, connState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateIdle {
			idled <- struct{}{}
		}
	}})
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s within 5 s", what)
		}
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// busy serves a request that blocks until release; idle is idle.
	busy, idle := dial(), dial()
	if _, err := io.WriteString(busy, "GET /block HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	wait(entered, "blocking request served")
	if err := keepAliveGet(idle, "/healthz"); err != nil {
		t.Fatal(err)
	}
	wait(idled, "connection became idle")
	// A third connection closes idle, not busy.
	third := dial()
	if err := keepAliveGet(third, "/healthz"); err != nil {
		t.Fatalf("a new request at the bound: %v", err)
	}
	wait(idled, "connection became idle")
	if err := closedWithin(idle, 5*time.Second); err != nil {
		t.Errorf("the idle connection at the bound: %v", err)
	}

	// Now busy is serving and third is idle: a fourth one closes third.
	fourth := dial()
	if _, err := io.WriteString(fourth, "GET /block HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	wait(entered, "blocking request served")
	if err := closedWithin(third, 5*time.Second); err != nil {
		t.Errorf("the idle connection at the bound: %v", err)
	}
	// Both open connections serve a request: a fifth is refused.
	if msg := eventually(5*time.Second, func() string {
		c := dial()
		if err := closedWithin(c, time.Second); err != nil {
			return fmt.Sprintf("a connection while all serve: %v", err)
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	unblock()
	for name, c := range map[string]net.Conn{"first": busy, "fourth": fourth} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("%s blocked request: %v", name, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "released" {
			t.Errorf("%s blocked request = %q", name, b)
		}
	}
}

func TestListenAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		":9187":          "127.0.0.1:9187",
		"9187":           "127.0.0.1:9187",
		":0":             "127.0.0.1:0",
		"127.0.0.1:9187": "127.0.0.1:9187",
		"0.0.0.0:9187":   "0.0.0.0:9187",
		"[::]:9187":      "[::]:9187",
		"[::1]:9187":     "[::1]:9187",
		"localhost:9187": "localhost:9187",
		"10.1.2.3:80":    "10.1.2.3:80",
	} {
		if got := ListenAddr(in); got != want {
			t.Errorf("ListenAddr(%q) = %q, want %q", in, got, want)
		}
	}
	ln, err := net.Listen("tcp", ListenAddr(":0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Errorf("a port alone bound %v, want 127.0.0.1", ln.Addr())
	}
}
