package kafkalog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// record is a record's value parsed whole, as the Reader parses it.
type record struct {
	h      Header
	frames []Frame
	frag   Fragment
	epoch  Epoch
}

// parseRecord parses a record's value: header, then the body of its kind.
func parseRecord(v []byte) (record, error) {
	var r record
	h, body, err := ParseHeader(v)
	if err != nil {
		return r, err
	}
	r.h = h
	switch h.Kind {
	case KindData:
		err = Frames(body, func(f Frame) error {
			r.frames = append(r.frames, f)
			return nil
		})
	case KindFragment:
		r.frag, err = ParseFragment(body)
	case KindEpoch:
		r.epoch, err = ParseEpoch(body)
	}
	return r, err
}

// The golden records: one of each kind.
var (
	goldenHeader = Header{Epoch: 0x6A1B2C3D, LastCommit: 0x16B374D848, Proto: 4, Binary: true}
	goldenFrames = []Frame{
		{WALStart: 0x16B374D900, Data: []byte("B\x00\x00\x00\x16\xb3\x74\xda\x00")},
		{WALStart: 0x16B374D9A0, Data: []byte("I\x00\x00\x40\x01N\x00\x01t\x00\x00\x00\x012")},
	}
	goldenFragment = Fragment{WALStart: 0x16B374DB00, Total: 40000, Offset: 32768, Chunk: []byte("tail of a large message")}
	goldenEpoch    = Epoch{Start: 0x16B374D000, SystemID: "7401234567890123456", Database: "shop",
		Slot: "repstream_shop", Publication: "repstream_pub", DDLMessages: true}
)

func goldenRecord(kind byte) []byte {
	h := goldenHeader
	h.Kind = kind
	v := AppendHeader(nil, h)
	switch kind {
	case KindData:
		for _, f := range goldenFrames {
			v = AppendFrame(v, f)
		}
	case KindFragment:
		f := goldenFragment
		v = AppendFragment(v, f.WALStart, f.Total, f.Offset, f.Chunk)
	case KindEpoch:
		v = AppendEpoch(v, goldenEpoch)
	}
	return v
}

// TestRecordGolden pins the exact bytes of one record of each kind (run
// with -update to rewrite testdata/ after an intended format change, which
// must also raise the format version).
func TestRecordGolden(t *testing.T) {
	for _, tc := range []struct {
		kind byte
		file string
	}{{KindData, "data.golden"}, {KindFragment, "fragment.golden"}, {KindEpoch, "epoch.golden"}} {
		t.Run(tc.file, func(t *testing.T) {
			v := goldenRecord(tc.kind)
			got := []byte(hex.Dump(v))
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("record encoding changed (run with -update if intended):\n%s\nwant:\n%s", got, want)
			}
			// The golden bytes parse back to what was encoded.
			r, err := parseRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			wantH := goldenHeader
			wantH.Kind = tc.kind
			if r.h != wantH {
				t.Fatalf("header %+v, want %+v", r.h, wantH)
			}
			switch tc.kind {
			case KindData:
				if !reflect.DeepEqual(r.frames, goldenFrames) {
					t.Fatalf("frames %q, want %q", r.frames, goldenFrames)
				}
			case KindFragment:
				if !reflect.DeepEqual(r.frag, goldenFragment) {
					t.Fatalf("fragment %+v, want %+v", r.frag, goldenFragment)
				}
			case KindEpoch:
				if r.epoch != goldenEpoch {
					t.Fatalf("epoch %+v, want %+v", r.epoch, goldenEpoch)
				}
			}
		})
	}
}

