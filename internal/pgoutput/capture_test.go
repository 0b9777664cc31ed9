package pgoutput

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

var update = flag.Bool("update", false, "rewrite the golden text files in testdata/")

// A capture file holds the XLogData payloads of one real replication
// session, as recorded by TestRecord:
//
//	header  "repstream pgoutput capture proto=<N>\n"
//	record  u8 flags (bit 0: the message arrived between Stream Start and Stop)
//	        u32 big-endian length, payload
//
// The golden text file beside it (.golden) is the decoded form, one line
// per message (Message.String), indented inside transactions and streams.
type captureRecord struct {
	inStream bool
	data     []byte
}

type capture struct {
	proto   int
	records []captureRecord
}

const captureMagic = "repstream pgoutput capture proto="

func writeCapture(path string, c capture) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s%d\n", captureMagic, c.proto)
	for _, r := range c.records {
		var flags byte
		if r.inStream {
			flags = 1
		}
		buf.WriteByte(flags)
		buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(r.data))))
		buf.Write(r.data)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write capture %s: %w", path, err)
	}
	return nil
}

func readCapture(path string) (capture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return capture{}, fmt.Errorf("read capture: %w", err)
	}
	r := bufio.NewReader(bytes.NewReader(b))
	header, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(header, captureMagic) {
		return capture{}, fmt.Errorf("capture %s: bad header %q", path, header)
	}
	var c capture
	if _, err := fmt.Sscanf(strings.TrimPrefix(header, captureMagic), "%d", &c.proto); err != nil {
		return capture{}, fmt.Errorf("capture %s: header %q: %w", path, header, err)
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return c, nil
			}
			return capture{}, fmt.Errorf("capture %s record %d: %w", path, len(c.records), err)
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r, data); err != nil {
			return capture{}, fmt.Errorf("capture %s record %d: %w", path, len(c.records), err)
		}
		c.records = append(c.records, captureRecord{inStream: hdr[0]&1 != 0, data: data})
	}
}

// goldenText decodes a capture into its golden form. It also checks the
// stream bracketing: the recorded inStream flag must match what the S/E
// messages imply, and every tuple must have the column count of its
// relation.
func goldenText(c capture) (string, error) {
	var sb strings.Builder
	var m Message
	inTxn, inStream := false, false
	ncols := map[uint32]int{}
	for i, r := range c.records {
		if r.inStream != inStream {
			return "", fmt.Errorf("record %d: recorded inStream=%v, S/E bracketing says %v", i, r.inStream, inStream)
		}
		if err := Parse(r.data, r.inStream, c.proto, &m); err != nil {
			return "", fmt.Errorf("record %d: %w", i, err)
		}
		switch m.Type {
		case MsgRelation:
			ncols[m.Relation.ID] = len(m.Relation.Columns)
		case MsgInsert, MsgUpdate, MsgDelete:
			n, ok := ncols[m.RelID]
			if !ok {
				return "", fmt.Errorf("record %d: %s of relation %d before its Relation message", i, TypeName(m.Type), m.RelID)
			}
			for _, t := range []change.Tuple{m.Old, m.New} {
				if t != nil && t.NumColumns() != n {
					return "", fmt.Errorf("record %d: tuple of %d columns for relation %d of %d", i, t.NumColumns(), m.RelID, n)
				}
			}
		}
		indent := ""
		switch m.Type {
		case MsgBegin:
			inTxn = true
		case MsgCommit:
			inTxn = false
		case MsgStreamStart:
			inStream = true
		case MsgStreamStop:
			inStream = false
		default:
			if inTxn || inStream {
				indent = "  "
			}
		}
		sb.WriteString(indent)
		sb.Write(m.AppendText(nil))
		sb.WriteByte('\n')
	}
	if inTxn || inStream {
		return "", fmt.Errorf("capture ends inside a transaction (%v) or stream (%v)", inTxn, inStream)
	}
	return sb.String(), nil
}

var captures = []string{"capture_v1", "capture_v3"}

