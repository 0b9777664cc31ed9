package target

import (
	"encoding/binary"
	"errors"

	"github.com/repstream/repstream/internal/change"
)

// copyEscape maps the bytes COPY's text format must escape to the letter
// that follows the backslash; 0 means the byte passes as it is.
var copyEscape = [256]byte{'\\': '\\', '\t': 't', '\n': 'n', '\r': 'r'}

// appendCopyRow appends one row of COPY text format to dst: the values of the
// tuple columns listed in cols (ascending source column indexes), separated
// by tabs, ended by a newline. Text values are copied with backslash, tab,
// line feed and carriage return escaped; NULL is \N. It reports the first
// column that was neither text nor null (bad = its kind, col = its index),
// bad == 0 if none; such a column is written as \N. It does not allocate
// beyond growing dst.
func appendCopyRow(dst []byte, t change.Tuple, cols []int) (_ []byte, bad byteCol) {
	it := t.Iter()
	j := 0
	for j < len(cols) && it.Next() {
		if it.Index() != cols[j] {
			continue
		}
		if j > 0 {
			dst = append(dst, '\t')
		}
		j++
		switch it.Kind() {
		case change.KindText:
			dst = appendCopyValue(dst, it.Value())
		case change.KindNull:
			dst = append(dst, '\\', 'N')
		default:
			if bad.kind == 0 {
				bad = byteCol{kind: it.Kind(), col: it.Index()}
			}
			dst = append(dst, '\\', 'N')
		}
	}
	for ; j < len(cols); j++ { // columns beyond the tuple's end
		if j > 0 {
			dst = append(dst, '\t')
		}
		dst = append(dst, '\\', 'N')
		if bad.kind == 0 {
			bad = byteCol{kind: 'm', col: cols[j]}
		}
	}
	return append(dst, '\n'), bad
}

// byteCol names a column whose kind cannot be copied ('m' = missing).
type byteCol struct {
	kind byte
	col  int
}

// appendCopyValue appends v escaped for COPY text format.
func appendCopyValue(dst, v []byte) []byte {
	start := 0
	for i, c := range v {
		if e := copyEscape[c]; e != 0 {
			dst = append(dst, v[start:i]...)
			dst = append(dst, '\\', e)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}

// binaryCopyHeader starts a COPY in binary format: the signature, no flags,
// no header extension.
var binaryCopyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// binaryCopyTrailer ends a COPY in binary format (a field count of -1).
var binaryCopyTrailer = []byte{0xff, 0xff}

// appendCopyRowBinary is appendCopyRow for COPY's binary format: a field
// count, then per column a 32-bit length (-1 for NULL) and the value as the
// type's send function wrote it. Only 'b' and 'n' columns can be copied; the
// first other one is reported as bad. The rows need binaryCopyHeader before
// them and binaryCopyTrailer after.
func appendCopyRowBinary(dst []byte, t change.Tuple, cols []int) (_ []byte, bad byteCol) {
	n := len(cols)
	dst = append(dst, byte(n>>8), byte(n))
	it := t.Iter()
	j := 0
	for j < len(cols) && it.Next() {
		if it.Index() != cols[j] {
			continue
		}
		j++
		switch it.Kind() {
		case change.KindBinary:
			v := it.Value()
			l := len(v)
			dst = append(dst, byte(l>>24), byte(l>>16), byte(l>>8), byte(l))
			dst = append(dst, v...)
		case change.KindNull:
			dst = append(dst, 0xff, 0xff, 0xff, 0xff)
		default:
			if bad.kind == 0 {
				bad = byteCol{kind: it.Kind(), col: it.Index()}
			}
			dst = append(dst, 0xff, 0xff, 0xff, 0xff)
		}
	}
	for ; j < len(cols); j++ {
		dst = append(dst, 0xff, 0xff, 0xff, 0xff)
		if bad.kind == 0 {
			bad = byteCol{kind: 'm', col: cols[j]}
		}
	}
	return dst, bad
}

// copyUnescape maps the letter after a backslash in COPY's text format to
// the byte it stands for; other letters stand for themselves.
var copyUnescape = func() (m [256]byte) {
	for i := range m {
		m[i] = byte(i)
	}
	m['t'], m['n'], m['r'], m['b'], m['f'], m['v'] = '\t', '\n', '\r', '\b', '\f', '\v'
	return m
}()

var errCopyRow = errors.New("malformed COPY row (internal error)")

// splitCopyRow splits the first row of rows, in COPY text format as
// appendCopyRow writes it, into vals (nil for \N; never nil otherwise) and
// returns the rest of rows. Values with escapes are decoded into buf, which
// is returned grown; the others point into rows.
func splitCopyRow(rows []byte, vals [][]byte, buf []byte) (_ [][]byte, rest, _ []byte, _ error) {
	start, esc := 0, false
	for i := 0; i < len(rows); i++ {
		c := rows[i]
		switch c {
		case '\\':
			esc = true
			i++ // the escaped byte is never a separator
			continue
		case '\t', '\n':
		default:
			continue
		}
		f := rows[start:i:i]
		switch {
		case len(f) == 2 && f[0] == '\\' && f[1] == 'N':
			f = nil
		case esc:
			from := len(buf)
			for j := 0; j < len(f); j++ {
				b := f[j]
				if b == '\\' && j+1 < len(f) {
					j++
					b = copyUnescape[f[j]]
				}
				buf = append(buf, b)
			}
			f = buf[from:len(buf):len(buf)]
		}
		vals = append(vals, f)
		start, esc = i+1, false
		if c == '\n' {
			return vals, rows[i+1:], buf, nil
		}
	}
	return vals, nil, buf, errCopyRow
}

// splitCopyRowBinary splits the first row of rows, in COPY binary format as
// appendCopyRowBinary writes it, into vals (nil for NULL; never nil
// otherwise, pointing into rows) and returns the rest of rows.
func splitCopyRowBinary(rows []byte, vals [][]byte) (_ [][]byte, rest []byte, _ error) {
	if len(rows) < 2 {
		return vals, nil, errCopyRow
	}
	n := int(binary.BigEndian.Uint16(rows))
	rows = rows[2:]
	for range n {
		if len(rows) < 4 {
			return vals, nil, errCopyRow
		}
		l := int32(binary.BigEndian.Uint32(rows))
		rows = rows[4:]
		switch {
		case l == -1:
			vals = append(vals, nil)
		case l < 0 || int(l) > len(rows):
			return vals, nil, errCopyRow
		default:
			vals = append(vals, rows[:l:l])
			rows = rows[l:]
		}
	}
	return vals, rows, nil
}
