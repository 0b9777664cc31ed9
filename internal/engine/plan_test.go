package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/target"
)

func TestPlanStart(t *testing.T) {
	slot := func(confirmed change.LSN) install.Slot {
		return install.Slot{Exists: true, Plugin: "pgoutput", Confirmed: confirmed, WALStatus: "reserved"}
	}
	record := func(low change.LSN, snap target.SnapshotState) target.Progress {
		return target.Progress{Exists: true, Low: low, Snapshot: snap}
	}
	tests := []struct {
		name       string
		cfg        config.Config
		prog       target.Progress
		createdPub bool
		slot       install.Slot
		steps      []startStep
		prog2      target.Progress // the record streamed from (Low 0 when the slot is created)
		flush      change.LSN
		recordPub  bool
		err        string // refused before any step (planStart's error)
		refuse     string // refused after the steps (stepRefuse)
	}{
		{name: "first start", steps: []startStep{stepCreateSlot},
			prog2: target.Progress{Exists: true, Snapshot: target.SnapshotDone}},
		{name: "first start, publication made", createdPub: true, prog: target.Progress{Exists: true, CreatedPublication: true},
			steps: []startStep{stepCreateSlot}, recordPub: true,
			prog2: target.Progress{Exists: true, Snapshot: target.SnapshotDone, CreatedPublication: true}},
		{name: "no slot, publication made by an earlier start", prog: target.Progress{Exists: true, CreatedPublication: true},
			steps: []startStep{stepCreateSlot}, recordPub: true,
			prog2: target.Progress{Exists: true, Snapshot: target.SnapshotDone}},
		{name: "slot missing, changes applied", prog: record(100, target.SnapshotDone),
			err: `replication slot "s" does not exist on the source, but the target has applied changes up to 0/64`},
		{name: "slot missing, record without a copy", prog: record(100, target.SnapshotNone),
			err: "the slot was dropped"},
		{name: "slot missing, record at 0", prog: record(0, target.SnapshotDone),
			steps: []startStep{stepCreateSlot}, prog2: target.Progress{Exists: true, Snapshot: target.SnapshotDone}},
		{name: "interrupted copy, slot gone", prog: record(100, target.SnapshotRunning),
			steps: []startStep{stepEmptyCopied, stepCreateSlot}, prog2: target.Progress{Exists: true, Snapshot: target.SnapshotDone}},
		{name: "wrong plugin", prog: record(100, target.SnapshotDone), slot: install.Slot{Exists: true, Plugin: "test_decoding", Confirmed: 100},
			err: `replication slot "s" uses plugin "test_decoding"; repstream needs a pgoutput slot`},
		{name: "slot lost", prog: record(100, target.SnapshotDone), slot: install.Slot{Exists: true, Plugin: "pgoutput", Confirmed: 100, WALStatus: "lost"},
			err: `replication slot "s" is invalidated (wal_status lost`},
		{name: "resume", prog: record(100, target.SnapshotDone), slot: slot(100),
			prog2: record(100, target.SnapshotDone), flush: 100},
		{name: "resume, slot ahead of an older record's low", prog: record(100, target.SnapshotNone), slot: slot(90),
			prog2: record(100, target.SnapshotNone), flush: 100},
		{name: "restored target behind the slot", prog: record(100, target.SnapshotDone), slot: slot(200),
			err: `the target has recorded the changes of slot "s" up to 0/64, but the slot has confirmed 0/C8`},
		{name: "restored target behind the slot, adopted", cfg: config.Config{AdoptSlot: true},
			prog: record(100, target.SnapshotDone), slot: slot(200), prog2: record(100, target.SnapshotDone), flush: 200},
		{name: "interrupted copy resumed", prog: record(100, target.SnapshotRunning), slot: slot(100),
			steps: []startStep{stepResumeCopy}, prog2: record(100, target.SnapshotDone), flush: 100},
		{name: "interrupted copy resumed, then found behind the slot", prog: record(100, target.SnapshotRunning), slot: slot(200),
			steps: []startStep{stepResumeCopy, stepRefuse}, refuse: "the slot has confirmed 0/C8"},
		{name: "slot without a record", slot: slot(200),
			err: `replication slot "s" exists on the source (confirmed up to 0/C8) but the target has no state for it`},
		{name: "slot without a record, adopted", cfg: config.Config{AdoptSlot: true}, slot: slot(200),
			steps: []startStep{stepAdoptSlot}, prog2: record(200, target.SnapshotNone), flush: 200},
		{name: "slot with only the publication recorded", prog: target.Progress{Exists: true, CreatedPublication: true}, slot: slot(200),
			err: "the target has recorded the changes of slot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Slot = "s"
			p, err := planStart(found{cfg: tt.cfg, prog: tt.prog, createdPub: tt.createdPub, slot: tt.slot})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("planStart: err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("planStart: %v", err)
			}
			if !slices.Equal(p.steps, tt.steps) {
				t.Errorf("steps %v, want %v", p.steps, tt.steps)
			}
			if tt.refuse != "" {
				if p.refuse == nil || !strings.Contains(p.refuse.Error(), tt.refuse) {
					t.Errorf("refuse %v, want one containing %q", p.refuse, tt.refuse)
				}
				return
			}
			if p.refuse != nil {
				t.Errorf("refuse %v, want none", p.refuse)
			}
			if p.prog.Exists != tt.prog2.Exists || p.prog.Low != tt.prog2.Low || p.prog.Snapshot != tt.prog2.Snapshot ||
				p.prog.CreatedPublication != tt.prog2.CreatedPublication {
				t.Errorf("prog %+v, want %+v", p.prog, tt.prog2)
			}
			if p.initialFlush != tt.flush || p.recordPub != tt.recordPub {
				t.Errorf("initialFlush %s, recordPub %v; want %s, %v", p.initialFlush, p.recordPub, tt.flush, tt.recordPub)
			}
		})
	}
}

func TestResuming(t *testing.T) {
	tests := []struct {
		name                      string
		prog                      target.Progress
		firstStart                bool
		mode                      ddlMode
		schemaMayLag, copyResumed bool
	}{
		{name: "first start", firstStart: true, mode: ddlTrigger},
		{name: "streaming resumed", prog: target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotDone}, mode: ddlTrigger, schemaMayLag: true},
		{name: "streaming resumed, relation messages", prog: target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotNone}, mode: ddlRelation, schemaMayLag: true},
		{name: "streaming resumed, --ddl=false", prog: target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotDone}, mode: ddlOff},
		{name: "record at 0", prog: target.Progress{Exists: true, Snapshot: target.SnapshotDone}, mode: ddlTrigger},
		{name: "copy resumed", prog: target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotRunning}, mode: ddlTrigger, copyResumed: true},
		{name: "copy whose slot is gone", prog: target.Progress{Exists: true, Low: 100, Snapshot: target.SnapshotRunning}, firstStart: true, mode: ddlTrigger},
	}
	for _, tt := range tests {
		lag, resumed := resuming(tt.prog, tt.firstStart, tt.mode)
		if lag != tt.schemaMayLag || resumed != tt.copyResumed {
			t.Errorf("%s: schemaMayLag %v, copyResumed %v; want %v, %v", tt.name, lag, resumed, tt.schemaMayLag, tt.copyResumed)
		}
	}
}
