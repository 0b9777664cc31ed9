package pgoutput

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// Message types (the first byte of every pgoutput message).
const (
	MsgBegin        byte = 'B'
	MsgCommit       byte = 'C'
	MsgOrigin       byte = 'O'
	MsgRelation     byte = 'R'
	MsgType         byte = 'Y'
	MsgInsert       byte = 'I'
	MsgUpdate       byte = 'U'
	MsgDelete       byte = 'D'
	MsgTruncate     byte = 'T'
	MsgMessage      byte = 'M'
	MsgStreamStart  byte = 'S'
	MsgStreamStop   byte = 'E'
	MsgStreamCommit byte = 'c'
	MsgStreamAbort  byte = 'A'
)

// Flag bits.
const (
	// MessageTransactional is set in Message.Flags of a logical message
	// emitted with transactional = true.
	MessageTransactional uint8 = 1
	// StreamFirstSegment is set in Message.Flags of the Stream Start that
	// opens the first block of a transaction.
	StreamFirstSegment uint8 = 1
)

// Tuple tags that precede a TupleData.
const (
	TupleNew byte = 'N'
	TupleKey byte = 'K' // replica-identity key columns only, others null
	TupleOld byte = 'O' // the whole old row (REPLICA IDENTITY FULL)
)

var (
	// ErrMalformed is wrapped by every error Parse returns for input that
	// does not decode: truncated, over-long, unknown type, bad tuple.
	ErrMalformed = errors.New("malformed pgoutput message")
	// ErrUnsupported is wrapped (together with ErrMalformed) for valid
	// pgoutput messages this decoder does not handle: the two-phase
	// messages, which repstream never requests.
	ErrUnsupported = errors.New("unsupported pgoutput message")
)

// pgEpochUnix is 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch, in Unix seconds.
const pgEpochUnix = 946684800

// Message is one decoded pgoutput message. Parse fills it in place; Tuples
// and byte fields alias the input slice (no copying, no per-column
// allocation), so a Message is valid only as long as the input is.
// Relation/Type/Truncate/Origin/Message decoding allocates (rare).
//
// Invariants after a successful Parse: every field not used by Type is zero;
// Old and New are nil or one complete, validated TupleData each (with
// len == cap, so appending to them never writes into the input).
type Message struct {
	Type byte // one of the Msg* constants
	// Xid is the Begin xid; the [xid] of in-stream messages; the Stream
	// Start/Commit/Abort xid. Inside a stream, the [xid] of a change (and of
	// R/Y/M) is the (sub)transaction that made it — it can be a subxid, seen
	// on PG15 — while Stream Start, Commit and Abort carry the top-level xid.
	Xid    uint32
	SubXid uint32 // Stream Abort
	// LSN is Begin: final (commit) LSN; Commit/StreamCommit: commit LSN;
	// Message: its LSN; Origin: origin commit LSN; StreamAbort v4: abort LSN.
	LSN    change.LSN
	EndLSN change.LSN // Commit / Stream Commit: end LSN
	// Time is the Begin/Commit/StreamCommit/(v4 StreamAbort) timestamp, UTC.
	Time    time.Time
	Flags   uint8  // Commit/StreamCommit flags; Message flags; StreamStart: first segment (1)
	RelID   uint32 // Insert/Update/Delete
	OldKind byte   // 0, 'K' or 'O'
	Old     change.Tuple
	New     change.Tuple
	// Relation is the decoded 'R' message (Namespace "" → "pg_catalog").
	Relation *change.Relation
	// Type message ('Y'); TypeNamespace "" → "pg_catalog".
	TypeOID       uint32
	TypeNamespace string
	TypeName      string
	// Truncate ('T').
	TruncateRelIDs []uint32
	TruncateOpts   uint8
	Name           string // Origin name; Message prefix
	Content        []byte // Message content (aliases input)
}

// Reset clears every field so the Message can be reused.
func (m *Message) Reset() { *m = Message{} }

// decoder reads big-endian fields from one message. Its methods never read
// past the end of b; on a short read they record what was short and return
// zero values, so a decode function can read a whole fixed-size header and
// check the error once.
type decoder struct {
	b    []byte
	off  int
	what string // first field that was short; "" while everything fitted
}

func (d *decoder) short(what string) {
	if d.what == "" {
		d.what = what
	}
}

