package change

import (
	"encoding/binary"
	"errors"
)

// Column value kinds in pgoutput's TupleData.
const (
	KindNull      byte = 'n'
	KindUnchanged byte = 'u' // unchanged TOASTed value: no data, must not be overwritten
	KindText      byte = 't'
	KindBinary    byte = 'b'
)

// Tuple is the raw TupleData of a pgoutput message, kept exactly as it was on
// the wire: int16 column count, then per column a kind byte and, for 't' and
// 'b', an int32 length and the bytes. Keeping the wire form means decoding
// allocates nothing per column, the spill format stores it as it is, and the
// COPY encoder reads text values straight out of it.
//
// A Tuple handed out by the decoder has been validated (see ValidateTuple), so
// iteration never reads out of bounds.
type Tuple []byte

// ErrBadTuple is returned for TupleData that does not parse.
var ErrBadTuple = errors.New("malformed tuple data")

// ValidateTuple checks that b starts with one well-formed TupleData and returns
// its length in bytes.
func ValidateTuple(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, ErrBadTuple
	}
	n := int(binary.BigEndian.Uint16(b))
	off := 2
	for i := 0; i < n; i++ {
		if off >= len(b) {
			return 0, ErrBadTuple
		}
		kind := b[off]
		off++
		switch kind {
		case KindNull, KindUnchanged:
		case KindText, KindBinary:
			if off+4 > len(b) {
				return 0, ErrBadTuple
			}
			l := int(int32(binary.BigEndian.Uint32(b[off:])))
			off += 4
			if l < 0 || l > len(b)-off {
				return 0, ErrBadTuple
			}
			off += l
		default:
			return 0, ErrBadTuple
		}
	}
	return off, nil
}

// NumColumns returns the number of columns in the tuple (0 for a nil tuple).
func (t Tuple) NumColumns() int {
	if len(t) < 2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(t))
}

// Iter returns an iterator over the tuple's columns. It does not allocate.
func (t Tuple) Iter() TupleIter { return TupleIter{t: t, off: 2, n: t.NumColumns()} }

// TupleIter walks the columns of a Tuple in order.
//
//	it := tup.Iter()
//	for it.Next() { use(it.Index(), it.Kind(), it.Value()) }
type TupleIter struct {
	t    Tuple
	off  int
	i, n int
	kind byte
	val  []byte
}

// Next advances to the next column; it returns false after the last one.
func (it *TupleIter) Next() bool {
	if it.i >= it.n {
		return false
	}
	if it.i > 0 || it.kind != 0 {
		it.i++
		if it.i >= it.n {
			return false
		}
	}
	it.kind = it.t[it.off]
	it.off++
	it.val = nil
	if it.kind == KindText || it.kind == KindBinary {
		l := int(binary.BigEndian.Uint32(it.t[it.off:]))
		it.off += 4
		it.val = it.t[it.off : it.off+l : it.off+l]
		it.off += l
	}
	return true
}

// Index is the current column's position (0-based).
func (it *TupleIter) Index() int { return it.i }

// Kind is the current column's kind: KindNull, KindUnchanged, KindText or KindBinary.
func (it *TupleIter) Kind() byte { return it.kind }

// Value is the current column's bytes (nil for null and unchanged). It aliases
// the tuple's memory.
func (it *TupleIter) Value() []byte { return it.val }

// Column returns the kind and value of column i, or (0, nil) if out of range.
func (t Tuple) Column(i int) (kind byte, val []byte) {
	it := t.Iter()
	for it.Next() {
		if it.Index() == i {
			return it.Kind(), it.Value()
		}
	}
	return 0, nil
}

// AppendTuple appends a TupleData built from (kind, value) pairs; a helper for
// tests and for synthesising tuples.
func AppendTuple(dst []byte, kinds []byte, vals [][]byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(kinds)))
	for i, k := range kinds {
		dst = append(dst, k)
		if k == KindText || k == KindBinary {
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(vals[i])))
			dst = append(dst, vals[i]...)
		}
	}
	return dst
}
