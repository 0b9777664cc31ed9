package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection, the client end
// wrapped.
func pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	client = Wrap(c)
	if _, ok := client.(*Conn); !ok {
		t.Fatalf("a TCP connection was not wrapped: %T", client)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestConn: reads and writes through raw system calls keep net.Conn's
// semantics — data both ways, a write larger than the socket buffers that
// must wait for room, the read deadline as a timeout error, Close waking a
// blocked read, and io.EOF when the peer closes.
func TestConn(t *testing.T) {
	client, server := pair(t)

	// Both ways.
	if _, err := server.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := client.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	// A write of 32 MiB: far more than the socket buffers hold, so it
	// waits for room (EAGAIN) while the peer reads.
	big := bytes.Repeat([]byte("0123456789abcdef"), 2<<20)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(server, int64(len(big))))
		got <- b
	}()
	if n, err := client.Write(big); err != nil || n != len(big) {
		t.Fatalf("wrote %d of %d: %v", n, len(big), err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the peer read %d bytes, not what was written", len(b))
	}

	// The read deadline.
	if err := client.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err = client.Read(buf)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past its deadline: %v", err)
	}
	if err := client.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// The peer closes: io.EOF.
	server.Close()
	if _, err := client.Read(buf); err != io.EOF {
		t.Fatalf("a read after the peer closed: %v", err)
	}
}

// TestConnClose: Close from another goroutine ends a blocked read with
// net.ErrClosed.
func TestConnClose(t *testing.T) {
	client, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	client.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a read ended by Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked read")
	}
}

// TestWrapOther: a connection that is not a socket of package net is
// returned as it is.
func TestWrapOther(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("a pipe was wrapped")
	}
}

// BenchmarkPingPong: a 100-byte request and its answer over loopback
// through a wrapped connection and a plain one — the engine's pattern of
// a read that finds nothing, a park in the netpoller and a wake-up.
func BenchmarkPingPong(b *testing.B) {
	for _, wrap := range []bool{false, true} {
		name := "net"
		if wrap {
			name = "rawsock"
		}
		b.Run(name, func(b *testing.B) {
			client, server := pair(b)
			if !wrap {
				client = client.(*Conn).Conn
			}
			go func() {
				buf := make([]byte, 100)
				for {
					if _, err := io.ReadFull(server, buf); err != nil {
						return
					}
					if _, err := server.Write(buf); err != nil {
						return
					}
				}
			}()
			msg := make([]byte, 100)
			for b.Loop() {
				if _, err := client.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(client, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
