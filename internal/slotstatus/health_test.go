package slotstatus

import (
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

func TestSlotStatusCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		st          SlotStatus
		maxInactive time.Duration
		health      string
		problem     string // substring of the one-line reason, "" = none
		warning     string // substring of a warning, "" = none
	}{
		{name: "active", st: SlotStatus{Active: true, WALStatus: "reserved"}, maxInactive: time.Minute, health: "ok"},
		{name: "recently inactive", st: SlotStatus{WALStatus: "reserved", InactiveSeconds: 30}, maxInactive: time.Minute, health: "ok"},
		{name: "inactive too long", st: SlotStatus{WALStatus: "reserved", InactiveSeconds: 61, RetainedBytes: 3 << 20}, maxInactive: time.Minute,
			health: "fail", problem: "inactive for 1m1s (more than --max-inactive 1m0s): is repstream running? the slot retains 3.0MiB"},
		{name: "no bound", st: SlotStatus{WALStatus: "reserved", InactiveSeconds: 1e6}, health: "ok"},
		{name: "lost", st: SlotStatus{Active: true, WALStatus: "lost"}, maxInactive: time.Minute, health: "fail", problem: "invalidated (wal_status lost"},
		{name: "invalidation reason", st: SlotStatus{WALStatus: "reserved", Invalidation: "rows_removed"}, health: "fail", problem: "invalidated (rows_removed)"},
		{name: "unreserved is a warning", st: SlotStatus{Active: true, WALStatus: "unreserved"}, maxInactive: time.Minute, health: "warn", warning: "wal_status unreserved"},
		{name: "unknown inactivity is a warning", st: SlotStatus{WALStatus: "reserved", InactiveSeconds: -1}, maxInactive: time.Minute, health: "warn", warning: "unknown time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.st.Slot = "s"
			v := tt.st.Check(tt.maxInactive)
			if v.Health != tt.health {
				t.Errorf("health %q, want %q (%+v)", v.Health, tt.health, v)
			}
			if (tt.problem == "") != (v.Problem == "") || !strings.Contains(v.Problem, tt.problem) {
				t.Errorf("problem %q, want %q", v.Problem, tt.problem)
			}
			if strings.Contains(v.Problem, "\n") {
				t.Errorf("problem %q is not one line", v.Problem)
			}
			if tt.warning == "" && len(v.Warnings) > 0 || tt.warning != "" && (len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], tt.warning)) {
				t.Errorf("warnings %q, want %q", v.Warnings, tt.warning)
			}
		})
	}
}

// TestKafkaCheck: status --kafka fails when the topic cannot be read, the
// target's offset is gone from it (retention) or is of a topic deleted
// since (another topic id), and says how to re-seed.
func TestKafkaCheck(t *testing.T) {
	ok := SlotStatus{Slot: "s", Active: true, WALStatus: "reserved"}
	for _, tc := range []struct {
		name string
		k    KafkaStatus
		want string // in Problem; "" for healthy
	}{
		{"reading", KafkaStatus{Topic: "repstream.s", Start: 0, End: 10, Offset: 4, LagRecords: 6}, ""},
		{"no offset yet", KafkaStatus{Topic: "repstream.s", End: 10, Offset: -1}, ""},
		{"brokers down", KafkaStatus{Topic: "repstream.s", Error: "kafka [127.0.0.1:1]: dial tcp: connection refused"}, "127.0.0.1:1"},
		{"trimmed", KafkaStatus{Topic: "repstream.s", Start: 50, End: 60, Offset: 40}, "drop --target-only"},
		{"same topic", KafkaStatus{Topic: "repstream.s", End: 10, Offset: 4, TopicID: "AAAA", RecordedID: "AAAA"}, ""},
		{"id not recorded", KafkaStatus{Topic: "repstream.s", End: 10, Offset: 4, TopicID: "AAAA"}, ""},
		{"made again", KafkaStatus{Topic: "repstream.s", End: 10, Offset: 4, TopicID: "BBBB", RecordedID: "AAAA"}, "deleted and made again"},
	} {
		st := ok
		k := tc.k
		st.Kafka = &k
		v := st.Check(0)
		if tc.want == "" && v.Problem != "" || tc.want != "" && !strings.Contains(v.Problem, tc.want) {
			t.Errorf("%s: problem %q, want one containing %q", tc.name, v.Problem, tc.want)
		}
		var b strings.Builder
		st.Format(&b)
		if !strings.Contains(b.String(), "kafka topic        repstream.s") {
			t.Errorf("%s: Format does not show the topic:\n%s", tc.name, b.String())
		}
	}
}