// TestRecordVersion1 reads the records of format version 1 (a 17-byte
// header, no flags: text values), as captures before version 2 wrote
// them: testdata/*.v1.golden are their exact bytes.
func TestRecordVersion1(t *testing.T) {
	for _, tc := range []struct {
		kind byte
		file string
	}{{KindData, "data.v1.golden"}, {KindFragment, "fragment.v1.golden"}, {KindEpoch, "epoch.v1.golden"}} {
		t.Run(tc.file, func(t *testing.T) {
			dump, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			v := undump(t, string(dump))
			if v[2] != 1 {
				t.Fatalf("version %d", v[2])
			}
			r, err := parseRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			want := goldenHeader
			want.Kind, want.Binary = tc.kind, false
			if r.h != want {
				t.Fatalf("header %+v, want %+v", r.h, want)
			}
			// The body is the current encoding's: only the header grew.
			cur := goldenRecord(tc.kind)
			if !bytes.Equal(v[headerLenV1:], cur[headerLen:]) {
				t.Fatalf("body % x, want % x", v[headerLenV1:], cur[headerLen:])
			}
		})
	}
}

// undump reverses hex.Dump.
func undump(t *testing.T, dump string) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(strings.TrimRight(dump, "\n"), "\n") {
		if len(line) < 10 {
			t.Fatalf("dump line %q", line)
		}
		hexPart := line[10:]
		if i := strings.IndexByte(hexPart, '|'); i >= 0 {
			hexPart = hexPart[:i]
		}
		b, err := hex.DecodeString(strings.ReplaceAll(hexPart, " ", ""))
		if err != nil {
			t.Fatalf("dump line %q: %v", line, err)
		}
		out = append(out, b...)
	}
	return out
}

// TestRecordLayout checks the byte offsets doc.go documents, independently
// of the encoders' own idea of them.
func TestRecordLayout(t *testing.T) {
	be := binary.BigEndian
	v := goldenRecord(KindData)
	if string(v[0:2]) != "RS" || v[2] != 2 || v[3] != 'D' ||
		be.Uint32(v[4:]) != goldenHeader.Epoch || be.Uint64(v[8:]) != uint64(goldenHeader.LastCommit) || v[16] != goldenHeader.Proto || v[17] != 1 {
		t.Fatalf("header bytes % x", v[:18])
	}
	b := v[18:]
	for i, f := range goldenFrames {
		if be.Uint64(b) != uint64(f.WALStart) || be.Uint32(b[8:]) != uint32(len(f.Data)) || !bytes.Equal(b[12:12+len(f.Data)], f.Data) {
			t.Fatalf("frame %d bytes % x", i, b)
		}
		b = b[12+len(f.Data):]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes after the frames", len(b))
	}

	v = goldenRecord(KindFragment)
	if v[3] != 'F' {
		t.Fatalf("kind %q", v[3])
	}
	b = v[18:]
	fr := goldenFragment
	if be.Uint64(b) != uint64(fr.WALStart) || be.Uint32(b[8:]) != uint32(fr.Total) || be.Uint32(b[12:]) != uint32(fr.Offset) || string(b[16:]) != string(fr.Chunk) {
		t.Fatalf("fragment bytes % x", b)
	}

	v = goldenRecord(KindEpoch)
	if v[3] != 'E' {
		t.Fatalf("kind %q", v[3])
	}
	b = v[18:]
	e := goldenEpoch
	if be.Uint64(b) != uint64(e.Start) {
		t.Fatalf("epoch start % x", b[:8])
	}
	b = b[8:]
	for _, s := range []string{e.SystemID, e.Database, e.Slot, e.Publication} {
		if n := int(be.Uint16(b)); n != len(s) || string(b[2:2+n]) != s {
			t.Fatalf("epoch string %q: bytes % x", s, b)
		}
		b = b[2+len(s):]
	}
	if len(b) != 1 || b[0] != 1 {
		t.Fatalf("epoch flags % x, want 01", b)
	}
	if b := AppendEpoch(nil, Epoch{}); b[len(b)-1] != 0 {
		t.Fatalf("flags of an epoch without DDL messages: %#x", b[len(b)-1])
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Kind: KindData},
		{Kind: KindFragment, Epoch: 1, LastCommit: 1, Proto: 1},
		{Kind: KindEpoch, Epoch: ^uint32(0), LastCommit: ^change.LSN(0), Proto: 255},
		{Kind: KindData, Epoch: goldenHeader.Epoch, LastCommit: goldenHeader.LastCommit, Proto: goldenHeader.Proto},
		{Kind: KindData, Epoch: 7, LastCommit: 9, Proto: 2, Binary: true},
	} {
		prefix := []byte("prefix")
		v := AppendHeader(append([]byte(nil), prefix...), h)
		if !bytes.HasPrefix(v, prefix) || len(v) != len(prefix)+headerLen {
			t.Fatalf("AppendHeader(%q, %+v) = % x", prefix, h, v)
		}
		v = append(v, "body"...)
		got, body, err := ParseHeader(v[len(prefix):])
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got != h || string(body) != "body" {
			t.Fatalf("round trip of %+v: %+v, body %q", h, got, body)
		}
	}
	// A header alone is a record with an empty body.
	_, body, err := ParseHeader(AppendHeader(nil, Header{Kind: KindData}))
	if err != nil || len(body) != 0 {
		t.Fatalf("header alone: body %q, %v", body, err)
	}
}

