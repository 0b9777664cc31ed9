package stats

import (
	"bytes"
	"testing"
)

// FuzzMetricsExposition feeds arbitrary component, counter, gauge and info
// names through WriteMetrics and checks the output is always valid exposition
// text with every series present exactly once.
func FuzzMetricsExposition(f *testing.F) {
	f.Add("capture", "keepalives", "depth", "slot", "s1")
	f.Add("apply.0", "rows.copied", "txns-open", "protocol", "4")
	f.Add("a\"b\\c\nd", "items", "state", "note", "say \"hi\"\n")
	f.Add("", "", "", "", "")
	f.Add("x", "9lives", "items_total", "k", "v")
	f.Add("x", "state_seconds", "info", "k", "v")
	f.Add("é", "ünïcode", "日本", "ключ", "значение")
	f.Fuzz(func(t *testing.T, comp, counter, gauge, infoKey, infoValue string) {
		r := NewRegistry()
		c := r.Component(comp)
		c.Add(1, 2)
		c.Counter(counter).Add(3)
		c.Counter(counter + "_total").Add(4) // may sanitise onto the same series
		c.Gauge(gauge).Store(-5)
		c.SetInfo(infoKey, infoValue)
		r.Component(comp + "2").Gauge(gauge).Store(6)

		var buf bytes.Buffer
		if err := WriteMetrics(&buf, r.Snapshot()); err != nil {
			t.Fatal(err)
		}
		series, err := parseExposition(buf.Bytes())
		if err != nil {
			t.Fatalf("invalid exposition: %v\n%s", err, buf.Bytes())
		}
		// Built-ins: uptime, 3 counters x2 components, 3 state seconds and
		// 3 state gauges x2, one info; plus custom series.
		if min := 1 + 6 + 12 + 1 + 1 + 2; len(series) < min {
			t.Fatalf("%d series, want at least %d:\n%s", len(series), min, buf.Bytes())
		}
	})
}
