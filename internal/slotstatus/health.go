package slotstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// `repstream status` for scripts: besides the positions, a verdict. The
// slot is unhealthy (exit code 2, one line on stderr saying why) when it
// cannot serve the next run:
//   - it does not exist on the source;
//   - it is invalidated: wal_status `lost` (the WAL it needed was removed,
//     max_slot_wal_keep_size), or an invalidation reason on PostgreSQL 17+
//     (`conflicting` on 16);
//   - no repstream has streamed from it for longer than --max-inactive: on
//     PostgreSQL 17+ the source's pg_replication_slots.inactive_since; on
//     older sources, an inactive slot's age is that of the target's progress
//     record (repstream.progress.updated_at), which is at least the time
//     since the last run stopped (more when the source was idle before it
//     stopped). An inactive slot retains WAL on the source without bound.
//
// With --kafka (kafka.go) the slot follows the capture, so the target is
// judged too: the topic unreadable, its offset gone from the topic or of a
// topic made again, behind the topic's last commit without advancing for
// longer than --max-inactive (its apply stopped or stuck), or its copy
// (the initial copy, or a table's) not progressing for longer than
// --max-inactive with no apply of the slot connected to the target (its
// apply stopped during the copy).
//
// wal_status `unreserved` (the slot's WAL is beyond max_wal_size and will be
// removed at the next checkpoint unless the slot catches up) is a warning
// only: the slot still works and a running repstream may catch up in time;
// scripts that want to page on it read "warnings" of --format json.

// SlotMissingError says the replication slot does not exist on the source.
type SlotMissingError struct{ Slot string }

func (e *SlotMissingError) Error() string {
	return fmt.Sprintf("replication slot %q does not exist on the source", e.Slot)
}

// Verdict is what `repstream status` concludes about a slot.
type Verdict struct {
	Health   string   `json:"health"`            // "ok", "warn" or "fail"
	Problem  string   `json:"problem,omitempty"` // one line: why the slot is unhealthy (exit code 2)
	Warnings []string `json:"warnings,omitempty"`
}

// Check judges the slot's status: maxInactive bounds how long the slot may
// be inactive (0: no bound).
func (s SlotStatus) Check(maxInactive time.Duration) Verdict {
	var v Verdict
	switch {
	case s.WALStatus == "lost":
		v.Problem = fmt.Sprintf("replication slot %q is invalidated (wal_status lost: the WAL it needs was removed); run `repstream drop --slot %s` and start again to resynchronise", s.Slot, s.Slot)
	case s.Invalidation != "":
		v.Problem = fmt.Sprintf("replication slot %q is invalidated (%s); run `repstream drop --slot %s` and start again to resynchronise", s.Slot, s.Invalidation, s.Slot)
	case !s.Active && maxInactive > 0 && s.InactiveSeconds >= maxInactive.Seconds():
		v.Problem = fmt.Sprintf("replication slot %q has been inactive for %s (more than --max-inactive %s): is repstream running? the slot retains %s of WAL on the source",
			s.Slot, (time.Duration(s.InactiveSeconds) * time.Second).String(), maxInactive, stats.HumanBytes(s.RetainedBytes))
	}
	if s.Kafka != nil && v.Problem == "" {
		s.Kafka.check(s.Slot, maxInactive, &v)
	}
	if s.WALStatus == "unreserved" {
		v.Warnings = append(v.Warnings, fmt.Sprintf("replication slot %q has wal_status unreserved: the WAL it needs exceeds max_wal_size and will be removed at the next checkpoint unless repstream catches up (max_slot_wal_keep_size)", s.Slot))
	}
	if s.ParkedTxns > 0 {
		v.Warnings = append(v.Warnings, fmt.Sprintf("%d source transactions of slot %q are parked in the error queue: the target lacks them until they are retried or skipped (repstream errors list)", s.ParkedTxns, s.Slot))
	}
	if !s.Active && s.InactiveSeconds < 0 {
		v.Warnings = append(v.Warnings, fmt.Sprintf("replication slot %q is inactive for an unknown time (no progress record on the target)", s.Slot))
	}
	switch {
	case v.Problem != "":
		v.Health = "fail"
	case len(v.Warnings) > 0:
		v.Health = "warn"
	default:
		v.Health = "ok"
	}
	return v
}

// readSlotHealth fills in what Check needs beyond the positions: how long
// the slot has been inactive and why it is invalidated. The columns that
// exist only on newer servers are read through to_jsonb, so one query
// serves every version.
func readSlotHealth(ctx context.Context, src, tgt *pgx.Conn, st *SlotStatus) error {
	var hasSince bool
	var since *float64
	var reason *string
	var conflicting *bool
	err := src.QueryRow(ctx, `SELECT to_jsonb(s) ? 'inactive_since',
			extract(epoch FROM now() - (to_jsonb(s)->>'inactive_since')::timestamptz)::float8,
			to_jsonb(s)->>'invalidation_reason', (to_jsonb(s)->>'conflicting')::bool
		FROM pg_replication_slots s WHERE s.slot_name = $1`, st.Slot).Scan(&hasSince, &since, &reason, &conflicting)
	if errors.Is(err, pgx.ErrNoRows) {
		return &SlotMissingError{Slot: st.Slot}
	}
	if err != nil {
		return fmt.Errorf("read slot %q: %w", st.Slot, err)
	}
	switch {
	case reason != nil && *reason != "":
		st.Invalidation = *reason
	case conflicting != nil && *conflicting:
		st.Invalidation = "conflicting with recovery"
	}
	st.InactiveSeconds = 0
	if st.Active {
		return nil
	}
	if hasSince {
		st.InactiveSeconds = -1
		if since != nil {
			st.InactiveSeconds = max(*since, 0)
		}
		return nil
	}
	age, ok, err := target.ProgressAge(ctx, tgt, st.Slot)
	if err != nil {
		return err
	}
	st.InactiveSeconds = -1
	if ok {
		st.InactiveSeconds = max(age.Seconds(), 0)
	}
	return nil
}