func (d *decoder) u8(what string) uint8 {
	if d.off >= len(d.b) {
		d.short(what)
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) u16(what string) uint16 {
	if len(d.b)-d.off < 2 {
		d.short(what)
		d.off = len(d.b)
		return 0
	}
	v := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32(what string) uint32 {
	if len(d.b)-d.off < 4 {
		d.short(what)
		d.off = len(d.b)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64(what string) uint64 {
	if len(d.b)-d.off < 8 {
		d.short(what)
		d.off = len(d.b)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decoder) time(what string) time.Time {
	return pgTime(int64(d.u64(what)))
}

// cstring returns the bytes of a NUL-terminated string (without the NUL).
func (d *decoder) cstring(what string) []byte {
	rest := d.b[d.off:]
	for i, c := range rest {
		if c == 0 {
			d.off += i + 1
			return rest[:i:i]
		}
	}
	d.short(what + " (no NUL terminator)")
	d.off = len(d.b)
	return nil
}

// tuple returns one validated TupleData.
func (d *decoder) tuple(what string) (change.Tuple, error) {
	if d.what != "" {
		return nil, nil // reported by the caller's check
	}
	n, err := change.ValidateTuple(d.b[d.off:])
	if err != nil {
		return nil, fmt.Errorf("%s tuple at offset %d: %w", what, d.off, err)
	}
	t := change.Tuple(d.b[d.off : d.off+n : d.off+n])
	d.off += n
	return t, nil
}

// pgTime converts microseconds since 2000-01-01 UTC to a time.Time in UTC.
func pgTime(us int64) time.Time {
	sec := us / 1e6
	rem := us % 1e6
	if rem < 0 {
		sec--
		rem += 1e6
	}
	return time.Unix(pgEpochUnix+sec, rem*1e3).UTC()
}

// Parse decodes one message. inStream says whether we are between Stream
// Start and Stream Stop (then I/U/D/T/R/Y/M carry a leading xid).
// protoVersion selects the v4 extras of Stream Abort (abort LSN and time),
// which are decoded iff the message carries them (streaming 'parallel').
// Every tuple is validated. Malformed or truncated input returns an error
// wrapping ErrMalformed that names the message type and what was short.
func Parse(data []byte, inStream bool, protoVersion int, m *Message) error {
	return parse(data, inStream, protoVersion, m, false)
}

// ParseHead is Parse for a sink that passes each message on whole, to be
// Parsed where it is read (capture's raw sessions: package kafkalog). An
// Insert, Update or Delete is decoded up to its first tuple tag only: Xid,
// RelID and, for a Delete or an Update with an old row, OldKind; Old and
// New stay nil and the tuples are neither read nor validated. Every other
// message is decoded as Parse does. It accepts every message Parse accepts,
// with the same header fields (FuzzParse checks).
func ParseHead(data []byte, inStream bool, protoVersion int, m *Message) error {
	return parse(data, inStream, protoVersion, m, true)
}

func parse(data []byte, inStream bool, protoVersion int, m *Message, head bool) error {
	m.Reset()
	if len(data) == 0 {
		return fmt.Errorf("%w: empty message", ErrMalformed)
	}
	m.Type = data[0]
	d := decoder{b: data, off: 1}
	var err error
	switch m.Type {
	case MsgBegin:
		m.LSN = change.LSN(d.u64("final LSN"))
		m.Time = d.time("commit time")
		m.Xid = d.u32("xid")
	case MsgCommit:
		m.Flags = d.u8("flags")
		m.LSN = change.LSN(d.u64("commit LSN"))
		m.EndLSN = change.LSN(d.u64("end LSN"))
		m.Time = d.time("commit time")
	case MsgInsert, MsgUpdate, MsgDelete:
		if head {
			err = parseRowHead(&d, inStream, m)
			break
		}
		switch m.Type {
		case MsgInsert:
			err = parseInsert(&d, inStream, m)
		case MsgUpdate:
			err = parseUpdate(&d, inStream, m)
		default:
			err = parseDelete(&d, inStream, m)
		}
	case MsgStreamStart:
		m.Xid = d.u32("xid")
		m.Flags = d.u8("first-segment flag")
	case MsgStreamStop:
	case MsgStreamCommit:
		m.Xid = d.u32("xid")
		m.Flags = d.u8("flags")
		m.LSN = change.LSN(d.u64("commit LSN"))
		m.EndLSN = change.LSN(d.u64("end LSN"))
		m.Time = d.time("commit time")
	case MsgStreamAbort:
		m.Xid = d.u32("xid")
		m.SubXid = d.u32("subxid")
		if protoVersion >= 4 && d.what == "" && len(d.b)-d.off >= 16 {
			m.LSN = change.LSN(d.u64("abort LSN"))
			m.Time = d.time("abort time")
		}
	case MsgOrigin:
		m.LSN = change.LSN(d.u64("origin LSN"))
		m.Name = string(d.cstring("origin name"))
	case MsgRelation:
		err = parseRelation(&d, inStream, m)
	case MsgType:
		if inStream {
			m.Xid = d.u32("xid")
		}
		m.TypeOID = d.u32("type OID")
		m.TypeNamespace = namespace(d.cstring("namespace"))
		m.TypeName = string(d.cstring("type name"))
	case MsgTruncate:
		err = parseTruncate(&d, inStream, m)
	case MsgMessage:
		if inStream {
			m.Xid = d.u32("xid")
		}
		m.Flags = d.u8("flags")
		m.LSN = change.LSN(d.u64("LSN"))
		m.Name = string(d.cstring("prefix"))
		n := d.u32("content length")
		if d.what == "" {
			if int64(n) > int64(len(d.b)-d.off) {
				d.short(fmt.Sprintf("content (length %d, %d bytes left)", n, len(d.b)-d.off))
			} else {
				m.Content = d.b[d.off : d.off+int(n) : d.off+int(n)]
				d.off += int(n)
			}
		}
	case 'b', 'P', 'K', 'r', 'p':
		return fmt.Errorf("%w: %w: two-phase message %q", ErrMalformed, ErrUnsupported, m.Type)
	default:
		return fmt.Errorf("%w: unknown message type %q (0x%02x)", ErrMalformed, m.Type, m.Type)
	}
	if d.what != "" {
		return fmt.Errorf("%w: %s: truncated at %s (%d bytes)", ErrMalformed, TypeName(m.Type), d.what, len(data))
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, TypeName(m.Type), err)
	}
	if d.off != len(data) {
		return fmt.Errorf("%w: %s: %d trailing bytes after offset %d", ErrMalformed, TypeName(m.Type), len(data)-d.off, d.off)
	}
	return nil
}

func parseInsert(d *decoder, inStream bool, m *Message) error {
	if inStream {
		m.Xid = d.u32("xid")
	}
	m.RelID = d.u32("relation id")
	if tag := d.u8("tuple tag"); d.what == "" && tag != TupleNew {
		return fmt.Errorf("want tuple tag 'N', got %q", tag)
	}
	var err error
	m.New, err = d.tuple("new")
	return err
}

// rowStart decodes a row change's [xid], relation id and first tuple tag;
// ok is false if they were short (d.what says which).
func rowStart(d *decoder, inStream bool, m *Message) (tag byte, ok bool) {
	if inStream {
		m.Xid = d.u32("xid")
	}
	m.RelID = d.u32("relation id")
	tag = d.u8("tuple tag")
	return tag, d.what == ""
}

func parseUpdate(d *decoder, inStream bool, m *Message) error {
	tag, ok := rowStart(d, inStream, m)
	if !ok {
		return nil
	}
	var err error
	if tag == TupleKey || tag == TupleOld {
		m.OldKind = tag
		if m.Old, err = d.tuple("old"); err != nil {
			return err
		}
		tag = d.u8("new tuple tag")
		if d.what != "" {
			return nil
		}
	}
	if tag != TupleNew {
		return fmt.Errorf("want tuple tag 'N', got %q", tag)
	}
	m.New, err = d.tuple("new")
	return err
}

func parseDelete(d *decoder, inStream bool, m *Message) error {
	tag, ok := rowStart(d, inStream, m)
	if !ok {
		return nil
	}
	if tag != TupleKey && tag != TupleOld {
		return fmt.Errorf("want tuple tag 'K' or 'O', got %q", tag)
	}
	m.OldKind = tag
	var err error
	m.Old, err = d.tuple("old")
	return err
}

// parseRowHead decodes an Insert, Update or Delete up to its first tuple
// tag, checks the tag and that a tuple follows it, and steps over the rest.
func parseRowHead(d *decoder, inStream bool, m *Message) error {
	tag, ok := rowStart(d, inStream, m)
	if !ok {
		return nil
	}
	switch {
	case m.Type == MsgInsert && tag != TupleNew:
		return fmt.Errorf("want tuple tag 'N', got %q", tag)
	case m.Type == MsgDelete && tag != TupleKey && tag != TupleOld:
		return fmt.Errorf("want tuple tag 'K' or 'O', got %q", tag)
	case m.Type == MsgUpdate && tag != TupleNew && tag != TupleKey && tag != TupleOld:
		return fmt.Errorf("want tuple tag 'K', 'O' or 'N', got %q", tag)
	}
	if tag != TupleNew {
		m.OldKind = tag
	}
	if len(d.b)-d.off < 2 {
		d.short("tuple column count")
		return nil
	}
	d.off = len(d.b)
	return nil
}

func parseTruncate(d *decoder, inStream bool, m *Message) error {
	if inStream {
		m.Xid = d.u32("xid")
	}
	n := int32(d.u32("relation count"))
	m.TruncateOpts = d.u8("options")
	if d.what != "" {
		return nil
	}
	if n < 0 || int64(n)*4 > int64(len(d.b)-d.off) {
		return fmt.Errorf("%d relations need %d bytes, %d left", n, int64(n)*4, len(d.b)-d.off)
	}
	m.TruncateRelIDs = make([]uint32, n)
	for i := range m.TruncateRelIDs {
		m.TruncateRelIDs[i] = d.u32("relation id")
	}
	return nil
}

// minColumnBytes is the smallest encoding of one Relation column:
// flags, empty name + NUL, type OID, typmod.
const minColumnBytes = 1 + 1 + 4 + 4

func parseRelation(d *decoder, inStream bool, m *Message) error {
	if inStream {
		m.Xid = d.u32("xid")
	}
	id := d.u32("relation id")
	// One string for every name of the relation: one allocation instead of
	// one per column.
	nspB := d.cstring("namespace")
	nameB := d.cstring("relation name")
	ident := d.u8("replica identity")
	ncols := int16(d.u16("column count"))
	if d.what != "" {
		return nil
	}
	if ncols < 0 || int(ncols)*minColumnBytes > len(d.b)-d.off {
		return fmt.Errorf("%d columns cannot fit in %d bytes", ncols, len(d.b)-d.off)
	}
	rel := &change.Relation{
		ID:              id,
		Namespace:       namespace(nspB),
		Name:            string(nameB),
		ReplicaIdentity: ident,
		Columns:         make([]change.Column, ncols),
	}
	// Column names are substrings of one copy of the column section.
	colStart := d.off
	all := string(d.b[colStart:])
	for i := range rel.Columns {
		c := &rel.Columns[i]
		flags := d.u8("column flags")
		nameStart := d.off
		name := d.cstring("column name")
		c.TypeOID = d.u32("column type")
		c.TypeMod = int32(d.u32("column typmod"))
		if d.what != "" {
			return nil
		}
		c.Key = flags&1 != 0
		c.Name = all[nameStart-colStart : nameStart-colStart+len(name)]
	}
	m.Relation = rel
	return nil
}

// namespace converts the wire namespace to a name: "" means pg_catalog.
func namespace(b []byte) string {
	if len(b) == 0 {
		return "pg_catalog"
	}
	return string(b)
}

// TypeName returns a lower-case name for a message type byte ("begin",
// "insert", "stream commit", ...), or "type 0xNN" for an unknown one.
func TypeName(t byte) string {
	switch t {
	case MsgBegin:
		return "begin"
	case MsgCommit:
		return "commit"
	case MsgOrigin:
		return "origin"
	case MsgRelation:
		return "relation"
	case MsgType:
		return "type"
	case MsgInsert:
		return "insert"
	case MsgUpdate:
		return "update"
	case MsgDelete:
		return "delete"
	case MsgTruncate:
		return "truncate"
	case MsgMessage:
		return "message"
	case MsgStreamStart:
		return "stream start"
	case MsgStreamStop:
		return "stream stop"
	case MsgStreamCommit:
		return "stream commit"
	case MsgStreamAbort:
		return "stream abort"
	}
	return fmt.Sprintf("type 0x%02x", t)
}