func TestFramesRoundTrip(t *testing.T) {
	frames := []Frame{
		{WALStart: 0, Data: []byte{'B'}},
		{WALStart: 0x100, Data: bytes.Repeat([]byte("x"), 70000)},
		{WALStart: ^change.LSN(0), Data: []byte("C\x00")},
	}
	var body []byte
	for _, f := range frames {
		n := len(body)
		body = AppendFrame(body, f)
		if len(body)-n != FrameSize(len(f.Data)) {
			t.Fatalf("AppendFrame added %d bytes, FrameSize says %d", len(body)-n, FrameSize(len(f.Data)))
		}
	}
	var got []Frame
	if err := Frames(body, func(f Frame) error { got = append(got, f); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, frames) {
		t.Fatalf("frames do not round-trip: got %d frames", len(got))
	}
	// A frame's Data aliases the body but cannot be appended to over the
	// next frame.
	_ = append(got[0].Data, 'Z')
	if got[1].WALStart != 0x100 || !bytes.Equal(body[FrameSize(1):FrameSize(1)+8], []byte{0, 0, 0, 0, 0, 0, 1, 0}) {
		t.Fatal("appending to a frame's Data overwrote the next frame")
	}
	// An empty body has no frames.
	if err := Frames(nil, func(Frame) error { t.Fatal("frame in an empty body"); return nil }); err != nil {
		t.Fatal(err)
	}
	// yield's error stops the walk and is returned as it is.
	stop := errors.New("stop")
	calls := 0
	err := Frames(body, func(Frame) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Fatalf("yield's error: %v after %d calls", err, calls)
	}
}

func TestFragmentRoundTrip(t *testing.T) {
	msg := []byte("a message of forty-two bytes, in 4 pieces")
	for _, chunk := range []int{1, 5, 16, len(msg)} {
		var a Assembler
		for off := 0; off < len(msg); off += chunk {
			end := min(off+chunk, len(msg))
			body := AppendFragment(nil, 0x16B374D848, len(msg), off, msg[off:end])
			if len(body) != fragHeaderLen+end-off {
				t.Fatalf("fragment body of %d bytes", len(body))
			}
			f, err := ParseFragment(body)
			if err != nil {
				t.Fatal(err)
			}
			want := Fragment{WALStart: 0x16B374D848, Total: len(msg), Offset: off, Chunk: msg[off:end]}
			if !reflect.DeepEqual(f, want) {
				t.Fatalf("fragment %+v, want %+v", f, want)
			}
			fr, done, err := a.Add(f)
			if err != nil {
				t.Fatal(err)
			}
			if done != (end == len(msg)) {
				t.Fatalf("chunk %d at %d: done %v", chunk, off, done)
			}
			if done && (fr.WALStart != 0x16B374D848 || !bytes.Equal(fr.Data, msg)) {
				t.Fatalf("assembled %s %q", fr.WALStart, fr.Data)
			}
		}
	}
}

func TestEpochRoundTrip(t *testing.T) {
	long := strings.Repeat("s", 0xFFFF)
	for _, e := range []Epoch{
		{},
		{DDLMessages: true},
		goldenEpoch,
		{Start: ^change.LSN(0), SystemID: long, Database: "", Slot: "é", Publication: long},
	} {
		body := AppendEpoch(nil, e)
		got, err := ParseEpoch(body)
		if err != nil {
			t.Fatalf("%.40v: %v", e, err)
		}
		if got != e {
			t.Fatalf("round trip of %.60v: %.60v", e, got)
		}
	}
	// Bits of the flags byte other than bit 0 are ignored.
	body := AppendEpoch(nil, Epoch{Slot: "s"})
	body[len(body)-1] = 0xFE
	if e, err := ParseEpoch(body); err != nil || e.DDLMessages || e.Slot != "s" {
		t.Fatalf("flags 0xfe: %+v, %v", e, err)
	}
}

func TestMalformed(t *testing.T) {
	hdr := func(kind byte) []byte {
		return AppendHeader(nil, Header{Kind: kind, Epoch: 3, LastCommit: 0x100, Proto: 1})
	}
	with := func(b []byte, mod func([]byte)) []byte {
		b = append([]byte(nil), b...)
		mod(b)
		return b
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	frame := AppendFrame(nil, Frame{WALStart: 0x200, Data: []byte("B1234")})
	frag := AppendFragment(nil, 0x300, 10, 4, []byte("456789"))
	epoch := AppendEpoch(nil, Epoch{Start: 0x400, SystemID: "1", Database: "d", Slot: "s", Publication: "p"})

	for _, tc := range []struct {
		name string
		v    []byte
	}{
		{"empty value", nil},
		{"short header", hdr(KindData)[:headerLen-1]},
		{"magic alone", []byte("RS")},
		{"wrong magic", with(hdr(KindData), func(b []byte) { b[0] = 'r' })},
		{"wrong magic second byte", with(hdr(KindData), func(b []byte) { b[1] = 'T' })},
		{"version 0", with(hdr(KindData), func(b []byte) { b[2] = 0 })},
		{"version 3", with(hdr(KindData), func(b []byte) { b[2] = 3 })},
		{"version 2 without its flags", with(hdr(KindData), func(b []byte) { b[2] = 2 })[:headerLen-1]},
		{"unknown kind", with(hdr(KindData), func(b []byte) { b[3] = 'X' })},
		{"lower-case kind", with(hdr(KindData), func(b []byte) { b[3] = 'd' })},
		{"kind zero", with(hdr(KindData), func(b []byte) { b[3] = 0 })},
		{"truncated frame header", cat(hdr(KindData), frame[:frameHeaderLen-1])},
		{"frame header alone", cat(hdr(KindData), frame[:frameHeaderLen])},
		{"truncated frame", cat(hdr(KindData), frame[:len(frame)-1])},
		{"truncated second frame", cat(hdr(KindData), frame, frame[:len(frame)-1])},
		{"trailing byte after a frame", cat(hdr(KindData), frame, []byte{0})},
		{"frame announcing 4 GiB", cat(hdr(KindData), with(frame, func(b []byte) { copy(b[8:], []byte{0xFF, 0xFF, 0xFF, 0xFF}) }))},
		{"zero-length frame", cat(hdr(KindData), AppendFrame(nil, Frame{WALStart: 0x200}))},
		{"zero-length frame after a good one", cat(hdr(KindData), frame, AppendFrame(nil, Frame{WALStart: 0x200}))},
		{"fragment header alone", cat(hdr(KindFragment), frag[:fragHeaderLen])},
		{"truncated fragment header", cat(hdr(KindFragment), frag[:fragHeaderLen-1])},
		{"fragment with no body", hdr(KindFragment)},
		{"fragment past total", cat(hdr(KindFragment), AppendFragment(nil, 0x300, 10, 5, []byte("567890")))},
		{"fragment beyond total", cat(hdr(KindFragment), AppendFragment(nil, 0x300, 10, 10, []byte("x")))},
		{"fragment of a zero-byte message", cat(hdr(KindFragment), AppendFragment(nil, 0x300, 0, 0, []byte("x")))},
		{"epoch with no body", hdr(KindEpoch)},
		{"truncated epoch start", cat(hdr(KindEpoch), epoch[:7])},
		{"truncated epoch string length", cat(hdr(KindEpoch), epoch[:9])},
		{"truncated epoch string", cat(hdr(KindEpoch), epoch[:10])},
		{"truncated epoch: last string", cat(hdr(KindEpoch), epoch[:len(epoch)-2])},
		{"truncated epoch: no flags", cat(hdr(KindEpoch), epoch[:len(epoch)-1])},
		{"epoch string announcing more than left", cat(hdr(KindEpoch), with(epoch, func(b []byte) { b[8], b[9] = 0xFF, 0xFF }))},
		{"trailing bytes after an epoch", cat(hdr(KindEpoch), epoch, []byte{0})},
		{"trailing bytes after a long epoch", cat(hdr(KindEpoch), epoch, []byte("more"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseRecord(tc.v)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("parse % x: %v, want an error wrapping ErrCorrupt", tc.v, err)
			}
		})
	}

	// A header error gives no body.
	if _, body, err := ParseHeader(with(hdr(KindData), func(b []byte) { b[2] = 9 })); err == nil || body != nil {
		t.Fatalf("bad version: body %q, %v", body, err)
	}
	// The frames before a damaged one are yielded, none after.
	n := 0
	err := Frames(cat(frame, frame[:len(frame)-1]), func(Frame) error { n++; return nil })
	if !errors.Is(err, ErrCorrupt) || n != 1 {
		t.Fatalf("damaged second frame: %d frames yielded, %v", n, err)
	}
}

func TestAssemblerInOrder(t *testing.T) {
	var a Assembler
	if a.Active() {
		t.Fatal("zero Assembler active")
	}
	msg := []byte("0123456789")
	pieces := []Fragment{
		{WALStart: 0x10, Total: 10, Offset: 0, Chunk: []byte("0123")},
		{WALStart: 0x10, Total: 10, Offset: 4, Chunk: []byte("456")},
		{WALStart: 0x10, Total: 10, Offset: 7, Chunk: []byte("789")},
	}
	for i, p := range pieces {
		f, done, err := a.Add(p)
		if err != nil {
			t.Fatalf("piece %d: %v", i, err)
		}
		last := i == len(pieces)-1
		if done != last || a.Active() == last {
			t.Fatalf("piece %d: done %v, active %v", i, done, a.Active())
		}
		if last && (f.WALStart != 0x10 || !bytes.Equal(f.Data, msg)) {
			t.Fatalf("assembled %s %q", f.WALStart, f.Data)
		}
	}
	// A one-piece message is done at once.
	f, done, err := a.Add(Fragment{WALStart: 0x20, Total: 2, Offset: 0, Chunk: []byte("ab")})
	if err != nil || !done || a.Active() || f.WALStart != 0x20 || string(f.Data) != "ab" {
		t.Fatalf("one piece: %s %q, done %v, %v", f.WALStart, f.Data, done, err)
	}
}

// TestAssemblerOwnsItsMessage: a message assembled is not overwritten by
// the next one, nor by its chunks' buffers being reused.
func TestAssemblerOwnsItsMessage(t *testing.T) {
	var a Assembler
	chunk := []byte("ab")
	if _, _, err := a.Add(Fragment{WALStart: 1, Total: 4, Offset: 0, Chunk: chunk}); err != nil {
		t.Fatal(err)
	}
	copy(chunk, "cd")
	first, done, err := a.Add(Fragment{WALStart: 1, Total: 4, Offset: 2, Chunk: chunk})
	if err != nil || !done || string(first.Data) != "abcd" {
		t.Fatalf("first: %q, %v, %v", first.Data, done, err)
	}
	copy(chunk, "xy")
	for _, off := range []int{0, 2} {
		if _, _, err := a.Add(Fragment{WALStart: 2, Total: 4, Offset: off, Chunk: chunk}); err != nil {
			t.Fatal(err)
		}
	}
	if string(first.Data) != "abcd" {
		t.Fatalf("the first message became %q", first.Data)
	}
}

func TestAssemblerOutOfOrder(t *testing.T) {
	start := Fragment{WALStart: 0x10, Total: 10, Offset: 0, Chunk: []byte("0123")}
	for _, tc := range []struct {
		name  string
		first *Fragment // added before, if any
		f     Fragment
	}{
		{"continuation with nothing begun", nil, Fragment{WALStart: 0x10, Total: 10, Offset: 4, Chunk: []byte("456")}},
		{"a piece skipped", &start, Fragment{WALStart: 0x10, Total: 10, Offset: 7, Chunk: []byte("789")}},
		{"a piece again", &start, Fragment{WALStart: 0x10, Total: 10, Offset: 2, Chunk: []byte("23")}},
		{"another message's piece", &start, Fragment{WALStart: 0x11, Total: 10, Offset: 4, Chunk: []byte("456")}},
		{"another total", &start, Fragment{WALStart: 0x10, Total: 11, Offset: 4, Chunk: []byte("456")}},
		{"a new message before the previous completes", &start, Fragment{WALStart: 0x20, Total: 3, Offset: 0, Chunk: []byte("abc")}},
		{"the same message begun again", &start, start},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a Assembler
			if tc.first != nil {
				if _, _, err := a.Add(*tc.first); err != nil {
					t.Fatal(err)
				}
			}
			f, done, err := a.Add(tc.f)
			if !errors.Is(err, ErrCorrupt) || done || f.Data != nil {
				t.Fatalf("Add(%+v): %q, done %v, %v; want an error wrapping ErrCorrupt", tc.f, f.Data, done, err)
			}
		})
	}
}

