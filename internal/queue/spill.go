package queue

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/repstream/repstream/internal/change"
)

const (
	frameHeaderSize = 8  // u32 length | u32 crc32c
	fixedSize       = 31 // fixed part of the payload, see the package doc
	recordOverhead  = frameHeaderSize + fixedSize

	// spillBufSize is the size of a spill writer's buffer and of a reader's
	// bufio.Reader.
	spillBufSize = 256 << 10
)

// castagnoli is the CRC-32C table (immutable after initialisation).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodedSize is the number of bytes the record of c takes in a spill file.
func encodedSize(c *change.Change) int {
	return recordOverhead + len(c.Old) + len(c.New) + 4*len(c.TruncateRels)
}

// relTable numbers the relations that appear in spill files, so that a change
// read back points at the same *change.Relation it was added with.
//
// Invariants: list only grows and its elements are never replaced;
// byPtr[list[i]] == i+1 for every i (references start at 1, 0 means none).
// Only the producer adds; readers take a snapshot of list, which stays valid
// because it is append-only.
type relTable struct {
	mu    sync.RWMutex
	byPtr map[*change.Relation]uint32
	list  []*change.Relation
}

// ref returns the reference of r, registering it if needed.
func (rt *relTable) ref(r *change.Relation) uint32 {
	if r == nil {
		return 0
	}
	rt.mu.RLock()
	id, ok := rt.byPtr[r]
	rt.mu.RUnlock()
	if ok {
		return id
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if id, ok := rt.byPtr[r]; ok {
		return id
	}
	if rt.byPtr == nil {
		rt.byPtr = make(map[*change.Relation]uint32)
	}
	rt.list = append(rt.list, r)
	id = uint32(len(rt.list))
	rt.byPtr[r] = id
	return id
}

// snapshot returns the relations registered so far, indexed by reference-1.
func (rt *relTable) snapshot() []*change.Relation {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return rt.list[:len(rt.list):len(rt.list)]
}

// spillHandle is the part of *os.File a spill file's writer and readers use;
// tests inject failing implementations (a full disk). The records are read
// back through the handle they were written with: the file is never reopened
// by name, so what is read is what was written, whatever happens to the name.
type spillHandle interface {
	io.WriterAt
	io.ReaderAt // safe for concurrent use, as *os.File's
	Truncate(size int64) error
	Close() error
}

// subStat counts the changes of one (sub)transaction in a spill file, so that
// a subtransaction abort can correct Len and Bytes without reading the file.
type subStat struct {
	n     int
	bytes int64
}

// spillWriter appends the records of one transaction to its spill file, and
// keeps the file's handle, through which its readers read it back, until the
// file is released or discarded.
//
// Invariants: the file holds complete records in [0, off); buf holds the
// complete records that follow them, not yet written. Writes go to explicit
// offsets (WriteAt), so a failed write changes neither off nor buf and can be
// retried; bytes a failed write left past off are overwritten by the next
// write or cut off by finish (failed is set). Nothing is ever dropped from buf
// unless it was written: an error never loses a change silently. h is set
// once, at creation, and never reassigned (readers use it while the queue may
// close it: *os.File allows that); done and closed belong to the producer
// until finish, and closed to whoever holds the file after.
type spillWriter struct {
	path   string      // for messages
	name   string      // in the spill directory
	h      spillHandle // open until closeFile
	remove func(name string) error
	buf    []byte
	bufp   *[]byte // pooled backing array of buf
	pool   *sync.Pool
	off    int64
	failed bool
	done   bool // finished: no more appends
	closed bool // h closed
	rels   *relTable

	lastRel *change.Relation // cache of the last relation reference
	lastRef uint32

	subs    map[uint32]*subStat
	lastSub uint32
	lastSt  *subStat
}

// newSpillWriter returns the writer of the new file h, path, which remove
// (nil: nothing to remove) deletes.
func newSpillWriter(path string, h spillHandle, remove func(name string) error, rels *relTable, pool *sync.Pool) *spillWriter {
	bp := pool.Get().(*[]byte)
	return &spillWriter{
		path: path, name: filepath.Base(path), h: h, remove: remove,
		buf: (*bp)[:0], bufp: bp, pool: pool, rels: rels,
		subs: make(map[uint32]*subStat),
	}
}

func (w *spillWriter) relRef(r *change.Relation) uint32 {
	if r == nil {
		return 0
	}
	if r != w.lastRel {
		w.lastRel, w.lastRef = r, w.rels.ref(r)
	}
	return w.lastRef
}

// append adds the record of c, accounted size bytes, and returns its encoded
// size. On error nothing of c was added and earlier records are kept.
func (w *spillWriter) append(c *change.Change, size int64) (int, error) {
	if w.done || w.closed {
		return 0, fmt.Errorf("append to spill file %s: already finished", w.path)
	}
	n := encodedSize(c)
	if n-frameHeaderSize > math.MaxUint32 {
		return 0, fmt.Errorf("append to spill file %s: change of %d bytes is too large", w.path, n)
	}
	if len(w.buf)+n > cap(w.buf) {
		if err := w.flush(); err != nil {
			return 0, err
		}
	}
	if n > cap(w.buf) {
		if err := w.writeLarge(c, n); err != nil {
			return 0, err
		}
	} else {
		w.buf = w.encode(w.buf, c, n)
	}
	if c.Xid != w.lastSub || w.lastSt == nil {
		st := w.subs[c.Xid]
		if st == nil {
			st = new(subStat)
			w.subs[c.Xid] = st
		}
		w.lastSub, w.lastSt = c.Xid, st
	}
	w.lastSt.n++
	w.lastSt.bytes += size
	return n, nil
}

// putFixed writes the frame length and the fixed part of c's payload into
// p[0:recordOverhead]; the CRC is left to the caller.
func (w *spillWriter) putFixed(p []byte, c *change.Change, n int) {
	le := binary.LittleEndian
	le.PutUint32(p[0:], uint32(n-frameHeaderSize))
	f := p[frameHeaderSize:recordOverhead]
	f[0] = byte(c.Op)
	f[1] = c.OldKind
	f[2] = c.TruncateOpts
	le.PutUint32(f[3:], c.Xid)
	le.PutUint64(f[7:], uint64(c.LSN))
	le.PutUint32(f[15:], w.relRef(c.Rel))
	le.PutUint32(f[19:], uint32(len(c.Old)))
	le.PutUint32(f[23:], uint32(len(c.New)))
	le.PutUint32(f[27:], uint32(len(c.TruncateRels)))
}

// encode appends the n-byte record of c to dst, which has room for it.
func (w *spillWriter) encode(dst []byte, c *change.Change, n int) []byte {
	start := len(dst)
	dst = dst[:start+n]
	rec := dst[start:]
	w.putFixed(rec, c, n)
	p := recordOverhead
	p += copy(rec[p:], c.Old)
	p += copy(rec[p:], c.New)
	for _, r := range c.TruncateRels {
		binary.LittleEndian.PutUint32(rec[p:], w.rels.ref(r))
		p += 4
	}
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[frameHeaderSize:], castagnoli))
	return dst
}

