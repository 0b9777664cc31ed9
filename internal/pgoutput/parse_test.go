package pgoutput

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// enc builds pgoutput messages for tests.
type enc []byte

func (e enc) u8(v uint8) enc   { return append(e, v) }
func (e enc) u16(v uint16) enc { return binary.BigEndian.AppendUint16(e, v) }
func (e enc) u32(v uint32) enc { return binary.BigEndian.AppendUint32(e, v) }
func (e enc) u64(v uint64) enc { return binary.BigEndian.AppendUint64(e, v) }
func (e enc) str(s string) enc { return append(append(e, s...), 0) }
func (e enc) raw(b []byte) enc { return append(e, b...) }

// pgMicros converts t to PostgreSQL-epoch microseconds.
func pgMicros(t time.Time) uint64 {
	return uint64(t.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds())
}

var (
	ts1  = time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
	tup1 = change.Tuple(change.AppendTuple(nil,
		[]byte{change.KindText, change.KindNull, change.KindUnchanged, change.KindBinary},
		[][]byte{[]byte("42"), nil, nil, {0, 1, 2}}))
	tupKey = change.Tuple(change.AppendTuple(nil,
		[]byte{change.KindText, change.KindNull, change.KindNull, change.KindNull},
		[][]byte{[]byte("41"), nil, nil, nil}))
)

type parseCase struct {
	name     string
	data     []byte
	inStream bool
	proto    int
	want     Message
}

// ddlJSON is a schema-change message as repstream's source event trigger
// emits it (install/ddl.go).
const ddlJSON = `{"tag": "ALTER TABLE", "oid": 16385, "name": "t", "old": null, "kind": "r", "pkey": ["id"], "pubs": ["repstream"], "ident": "d", "schema": "public", "columns": [{"num": 1, "seq": null, "name": "id", "type": "integer", "typmod": -1, "default": null, "missing": null, "notnull": true, "typeoid": 23, "identity": "", "generated": null, "hasmissing": false}]}`

