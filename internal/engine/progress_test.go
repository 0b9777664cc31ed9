package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/stats"
)

func TestETA(t *testing.T) {
	for _, tt := range []struct {
		rows int64
		rate float64
		want string
	}{{0, 10, "0s"}, {100, 0, "unknown"}, {5, 100, "<1s"}, {1000, 10, "1m40s"}} {
		if got := eta(tt.rows, tt.rate); got != tt.want {
			t.Errorf("eta(%d, %v) = %q, want %q", tt.rows, tt.rate, got, tt.want)
		}
	}
}

// TestCopyProgressLog: the initial copy's progress, per table and in
// total, with rows, bytes, rates and ETA, as JSON log records.
func TestCopyProgressLog(t *testing.T) {
	var buf bytes.Buffer
	log, err := config.NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	reg := stats.NewRegistry()
	a := reg.Component(stats.CopyPrefix + "public.a")
	b := reg.Component(stats.CopyPrefix + "public.b")
	a.Gauge(stats.GaugeRowsEstimate).Store(1000)
	b.Gauge(stats.GaugeRowsEstimate).Store(50)
	prev := reg.Snapshot()
	a.Add(400, 4000)
	b.Add(50, 500)
	b.Gauge(stats.GaugeDone).Store(1)
	cur := reg.Snapshot()
	cur.Time = prev.Time.Add(2 * time.Second)
	e := &Engine{log: log}
	e.logCopyProgress(prev, cur)
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want one for the table in progress and the total:\n%s", len(recs), buf.String())
	}
	tbl, tot := recs[0], recs[1]
	if tbl["table"] != "public.a" || tbl["rows"] != 400.0 || tbl["rows_per_second"] != 200.0 || tbl["eta"] != "3s" {
		t.Errorf("table record: %v", tbl)
	}
	// 450 of 1050 rows at 225 rows/s: 600 left, 2.67 s.
	if tot["tables_done"] != 1.0 || tot["tables"] != 2.0 || tot["rows"] != 450.0 || tot["rows_estimate"] != 1050.0 || tot["eta"] != "3s" {
		t.Errorf("total record: %v", tot)
	}
}

// TestProgressLineCountsEager: changes applied eagerly count in the line.
func TestProgressLineCountsEager(t *testing.T) {
	reg := stats.NewRegistry()
	prev := reg.Snapshot()
	reg.Component("eager").Add(5000, 1)
	reg.Component("apply.0").Add(1000, 1)
	cur := reg.Snapshot()
	cur.Time = prev.Time.Add(time.Second)
	if line := ProgressLine(prev, cur); !strings.Contains(line, "apply 6.0K rows/s") {
		t.Errorf("progress line %q does not count eager apply", line)
	}
}

// TestProgressLineUnacknowledged: a run's line says what its slot has sent
// and not had acknowledged; an apply --kafka's, which acknowledges nothing
// to a slot, says nothing of it (it said the whole position received, ever
// growing).
func TestProgressLineUnacknowledged(t *testing.T) {
	reg := stats.NewRegistry()
	reg.Component("capture").Gauge("received_lsn").Store(3 << 20)
	prev := reg.Snapshot()
	if line := ProgressLine(prev, reg.Snapshot()); strings.Contains(line, "unacknowledged") {
		t.Errorf("apply --kafka's line %q speaks of unacknowledged WAL", line)
	}
	reg.Component("capture").Gauge("flushed_lsn").Store(1 << 20)
	if line := ProgressLine(prev, reg.Snapshot()); !strings.Contains(line, "unacknowledged 2.0MiB") {
		t.Errorf("a run's line %q, want unacknowledged 2.0MiB", line)
	}
}
