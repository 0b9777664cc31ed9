package kafkalog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
)

// Record kinds (the byte at offset 3 of a record's value).
const (
	KindData     byte = 'D' // whole pgoutput messages (frames)
	KindFragment byte = 'F' // one piece of a message too large for a record
	KindEpoch    byte = 'E' // a capture session starts
)

const (
	magic0, magic1 = 'R', 'S'
	version        = 2
	headerLen      = 18 // magic(2) version(1) kind(1) epoch(4) lastCommit(8) proto(1) flags(1)
	headerLenV1    = 17 // version 1: no flags (text values)
	frameHeaderLen = 12 // walStart(8) length(4)
	fragHeaderLen  = 16 // walStart(8) total(4) offset(4)
)

// ErrCorrupt is wrapped by every error about a value that is not a
// well-formed record of this format (a foreign or damaged record).
var ErrCorrupt = errors.New("not a repstream record")

// Header is what every record carries before its body.
type Header struct {
	Kind  byte
	Epoch uint32 // the capture session that wrote it (EPOCH markers raise it)
	// LastCommit is the end LSN of the last transaction whose commit is in
	// this record or an earlier one of the topic: what a restarted capture
	// skips to.
	LastCommit change.LSN
	Proto      uint8 // the pgoutput protocol version of the messages
	// Binary: the messages' values are in pgoutput's binary format (the
	// capture session streamed with binary 'true'); else text.
	Binary bool
	// InStream: the record's first message is inside a stream block
	// that began in an earlier record (a fragment: its message is in a
	// block). A reader that starts there drops the block's rest.
	InStream bool
}

// Frame is one pgoutput message as the slot sent it: the WAL position of
// its XLogData and the message bytes.
type Frame struct {
	WALStart change.LSN
	Data     []byte
}

// Epoch is the body of an EPOCH marker: a capture session of Slot, started
// at Start (every transaction ending after Start follows the marker), with
// the source's identity and what its consumers must decode with.
type Epoch struct {
	Start    change.LSN
	SystemID string // the source's system identifier
	Database string // the source database's name
	// DatabaseOID is the source database's OID, carried in the marker
	// record's Kafka header DatabaseOIDHeader, not in its value (an apply
	// of an earlier version refuses a value longer than it knows and would
	// stop at the first marker of an upgraded capture; it ignores
	// headers). 0: unknown (a marker of an earlier capture).
	DatabaseOID uint32
	Slot        string
	Publication string
	DDLMessages bool // repstream.ddl messages are captured (the event trigger)
}

// DatabaseOIDHeader is the Kafka record header of an EPOCH marker that
// holds Epoch.DatabaseOID: 4 bytes, big-endian. With the system
// identifier and the name it names the source database as the name
// cannot alone: a database dropped and made again under the same name
// (from a copy, a dump) is another source.
const DatabaseOIDHeader = "repstream.database_oid"

// EpochHeaders returns the Kafka record headers of e's marker.
func EpochHeaders(e Epoch) []kgo.RecordHeader {
	if e.DatabaseOID == 0 {
		return nil
	}
	return []kgo.RecordHeader{{Key: DatabaseOIDHeader, Value: binary.BigEndian.AppendUint32(nil, e.DatabaseOID)}}
}

// ParseEpochRecord reads an EPOCH marker: its body (ParseEpoch) and its
// record's headers (EpochHeaders; other headers are ignored).
func ParseEpochRecord(body []byte, headers []kgo.RecordHeader) (Epoch, error) {
	e, err := ParseEpoch(body)
	if err != nil {
		return e, err
	}
	for _, h := range headers {
		if h.Key != DatabaseOIDHeader {
			continue
		}
		if len(h.Value) != 4 || binary.BigEndian.Uint32(h.Value) == 0 {
			return e, fmt.Errorf("%w: epoch marker header %s of %d bytes (%x)", ErrCorrupt, h.Key, len(h.Value), h.Value)
		}
		e.DatabaseOID = binary.BigEndian.Uint32(h.Value)
	}
	return e, nil
}

// AppendHeader appends h, encoded, to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = append(dst, magic0, magic1, version, h.Kind)
	dst = binary.BigEndian.AppendUint32(dst, h.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.LastCommit))
	var flags byte
	if h.Binary {
		flags |= 1
	}
	if h.InStream {
		flags |= 2
	}
	return append(dst, h.Proto, flags)
}

// AppendFrame appends one frame to a KindData record's body.
func AppendFrame(dst []byte, f Frame) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.WALStart))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(f.Data)))
	return append(dst, f.Data...)
}

// FrameSize is the bytes AppendFrame adds for a message of n bytes.
func FrameSize(n int) int { return frameHeaderLen + n }

// AppendFragment appends a KindFragment record's body: bytes
// [offset, offset+len(chunk)) of a message of total bytes at walStart.
func AppendFragment(dst []byte, walStart change.LSN, total, offset int, chunk []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(walStart))
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(offset))
	return append(dst, chunk...)
}

// AppendEpoch appends an EPOCH marker's body.
func AppendEpoch(dst []byte, e Epoch) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Start))
	for _, s := range []string{e.SystemID, e.Database, e.Slot, e.Publication} {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
		dst = append(dst, s...)
	}
	var flags byte
	if e.DDLMessages {
		flags |= 1
	}
	return append(dst, flags)
}

