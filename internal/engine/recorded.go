package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/target"
)

// recordedAcker is what capture acknowledges to the source from: the
// watermark, held back to the position the target has recorded as its low
// watermark (repstream.progress.low_lsn, written by persistLoop).
//
// Invariant: the slot's confirmed position never passes the target's
// recorded low watermark. So a target whose record is behind the slot's
// confirmed position at a start lost what it had recorded — it was
// restored from an older copy, or is a standby promoted before it had
// replayed everything — and the changes in between are gone from the slot:
// the start refuses it (checkRestoredTarget) instead of skipping forward.
type recordedAcker struct {
	*apply.Watermark
	recorded atomic.Uint64
}

func newRecordedAcker(wm *apply.Watermark, recorded change.LSN) *recordedAcker {
	a := &recordedAcker{Watermark: wm}
	a.recorded.Store(uint64(recorded))
	return a
}

// Flush is the watermark's, at most what the target has recorded.
func (a *recordedAcker) Flush() change.LSN {
	return min(a.Watermark.Flush(), change.LSN(a.recorded.Load()))
}

// persistEvery is the shortest interval between two records of the low
// watermark on the target while it moves: the slot's acknowledgement, and
// so `--until-caught-up`, follows the record by at most this much.
const persistEvery = 100 * time.Millisecond

// persistLoop records the low watermark on the target as it moves (at most
// every persistEvery, and at least every second) and lets the acker
// acknowledge what is recorded, until ctx ends.
func (e *Engine) persistLoop(ctx context.Context, tgt *pgx.Conn, acker *recordedAcker, persisted *change.LSN) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last time.Time
	for {
		changed := e.wm.Changed()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
			if wait := persistEvery - time.Since(last); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return nil
				case <-timer.C:
				}
			}
		}
		last = time.Now()
		pctx, cancel := inFlight(ctx)
		err := e.persist(pctx, tgt, persisted)
		cancel()
		if err != nil {
			return err
		}
		acker.recorded.Store(uint64(*persisted))
	}
}

// persistTimeout bounds one record of the low watermark begun before the
// run ended (inFlight).
const persistTimeout = 10 * time.Second

// inFlight is the context of one record of the low watermark on the
// shared target connection: not cancelled with the run's (ctx), only
// after persistTimeout. pgx closes a connection whose call's context is
// cancelled; when the run ended (caught up, stopped) while a record was
// under way, the final record and the table states after it found the
// connection closed, and a caught-up run reconnected and started over.
// The loop looks at ctx between records.
func inFlight(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), persistTimeout)
}

// checkRestoredTarget refuses a start whose target has recorded less than
// the slot has confirmed (see recordedAcker): the changes in between were
// acknowledged to the source and are not on the target. --adopt-slot takes
// the target as it is.
func checkRestoredTarget(cfg config.Config, prog target.Progress, confirmed change.LSN) error {
	if !prog.Exists || prog.Snapshot == target.SnapshotRunning || confirmed <= prog.Low || cfg.AdoptSlot {
		return nil
	}
	return fmt.Errorf("the target has recorded the changes of slot %q up to %s, but the slot has confirmed %s: "+
		"the target was restored from an older copy (or is a standby promoted before it had everything), and the changes between %s and %s "+
		"are on neither the target nor the slot any more; run `repstream drop --slot %s` and start again for a new initial copy "+
		"(or pass --adopt-slot to go on from %s, if those changes are on the target after all)",
		cfg.Slot, prog.Low, confirmed, prog.Low, confirmed, cfg.Slot, confirmed)
}
