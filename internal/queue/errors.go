package queue

import "errors"

// ErrClosed is returned by calls on a closed Queue, and by Next when the
// queue is closed while it waits.
var ErrClosed = errors.New("queue closed")

// ErrReleased is returned when the changes of a released transaction are read.
var ErrReleased = errors.New("transaction already released")

// ErrCorrupt is wrapped by errors reading a spill file whose records do not
// parse: a bad length, a CRC mismatch, a malformed tuple or an unknown
// relation reference. The error names the file and the record's offset.
var ErrCorrupt = errors.New("corrupt spill record")
