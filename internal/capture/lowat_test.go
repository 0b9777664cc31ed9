package capture

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// readFull reads n bytes through r.
func readFull(t *testing.T, r io.Reader, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for got := 0; got < n; {
		k, err := r.Read(buf[:min(len(buf), n-got)])
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got, n, err)
		}
		got += k
	}
}

// TestLowWater: on a real socket, a busy stream (many small sends) raises
// the receive low-water mark, so the reader takes the stream in few large
// reads; the tail of a burst, smaller than the mark, still arrives within
// about lowWaterWait — not at the capture loop's deadline — and drops the
// mark; a quiet stream never raises it.
func TestLowWater(t *testing.T) {
	client, server := tcpPair(t)
	r := newCoalescingReader(client)
	r.lw = newLowWater(client)
	if r.lw == nil {
		t.Fatal("no low-water mark on a TCP connection")
	}
	outer := time.Now().Add(10 * time.Second)
	if err := r.lw.setDeadline(outer); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("m"), 100)

	// Quiet: a message at a time, each read as it comes.
	for i := 0; i < 20; i++ {
		if _, err := server.Write(msg); err != nil {
			t.Fatal(err)
		}
		readFull(t, r, len(msg))
		time.Sleep(2 * time.Millisecond)
	}
	if r.lw.raises != 0 {
		t.Fatal("a quiet stream raised the mark")
	}

	// Busy: 4 MB in 100-byte sends as fast as they go, read concurrently.
	const busy = 4 << 20
	go func() {
		for i := 0; i < busy/len(msg); i++ {
			if _, err := server.Write(msg); err != nil {
				return
			}
		}
	}()
	before := r.reads.Load()
	readFull(t, r, busy/len(msg)*len(msg))
	reads := r.reads.Load() - before
	if r.lw.raises == 0 {
		t.Fatal("a busy stream did not raise the mark")
	}
	// 41,943 sends; with the mark raised a read takes the mark or what
	// is there when it comes back. Generous: a tenth of the sends.
	if reads > uint64(busy/len(msg)/10) {
		t.Errorf("%d reads for %d sends of %d bytes", reads, busy/len(msg), len(msg))
	}
	t.Logf("%d reads for %d sends", reads, busy/len(msg))

	// The tail: 300 bytes that come while the reader waits with the mark
	// raised, then nothing. They arrive within about lowWaterWait (plus
	// scheduling), long before outer, and drop the mark.
	r.lw.want = maxMark // the next read raises the mark if the end of the busy stream dropped it
	go func() {
		time.Sleep(time.Millisecond)
		_, _ = server.Write(bytes.Repeat(msg, 3))
	}()
	start := time.Now()
	readFull(t, r, 3*len(msg))
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the tail took %s", d)
	}
	if r.lw.raised {
		t.Fatal("the mark stayed raised after the tail")
	}
	t.Logf("the tail came after %s", time.Since(start))

	// The capture loop's deadline still ends a read with nothing to read.
	if err := r.lw.setDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 10)); err == nil {
		t.Fatal("a read past the deadline returned no error")
	}
}

// BenchmarkLowWaterRead streams 100-byte sends through a loopback socket
// and reads them through the coalescing reader (low-water mark on): the
// reader's cost per message, and reads per message as a metric.
func BenchmarkLowWaterRead(b *testing.B) {
	client, server := tcpPair(b)
	r := newCoalescingReader(client)
	r.lw = newLowWater(client)
	if err := r.lw.setDeadline(time.Now().Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	msg := bytes.Repeat([]byte("m"), 100)
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := server.Write(msg); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 1<<20)
	b.ResetTimer()
	for got := 0; got < b.N*len(msg); {
		n, err := r.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.ReportMetric(float64(r.reads.Load())/float64(b.N), "reads/msg")
}

// TestLowWaterUnits: a stream of transactions that is not busy — each
// sends nine messages, then its COMMIT a millisecond later, then pauses — is
// read in one read per transaction once the reader has seen unitRing of
// them (the hint raises the mark to the size of a transaction), where it
// took at least two before; a smaller transaction after them still arrives
// after about lowWaterWait, not at the capture loop's deadline.
func TestLowWaterUnits(t *testing.T) {
	client, server := tcpPair(t)
	r := newCoalescingReader(client)
	r.lw = newLowWater(client)
	if r.lw == nil {
		t.Fatal("no low-water mark on a TCP connection")
	}
	if err := r.lw.setDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// A long bound for the waits, so that a loaded machine cannot make a
	// transaction's wait time out (the bound is the small transaction's
	// part, below).
	r.lw.wait = 200 * time.Millisecond
	const msgLen, perUnit, units = 60, 10, 40
	msg := bytes.Repeat([]byte("m"), msgLen)
	send := func(n int) {
		for i := 0; i < n; i++ {
			if i == n-1 {
				time.Sleep(time.Millisecond)
			}
			if _, err := server.Write(msg); err != nil {
				return
			}
		}
	}
	// read takes one transaction of n messages, telling lowWater of each
	// message as the capture loop does, and returns the reads it took.
	buf := make([]byte, 1<<20)
	read := func(n int) int {
		reads, got, told := 0, 0, 0
		for got < n*msgLen {
			k, err := r.Read(buf[:n*msgLen-got])
			if err != nil {
				t.Fatalf("after %d of %d bytes: %v", got, n*msgLen, err)
			}
			reads++
			got += k
			for ; told < got/msgLen; told++ {
				r.lw.handled(msgLen, told == n-1)
			}
		}
		return reads
	}
	go func() {
		for u := 0; u < units; u++ {
			send(perUnit)
			time.Sleep(time.Millisecond)
		}
	}()
	var before, with int
	for u := 0; u < units; u++ {
		n := read(perUnit)
		if u < unitRing {
			before += n
		} else {
			with += n
		}
	}
	perBefore := float64(before) / unitRing
	perWith := float64(with) / (units - unitRing)
	t.Logf("reads per transaction: %.2f before the hint, %.2f with it", perBefore, perWith)
	if perBefore < 1.9 {
		t.Errorf("%.2f reads per transaction before the hint: the test does not split transactions", perBefore)
	}
	if perWith > 1.5 {
		t.Errorf("%.2f reads per transaction with the hint (%.2f before it)", perWith, perBefore)
	}

	// A smaller transaction: in after about lowWaterWait.
	r.lw.wait = lowWaterWait
	go send(3)
	start := time.Now()
	read(3)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a small transaction took %s", d)
	}
	t.Logf("a small transaction came after %s", time.Since(start))
}