func parseCases() []parseCase {
	return []parseCase{
		{name: "begin", data: enc{'B'}.u64(0x1_0000_0010).u64(pgMicros(ts1)).u32(740),
			want: Message{Type: MsgBegin, LSN: 0x1_0000_0010, Time: ts1, Xid: 740}},
		{name: "commit", data: enc{'C'}.u8(0).u64(0x20).u64(0x58).u64(pgMicros(ts1)),
			want: Message{Type: MsgCommit, LSN: 0x20, EndLSN: 0x58, Time: ts1}},
		{name: "origin", data: enc{'O'}.u64(0x1234).str("node_a"),
			want: Message{Type: MsgOrigin, LSN: 0x1234, Name: "node_a"}},
		{name: "relation", data: enc{'R'}.u32(16385).str("public").str("t").u8('d').u16(2).
			u8(1).str("id").u32(23).u32(0xffffffff).
			u8(0).str("v").u32(1043).u32(24),
			want: Message{Type: MsgRelation, Relation: &change.Relation{ID: 16385, Namespace: "public", Name: "t",
				ReplicaIdentity: 'd', Columns: []change.Column{
					{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
					{Name: "v", TypeOID: 1043, TypeMod: 24}}}}},
		{name: "relation pg_catalog in stream", inStream: true, data: enc{'R'}.u32(9).u32(1).str("").str("x").u8('f').u16(0),
			want: Message{Type: MsgRelation, Xid: 9, Relation: &change.Relation{ID: 1, Namespace: "pg_catalog",
				Name: "x", ReplicaIdentity: 'f', Columns: []change.Column{}}}},
		{name: "type", data: enc{'Y'}.u32(16390).str("public").str("mood"),
			want: Message{Type: MsgType, TypeOID: 16390, TypeNamespace: "public", TypeName: "mood"}},
		{name: "type in stream", inStream: true, data: enc{'Y'}.u32(7).u32(16390).str("").str("mood"),
			want: Message{Type: MsgType, Xid: 7, TypeOID: 16390, TypeNamespace: "pg_catalog", TypeName: "mood"}},
		{name: "insert", data: enc{'I'}.u32(16385).u8('N').raw(tup1),
			want: Message{Type: MsgInsert, RelID: 16385, New: tup1}},
		{name: "insert in stream", inStream: true, data: enc{'I'}.u32(77).u32(16385).u8('N').raw(tup1),
			want: Message{Type: MsgInsert, Xid: 77, RelID: 16385, New: tup1}},
		{name: "update new only", data: enc{'U'}.u32(5).u8('N').raw(tup1),
			want: Message{Type: MsgUpdate, RelID: 5, New: tup1}},
		{name: "update key", data: enc{'U'}.u32(5).u8('K').raw(tupKey).u8('N').raw(tup1),
			want: Message{Type: MsgUpdate, RelID: 5, OldKind: 'K', Old: tupKey, New: tup1}},
		{name: "update old in stream", inStream: true, data: enc{'U'}.u32(3).u32(5).u8('O').raw(tup1).u8('N').raw(tup1),
			want: Message{Type: MsgUpdate, Xid: 3, RelID: 5, OldKind: 'O', Old: tup1, New: tup1}},
		{name: "delete key", data: enc{'D'}.u32(5).u8('K').raw(tupKey),
			want: Message{Type: MsgDelete, RelID: 5, OldKind: 'K', Old: tupKey}},
		{name: "delete old", data: enc{'D'}.u32(5).u8('O').raw(tup1),
			want: Message{Type: MsgDelete, RelID: 5, OldKind: 'O', Old: tup1}},
		{name: "truncate", data: enc{'T'}.u32(2).u8(3).u32(10).u32(11),
			want: Message{Type: MsgTruncate, TruncateOpts: 3, TruncateRelIDs: []uint32{10, 11}}},
		{name: "truncate in stream", inStream: true, data: enc{'T'}.u32(8).u32(1).u8(0).u32(10),
			want: Message{Type: MsgTruncate, Xid: 8, TruncateRelIDs: []uint32{10}}},
		{name: "message", data: enc{'M'}.u8(1).u64(0x99).str("pfx").u32(3).raw([]byte("abc")),
			want: Message{Type: MsgMessage, Flags: 1, LSN: 0x99, Name: "pfx", Content: []byte("abc")}},
		{name: "repstream.ddl message in stream", inStream: true,
			data: enc{'M'}.u32(12).u8(1).u64(0x1_0000_0100).str("repstream.ddl").u32(uint32(len(ddlJSON))).raw([]byte(ddlJSON)),
			want: Message{Type: MsgMessage, Xid: 12, Flags: 1, LSN: 0x1_0000_0100, Name: "repstream.ddl", Content: []byte(ddlJSON)}},
		{name: "message empty in stream", inStream: true, data: enc{'M'}.u32(4).u8(0).u64(0x99).str("").u32(0),
			want: Message{Type: MsgMessage, Xid: 4, LSN: 0x99, Content: []byte{}}},
		{name: "stream start", data: enc{'S'}.u32(800).u8(1),
			want: Message{Type: MsgStreamStart, Xid: 800, Flags: 1}},
		{name: "stream stop", inStream: true, data: enc{'E'},
			want: Message{Type: MsgStreamStop}},
		{name: "stream commit", data: enc{'c'}.u32(800).u8(0).u64(0x100).u64(0x130).u64(pgMicros(ts1)),
			want: Message{Type: MsgStreamCommit, Xid: 800, LSN: 0x100, EndLSN: 0x130, Time: ts1}},
		{name: "stream abort", proto: 3, data: enc{'A'}.u32(800).u32(801),
			want: Message{Type: MsgStreamAbort, Xid: 800, SubXid: 801}},
		{name: "stream abort v4 without extras", proto: 4, data: enc{'A'}.u32(800).u32(800),
			want: Message{Type: MsgStreamAbort, Xid: 800, SubXid: 800}},
		{name: "stream abort v4 parallel", proto: 4, data: enc{'A'}.u32(800).u32(801).u64(0x200).u64(pgMicros(ts1)),
			want: Message{Type: MsgStreamAbort, Xid: 800, SubXid: 801, LSN: 0x200, Time: ts1}},
	}
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases() {
		t.Run(tc.name, func(t *testing.T) {
			proto := tc.proto
			if proto == 0 {
				proto = 3
			}
			var m Message
			m.Xid, m.Name = 12345, "stale" // Parse must clear what a previous message left
			if err := Parse(tc.data, tc.inStream, proto, &m); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", m, tc.want)
			}
			if s := m.String(); len(s) == 0 || s[0] != tc.want.Type {
				t.Fatalf("String() = %q", s)
			}
		})
	}
}