func TestAssemblerReset(t *testing.T) {
	var a Assembler
	if _, _, err := a.Add(Fragment{WALStart: 0x10, Total: 10, Offset: 0, Chunk: []byte("0123")}); err != nil {
		t.Fatal(err)
	}
	a.Reset()
	if a.Active() {
		t.Fatal("active after Reset")
	}
	// The forgotten message's rest is out of sequence now...
	if _, _, err := a.Add(Fragment{WALStart: 0x10, Total: 10, Offset: 4, Chunk: []byte("456789")}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("rest of a forgotten message: %v", err)
	}
	// ...and a new message assembles from its start alone.
	if _, _, err := a.Add(Fragment{WALStart: 0x30, Total: 4, Offset: 0, Chunk: []byte("ab")}); err != nil {
		t.Fatal(err)
	}
	f, done, err := a.Add(Fragment{WALStart: 0x30, Total: 4, Offset: 2, Chunk: []byte("cd")})
	if err != nil || !done || f.WALStart != 0x30 || string(f.Data) != "abcd" {
		t.Fatalf("after Reset: %s %q, done %v, %v", f.WALStart, f.Data, done, err)
	}
	// Reset of an idle Assembler is harmless.
	a.Reset()
	if a.Active() {
		t.Fatal("active after Reset")
	}
}

