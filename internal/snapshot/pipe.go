package snapshot

import (
	"io"
	"sync"
)

// chunkSize is the payload of one CopyData message pgx's CopyFrom sends
// (it reads into a 64 KiB buffer behind a 5-byte message header): chunks of
// exactly this size go to the target as full messages.
const chunkSize = 64*1024 - 5

// chunkPipe carries COPY data from the source's COPY TO (one Write per row:
// pgx hands every CopyData message to the writer) to the target's COPY FROM
// in chunks of chunkSize bytes. An io.Pipe would hand over every row on its
// own — a goroutine switch per row, and pgx would send every row to the
// target in a message and a socket write of its own.
//
// Invariants: the bytes Read returns are exactly the bytes written, in
// order; at most 3 chunks exist (one being filled, at most one queued, one
// being read), so the writer blocks while the reader is behind. The
// writer's goroutine alone calls Write and CloseWithError; the reader's
// alone calls Read and closeRead.
type chunkPipe struct {
	full chan []byte // filled chunks, writer → reader; closed at the end of the data
	free chan []byte // empty chunks, reader → writer

	// writer side
	cur []byte

	// reader side: the chunk being read and how far
	rd  []byte
	off int

	mu     sync.Mutex
	werr   error         // the writer's error (io.EOF once closed without one)
	done   chan struct{} // closed when the reader stops
	closed sync.Once
}

func newChunkPipe() *chunkPipe {
	p := &chunkPipe{
		full: make(chan []byte, 1),
		free: make(chan []byte, 3),
		done: make(chan struct{}),
	}
	for range 2 {
		p.free <- make([]byte, 0, chunkSize)
	}
	p.cur = make([]byte, 0, chunkSize)
	return p
}

// Write appends b to the current chunk, queueing every chunk it fills.
func (p *chunkPipe) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := copy(p.cur[len(p.cur):cap(p.cur)], b)
		p.cur = p.cur[:len(p.cur)+k]
		n += k
		b = b[k:]
		if len(p.cur) == cap(p.cur) {
			if err := p.send(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// send queues the current chunk and takes an empty one.
func (p *chunkPipe) send() error {
	select {
	case p.full <- p.cur:
	case <-p.done:
		return io.ErrClosedPipe
	}
	select {
	case p.cur = <-p.free:
		p.cur = p.cur[:0]
	case <-p.done:
		return io.ErrClosedPipe
	}
	return nil
}

// CloseWithError ends the data: the reader gets the bytes written so far,
// then err (io.EOF if nil).
func (p *chunkPipe) CloseWithError(err error) {
	if len(p.cur) > 0 {
		if serr := p.send(); serr != nil && err == nil {
			err = serr
		}
	}
	if err == nil {
		err = io.EOF
	}
	p.mu.Lock()
	p.werr = err
	p.mu.Unlock()
	close(p.full)
}

// Read returns the next bytes written, then the writer's error.
func (p *chunkPipe) Read(b []byte) (int, error) {
	if p.off == len(p.rd) {
		if p.rd != nil {
			p.free <- p.rd[:0] // never blocks: at most 3 chunks exist
			p.rd = nil
		}
		c, ok := <-p.full
		if !ok {
			p.mu.Lock()
			defer p.mu.Unlock()
			return 0, p.werr
		}
		p.rd, p.off = c, 0
	}
	n := copy(b, p.rd[p.off:])
	p.off += n
	return n, nil
}

// closeRead stops the reader: a writer blocked on a full pipe, or writing
// later, gets io.ErrClosedPipe.
func (p *chunkPipe) closeRead() { p.closed.Do(func() { close(p.done) }) }