// TestParseHead checks that ParseHead decodes every message as Parse does,
// but for the row changes' tuples, and refuses what is wrong before them.
func TestParseHead(t *testing.T) {
	for _, tc := range parseCases() {
		proto := tc.proto
		if proto == 0 {
			proto = 3
		}
		var m Message
		m.Xid = 12345
		if err := ParseHead(tc.data, tc.inStream, proto, &m); err != nil {
			t.Fatalf("%s: ParseHead: %v", tc.name, err)
		}
		want := tc.want
		switch want.Type {
		case MsgInsert, MsgUpdate, MsgDelete:
			want.Old, want.New = nil, nil
		}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("%s: got  %+v\nwant %+v", tc.name, m, want)
		}
	}
	for _, tc := range []struct {
		name     string
		data     []byte
		inStream bool
		want     string
	}{
		{"insert wrong tag", enc{'I'}.u32(1).u8('K').raw(tup1), false, "want tuple tag 'N'"},
		{"update bad tag", enc{'U'}.u32(1).u8('X').raw(tup1), false, "want tuple tag 'K', 'O' or 'N'"},
		{"delete new tag", enc{'D'}.u32(1).u8('N').raw(tup1), false, "want tuple tag 'K' or 'O'"},
		{"insert without tuple", enc{'I'}.u32(1).u8('N'), false, "insert: truncated at tuple column count"},
		{"delete without tag", enc{'D'}.u32(1), false, "delete: truncated at tuple tag"},
		{"insert in stream short", enc{'I'}.u16(1), true, "insert: truncated at xid"},
	} {
		var m Message
		err := ParseHead(tc.data, tc.inStream, 3, &m)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrMalformed containing %q", tc.name, err, tc.want)
		}
	}
}

// TestParseTruncated cuts every valid message at every length and appends a
// byte to it: each must fail with ErrMalformed, and never panic.
func TestParseTruncated(t *testing.T) {
	for _, tc := range parseCases() {
		proto := tc.proto
		if proto == 0 {
			proto = 3
		}
		for cut := 0; cut < len(tc.data); cut++ {
			var m Message
			err := Parse(tc.data[:cut:cut], tc.inStream, proto, &m)
			if tc.want.Type == MsgStreamAbort && proto == 4 && cut == 9 {
				if err != nil {
					t.Errorf("%s: v4 abort without extras rejected: %v", tc.name, err)
				}
				continue
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s cut at %d/%d: err = %v, want ErrMalformed", tc.name, cut, len(tc.data), err)
			}
		}
		var m Message
		long := append(append([]byte(nil), tc.data...), 0)
		if err := Parse(long, tc.inStream, proto, &m); !errors.Is(err, ErrMalformed) ||
			!strings.Contains(err.Error(), "trailing") {
			t.Errorf("%s with a trailing byte: err = %v", tc.name, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		data     []byte
		inStream bool
		want     string
	}{
		{"empty", nil, false, "empty message"},
		{"unknown", []byte{'Z'}, false, "unknown message type"},
		{"two-phase", enc{'P'}.u64(1), false, "two-phase"},
		{"insert wrong tag", enc{'I'}.u32(1).u8('K').raw(tup1), false, "want tuple tag 'N'"},
		{"insert bad tuple", enc{'I'}.u32(1).u8('N').u16(1).u8('x'), false, "malformed tuple data"},
		{"insert tuple too long", enc{'I'}.u32(1).u8('N').u16(1).u8('t').u32(100).raw([]byte("ab")), false, "new tuple"},
		{"insert negative length", enc{'I'}.u32(1).u8('N').u16(1).u8('t').u32(0xffffffff), false, "new tuple"},
		{"update bad tag", enc{'U'}.u32(1).u8('X').raw(tup1), false, "want tuple tag 'N'"},
		{"update key without new", enc{'U'}.u32(1).u8('K').raw(tupKey).u8('K').raw(tup1), false, "want tuple tag 'N'"},
		{"delete new tag", enc{'D'}.u32(1).u8('N').raw(tup1), false, "want tuple tag 'K' or 'O'"},
		{"truncate negative", enc{'T'}.u32(0xffffffff).u8(0), false, "relations need"},
		{"truncate huge", enc{'T'}.u32(0x7fffffff).u8(0).u32(1), false, "relations need"},
		{"relation negative cols", enc{'R'}.u32(1).str("s").str("t").u8('d').u16(0x8000), false, "columns cannot fit"},
		{"relation huge cols", enc{'R'}.u32(1).str("s").str("t").u8('d').u16(1000).u8(0).str("a").u32(1).u32(1), false, "columns cannot fit"},
		{"relation no NUL", enc{'R'}.u32(1).str("s").raw([]byte("tab")), false, "relation name (no NUL terminator)"},
		{"message content too long", enc{'M'}.u8(0).u64(1).str("p").u32(10).raw([]byte("abc")), false, "content (length 10"},
		{"message content huge", enc{'M'}.u8(0).u64(1).str("p").u32(0xffffffff), false, "content (length"},
		{"begin short", enc{'B'}.u64(1).u32(2), false, "begin: truncated at commit time"},
		{"insert in stream short", enc{'I'}.u16(1), true, "insert: truncated at xid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Message
			err := Parse(tc.data, tc.inStream, 3, &m)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMalformed containing %q", err, tc.want)
			}
		})
	}
	var m Message
	if err := Parse(enc{'K'}, false, 3, &m); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("two-phase: err = %v, want ErrUnsupported", err)
	}
}

