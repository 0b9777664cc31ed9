package queue

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by calls on a closed Queue, and by Next when the
// queue is closed while it waits.
var ErrClosed = errors.New("queue closed")

// ErrReleased is returned when the changes of a released transaction are read.
var ErrReleased = errors.New("transaction already released")

// ErrCorrupt is wrapped by errors reading a spill file whose records do not
// parse: a bad length, a CRC mismatch, a malformed tuple or an unknown
// relation reference. The error names the file and the record's offset.
var ErrCorrupt = errors.New("corrupt spill record")

// ErrSpill is matched (errors.Is) by every error of the spill directory and
// its files: a directory refused or not usable, a spill file that cannot be
// created, written, truncated or read (a full or read-only file system, a
// quota, permissions, an I/O error: ENOSPC, EDQUOT, EROFS, EACCES, EIO), or
// one whose records do not parse ([ErrCorrupt]). These are local faults of
// this host, which no reconnect cures: the engine stops on them. The error's
// text is the operation, the file and the system error; ErrSpill adds none.
var ErrSpill = errors.New("spill directory or file error")

// spillError marks err as an [ErrSpill] without changing its text.
type spillError struct{ err error }

func (e *spillError) Error() string        { return e.err.Error() }
func (e *spillError) Unwrap() error        { return e.err }
func (e *spillError) Is(target error) bool { return target == ErrSpill }

// spillErrorf is fmt.Errorf marked as an [ErrSpill].
func spillErrorf(format string, args ...any) error {
	return &spillError{fmt.Errorf(format, args...)}
}