// TestGolden decodes the recorded captures and compares them with the
// golden text; -update rewrites the text.
func TestGolden(t *testing.T) {
	for _, name := range captures {
		t.Run(name, func(t *testing.T) {
			c, err := readCapture(filepath.Join("testdata", name+".bin"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := goldenText(c)
			if err != nil {
				t.Fatal(err)
			}
			goldenPath := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
				for i := 0; i < len(gl) && i < len(wl); i++ {
					if gl[i] != wl[i] {
						t.Fatalf("line %d differs:\ngot  %s\nwant %s", i+1, gl[i], wl[i])
					}
				}
				t.Fatalf("got %d lines, want %d", len(gl), len(wl))
			}
		})
	}
}

// TestCaptureCoverage makes sure the recorded workload exercises what the
// decoder must handle, so that a re-recording that lost a case fails.
func TestCaptureCoverage(t *testing.T) {
	type feature struct {
		name string
		ok   func(m *Message, inStream bool) bool
	}
	kinds := func(tup change.Tuple, k byte) bool { return bytes.IndexByte(kindsOf(tup), k) >= 0 }
	common := []feature{
		{"begin", func(m *Message, _ bool) bool { return m.Type == MsgBegin }},
		{"commit", func(m *Message, _ bool) bool { return m.Type == MsgCommit }},
		{"origin", func(m *Message, _ bool) bool { return m.Type == MsgOrigin && m.Name != "" }},
		{"type", func(m *Message, _ bool) bool { return m.Type == MsgType }},
		{"insert with null", func(m *Message, _ bool) bool { return m.Type == MsgInsert && kinds(m.New, 'n') }},
		{"update new only with 'u'", func(m *Message, _ bool) bool {
			return m.Type == MsgUpdate && m.OldKind == 0 && kinds(m.New, 'u')
		}},
		{"update K", func(m *Message, _ bool) bool { return m.Type == MsgUpdate && m.OldKind == 'K' }},
		{"update O", func(m *Message, _ bool) bool { return m.Type == MsgUpdate && m.OldKind == 'O' }},
		{"delete K", func(m *Message, _ bool) bool { return m.Type == MsgDelete && m.OldKind == 'K' }},
		{"delete O", func(m *Message, _ bool) bool { return m.Type == MsgDelete && m.OldKind == 'O' }},
		{"truncate cascade restart", func(m *Message, _ bool) bool {
			return m.Type == MsgTruncate && m.TruncateOpts == 3 && len(m.TruncateRelIDs) == 2
		}},
		{"transactional message", func(m *Message, _ bool) bool { return m.Type == MsgMessage && m.Flags == 1 }},
		{"non-transactional message", func(m *Message, _ bool) bool { return m.Type == MsgMessage && m.Flags == 0 }},
		{"toasted value", func(m *Message, _ bool) bool {
			it := m.New.Iter()
			for it.Next() {
				if len(it.Value()) > 2048 {
					return true
				}
			}
			return false
		}},
	}
	streamed := []feature{
		{"stream start first", func(m *Message, _ bool) bool { return m.Type == MsgStreamStart && m.Flags == 1 }},
		{"stream start next", func(m *Message, _ bool) bool { return m.Type == MsgStreamStart && m.Flags == 0 }},
		{"stream commit", func(m *Message, _ bool) bool { return m.Type == MsgStreamCommit }},
		{"stream abort subxact", func(m *Message, _ bool) bool {
			return m.Type == MsgStreamAbort && m.SubXid != m.Xid
		}},
		{"stream abort top", func(m *Message, _ bool) bool {
			return m.Type == MsgStreamAbort && m.SubXid == m.Xid
		}},
		{"relation in stream", func(m *Message, s bool) bool { return m.Type == MsgRelation && s && m.Xid != 0 }},
		{"insert in stream", func(m *Message, s bool) bool { return m.Type == MsgInsert && s && m.Xid != 0 }},
		{"update in stream", func(m *Message, s bool) bool { return m.Type == MsgUpdate && s && m.Xid != 0 }},
		{"delete in stream", func(m *Message, s bool) bool { return m.Type == MsgDelete && s && m.Xid != 0 }},
		{"truncate in stream", func(m *Message, s bool) bool { return m.Type == MsgTruncate && s && m.Xid != 0 }},
		{"message in stream", func(m *Message, s bool) bool { return m.Type == MsgMessage && s && m.Xid != 0 }},
	}
	for _, name := range captures {
		c, err := readCapture(filepath.Join("testdata", name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		want := common
		if c.proto >= 2 {
			want = append(append([]feature(nil), common...), streamed...)
		}
		seen := make([]bool, len(want))
		var m Message
		for _, r := range c.records {
			if err := Parse(r.data, r.inStream, c.proto, &m); err != nil {
				t.Fatal(err)
			}
			if c.proto < 2 && (m.Type == MsgStreamStart || m.Xid != 0 && m.Type != MsgBegin) {
				t.Errorf("%s: v1 capture has stream data: %s", name, m.String())
			}
			for i, f := range want {
				seen[i] = seen[i] || f.ok(&m, r.inStream)
			}
		}
		for i, f := range want {
			if !seen[i] {
				t.Errorf("%s: no %s in the capture", name, f.name)
			}
		}
	}
}

func kindsOf(t change.Tuple) []byte {
	var ks []byte
	it := t.Iter()
	for it.Next() {
		ks = append(ks, it.Kind())
	}
	return ks
}

// BenchmarkParseCapture decodes every message of the v3 capture: a realistic
// mix of message types and sizes.
func BenchmarkParseCapture(b *testing.B) {
	c, err := readCapture(filepath.Join("testdata", "capture_v3.bin"))
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, r := range c.records {
		total += int64(len(r.data))
	}
	var m Message
	b.SetBytes(total)
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range c.records {
			if err := Parse(r.data, r.inStream, c.proto, &m); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// FuzzParse feeds the recorded messages (plus the synthetic cases) mutated:
// Parse must never panic, and a successful parse must hand out valid tuples
// that alias the input.
func FuzzParse(f *testing.F) {
	seen := map[string]bool{}
	add := func(data []byte, inStream bool, proto int) {
		// One seed per (type, inStream, old kind) keeps the corpus small.
		key := fmt.Sprintf("%c/%v/%d/%d", data[0], inStream, proto, len(data)/64)
		if seen[key] {
			return
		}
		seen[key] = true
		f.Add(data, inStream, proto)
	}
	for _, name := range captures {
		c, err := readCapture(filepath.Join("testdata", name+".bin"))
		if err != nil {
			f.Fatal(err)
		}
		for _, r := range c.records {
			add(r.data, r.inStream, c.proto)
		}
	}
	for _, tc := range parseCases() {
		proto := tc.proto
		if proto == 0 {
			proto = 3
		}
		add(tc.data, tc.inStream, proto)
	}
	f.Fuzz(func(t *testing.T, data []byte, inStream bool, proto int) {
		var m, h Message
		err := Parse(data, inStream, proto, &m)
		herr := ParseHead(data, inStream, proto, &h)
		if herr != nil && !errors.Is(herr, ErrMalformed) {
			t.Fatalf("ParseHead's error does not wrap ErrMalformed: %v", herr)
		}
		if err == nil {
			if herr != nil {
				t.Fatalf("Parse accepts what ParseHead refuses: %v", herr)
			}
			if h.Type != m.Type || h.Xid != m.Xid || h.RelID != m.RelID || h.OldKind != m.OldKind || h.LSN != m.LSN || h.EndLSN != m.EndLSN {
				t.Fatalf("ParseHead's header differs from Parse's: %+v, %+v", h, m)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		for _, tup := range []change.Tuple{m.Old, m.New} {
			if tup == nil {
				continue
			}
			n, err := change.ValidateTuple(tup)
			if err != nil || n != len(tup) || cap(tup) != len(tup) {
				t.Fatalf("invalid tuple handed out: n=%d len=%d cap=%d err=%v", n, len(tup), cap(tup), err)
			}
			if !aliases(data, tup) {
				t.Fatal("tuple does not alias the input")
			}
			it := tup.Iter()
			for it.Next() {
				_ = it.Value()
			}
		}
		if !aliases(data, m.Content) {
			t.Fatal("content does not alias the input")
		}
		_ = m.String()
	})
}

// aliases reports whether sub lies inside b's memory.
func aliases(b, sub []byte) bool {
	if len(sub) == 0 {
		return true
	}
	for off := 0; off+len(sub) <= len(b); off++ {
		if &b[off] == &sub[0] {
			return true
		}
	}
	return false
}
