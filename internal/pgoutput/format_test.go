package pgoutput

import (
	"hash/crc32"
	"strconv"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// maxShownValue is the longest column value or message content String shows
// in full; longer ones are shown as a prefix, their length and a CRC-32C.
const maxShownValue = 48

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// String formats the message on one line, stable and readable, e.g.
//
//	B xid=740 lsn=0/1A2B3C8 time=2025-01-02T03:04:05.123456Z
//	I rel=16385 new=[t"1" n u t"abc"]
//
// Fields that the message type does not use are omitted. It is the format
// of the golden files under testdata/.
func (m *Message) String() string { return string(m.AppendText(nil)) }

// AppendText appends the String form of m to dst.
func (m *Message) AppendText(dst []byte) []byte {
	dst = append(dst, m.Type)
	xid := func(dst []byte) []byte {
		if m.Xid != 0 {
			dst = append(dst, " xid="...)
			dst = strconv.AppendUint(dst, uint64(m.Xid), 10)
		}
		return dst
	}
	switch m.Type {
	case MsgBegin:
		dst = xid(dst)
		dst = appendLSN(dst, " lsn=", m.LSN)
		dst = appendTime(dst, m.Time)
	case MsgCommit:
		dst = appendUint(dst, " flags=", uint64(m.Flags))
		dst = appendLSN(dst, " lsn=", m.LSN)
		dst = appendLSN(dst, " end=", m.EndLSN)
		dst = appendTime(dst, m.Time)
	case MsgOrigin:
		dst = appendLSN(dst, " lsn=", m.LSN)
		dst = append(dst, " name="...)
		dst = strconv.AppendQuote(dst, m.Name)
	case MsgRelation:
		dst = xid(dst)
		if r := m.Relation; r != nil {
			dst = appendUint(dst, " rel=", uint64(r.ID))
			dst = append(dst, ' ')
			dst = strconv.AppendQuote(dst, r.Namespace)
			dst = append(dst, '.')
			dst = strconv.AppendQuote(dst, r.Name)
			dst = append(dst, " ident="...)
			dst = append(dst, r.ReplicaIdentity)
			dst = append(dst, " cols=["...)
			for i, c := range r.Columns {
				if i > 0 {
					dst = append(dst, ' ')
				}
				dst = strconv.AppendQuote(dst, c.Name)
				dst = append(dst, ':')
				dst = strconv.AppendUint(dst, uint64(c.TypeOID), 10)
				if c.TypeMod != -1 {
					dst = append(dst, '(')
					dst = strconv.AppendInt(dst, int64(c.TypeMod), 10)
					dst = append(dst, ')')
				}
				if c.Key {
					dst = append(dst, ":key"...)
				}
			}
			dst = append(dst, ']')
		}
	case MsgType:
		dst = xid(dst)
		dst = appendUint(dst, " oid=", uint64(m.TypeOID))
		dst = append(dst, ' ')
		dst = strconv.AppendQuote(dst, m.TypeNamespace)
		dst = append(dst, '.')
		dst = strconv.AppendQuote(dst, m.TypeName)
	case MsgInsert, MsgUpdate, MsgDelete:
		dst = xid(dst)
		dst = appendUint(dst, " rel=", uint64(m.RelID))
		if m.OldKind != 0 {
			dst = append(dst, ' ')
			dst = append(dst, m.OldKind)
			dst = append(dst, '=')
			dst = AppendTuple(dst, m.Old)
		}
		if m.New != nil {
			dst = append(dst, " N="...)
			dst = AppendTuple(dst, m.New)
		}
	case MsgTruncate:
		dst = xid(dst)
		dst = appendUint(dst, " opts=", uint64(m.TruncateOpts))
		dst = append(dst, " rels=["...)
		for i, id := range m.TruncateRelIDs {
			if i > 0 {
				dst = append(dst, ' ')
			}
			dst = strconv.AppendUint(dst, uint64(id), 10)
		}
		dst = append(dst, ']')
	case MsgMessage:
		dst = xid(dst)
		dst = appendUint(dst, " flags=", uint64(m.Flags))
		dst = appendLSN(dst, " lsn=", m.LSN)
		dst = append(dst, " prefix="...)
		dst = strconv.AppendQuote(dst, m.Name)
		dst = append(dst, " content="...)
		dst = appendValue(dst, m.Content)
	case MsgStreamStart:
		dst = xid(dst)
		dst = appendUint(dst, " first=", uint64(m.Flags))
	case MsgStreamStop:
	case MsgStreamCommit:
		dst = xid(dst)
		dst = appendUint(dst, " flags=", uint64(m.Flags))
		dst = appendLSN(dst, " lsn=", m.LSN)
		dst = appendLSN(dst, " end=", m.EndLSN)
		dst = appendTime(dst, m.Time)
	case MsgStreamAbort:
		dst = xid(dst)
		dst = appendUint(dst, " subxid=", uint64(m.SubXid))
		if m.LSN != 0 || !m.Time.IsZero() {
			dst = appendLSN(dst, " lsn=", m.LSN)
			dst = appendTime(dst, m.Time)
		}
	}
	return dst
}

// AppendTuple appends a readable form of a validated tuple to dst:
// [t"text" n u b"\x01"]; values longer than 48 bytes are shortened to a
// prefix with their length and CRC-32C: t"abc…"(len=6400,crc=1a2b3c4d).
func AppendTuple(dst []byte, t change.Tuple) []byte {
	dst = append(dst, '[')
	it := t.Iter()
	for it.Next() {
		if it.Index() > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, it.Kind())
		if k := it.Kind(); k == change.KindText || k == change.KindBinary {
			dst = appendValue(dst, it.Value())
		}
	}
	return append(dst, ']')
}

func appendValue(dst, v []byte) []byte {
	if len(v) <= maxShownValue {
		return strconv.AppendQuote(dst, string(v))
	}
	dst = strconv.AppendQuote(dst, string(v[:maxShownValue/2]))
	dst = append(dst, "…(len="...)
	dst = strconv.AppendInt(dst, int64(len(v)), 10)
	dst = append(dst, ",crc="...)
	c := crc32.Checksum(v, castagnoli)
	const hexd = "0123456789abcdef"
	for s := 28; s >= 0; s -= 4 {
		dst = append(dst, hexd[c>>uint(s)&0xf])
	}
	return append(dst, ')')
}

func appendUint(dst []byte, label string, v uint64) []byte {
	dst = append(dst, label...)
	return strconv.AppendUint(dst, v, 10)
}

func appendLSN(dst []byte, label string, l change.LSN) []byte {
	dst = append(dst, label...)
	return append(dst, l.String()...)
}

func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, " time="...)
	return t.UTC().AppendFormat(dst, time.RFC3339Nano)
}
