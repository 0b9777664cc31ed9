package engine

import (
	"fmt"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/target"
)

// A start as a plan: run finds what is there — the target's record for the
// slot, the slot, the settings — and planStart, a pure function of that,
// decides what to do with the slot, or refuses; run then carries the plan
// out (carryOut). What the start provisions before (the publication, the
// event trigger, the target tables: package install) is the same whatever
// the plan.

// found is what a start found when it decides what to do with the slot.
type found struct {
	cfg        config.Config   // Slot, AdoptSlot (and the rest, unread)
	prog       target.Progress // the target's record for the slot (with the publication this start made)
	createdPub bool            // this start created the publication
	slot       install.Slot    // the slot on the source, as it is now
}

// startStep is one thing a plan does, in order.
type startStep int

const (
	// stepEmptyCopied: the slot of an interrupted initial copy is gone;
	// what the copy wrote is emptied, to be copied again from the new
	// slot's snapshot.
	stepEmptyCopied startStep = iota
	// stepCreateSlot: create the slot (with the initial copy under
	// --snapshot); the run streams from its consistent point.
	stepCreateSlot
	// stepResumeCopy: resume the interrupted initial copy (the slot is
	// there): the tables not copied yet are copied again whole.
	stepResumeCopy
	// stepAdoptSlot: --adopt-slot, the target has no record: record the
	// slot's confirmed position as applied, without an initial copy.
	stepAdoptSlot
	// stepRefuse: refuse after the steps before it (startPlan.refuse).
	stepRefuse
)

func (s startStep) String() string {
	return [...]string{"empty copied", "create slot", "resume copy", "adopt slot", "refuse"}[s]
}

// startPlan is what a start does with the slot: its steps in order, then
// it streams from prog at initialFlush. With stepCreateSlot, prog.Low and
// initialFlush are the new slot's consistent point, which only creating
// it tells.
type startPlan struct {
	steps        []startStep
	prog         target.Progress
	initialFlush change.LSN
	// recordPub is what the created slot's record says of the publication:
	// repstream created it (this start or an earlier one).
	recordPub bool
	// refuse is what stepRefuse returns: a resumed copy's target checked
	// as the resumed copy leaves it (checkRestoredTarget), after it.
	refuse error
}

// planStart decides, from what a start found, what it does with the slot:
//
//   - no slot, and a record of applied changes (not of an interrupted
//     copy): the slot was dropped and changes are lost — refused;
//   - no slot: create it, emptying first what an interrupted copy wrote;
//   - a slot of another plugin, or invalidated (wal_status lost): refused;
//   - a slot with an interrupted copy recorded: resume the copy;
//   - a slot behind which the target's record lags (checkRestoredTarget):
//     refused, unless --adopt-slot;
//   - a slot without a record on the target: refused, unless --adopt-slot
//     (then adopted at its confirmed position);
//   - otherwise: stream from the record, or the slot's confirmed position
//     if that is further.
func planStart(f found) (startPlan, error) {
	cfg, prog, slot := f.cfg, f.prog, f.slot
	if !slot.Exists {
		if prog.Exists && prog.Low > 0 && prog.Snapshot != target.SnapshotRunning {
			return startPlan{}, fmt.Errorf("replication slot %q does not exist on the source, but the target has applied changes up to %s: "+
				"the slot was dropped and the changes since then are lost; run `repstream drop --slot %s` and start again to resynchronise",
				cfg.Slot, prog.Low, cfg.Slot)
		}
		var p startPlan
		if prog.Snapshot == target.SnapshotRunning {
			p.steps = append(p.steps, stepEmptyCopied)
		}
		p.steps = append(p.steps, stepCreateSlot)
		p.prog = target.Progress{Exists: true, Snapshot: target.SnapshotDone, CreatedPublication: f.createdPub}
		p.recordPub = f.createdPub || prog.CreatedPublication
		return p, nil
	}
	if slot.Plugin != "pgoutput" {
		return startPlan{}, fmt.Errorf("replication slot %q uses plugin %q; repstream needs a pgoutput slot", cfg.Slot, slot.Plugin)
	}
	if slot.WALStatus == "lost" {
		return startPlan{}, fmt.Errorf("replication slot %q is invalidated (wal_status lost: the WAL it needed was removed, max_slot_wal_keep_size): "+
			"run `repstream drop --slot %s` and start again to resynchronise", cfg.Slot, cfg.Slot)
	}
	var p startPlan
	if prog.Exists && prog.Snapshot == target.SnapshotRunning {
		p.steps = append(p.steps, stepResumeCopy)
		prog.Snapshot = target.SnapshotDone
	}
	if err := checkRestoredTarget(cfg, prog, slot.Confirmed); err != nil {
		if len(p.steps) == 0 {
			return startPlan{}, err
		}
		p.steps, p.refuse = append(p.steps, stepRefuse), err
		return p, nil
	}
	if !prog.Exists {
		if !cfg.AdoptSlot {
			return startPlan{}, fmt.Errorf("replication slot %q exists on the source (confirmed up to %s) but the target has no state for it: "+
				"the target may be another one than the slot's (a wrong --target) or rebuilt, and the changes before %s would be missing on it; "+
				"run `repstream drop --slot %s` and start again for a new initial copy, or pass --adopt-slot if the target holds the data up to %s",
				cfg.Slot, slot.Confirmed, slot.Confirmed, cfg.Slot, slot.Confirmed)
		}
		p.steps = append(p.steps, stepAdoptSlot)
		prog = target.Progress{Exists: true, Low: slot.Confirmed, Snapshot: target.SnapshotNone}
	}
	p.prog, p.initialFlush = prog, max(prog.Low, slot.Confirmed)
	return p, nil
}

// resuming says how a start that found prog (firstStart: no slot when it
// began) takes the target's tables, following schema changes as mode says:
// schemaMayLag, a stream resumed with schema changes followed, whose
// target tables may lag the source's until the stream's pending changes
// are applied; copyResumed, an initial copy an earlier run began, resumed.
func resuming(prog target.Progress, firstStart bool, mode ddlMode) (schemaMayLag, copyResumed bool) {
	schemaMayLag = mode != ddlOff && prog.Exists && prog.Low > 0 && prog.Snapshot != target.SnapshotRunning
	copyResumed = prog.Exists && prog.Snapshot == target.SnapshotRunning && !firstStart
	return schemaMayLag, copyResumed
}
