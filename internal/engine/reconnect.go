package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/target"
)

// sideError names the side — "source" or "target" — whose connection an
// error of the pipeline came from, for the reconnect log and counters.
type sideError struct {
	side string
	err  error
}

func (e *sideError) Error() string { return e.err.Error() }
func (e *sideError) Unwrap() error { return e.err }

func onSide(side string, err error) error {
	if err == nil {
		return nil
	}
	return &sideError{side: side, err: err}
}

func sideOf(err error) string {
	var se *sideError
	if errors.As(err, &se) {
		return se.side
	}
	var ce *snapshot.SourceError
	if errors.As(err, &ce) {
		return "source"
	}
	return "target"
}

// healthyRun is how long a streaming attempt must last for the next
// failure to count as a new incident (the backoff starts again).
const healthyRun = 2 * time.Minute

// streamResilient streams, and rides through the faults a reconnect can
// cure (pgerr.Transient: a lost or silent connection on either side, a
// server restarting or in recovery, a slot still held by the walsender of
// the lost connection). After such a fault the whole pipeline is rebuilt
// from what the target says is applied — the exactly-once record makes a
// restart in the same process as safe as one in a new process — after a
// wait that grows exponentially with jitter (cenkalti/backoff) up to
// --reconnect-max-wait. Every attempt is logged once with its cause and
// counted (the reconnects counter of the "source" or "target" component).
// Fatal causes — authentication, privileges, a missing, dropped or
// invalidated slot, a missing publication or table, a schema mismatch, a
// full disk, a spill file that cannot be written or read (a local fault:
// see transient), bad data — end the run at once, as does ctx.
//
// What is not kept: the queue's committed but unapplied transactions are
// read again from the slot (which still holds them: it was acknowledged
// only up to what is durable on the target).
func (e *Engine) streamResilient(ctx context.Context, prog target.Progress, initialFlush change.LSN) error {
	cfg := e.cfg
	bo := reconnectBackoff(500*time.Millisecond, cfg.ReconnectMaxWait)
	e.watch = target.NewLinkWatch(cfg.Target, cfg.TargetTimeout, e.stats.Component("target").Counter("silent_links"), e.log)
	attempt := 0
	for {
		started := time.Now()
		err := e.streamOnce(ctx, prog, initialFlush)
		for {
			if errors.Is(err, capture.ErrRedecode) && ctx.Err() == nil {
				// Nothing failed: a new decoding session, at once.
				if prog, initialFlush, err = e.resume(ctx); err == nil {
					break
				}
				continue
			}
			if err == nil || ctx.Err() != nil || !transient(err) {
				return explainLocal(err, cfg.SpillDir)
			}
			if time.Since(started) > healthyRun {
				bo.Reset()
				attempt = 0
			}
			attempt++
			if !e.waitToReconnect(ctx, bo, err, attempt, "connection lost: reconnecting") {
				return nil
			}
			started = time.Now()
			if prog, initialFlush, err = e.resume(ctx); err == nil {
				break
			}
		}
		e.log.Info("reconnected: resuming from the target's record", "applied_low", prog.Low, "from", initialFlush, "attempt", attempt)
	}
}

// transient reports whether a reconnect can cure err: pgerr.Transient,
// except for a fault of the spill directory or its files (queue.ErrSpill: a
// full or read-only file system, a quota, permissions, an I/O error, a
// refused directory), which is local to this host. Such a fault ends the run
// with its cause; retried as a lost connection it would loop for ever, the
// slot's WAL piling up, while /healthz said ok.
func transient(err error) bool {
	return !errors.Is(err, queue.ErrSpill) && pgerr.Transient(err)
}

// spillFault is a spill fault as the run ends on it: local, not retried.
type spillFault struct {
	dir string
	err error
}

func (f *spillFault) Error() string {
	return fmt.Sprintf("spill directory %s: a local file fault, not a connection problem: not retried "+
		"(free space or fix the file system, or choose another --spill-dir; a restart resumes from the target's record): %v", f.dir, f.err)
}
func (f *spillFault) Unwrap() error { return f.err }

// explainLocal says of a spill fault (queue.ErrSpill) that it is local and
// not retried, and what to do; other errors are returned as they are.
func explainLocal(err error, spillDir string) error {
	var done *spillFault
	if !errors.Is(err, queue.ErrSpill) || errors.As(err, &done) {
		return err
	}
	return &spillFault{dir: spillDir, err: err}
}

// reconnectBackoff waits first about initial, doubling with ±30% jitter up
// to maxWait.
func reconnectBackoff(initial, maxWait time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = initial
	bo.Multiplier = 2
	bo.RandomizationFactor = 0.3
	bo.MaxInterval = maxWait
	return bo
}

