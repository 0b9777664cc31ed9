package kafkalog

import (
	"fmt"
	"sync"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

// step is one call on a resumePoints.
type step struct {
	op  string // begin, commit, abort, abortOpen, read, resume, open, closed
	xid uint32
	off int64      // begin: the first offset; read: the next offset; resume: the offset wanted
	lsn change.LSN // commit: the end; resume: the low watermark
}

func TestResumePoints(t *testing.T) {
	begin := func(xid uint32, off int64) step { return step{op: "begin", xid: xid, off: off} }
	commit := func(xid uint32, end change.LSN) step { return step{op: "commit", xid: xid, lsn: end} }
	abort := func(xid uint32) step { return step{op: "abort", xid: xid} }
	abortOpen := func() step { return step{op: "abortOpen"} }
	read := func(next int64) step { return step{op: "read", off: next} }
	isOpen := func(xid uint32) step { return step{op: "open", xid: xid} }
	notOpen := func(xid uint32) step { return step{op: "closed", xid: xid} }
	// resume checks that resume(low) returns want.
	resume := func(low change.LSN, want int64) step { return step{op: "resume", lsn: low, off: want} }

	for _, tc := range []struct {
		name  string
		from  int64
		steps []step
	}{
		{"nothing read: where reading starts", 40, []step{
			resume(0, 40), resume(^change.LSN(0), 40),
		}},
		{"read moves next", 40, []step{
			read(41), resume(0, 41), read(50), resume(0, 50),
		}},
		{"an open transaction pins its first offset", 0, []step{
			begin(7, 3), read(4), read(9), resume(0, 3), resume(^change.LSN(0), 3),
		}},
		{"begun again: the first offset stays", 0, []step{
			begin(7, 3), begin(7, 5), read(9), resume(^change.LSN(0), 3),
		}},
		{"committed above low pins, at or below low not", 0, []step{
			begin(7, 3), read(4), commit(7, 0x100), read(5), notOpen(7),
			resume(0, 3), resume(0xFF, 3), resume(0x100, 5),
		}},
		{"commits at or below low are forgotten", 0, []step{
			begin(7, 3), commit(7, 0x100), read(5),
			resume(0x100, 5), resume(0, 5), resume(0xFF, 5),
		}},
		{"commits above low are kept", 0, []step{
			begin(7, 3), commit(7, 0x100), read(5),
			resume(0xFF, 3), resume(0, 3),
		}},
		{"low between commits", 0, []step{
			begin(1, 2), commit(1, 0x100),
			begin(2, 5), commit(2, 0x200),
			begin(3, 8), commit(3, 0x300),
			read(10),
			resume(0, 2), resume(0x150, 5), resume(0x200, 8), resume(0x2FF, 8), resume(0x300, 10),
		}},
		{"minimum, not the first commit's offset", 0, []step{
			// A streamed transaction begun at 3 commits after one begun at 5.
			begin(20, 3), begin(21, 5), commit(21, 0x100), commit(20, 0x200), read(9),
			resume(0, 3), resume(0x100, 3), resume(0x200, 9),
		}},
		{"minimum of open and committed", 0, []step{
			begin(1, 4), commit(1, 0x100), begin(2, 6), read(7),
			resume(0, 4), resume(0x100, 6), begin(3, 2) /* a streamed one seen late */, resume(0x100, 2),
		}},
		{"an open transaction below a committed one", 0, []step{
			begin(30, 1), begin(1, 4), commit(1, 0x100), read(7),
			resume(0, 1), resume(0x100, 1), abort(30), resume(0x100, 7),
		}},
		{"abort releases", 10, []step{
			begin(7, 12), read(13), isOpen(7), abort(7), notOpen(7), resume(0, 13),
		}},
		{"abort of another transaction changes nothing", 10, []step{
			begin(7, 12), read(13), abort(8), isOpen(7), resume(0, 12),
		}},
		{"aborted, then its commit: ignored", 10, []step{
			begin(7, 12), abort(7), commit(7, 0x100), read(13), resume(0, 13),
		}},
		{"abortOpen forgets the open, keeps the committed", 0, []step{
			begin(1, 1), begin(2, 2), begin(3, 3), commit(2, 0x100), read(6),
			abortOpen(), notOpen(1), notOpen(3),
			resume(0, 2), resume(0x100, 6),
			commit(1, 0x200), resume(0, 6), // its commit after the marker: ignored
		}},
		{"a commit of a transaction never begun is ignored", 10, []step{
			commit(9, 0x100), read(12), resume(0, 12), notOpen(9),
		}},
		{"a commit never begun leaves the open ones alone", 10, []step{
			begin(7, 11), commit(9, 0x100), read(12), isOpen(7), resume(0x100, 11),
		}},
		{"a commit not above the last end is not kept", 0, []step{
			begin(1, 1), commit(1, 0x200), begin(2, 2), commit(2, 0x200), begin(3, 3), commit(3, 0x100), read(5),
			notOpen(2), notOpen(3), resume(0, 1), resume(0x200, 5),
		}},
		{"a commit ending below the last one kept is not kept", 0, []step{
			begin(1, 1), begin(2, 2), commit(2, 0x300), commit(1, 0x200), read(5),
			notOpen(1), resume(0, 2), resume(0x250, 2), resume(0x300, 5),
		}},
		{"read into the past is taken as it is", 0, []step{
			read(20), read(15), resume(0, 15),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newResumePoints(tc.from)
			for i, s := range tc.steps {
				switch s.op {
				case "begin":
					p.begin(s.xid, s.off)
				case "commit":
					p.commit(s.xid, s.lsn)
				case "abort":
					p.abort(s.xid)
				case "abortOpen":
					p.abortOpen()
				case "read":
					p.read(s.off)
				case "open", "closed":
					if got := p.isOpen(s.xid); got != (s.op == "open") {
						t.Fatalf("step %d: isOpen(%d) = %v", i, s.xid, got)
					}
				case "resume":
					if got := p.resume(s.lsn); got != s.off {
						t.Fatalf("step %d: resume(%s) = %d, want %d (steps %s)", i, s.lsn, got, s.off, fmtSteps(tc.steps[:i]))
					}
				default:
					t.Fatalf("step %d: op %q", i, s.op)
				}
			}
		})
	}
}

func fmtSteps(ss []step) string {
	var out []byte
	for _, s := range ss {
		switch s.op {
		case "begin":
			out = fmt.Appendf(out, "begin(%d,%d) ", s.xid, s.off)
		case "commit":
			out = fmt.Appendf(out, "commit(%d,%s) ", s.xid, s.lsn)
		case "read":
			out = fmt.Appendf(out, "read(%d) ", s.off)
		case "resume":
			out = fmt.Appendf(out, "resume(%s) ", s.lsn)
		default:
			out = fmt.Appendf(out, "%s(%d) ", s.op, s.xid)
		}
	}
	return string(out)
}

// TestResumePointsConcurrent: the reader's calls against the watermark
// persister's resume (run with -race), each kind of call from a goroutine
// of its own; resume never passes the open transaction begun at offset 0.
func TestResumePointsConcurrent(t *testing.T) {
	const n = 3000
	p := newResumePoints(0)
	p.begin(0, 0) // open throughout
	for i := 1; i <= n; i++ {
		p.begin(uint32(i), int64(i))     // committed by one goroutine
		p.begin(uint32(n+i), int64(n+i)) // aborted by another
	}
	var wg sync.WaitGroup
	for _, f := range []func(i int){
		func(i int) { p.commit(uint32(i), change.LSN(i)) },
		func(i int) { p.abort(uint32(n + i)) },
		func(i int) { p.begin(uint32(2*n+i), int64(2*n+i)) },
		func(i int) { p.read(int64(3*n + i)) },
		func(i int) { p.isOpen(uint32(i)) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= n; i++ {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		if got := p.resume(change.LSN(i)); got != 0 {
			t.Fatalf("resume(%d) = %d with transaction 0 open from offset 0", i, got)
		}
	}
	wg.Wait()
	p.abortOpen()
	if got := p.resume(n - 1); got != n {
		t.Fatalf("resume(%d) = %d, want %d (the last commit's first offset)", n-1, got, n)
	}
	if got := p.resume(n); got != 4*n {
		t.Fatalf("resume(%d) = %d, want %d", n, got, 4*n)
	}
}

// TestResumePointsReadConcurrent: read alone (the reader's every record)
// against resume (run with -race).
func TestResumePointsReadConcurrent(t *testing.T) {
	p := newResumePoints(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= 5000; i++ {
			p.read(i)
		}
	}()
	last := int64(0)
	for i := 0; i < 5000; i++ {
		got := p.resume(0)
		if got < last || got > 5000 {
			t.Fatalf("resume(0) = %d after %d", got, last)
		}
		last = got
	}
	<-done
	if got := p.resume(0); got != 5000 {
		t.Fatalf("resume(0) = %d after read(5000)", got)
	}
}