// TestKafkaJudge: a target is caught up when its low watermark is at or
// past the topic's last commit, whatever the offsets say (the capture's
// Kafka transaction markers take offsets: a caught-up target's offset stays
// below the end); behind, it is behind by the WAL between them.
func TestKafkaJudge(t *testing.T) {
	for _, tc := range []struct {
		last, low change.LSN
		caughtUp  bool
		behind    int64
	}{
		{0, 0, true, 0},           // the topic holds no commit
		{0x3000, 0x3000, true, 0}, // every commit applied
		{0x3000, 0x3100, true, 0}, // the copy's sync LSN past it
		{0x3000, 0x2800, false, 0x800},
	} {
		k := KafkaStatus{Start: 0, End: 100, Offset: 97, LagRecords: 3}
		k.judge(tc.last, tc.low)
		if k.CaughtUp != tc.caughtUp || k.BehindBytes != tc.behind {
			t.Errorf("last commit %s, low %s: caught up %v, behind %d; want %v, %d", tc.last, tc.low, k.CaughtUp, k.BehindBytes, tc.caughtUp, tc.behind)
		}
	}
}

// TestKafkaStale: --max-inactive flags a target behind the topic whose
// progress has not advanced for the limit and whose oldest missing commit
// is that old (or unknown): a stopped apply, though the slot stays active
// through the capture. Not a caught-up one, however long idle; not a copy
// under way (its apply connected); not one that lacks only a recent
// commit. A copy whose apply is not connected and whose record has not
// changed for the limit is flagged: its apply stopped during the copy.
func TestKafkaStale(t *testing.T) {
	ok := SlotStatus{Slot: "s", Active: true, WALStatus: "reserved", LagSeconds: 0}
	behind := KafkaStatus{Topic: "repstream.s", End: 100, Offset: 40, LagRecords: 60, LastCommit: "0/3000",
		BehindBytes: 0x800, BehindSeconds: 400, ProgressAgeSeconds: 420, CaptureLagSeconds: 0}
	caughtUp := KafkaStatus{Topic: "repstream.s", End: 100, Offset: 97, LagRecords: 3, LastCommit: "0/3000",
		CaughtUp: true, ProgressAgeSeconds: 3600, CaptureLagSeconds: 0.002}
	copyStopped := behind
	copyStopped.Copying, copyStopped.CopyAgeSeconds, copyStopped.target, copyStopped.copyWhat = true, 420, `database "t" on h:5432`, "the initial copy"
	for _, tc := range []struct {
		name        string
		k           KafkaStatus
		maxInactive time.Duration
		want        string // in Problem; "" for healthy
		line        string // in Format's output
	}{
		{"stopped", behind, 5 * time.Minute, "has not advanced for 7m0s (more than --max-inactive 5m0s), lacks a commit of 6m40s ago and is 2.0KiB of WAL behind topic repstream.s (its last commit 0/3000): is its repstream apply running?",
			"behind the topic by 2.0KiB of WAL, since a commit of 6m40s ago; its progress last advanced 7m0s ago"},
		{"no bound", behind, 0, "", "target's offset    40\n"},
		{"not yet", behind, 10 * time.Minute, "", "capture lag        0.000 s"},
		{"caught up, long idle", caughtUp, time.Minute, "", "target             caught up with the topic"},
		{"a recent commit after a quiet hour", func() KafkaStatus { k := behind; k.BehindSeconds, k.ProgressAgeSeconds = 2, 3600; return k }(), time.Minute, "", "since a commit of 2s ago"},
		{"its commit unknown", func() KafkaStatus { k := behind; k.BehindSeconds = -1; return k }(), time.Minute, "has not advanced for 7m0s", "behind the topic by 2.0KiB of WAL; its progress last advanced 7m0s ago"},
		{"copying", func() KafkaStatus {
			k := behind
			k.Copying, k.ApplyConnected, k.CopyAgeSeconds = true, true, 3600
			return k
		}(), time.Minute, "", "target's copy      under way (the initial copy, or a table's), its record last changed 1h0m0s ago"},
		{"copy stopped", copyStopped, 5 * time.Minute,
			`the initial copy of the target database "t" on h:5432 (slot "s") has not progressed for 7m0s (more than --max-inactive 5m0s), and no repstream apply of the slot is connected to it`,
			"target's copy      stopped: no repstream apply of the slot is connected to the target, its record last changed 7m0s ago"},
		{"copy stopped, not yet", copyStopped, 10 * time.Minute, "", "target's copy      stopped"},
		{"copy stopped, no offset yet", func() KafkaStatus { k := copyStopped; k.Offset = -1; return k }(), 5 * time.Minute, "the initial copy of the target", "target's offset    none recorded"},
		{"no capture", func() KafkaStatus { k := caughtUp; k.CaptureLagSeconds = -1; return k }(), time.Minute, "", "capture lag        unknown (no capture streams from the slot)"},
	} {
		st := ok
		k := tc.k
		st.Kafka = &k
		v := st.Check(tc.maxInactive)
		if tc.want == "" && v.Problem != "" || tc.want != "" && !strings.Contains(v.Problem, tc.want) {
			t.Errorf("%s: problem %q, want one containing %q", tc.name, v.Problem, tc.want)
		}
		var b strings.Builder
		st.Format(&b)
		if !strings.Contains(b.String(), tc.line) {
			t.Errorf("%s: Format lacks %q:\n%s", tc.name, tc.line, b.String())
		}
	}
}