// writeLarge writes a record bigger than the buffer straight to the file, in
// pieces, without copying the tuples. buf is empty.
func (w *spillWriter) writeLarge(c *change.Change, n int) error {
	var hdr [recordOverhead]byte
	w.putFixed(hdr[:], c, n)
	trunc := make([]byte, 4*len(c.TruncateRels))
	for i, r := range c.TruncateRels {
		binary.LittleEndian.PutUint32(trunc[4*i:], w.rels.ref(r))
	}
	crc := crc32.Update(0, castagnoli, hdr[frameHeaderSize:])
	crc = crc32.Update(crc, castagnoli, c.Old)
	crc = crc32.Update(crc, castagnoli, c.New)
	crc = crc32.Update(crc, castagnoli, trunc)
	binary.LittleEndian.PutUint32(hdr[4:], crc)
	off := w.off
	for _, piece := range [][]byte{hdr[:], c.Old, c.New, trunc} {
		if len(piece) == 0 {
			continue
		}
		if _, err := w.h.WriteAt(piece, off); err != nil {
			w.failed = true
			return spillErrorf("write spill file %s at offset %d: %w", w.path, off, err)
		}
		off += int64(len(piece))
	}
	w.off = off
	return nil
}

// flush writes the buffered records.
func (w *spillWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.h.WriteAt(w.buf, w.off); err != nil {
		w.failed = true
		return spillErrorf("write spill file %s at offset %d: %w", w.path, w.off, err)
	}
	w.off += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// finish writes what is buffered; the file then holds exactly off bytes and
// takes no more appends. It stays open: it is read back through h. It can be
// retried after an error.
func (w *spillWriter) finish() error {
	if w.done {
		return nil
	}
	if w.closed {
		return fmt.Errorf("finish spill file %s: already closed", w.path)
	}
	if err := w.flush(); err != nil {
		return err
	}
	if w.failed {
		if err := w.h.Truncate(w.off); err != nil {
			return spillErrorf("truncate spill file %s to %d: %w", w.path, w.off, err)
		}
		w.failed = false
	}
	w.done = true
	w.releaseBuf()
	return nil
}

func (w *spillWriter) releaseBuf() {
	if w.bufp != nil {
		*w.bufp = w.buf[:0]
		w.pool.Put(w.bufp)
		w.bufp, w.buf = nil, nil
	}
}

// discard closes and deletes the file (once: later calls do nothing).
func (w *spillWriter) discard() error {
	if w.closed {
		return nil
	}
	var errs []error
	w.closed = true
	if err := w.h.Close(); err != nil {
		errs = append(errs, spillErrorf("close spill file %s: %w", w.path, err))
	}
	w.releaseBuf()
	if w.remove != nil {
		if err := w.remove(w.name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, spillErrorf("remove spill file %s: %w", w.path, err))
		}
	}
	return errors.Join(errs...)
}

