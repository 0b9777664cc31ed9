package target

import (
	"context"
	"fmt"
	"time"
)

// SessionOptions configure an apply session (OpenSession).
type SessionOptions struct {
	DSN     string // the target
	AppName string // application_name, e.g. repstream-apply.0
	Writer  WriterOptions
	Watch   *LinkWatch // watches the connection for a silent link; nil: none
}

// OpenSession opens an apply session: one connection to the target (Connect:
// replica role, ISO dates), committing with synchronous_commit = off — the
// watermark counts a transaction done only once the target's WAL is flushed
// past its commit (apply/durable.go) — and holding the slot's shared apply
// lock for its whole life (lock.go) and a replication origin of its
// own (Origins.Use), with a Writer on it. Every session that
// writes applied transactions — apply workers and eager apply — opens here.
//
// closeFn closes the connection, waiting at most 2 s for the server.
func OpenSession(ctx context.Context, o SessionOptions) (w *Writer, closeFn func(), err error) {
	conn, err := ConnectWatched(ctx, o.DSN, o.AppName, o.Watch)
	if err != nil {
		return nil, nil, err
	}
	closeFn = func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("open apply session %s: %w", o.AppName, err)
	}
	if err := HoldApplyLock(ctx, conn, o.Writer.Slot); err != nil {
		closeFn()
		return nil, nil, err
	}
	// Its transactions are replicated ones (origin.go).
	if _, err := o.Writer.Origins.Use(ctx, conn); err != nil {
		closeFn()
		return nil, nil, err
	}
	return NewWriter(conn, o.Writer), closeFn, nil
}
