package capture

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
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
	// is there when it comes back. Generous: a fifth of the sends (a
	// loaded machine under -race took up to a tenth).
	if reads > uint64(busy/len(msg)/5) {
		t.Errorf("%d reads for %d sends of %d bytes", reads, busy/len(msg), len(msg))
	}
	t.Logf("%d reads for %d sends", reads, busy/len(msg))

	// The tail: 300 bytes that come while the reader waits with the mark
	// raised, then nothing. They arrive within about lowWaterWait (plus
	// scheduling), long before outer, and drop the mark.
	// On a loaded machine the reader may come to its read after the tail
	// is there; the read then takes it at once (a non-blocking read
	// ignores the mark) and the mark stays up, which is right but proves
	// nothing: try again with the writer later.
	for attempt := 1; ; attempt++ {
		r.lw.want = maxMark // the next read raises the mark if the end of the busy stream dropped it
		go writeAfter(t, server, time.Duration(attempt)*time.Millisecond, bytes.Repeat(msg, 3))
		start := time.Now()
		readFull(t, r, 3*len(msg))
		if d := time.Since(start); d > time.Second {
			t.Fatalf("the tail took %s", d)
		}
		if !r.lw.raised {
			t.Logf("the tail came after %s", time.Since(start))
			break
		}
		if attempt == 5 {
			t.Fatal("the mark stayed raised after the tail")
		}
		t.Logf("attempt %d: the tail was read with the mark up (there before the read)", attempt)
	}

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

// TestLowWaterHint: the hint follows the transactions the capture loop
// handled — none before the first COMMIT, betweenMark between transactions,
// inside one what is left of the smallest of the last txnRing (once that
// many were seen, at most minMark) with the short bound, nothing when too
// little is left or after a wait for a hint timed out, until the next BEGIN
// or COMMIT.
func TestLowWaterHint(t *testing.T) {
	lw := &lowWater{wait: lowWaterWait, hintWait: txnHintWait}
	check := func(what string, mark int, bound time.Duration) {
		t.Helper()
		m, b := lw.hint()
		if m != mark || b != bound {
			t.Fatalf("%s: hint %d bytes within %s, want %d within %s", what, m, b, mark, bound)
		}
	}
	txn := func(size int) { // a BEGIN, changes, a COMMIT: size bytes
		lw.handled(51, true, false)
		lw.handled(size-51-56, false, false)
		lw.handled(56, false, true)
	}
	check("a new stream", 0, 0)
	lw.handled(23, false, false) // a keepalive
	check("a keepalive", 0, 0)
	txn(700)
	check("between transactions", betweenMark, lowWaterWait)
	lw.handled(51, true, false)
	check("inside a transaction, with too few seen", 0, 0)
	lw.handled(649, false, true)
	for i := 0; i < txnRing-2; i++ {
		txn(700)
	}
	txn(1000)
	lw.handled(23, false, false)
	check("a keepalive between transactions", betweenMark, lowWaterWait)
	lw.handled(51, true, false)
	check("after a BEGIN", 700-51-hintSlack, txnHintWait)
	lw.handled(300, false, false)
	check("after a change", 700-351-hintSlack, txnHintWait)
	lw.handled(300, false, false)
	check("too little left", 0, 0)
	lw.handled(56, false, true)
	lw.handled(51, true, false)
	lw.hintOff = true // what a wait that timed out does
	check("after a timed-out wait", 0, 0)
	lw.handled(56, false, true)
	check("after the next COMMIT", betweenMark, lowWaterWait)
	for i := 0; i < txnRing; i++ {
		txn(300)
	}
	lw.handled(51, true, false)
	check("smaller transactions", 300-51-hintSlack, txnHintWait)
	lw.handled(249, false, true)
	for i := 0; i < txnRing; i++ {
		txn(100 << 10)
	}
	lw.handled(51, true, false)
	check("large transactions", minMark, txnHintWait)
}

