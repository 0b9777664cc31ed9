package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run over real loopback sockets, as the proxy is used (RST,
// half close, a refused dial): every wait is bounded, and timing
// assertions are lower bounds (a delay is at least d) or generous upper
// bounds (a cut is seen within seconds, not minutes). The exact timing of
// Delay and Freeze is tested in synctest_test.go, over net.Pipe in a
// testing/synctest bubble (loopback I/O is not durably blocking).

// echoServer accepts connections and writes back what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func startEcho(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(context.Background(), echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo mismatch: " + string(buf))
	}
	return nil
}

// closedAtOnce checks that a new connection to p is closed by the proxy:
// the kernel completes the handshake, the proxy resets it, which the dial
// itself may already report.
func closedAtOnce(p *Proxy) error {
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		return fmt.Errorf("read: %v, want the connection closed", err)
	}
	return nil
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

func TestForwardsBothWaysAndCounts(t *testing.T) {
	p := startEcho(t)
	c := dial(t, p)
	if err := roundTrip(c, "hello", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	if err := roundTrip(c, string(big), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The proxy counts a chunk after writing it on: the client may have
	// read the last bytes a moment before they are counted.
	want := int64(5 + len(big))
	s := p.Stats()
	for deadline := time.Now().Add(5 * time.Second); s.BytesDown < want && time.Now().Before(deadline); s = p.Stats() {
		time.Sleep(time.Millisecond)
	}
	if s.Accepted != 1 || s.Active != 1 || s.BytesUp != want || s.BytesDown != want {
		t.Fatalf("stats %+v, want 1 accepted, 1 active, %d bytes each way", s, want)
	}
}

func TestCutResetsEveryConnectionAndAcceptsNewOnes(t *testing.T) {
	p := startEcho(t)
	a, b := dial(t, p), dial(t, p)
	for _, c := range []net.Conn{a, b} {
		if err := roundTrip(c, "x", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Cut(); n != 2 {
		t.Fatalf("Cut closed %d connections, want 2", n)
	}
	for _, c := range []net.Conn{a, b} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after Cut: %v, want a connection reset", err)
		}
	}
	if s := p.Stats(); s.Active != 0 || s.Cut != 2 {
		t.Fatalf("stats after Cut %+v", s)
	}
	if err := roundTrip(dial(t, p), "again", 5*time.Second); err != nil {
		t.Fatalf("a new connection after Cut: %v", err)
	}
}

func TestFreezeIsSilenceNotClose(t *testing.T) {
	p := startEcho(t)
	c := dial(t, p)
	if err := roundTrip(c, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	// The write goes out (the socket is open), the echo never comes: the
	// read times out rather than ending.
	err := roundTrip(c, "during", 300*time.Millisecond)
	if !isTimeout(err) {
		t.Fatalf("round trip while frozen: %v, want a timeout", err)
	}
	// A connection made during the freeze is accepted but silent too.
	d := dial(t, p)
	if err := roundTrip(d, "new", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection while frozen: %v, want a timeout", err)
	}
	p.Thaw()
	// Held data is delivered in order once thawed.
	buf := make([]byte, len("during"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "during" {
		t.Fatalf("after Thaw read %q, %v; want \"during\"", buf, err)
	}
	buf = make([]byte, len("new"))
	_ = d.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(d, buf); err != nil || string(buf) != "new" {
		t.Fatalf("after Thaw the new connection read %q, %v; want \"new\"", buf, err)
	}
	if err := roundTrip(c, "after", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestCutWhileFrozen(t *testing.T) {
	p := startEcho(t)
	c := dial(t, p)
	if err := roundTrip(c, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after a Cut of a frozen link: %v, want a reset", err)
	}
}

func TestDelay(t *testing.T) {
	p := startEcho(t)
	c := dial(t, p)
	if err := roundTrip(c, "warm", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	const d = 150 * time.Millisecond
	p.Delay(d)
	t0 := time.Now()
	if err := roundTrip(c, "slow", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// One chunk each way: at least 2d (a lower bound: a loaded machine
	// only adds to it).
	if el := time.Since(t0); el < 2*d {
		t.Fatalf("round trip with Delay(%v) took %v, want at least %v", d, el, 2*d)
	}
	// That Delay(0) removes the delay, and that the delay is exactly d,
	// TestDelayExact checks in virtual time (no wall-clock bound here).
	p.Delay(0)
	if err := roundTrip(c, "fast", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRefuse(t *testing.T) {
	p := startEcho(t)
	kept := dial(t, p)
	if err := roundTrip(kept, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Refuse(true)
	if err := closedAtOnce(p); err != nil {
		t.Fatalf("a refused connection: %v", err)
	}
	if err := roundTrip(kept, "still", 5*time.Second); err != nil {
		t.Fatalf("a connection made before Refuse: %v", err)
	}
	p.Refuse(false)
	if err := roundTrip(dial(t, p), "ok", 5*time.Second); err != nil {
		t.Fatalf("after Refuse(false): %v", err)
	}
	if s := p.Stats(); s.Refused != 1 || s.Accepted != 2 {
		t.Fatalf("stats %+v, want 1 refused, 2 accepted", s)
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Closed after Start, so that the proxy cannot listen on this port.
	addr := ln.Addr().String()
	p, err := Start(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	defer p.Close()
	if err := closedAtOnce(p); err != nil {
		t.Fatalf("with upstream down: %v", err)
	}
	if s := p.Stats(); s.Failed != 1 {
		t.Fatalf("stats %+v, want 1 failed", s)
	}
}

func TestHalfClosePassesThrough(t *testing.T) {
	p := startEcho(t)
	c := dial(t, p)
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "last words" {
		t.Fatalf("after a half close read %q, %v", b, err)
	}
}

func TestCloseAndContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	if err := roundTrip(c, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze() // a frozen pump must not keep Close waiting
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan struct{})
	go func() { p.Close(); p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: %v, want it closed", err)
	}
}
