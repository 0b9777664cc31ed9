package faultproxy

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The timing of Delay and Freeze, exactly: in a synctest bubble over an
// in-memory network (net.Pipe), whose blocking is durable, time moves only
// when every goroutine waits, so a round trip takes exactly what the proxy
// adds.

// pipeListener is a net.Listener whose connections are net.Pipe ends.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects a client to the listener.
func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// pipeEcho starts an in-memory echo upstream and a proxy in front of it;
// it returns the proxy and a client connection through it.
func pipeEcho(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	up := newPipeListener()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	front := newPipeListener()
	p := start(t.Context(), front, up.dial)
	c, err := front.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); p.Close(); up.Close() })
	return p, c
}

// send writes msg (net.Pipe writes block until read: in a goroutine) and
// returns a channel that receives the echo once it is read back.
func send(t *testing.T, c net.Conn, msg string) <-chan string {
	got := make(chan string, 1)
	go func() {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Errorf("write: %v", err)
		}
	}()
	go func() {
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return // the connection closed (test cleanup)
		}
		got <- string(buf)
	}()
	return got
}

func TestDelayExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c := pipeEcho(t)
		const d = 40 * time.Millisecond
		p.Delay(d)
		t0 := time.Now()
		if got := <-send(t, c, "ping"); got != "ping" {
			t.Fatalf("echo %q", got)
		}
		// One delayed chunk to upstream, one back.
		if el := time.Since(t0); el != 2*d {
			t.Fatalf("round trip with Delay(%v) took %v, want exactly %v", d, el, 2*d)
		}
		p.Delay(0)
		t0 = time.Now()
		<-send(t, c, "pong")
		if el := time.Since(t0); el != 0 {
			t.Fatalf("round trip after Delay(0) took %v", el)
		}
	})
}

func TestFreezeHoldsUntilThaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c := pipeEcho(t)
		p.Freeze()
		got := send(t, c, "held")
		select { // an hour of silence
		case s := <-got:
			t.Fatalf("the echo %q came through a frozen proxy", s)
		case <-time.After(time.Hour):
		}
		p.Thaw()
		synctest.Wait()
		select {
		case s := <-got:
			if s != "held" {
				t.Fatalf("echo %q", s)
			}
		default:
			t.Fatal("nothing came through after Thaw")
		}
	})
}

func TestFreezeDuringDelayHoldsTheChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c := pipeEcho(t)
		const d = time.Second
		p.Delay(d)
		got := send(t, c, "x")
		time.Sleep(d / 2)
		p.Freeze()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a chunk delayed before Freeze was forwarded while frozen")
		default:
		}
		t0 := time.Now()
		p.Thaw()
		<-got
		// The held chunk waits its delay again, then the echo its own.
		if el := time.Since(t0); el != 2*d {
			t.Fatalf("after Thaw the echo took %v, want %v", el, 2*d)
		}
	})
}
