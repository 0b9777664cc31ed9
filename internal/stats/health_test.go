package stats

import (
	"strings"
	"testing"
	"time"
)

// TestHealthSides: a probed side (the source, the target, the Kafka
// brokers) whose last probe failed makes /healthz unhealthy with its
// error; one not probed (yet) does not; a stale success does.
func TestHealthSides(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		comp ComponentSnapshot
		want string // in a reason; "" for healthy
	}{
		{"kafka down", ComponentSnapshot{Name: CompKafka, Gauges: map[string]int64{GaugeUp: 0},
			Info: map[string]string{InfoLastError: "kafka 127.0.0.1:9092: dial tcp: connection refused"}}, "kafka connection down: kafka 127.0.0.1:9092"},
		{"kafka up", ComponentSnapshot{Name: CompKafka, Gauges: map[string]int64{GaugeUp: 1, GaugeLastOKUnixNano: now.Add(-time.Second).UnixNano()}}, ""},
		{"kafka counters only (no probe yet)", ComponentSnapshot{Name: CompKafka, Counters: map[string]int64{"records": 10}}, ""},
		{"kafka stale", ComponentSnapshot{Name: CompKafka, Gauges: map[string]int64{GaugeUp: 1, GaugeLastOKUnixNano: now.Add(-time.Minute).UnixNano()}}, "kafka: no successful probe for 1m0s"},
		{"target down", ComponentSnapshot{Name: CompTarget, Info: map[string]string{InfoLastError: "refused"}}, "target connection down: refused"},
	} {
		ok, reasons := Health(Snapshot{Time: now, Components: []ComponentSnapshot{tc.comp}}, HealthOptions{})
		got := strings.Join(reasons, "; ")
		if tc.want == "" && !ok || tc.want != "" && (ok || !strings.Contains(got, tc.want)) {
			t.Errorf("%s: healthy %v, reasons %q; want %q", tc.name, ok, got, tc.want)
		}
	}
}
