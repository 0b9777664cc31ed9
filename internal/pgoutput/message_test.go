package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestWithContent: a logical message re-encoded with other content (in
// and out of a stream) parses back with its header as it was and the new
// content; the input is left as it was; other messages are refused.
func TestWithContent(t *testing.T) {
	for _, inStream := range []bool{false, true} {
		b := []byte{MsgMessage}
		if inStream {
			b = binary.BigEndian.AppendUint32(b, 77)
		}
		b = append(b, MessageTransactional)
		b = binary.BigEndian.AppendUint64(b, 0x1234)
		b = append(b, "repstream.ddl\x00"...)
		b = binary.BigEndian.AppendUint32(b, 5)
		b = append(b, "short"...)
		orig := bytes.Clone(b)
		var m Message
		if err := Parse(b, inStream, 2, &m); err != nil {
			t.Fatal(err)
		}
		content := bytes.Repeat([]byte("longer content "), 20)
		out, err := WithContent(b, &m, content)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("the input was changed")
		}
		var got Message
		if err := Parse(out, inStream, 2, &got); err != nil {
			t.Fatalf("in stream %v: %v", inStream, err)
		}
		if !bytes.Equal(got.Content, content) || got.Name != m.Name || got.Flags != m.Flags || got.LSN != m.LSN || got.Xid != m.Xid {
			t.Errorf("in stream %v: %+v, want %+v with the new content", inStream, got, m)
		}
	}
	var m Message
	if err := Parse([]byte{MsgStreamStop}, false, 2, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := WithContent([]byte{MsgStreamStop}, &m, []byte("x")); !errors.Is(err, ErrMalformed) {
		t.Errorf("a stream stop re-encoded: %v", err)
	}
}
