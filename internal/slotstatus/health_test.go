package slotstatus

import (
	"strings"
	"testing"
	"time"
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