// spillReader reads the records of one spill file in order. The Change it
// returns, and the tuples and truncate list it points at, are reused by the
// next call.
type spillReader struct {
	name   string
	r      io.Reader
	off    int64 // offset of the next record
	remain int64 // bytes of the file not yet read
	rels   []*change.Relation
	hdr    [frameHeaderSize]byte
	buf    []byte
	c      change.Change
	trunc  []*change.Relation
}

func (r *spillReader) corrupt(off int64, format string, args ...any) error {
	return spillErrorf("spill file %s: record at offset %d: %s: %w", r.name, off, fmt.Sprintf(format, args...), ErrCorrupt)
}

// next returns the next change and the bytes its record took, or io.EOF
// after the last record.
func (r *spillReader) next() (*change.Change, int, error) {
	if r.remain == 0 {
		return nil, 0, io.EOF
	}
	off := r.off
	if r.remain < frameHeaderSize {
		return nil, 0, r.corrupt(off, "%d trailing bytes", r.remain)
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return nil, 0, r.readErr(off, err)
	}
	n := int64(binary.LittleEndian.Uint32(r.hdr[0:]))
	sum := binary.LittleEndian.Uint32(r.hdr[4:])
	if n < fixedSize || n > r.remain-frameHeaderSize {
		return nil, 0, r.corrupt(off, "bad length %d (%d bytes left)", n, r.remain-frameHeaderSize)
	}
	if int64(cap(r.buf)) < n {
		r.buf = make([]byte, n, max(n, spillBufSize/4))
	}
	p := r.buf[:n]
	if _, err := io.ReadFull(r.r, p); err != nil {
		return nil, 0, r.readErr(off, err)
	}
	if got := crc32.Checksum(p, castagnoli); got != sum {
		return nil, 0, r.corrupt(off, "crc32c %08x, want %08x", got, sum)
	}
	var err error
	r.trunc, err = decodePayload(p, r.rels, &r.c, r.trunc[:0])
	if err != nil {
		return nil, 0, r.corrupt(off, "%v", err)
	}
	rec := frameHeaderSize + n
	r.off += rec
	r.remain -= rec
	return &r.c, int(rec), nil
}