// runResilient runs the whole of a run — checks, slot, initial copy,
// streaming — again after a transient fault outside streaming (a server
// restarting during the start or the initial copy, which the next attempt
// resumes), once both servers have answered and passed the start checks:
// before that, a server that cannot be reached is a wrong configuration
// and is reported at once. Streaming faults are handled closer, by
// streamResilient.
func (e *Engine) runResilient(ctx context.Context) error {
	bo := reconnectBackoff(time.Second, e.cfg.ReconnectMaxWait)
	for attempt := 1; ; attempt++ {
		err := e.run(ctx)
		if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || pgerr.ConnectionLost(err)) {
			// Stopped before streaming (during the checks or the copy),
			// as runHalf: the next start goes on from what is recorded.
			e.log.Info("stopped before streaming", "during", err)
			return nil
		}
		if err == nil || ctx.Err() != nil || !e.reachedOnce || !transient(err) {
			return explainLocal(err, e.cfg.SpillDir)
		}
		if !e.waitToReconnect(ctx, bo, err, attempt, "connection lost before streaming: starting over") {
			return nil
		}
	}
}

// waitToReconnect counts and logs (once) a lost connection and waits the
// backoff's next interval; false if ctx ended meanwhile.
func (e *Engine) waitToReconnect(ctx context.Context, bo *backoff.ExponentialBackOff, cause error, attempt int, msg string) bool {
	wait := bo.NextBackOff()
	side := sideOf(cause)
	e.stats.Component(side).Counter("reconnects").Add(1)
	e.log.Warn(msg, "side", side, "attempt", attempt, "in", wait.Round(time.Millisecond), "cause", cause)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// streamOnce runs one streaming attempt on a fresh admin connection to the
// target (the persister's).
func (e *Engine) streamOnce(ctx context.Context, prog target.Progress, initialFlush change.LSN) error {
	tgt, err := target.ConnectWatched(ctx, e.cfg.Target, "repstream-admin", e.watch)
	if err != nil {
		return onSide("target", err)
	}
	defer tgt.Close(context.Background())
	return e.stream(ctx, tgt, prog, initialFlush)
}

// resume prepares the next attempt after a lost connection: it ends the
// sessions the lost attempt may have left behind on either server (after a
// silent link they live on, holding the slot or the apply lock and their
// row locks, until the server notices), waits for every earlier apply
// session to be gone, and reads where to start from the target's record
// and the slot. A slot dropped or invalidated meanwhile is fatal.
func (e *Engine) resume(ctx context.Context) (target.Progress, change.LSN, error) {
	cfg := e.cfg
	var prog target.Progress
	tgt, err := target.Connect(ctx, cfg.Target, "repstream-admin")
	if err != nil {
		return prog, 0, onSide("target", err)
	}
	defer tgt.Close(context.Background())
	if err := target.EndPreviousApply(ctx, tgt, cfg.Slot, e.log); err != nil {
		return prog, 0, onSide("target", err)
	}
	if err := target.WaitForPreviousApply(ctx, tgt, cfg.Slot, 30*time.Second, e.log); err != nil {
		return prog, 0, onSide("target", err)
	}
	if prog, err = target.LoadProgress(ctx, tgt, cfg.Slot); err != nil {
		return prog, 0, onSide("target", fmt.Errorf("read progress of slot %q on the target: %w", cfg.Slot, err))
	}
	src, err := install.ConnectSource(ctx, cfg.Source)
	if err != nil {
		return prog, 0, onSide("source", err)
	}
	defer src.Close(context.Background())
	if err := endWalsender(ctx, src, cfg.Slot, e.walsenderPID); err != nil {
		return prog, 0, onSide("source", err)
	}
	slot, err := install.LookupSlot(ctx, src, cfg.Slot)
	if err != nil {
		return prog, 0, onSide("source", err)
	}
	switch {
	case !slot.Exists:
		return prog, 0, fmt.Errorf("replication slot %q was dropped on the source while repstream was reconnecting: the changes since %s are lost; "+
			"run `repstream drop --slot %s` and start again to resynchronise", cfg.Slot, prog.Low, cfg.Slot)
	case slot.WALStatus == "lost":
		return prog, 0, fmt.Errorf("replication slot %q was invalidated while repstream was reconnecting (wal_status lost: the WAL it needed was removed, max_slot_wal_keep_size): "+
			"run `repstream drop --slot %s` and start again to resynchronise", cfg.Slot, cfg.Slot)
	}
	return prog, max(prog.Low, slot.Confirmed), nil
}

// endWalsender terminates the walsender that served the lost attempt if it
// still holds the slot: after a silent link it would hold it until
// wal_sender_timeout. Only that process (by PID): a walsender of anyone
// else is left alone, and capture waits for or reports it.
func endWalsender(ctx context.Context, src *pgx.Conn, slot string, pid uint32) error {
	if pid == 0 {
		return nil
	}
	_, err := src.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_catalog.pg_replication_slots
		WHERE slot_name = $1 AND active_pid = $2`, slot, int32(pid))
	if err != nil && !pgerr.PermissionDenied(err) {
		return fmt.Errorf("end the walsender of the lost connection (PID %d): %w", pid, err)
	}
	return nil
}
