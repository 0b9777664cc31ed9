package rawsock

import (
	"context"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Conn is a TCP or Unix socket connection whose Read and Write are raw
// system calls; everything else (deadlines, Close, addresses) is the
// wrapped connection's.
type Conn struct {
	net.Conn
	rc syscall.RawConn
}

// Wrap returns c reading and writing through raw system calls, or c itself
// when it is not a socket of package net (a test's pipe, a TLS connection).
func Wrap(c net.Conn) net.Conn {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return c
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{Conn: c, rc: rc}
}

// DialFunc is the signature of pgconn.Config.DialFunc.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial wraps the connections dial opens.
func Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}

// NetConn is the wrapped connection (as tls.Conn's NetConn).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Read reads like net.Conn's Read: it waits for data (or the read
// deadline, or Close) in the netpoller, returns io.EOF at the end of the
// stream, and errors as *net.OpError.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case 0:
				n = int(r)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("read", errno)
	}
	if err != nil {
		return 0, c.opError("read", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p like net.Conn's Write, waiting for room in the
// netpoller (or the write deadline, or Close).
func (c *Conn) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// SetsockoptInt sets an int socket option on fd as a raw system call (from
// inside syscall.RawConn's Control), for options set often, as the
// capture's receive low-water mark.
func SetsockoptInt(fd uintptr, level, opt, value int) error {
	v := int32(value)
	_, _, e := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	if e != 0 {
		return os.NewSyscallError("setsockopt", e)
	}
	return nil
}