func (r *spillReader) readErr(off int64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return r.corrupt(off, "file shorter than expected")
	}
	return spillErrorf("read spill file %s at offset %d: %w", r.name, off, err)
}

// decodePayload decodes one record payload into c; its tuples alias p. The
// truncated relations are appended to trunc, which is returned.
func decodePayload(p []byte, rels []*change.Relation, c *change.Change, trunc []*change.Relation) ([]*change.Relation, error) {
	le := binary.LittleEndian
	if len(p) < fixedSize {
		return trunc, fmt.Errorf("payload of %d bytes", len(p))
	}
	op := change.Op(p[0])
	switch op {
	case change.OpInsert, change.OpUpdate, change.OpDelete, change.OpTruncate, change.OpDDL:
	default:
		return trunc, fmt.Errorf("unknown op %#x", p[0])
	}
	oldLen := int64(le.Uint32(p[19:]))
	newLen := int64(le.Uint32(p[23:]))
	nTrunc := int64(le.Uint32(p[27:]))
	if fixedSize+oldLen+newLen+4*nTrunc != int64(len(p)) {
		return trunc, fmt.Errorf("parts of %d+%d+4×%d bytes do not fill a payload of %d", oldLen, newLen, nTrunc, len(p))
	}
	rel, err := lookupRel(rels, le.Uint32(p[15:]))
	if err != nil {
		return trunc, err
	}
	*c = change.Change{
		Op:           op,
		OldKind:      p[1],
		TruncateOpts: p[2],
		Xid:          le.Uint32(p[3:]),
		LSN:          change.LSN(le.Uint64(p[7:])),
		Rel:          rel,
	}
	q := p[fixedSize:]
	if oldLen > 0 {
		c.Old = change.Tuple(q[:oldLen:oldLen])
		if n, err := change.ValidateTuple(c.Old); err != nil || n != len(c.Old) {
			return trunc, errors.New("malformed old tuple")
		}
	}
	q = q[oldLen:]
	if newLen > 0 {
		c.New = change.Tuple(q[:newLen:newLen])
		if n, err := change.ValidateTuple(c.New); err != nil || n != len(c.New) {
			return trunc, errors.New("malformed new tuple")
		}
	}
	if op == change.OpDDL {
		// The file carries the message's content only: parsed again, as
		// capture parsed it.
		if err := c.ParseDDL(); err != nil {
			return trunc, fmt.Errorf("schema-change message: %w", err)
		}
	}
	q = q[newLen:]
	for i := int64(0); i < nTrunc; i++ {
		r, err := lookupRel(rels, le.Uint32(q[4*i:]))
		if err != nil {
			return trunc, err
		}
		trunc = append(trunc, r)
	}
	if nTrunc > 0 {
		c.TruncateRels = trunc
	}
	return trunc, nil
}

func lookupRel(rels []*change.Relation, ref uint32) (*change.Relation, error) {
	if ref == 0 {
		return nil, nil
	}
	if int64(ref) > int64(len(rels)) {
		return nil, fmt.Errorf("unknown relation reference %d", ref)
	}
	return rels[ref-1], nil
}

// newBufReader returns a pooled bufio.Reader over rd.
func newBufReader(pool *sync.Pool, rd io.Reader) *bufio.Reader {
	br := pool.Get().(*bufio.Reader)
	br.Reset(rd)
	return br
}