// ParseHeader reads a record's header; body is the rest of the value.
func ParseHeader(v []byte) (h Header, body []byte, err error) {
	if len(v) < headerLenV1 || v[0] != magic0 || v[1] != magic1 {
		return h, nil, fmt.Errorf("%w: no repstream header", ErrCorrupt)
	}
	n := headerLen
	switch v[2] {
	case 1:
		n = headerLenV1
	case version:
		if len(v) < headerLen {
			return h, nil, fmt.Errorf("%w: no repstream header", ErrCorrupt)
		}
		h.Binary, h.InStream = v[17]&1 != 0, v[17]&2 != 0
	default:
		return h, nil, fmt.Errorf("%w: format version %d (this repstream reads 1 and %d)", ErrCorrupt, v[2], version)
	}
	h.Kind = v[3]
	switch h.Kind {
	case KindData, KindFragment, KindEpoch:
	default:
		return h, nil, fmt.Errorf("%w: unknown record kind %q", ErrCorrupt, h.Kind)
	}
	h.Epoch = binary.BigEndian.Uint32(v[4:])
	h.LastCommit = change.LSN(binary.BigEndian.Uint64(v[8:]))
	h.Proto = v[16]
	return h, v[n:], nil
}

// Frames calls yield for every frame of a KindData body, in order; the
// frame's Data aliases body.
func Frames(body []byte, yield func(Frame) error) error {
	for len(body) > 0 {
		if len(body) < frameHeaderLen {
			return fmt.Errorf("%w: truncated frame header (%d bytes left)", ErrCorrupt, len(body))
		}
		f := Frame{WALStart: change.LSN(binary.BigEndian.Uint64(body))}
		n := int(binary.BigEndian.Uint32(body[8:]))
		body = body[frameHeaderLen:]
		if n > len(body) || n == 0 {
			return fmt.Errorf("%w: frame at %s announces %d bytes, %d left", ErrCorrupt, f.WALStart, n, len(body))
		}
		f.Data = body[:n:n]
		body = body[n:]
		if err := yield(f); err != nil {
			return err
		}
	}
	return nil
}

// Fragment is a parsed KindFragment body.
type Fragment struct {
	WALStart      change.LSN
	Total, Offset int
	Chunk         []byte
}

// ParseFragment reads a KindFragment body.
func ParseFragment(body []byte) (Fragment, error) {
	if len(body) < fragHeaderLen {
		return Fragment{}, fmt.Errorf("%w: truncated fragment", ErrCorrupt)
	}
	f := Fragment{
		WALStart: change.LSN(binary.BigEndian.Uint64(body)),
		Total:    int(binary.BigEndian.Uint32(body[8:])),
		Offset:   int(binary.BigEndian.Uint32(body[12:])),
		Chunk:    body[fragHeaderLen:],
	}
	if len(f.Chunk) == 0 || f.Offset+len(f.Chunk) > f.Total {
		return Fragment{}, fmt.Errorf("%w: fragment [%d, %d) of a %d-byte message at %s", ErrCorrupt, f.Offset, f.Offset+len(f.Chunk), f.Total, f.WALStart)
	}
	return f, nil
}

// ParseEpoch reads an EPOCH marker's body.
func ParseEpoch(body []byte) (Epoch, error) {
	var e Epoch
	if len(body) < 8 {
		return e, fmt.Errorf("%w: truncated epoch marker", ErrCorrupt)
	}
	e.Start = change.LSN(binary.BigEndian.Uint64(body))
	body = body[8:]
	for _, s := range []*string{&e.SystemID, &e.Database, &e.Slot, &e.Publication} {
		if len(body) < 2 {
			return e, fmt.Errorf("%w: truncated epoch marker", ErrCorrupt)
		}
		n := int(binary.BigEndian.Uint16(body))
		body = body[2:]
		if n > len(body) {
			return e, fmt.Errorf("%w: truncated epoch marker", ErrCorrupt)
		}
		*s = string(body[:n])
		body = body[n:]
	}
	if len(body) != 1 {
		return e, fmt.Errorf("%w: epoch marker of %d trailing bytes", ErrCorrupt, len(body))
	}
	e.DDLMessages = body[0]&1 != 0
	return e, nil
}

// Assembler puts a message split over fragments back together. The zero
// value is ready.
type Assembler struct {
	buf      []byte
	total    int // the message's announced size
	walStart change.LSN
	active   bool
}

// assembleGrow is the most Add allocates ahead of the bytes it has: a
// damaged first fragment announcing gigabytes costs no more than this.
const assembleGrow = 64 << 20

// Active reports whether a message is partly assembled.
func (a *Assembler) Active() bool { return a.active }

// Add adds one fragment; it returns the whole message when f is its last.
func (a *Assembler) Add(f Fragment) (Frame, bool, error) {
	if f.Offset == 0 {
		if a.active {
			return Frame{}, false, fmt.Errorf("%w: a new message at %s begins before the one at %s is complete", ErrCorrupt, f.WALStart, a.walStart)
		}
		a.active, a.walStart, a.total = true, f.WALStart, f.Total
		a.buf = make([]byte, 0, min(f.Total, assembleGrow))
	} else if !a.active || f.WALStart != a.walStart || f.Offset != len(a.buf) || f.Total != a.total {
		return Frame{}, false, fmt.Errorf("%w: fragment [%d, %d) of the message at %s out of sequence", ErrCorrupt, f.Offset, f.Offset+len(f.Chunk), f.WALStart)
	}
	a.buf = append(a.buf, f.Chunk...)
	if len(a.buf) < f.Total {
		return Frame{}, false, nil
	}
	fr := Frame{WALStart: a.walStart, Data: a.buf}
	a.buf, a.active = nil, false
	return fr, true, nil
}

// Reset forgets a partly assembled message (a new epoch: its rest never comes).
func (a *Assembler) Reset() { a.buf, a.active = nil, false }