// checkCorrupt fails unless err is nil or wraps ErrCorrupt.
func checkCorrupt(t *testing.T, err error) bool {
	t.Helper()
	if err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error not wrapping ErrCorrupt: %v", err)
	}
	return err == nil
}

func FuzzParseHeader(f *testing.F) {
	for _, k := range []byte{KindData, KindFragment, KindEpoch} {
		f.Add(goldenRecord(k))
	}
	f.Add(AppendHeader(nil, Header{Kind: 'X'}))
	f.Add([]byte("RS"))
	f.Fuzz(func(t *testing.T, v []byte) {
		h, body, err := ParseHeader(v)
		if !checkCorrupt(t, err) {
			if body != nil {
				t.Fatalf("body %q with an error", body)
			}
			return
		}
		switch h.Kind {
		case KindData, KindFragment, KindEpoch:
		default:
			t.Fatalf("kind %q accepted", h.Kind)
		}
		if got := append(AppendHeader(nil, h), body...); !bytes.Equal(got, v) {
			t.Fatalf("% x parsed as %+v + % x, which encodes as % x", v, h, body, got)
		}
	})
}

func FuzzFrames(f *testing.F) {
	f.Add(goldenRecord(KindData)[headerLen:])
	f.Add(AppendFrame(nil, Frame{WALStart: 1, Data: []byte("x")}))
	f.Add(AppendFrame(nil, Frame{WALStart: 1}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		var re []byte
		err := Frames(body, func(fr Frame) error {
			if len(fr.Data) == 0 {
				t.Fatal("zero-length frame yielded")
			}
			re = AppendFrame(re, fr)
			return nil
		})
		if !checkCorrupt(t, err) {
			// What was yielded is what the body began with.
			if !bytes.HasPrefix(body, re) || len(re) == len(body) {
				t.Fatalf("% x: frames yielded before the error encode as % x", body, re)
			}
			return
		}
		if !bytes.Equal(re, body) {
			t.Fatalf("% x: frames encode as % x", body, re)
		}
	})
}