// TestParseAliases checks that tuples and content alias the input and are
// capped, so appending to them never overwrites the input.
func TestParseAliases(t *testing.T) {
	data := enc{'U'}.u32(5).u8('K').raw(tupKey).u8('N').raw(tup1)
	var m Message
	if err := Parse(data, false, 3, &m); err != nil {
		t.Fatal(err)
	}
	if &m.Old[0] != &data[6] || &m.New[0] != &data[6+len(tupKey)+1] {
		t.Fatal("tuples do not alias the input")
	}
	if cap(m.Old) != len(m.Old) || cap(m.New) != len(m.New) {
		t.Fatalf("tuple capacity not limited: old %d/%d new %d/%d", len(m.Old), cap(m.Old), len(m.New), cap(m.New))
	}
}

func TestPgTime(t *testing.T) {
	for _, tc := range []struct {
		us   int64
		want time.Time
	}{
		{0, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{1, time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC)},
		{-1, time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{int64(pgMicros(ts1)), ts1},
	} {
		got := pgTime(tc.us)
		if !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("pgTime(%d) = %v, want %v", tc.us, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, tc := range []struct {
		m    Message
		want string
	}{
		{Message{Type: MsgBegin, Xid: 740, LSN: 0x1_0000_0010, Time: ts1},
			"B xid=740 lsn=1/10 time=2025-03-04T05:06:07.123456Z"},
		{Message{Type: MsgInsert, RelID: 7, New: tup1},
			`I rel=7 N=[t"42" n u b"\x00\x01\x02"]`},
		{Message{Type: MsgDelete, Xid: 3, RelID: 7, OldKind: 'K', Old: tupKey},
			`D xid=3 rel=7 K=[t"41" n n n]`},
		{Message{Type: MsgMessage, Flags: 1, LSN: 1, Name: "p", Content: []byte(long)},
			`M flags=1 lsn=0/1 prefix="p" content="xxxxxxxxxxxxxxxxxxxxxxxx"…(len=100,crc=` +
				crcHex(long) + ")"},
		{Message{Type: MsgTruncate, TruncateOpts: 1, TruncateRelIDs: []uint32{4, 5}},
			"T opts=1 rels=[4 5]"},
		{Message{Type: MsgStreamAbort, Xid: 5, SubXid: 6}, "A xid=5 subxid=6"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

func crcHex(s string) string {
	b := appendValue(nil, []byte(s))
	i := strings.Index(string(b), "crc=")
	return string(b[i+4 : i+12])
}

// TestParseZeroAlloc asserts that the hot-path messages decode without
// allocating.
func TestParseZeroAlloc(t *testing.T) {
	for _, tc := range parseCases() {
		switch tc.want.Type {
		case MsgBegin, MsgCommit, MsgInsert, MsgUpdate, MsgDelete,
			MsgStreamStart, MsgStreamStop, MsgStreamCommit, MsgStreamAbort:
		default:
			continue
		}
		proto := tc.proto
		if proto == 0 {
			proto = 3
		}
		var m Message
		allocs := testing.AllocsPerRun(100, func() {
			if err := Parse(tc.data, tc.inStream, proto, &m); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Parse, want 0", tc.name, allocs)
		}
	}
}

// benchInsert is an Insert of a typical 8-column row.
func benchInsert() []byte {
	tup := change.AppendTuple(nil,
		[]byte{'t', 't', 't', 'n', 't', 't', 't', 't'},
		[][]byte{[]byte("123456"), []byte("customer-00042"), []byte("2025-03-04 05:06:07.123456+00"), nil,
			[]byte("1234.50"), []byte("t"), []byte("some text value of moderate length"), []byte("42")})
	return enc{'I'}.u32(16385).u8('N').raw(tup)
}

func BenchmarkParseInsert(b *testing.B) {
	data := benchInsert()
	var m Message
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(data, false, 3, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseHeadInsert(b *testing.B) {
	data := benchInsert()
	var m Message
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseHead(data, false, 3, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseUpdateKey(b *testing.B) {
	data := enc{'U'}.u32(5).u8('K').raw(tupKey).u8('N').raw(tup1)
	var m Message
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(data, false, 3, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseBegin(b *testing.B) {
	data := enc{'B'}.u64(0x1_0000_0010).u64(pgMicros(ts1)).u32(740)
	var m Message
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(data, false, 3, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkString(b *testing.B) {
	data := benchInsert()
	var m Message
	if err := Parse(data, false, 3, &m); err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = m.AppendText(buf[:0])
	}
}