// TestLowWaterTxns: on a real socket, the hints hold the reader asleep —
// a keepalive alone does not wake it (the read returns only at the bound),
// and inside a transaction the read that waits for the rest returns the
// whole rest although it came in two sends 5 ms apart — and a transaction
// smaller than the hint is in after about txnHintWait, not at the capture
// loop's deadline.
func TestLowWaterTxns(t *testing.T) {
	r, server := lowWaterPair(t)
	lw := r.lw
	const txnLen = 700
	for i := 0; i < txnRing; i++ {
		lw.handled(51, true, false)
		lw.handled(txnLen-51-56, false, false)
		lw.handled(56, false, true)
	}
	buf := make([]byte, 1<<20)
	write := func(n int) {
		if _, err := server.Write(bytes.Repeat([]byte("m"), n)); err != nil {
			t.Error(err)
		}
	}

	// later writes n bytes after d, while the reader waits.
	later := func(d time.Duration, n int) {
		writeAfter(t, server, d, bytes.Repeat([]byte("m"), n))
	}

	// A keepalive alone: held until the bound. On a loaded machine the
	// writer may run before the read begins; bytes already there are
	// rightly read at once, so that try says nothing: try again.
	for try := 1; ; try++ {
		var wrote atomic.Int64
		go func() {
			time.Sleep(300 * time.Microsecond)
			wrote.Store(time.Now().UnixNano())
			write(23)
		}()
		start := time.Now()
		n, err := r.Read(buf)
		if err != nil || n != 23 {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		d := time.Since(start)
		lw.handled(23, false, false)
		if wrote.Load() <= start.UnixNano() && try < 10 {
			continue
		}
		if d < lowWaterWait/2 || d > time.Second {
			t.Fatalf("a keepalive alone was read after %s, want about %s", d, lowWaterWait)
		}
		break
	}

	// The next transaction: its BEGIN and first change wake the reader;
	// the rest comes in two sends 5 ms apart and is read at once.
	lw.hintWait = time.Second // a loaded machine must not end the wait
	write(51 + 100)
	if n, err := r.Read(buf); err != nil || n != 151 {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	lw.handled(51, true, false)
	lw.handled(100, false, false)
	rest := txnLen - 151
	go func() {
		later(time.Millisecond, rest/2)
		later(5*time.Millisecond, rest-rest/2)
	}()
	got := 0
	for got < rest {
		n, err := r.Read(buf[:rest-got])
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 && n < rest-hintSlack {
			t.Fatalf("the first read after the BEGIN took %d of the %d bytes left: the hint did not hold it", n, rest)
		}
		got += n
	}
	lw.handled(rest-56, false, false)
	lw.handled(56, false, true)

	// A smaller transaction: in after about txnHintWait.
	lw.hintWait = txnHintWait
	write(51 + 100)
	if n, err := r.Read(buf[:151]); err != nil || n != 151 {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	lw.handled(51, true, false)
	lw.handled(100, false, false)
	// Written after the hint's wait: it times out first. (On a loaded
	// machine the writer may run before the read begins: then the bytes
	// are read at once, with no wait to time out.)
	var wrote atomic.Int64
	go func() {
		time.Sleep(txnHintWait + time.Millisecond)
		wrote.Store(time.Now().UnixNano())
		write(56)
	}()
	start := time.Now()
	if n, err := r.Read(buf); err != nil || n != 56 {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the end of a small transaction took %s", d)
	}
	if !lw.hintOff && wrote.Load() > start.UnixNano() {
		t.Fatal("the wait for the hint did not time out")
	}

	// A busy stream: its mark rules, not the hint.
	lw.handled(56, false, true)
	lw.handled(51, true, false)
	lw.want = 8 << 10
	write(100)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	if lw.mark != 8<<10 {
		t.Fatalf("busy: the mark is %d, want the busy mark %d", lw.mark, 8<<10)
	}
}

// TestLowWaterGather: on a steady stream (COMMITs less than gatherWait
// apart) a read between transactions gathers what comes within gatherWait
// into one wake-up; after a quiet spell longer than gatherWait the next
// transaction is read at once; with gathering off, at once too.
func TestLowWaterGather(t *testing.T) {
	r, server := lowWaterPair(t)
	lw := r.lw
	const gather = 60 * time.Millisecond // long: a loaded machine must not end the wait early
	lw.gatherWait = gather
	var gathers atomic.Bool // Capture.Gathers: whether the last read between transactions gathered
	lw.gathers = &gathers
	txn := func() {
		lw.handled(51, true, false)
		lw.handled(200, false, false)
		lw.handled(56, false, true)
	}
	const txnLen = 51 + 200 + 56
	txn()
	txn() // two COMMITs microseconds apart: steady
	buf := make([]byte, 1<<20)
	write := func(d time.Duration, n int) {
		writeAfter(t, server, d, bytes.Repeat([]byte("m"), n))
	}

	// Steady: two transactions 5 ms apart, one read.
	go func() {
		write(time.Millisecond, txnLen)
		write(5*time.Millisecond, txnLen)
	}()
	start := time.Now()
	n, err := r.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2*txnLen {
		t.Fatalf("a steady stream: the read took %d bytes, want both transactions (%d)", n, 2*txnLen)
	}
	if d := time.Since(start); d < gather/2 {
		t.Fatalf("the gathering read returned after %s, want about %s", d, gather)
	}
	if !gathers.Load() {
		t.Error("Gathers is false after a gathering read")
	}
	txn()
	txn()

	// atOnce: a transaction sent now is read alone, without a gathering wait.
	atOnce := func(what string) {
		t.Helper()
		go write(time.Millisecond, txnLen)
		start := time.Now()
		if n, err := r.Read(buf); err != nil || n != txnLen {
			t.Fatalf("%s: read %d bytes: %v", what, n, err)
		}
		if d := time.Since(start); d >= gather/2 {
			t.Fatalf("%s was held %s", what, d)
		}
	}

	// A quiet spell: the next transaction is read at once.
	time.Sleep(gather + 10*time.Millisecond)
	txn() // its COMMIT comes more than gather after the last
	atOnce("a transaction after a quiet spell")
	if gathers.Load() {
		t.Error("Gathers is true after a quiet spell")
	}

	// A fast stream (its last window brought minMark or more in
	// markSpan) is not gathered.
	txn()
	txn()
	lw.slow = false
	atOnce("a fast stream")
	if gathers.Load() {
		t.Error("Gathers is true on a fast stream")
	}

	// Gathering off: a steady stream is read transaction by transaction.
	lw.gatherWait = 0
	txn()
	txn()
	go func() {
		write(time.Millisecond, txnLen)
		write(20*time.Millisecond, txnLen)
	}()
	if n, err := r.Read(buf); err != nil || n != txnLen {
		t.Fatalf("gathering off: read %d bytes: %v", n, err)
	}
	if n, err := r.Read(buf); err != nil || n != txnLen {
		t.Fatalf("gathering off: read %d bytes: %v", n, err)
	}
}

// writeAfter writes b to c after d: the bytes come while the reader waits
// (data already there when a read starts is returned at once, whatever the
// mark), which is what these tests time. (A real socket's wake-ups are the
// kernel's: these tests cannot run in virtual time.)
func writeAfter(t *testing.T, c net.Conn, d time.Duration, b []byte) {
	time.Sleep(d)
	if _, err := c.Write(b); err != nil {
		t.Error(err)
	}
}

// lowWaterPair is a reader with a low-water mark on the client end of a
// loopback TCP connection (a read deadline 10 s out), and the server end.
func lowWaterPair(t *testing.T) (*coalescingReader, net.Conn) {
	t.Helper()
	client, server := tcpPair(t)
	r := newCoalescingReader(client)
	r.lw = newLowWater(client)
	if r.lw == nil {
		t.Fatal("no low-water mark on a TCP connection")
	}
	if err := r.lw.setDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return r, server
}

// TestGathers: Capture.Gathers is false until a read gathers, and
// useLowWater publishes into it only on a TCP connection.
func TestGathers(t *testing.T) {
	client, _ := tcpPair(t)
	pipeC, pipeS := net.Pipe() // not TCP: no low-water mark
	defer pipeC.Close()
	defer pipeS.Close()
	for _, conn := range []net.Conn{client, pipeC} {
		c := &Capture{opts: Options{GatherWait: 2 * time.Millisecond}}
		c.rd = newCoalescingReader(conn)
		c.gathers.Store(true)
		c.useLowWater(conn)
		if c.Gathers() {
			t.Errorf("%T: Gathers() before any read", conn)
		}
		if (c.rd.lw != nil) != (conn == client) || (c.rd.lw != nil && c.rd.lw.gathers != &c.gathers) {
			t.Errorf("%T: low-water mark %v", conn, c.rd.lw)
		}
	}
}