func FuzzParseEpoch(f *testing.F) {
	f.Add(goldenRecord(KindEpoch)[headerLen:])
	f.Add(AppendEpoch(nil, Epoch{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := ParseEpoch(body)
		if !checkCorrupt(t, err) {
			return
		}
		// Encoded again: the same bytes, but for the flags' unknown bits.
		want := append([]byte(nil), body...)
		want[len(want)-1] &= 1
		if got := AppendEpoch(nil, e); !bytes.Equal(got, want) {
			t.Fatalf("% x parsed as %+v, which encodes as % x", body, e, got)
		}
		if e2, err := ParseEpoch(AppendEpoch(nil, e)); err != nil || e2 != e {
			t.Fatalf("%+v: parsed again as %+v, %v", e, e2, err)
		}
	})
}

func FuzzParseFragment(f *testing.F) {
	f.Add(goldenRecord(KindFragment)[headerLen:])
	f.Add(AppendFragment(nil, 1, 3, 0, []byte("abc")))
	f.Add(AppendFragment(nil, 1, 3, 2, []byte("cd")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		fr, err := ParseFragment(body)
		if !checkCorrupt(t, err) {
			return
		}
		if len(fr.Chunk) == 0 || fr.Offset < 0 || fr.Offset+len(fr.Chunk) > fr.Total {
			t.Fatalf("% x: fragment [%d, %d) of %d bytes accepted", body, fr.Offset, fr.Offset+len(fr.Chunk), fr.Total)
		}
		if got := AppendFragment(nil, fr.WALStart, fr.Total, fr.Offset, fr.Chunk); !bytes.Equal(got, body) {
			t.Fatalf("% x parsed as %+v, which encodes as % x", body, fr, got)
		}
		// A fresh Assembler takes a first piece (keeping the allocation
		// of the announced total small) and refuses any other.
		if fr.Total > 1<<16 {
			return
		}
		var a Assembler
		m, done, err := a.Add(fr)
		if fr.Offset != 0 {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("continuation with nothing begun: %v", err)
			}
			return
		}
		if err != nil || done != (len(fr.Chunk) == fr.Total) || done && !bytes.Equal(m.Data, fr.Chunk) {
			t.Fatalf("first piece %+v: %q, done %v, %v", fr, m.Data, done, err)
		}
	})
}

// TestSamePublication: an apply's --publication must be the one its
// topic's capture streams.
func TestSamePublication(t *testing.T) {
	e := Epoch{Slot: "app", Publication: "app"}
	if err := e.SamePublication("repstream.app", "app"); err != nil {
		t.Errorf("same publication: %v", err)
	}
	err := e.SamePublication("repstream.app", "otherpub")
	if err == nil || !strings.Contains(err.Error(), `publication "app"`) || !strings.Contains(err.Error(), "give --publication app") {
		t.Errorf("another publication: %v", err)
	}
	if err := (Epoch{Slot: "app"}).SamePublication("repstream.app", "otherpub"); err != nil {
		t.Errorf("a marker that names no publication: %v", err)
	}
}
