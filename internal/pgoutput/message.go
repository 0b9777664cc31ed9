package pgoutput

import (
	"encoding/binary"
	"fmt"
)

// WithContent returns the logical message data (an 'M' message, m its
// Parse or ParseHead) with content in place of m.Content: its header (the
// xid in a stream, the flags, the LSN, the prefix) as it was, the length
// and the content new. data is not changed.
func WithContent(data []byte, m *Message, content []byte) ([]byte, error) {
	if m.Type != MsgMessage || len(data) < len(m.Content)+4 {
		return nil, fmt.Errorf("%w: not a logical message", ErrMalformed)
	}
	head := len(data) - len(m.Content) - 4 // the content ends the message
	if binary.BigEndian.Uint32(data[head:]) != uint32(len(m.Content)) {
		return nil, fmt.Errorf("%w: message: the content does not end it", ErrMalformed)
	}
	out := make([]byte, 0, head+4+len(content))
	out = append(out, data[:head]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(content)))
	return append(out, content...), nil
}
