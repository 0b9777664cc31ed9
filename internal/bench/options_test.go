package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{Workload: "conditions"}
	ok.EnsureDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if ok.Mode != ModeLive || len(ok.Systems) != 2 || ok.Params.Scale != 1 || ok.Out != "bench-conditions" || ok.Timeout != 30*time.Minute {
		t.Errorf("EnsureDefaults: %+v", ok)
	}
	dbl := Options{Workload: "dbl", Mode: ModeBacklog}
	dbl.EnsureDefaults()
	if dbl.Mode != ModeLive {
		t.Errorf("dbl runs live, got %s", dbl.Mode)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"workload", Options{Workload: "conditons"}, `unknown workload "conditons"`},
		{"mode", Options{Workload: "conditions", Mode: "bakclog"}, `--mode "bakclog": want live or backlog`},
		{"system", Options{Workload: "conditions", Systems: []System{"slony"}}, `--systems: unknown system "slony"`},
		{"repeat", Options{Workload: "conditions", Repeat: -1}, "--repeat -1"},
		{"repeat and vary", Options{Workload: "conditions", Repeat: 2, Vary: "apply-parallelism=1,2"}, "one at a time"},
		{"dbl repeat", Options{Workload: "dbl", Repeat: 2}, "not for dbl"},
		{"vary", Options{Workload: "conditions", Vary: "apply-parallelism"}, "--vary"},
		{"source alone", Options{Workload: "conditions", SourceDSN: "host=x"}, "--source and --target go together"},
		{"brokers", Options{Workload: "fly", Systems: []System{SystemKafka}, KafkaBrokers: 4}, "--kafka-brokers 4"},
		{"targets", Options{Workload: "fly", Systems: []System{SystemKafka}, KafkaTargets: 3}, "--kafka-targets 3"},
		{"brokers without kafka", Options{Workload: "fly", KafkaBrokers: 3}, "add kafka to --systems"},
		{"stopped target in backlog", Options{Workload: "fly", Mode: ModeBacklog, Systems: []System{SystemKafka}, KafkaTargets: 2}, "live mode only"},
		{"stopped target in initial-copy", Options{Workload: "initial-copy", Systems: []System{SystemKafka}, KafkaTargets: 2}, "not for initial-copy"},
		{"unix socket", Options{Workload: "conditions", SourceDSN: "host=x", TargetDSN: "host=y", UnixSocket: true}, "--unix-socket"},
	} {
		o := tc.o
		o.EnsureDefaults()
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	var m Mode
	if err := m.Set("bakclog"); err == nil {
		t.Error("Mode.Set accepted a typo")
	}
	var s Systems
	if err := s.Set("repstream,natve"); err == nil || !strings.Contains(err.Error(), `"natve"`) {
		t.Errorf("Systems.Set with a typo: %v", err)
	}
	if err := s.Set("native, repstream"); err != nil || s.String() != "native,repstream" {
		t.Errorf("Systems.Set: %v %q", err, s)
	}
	if err := s.Set("native,native"); err == nil {
		t.Error("Systems.Set accepted a system twice")
	}
}

func TestRunFigures(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	base := readings{
		loadStart: at(0), loadEnd: at(4), replStart: at(1), visible: at(6),
		load:    LoadStats{Rows: 1000, Txns: 10, SourceRows: 1200},
		srcWAL0: change.LSN(1000), srcWAL1: change.LSN(5000), tgtWAL0: change.LSN(100), tgtWAL1: change.LSN(3100),
		payload: 2_000_000,
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		mode                                     Mode
		repl, lastToVisible, catchUp, rows, mbps float64
		loadSecs, loadRowsPerSec, loadTxnsPerSec float64
		srcBytes, tgtBytes                       int64
		walRatio                                 float64
	}{
		{ModeLive, 5, 2, 2, 200, 0.4, 4, 300, 2.5, 4000, 3000, 0.75},
		{ModeBacklog, 5, 2, 5, 200, 0.4, 4, 300, 2.5, 4000, 3000, 0.75},
	} {
		m := base
		m.mode = tc.mode
		lf, rf, wf := runFigures(m)
		if !near(rf.Seconds, tc.repl) || !near(rf.LastCommitToVisibleSeconds, tc.lastToVisible) || !near(rf.CatchUpSeconds, tc.catchUp) ||
			!near(rf.RowsPerSec, tc.rows) || !near(rf.MBPerSec, tc.mbps) {
			t.Errorf("%s: replication figures %+v", tc.mode, rf)
		}
		if rf.StartToVisibleSeconds != 0 {
			t.Errorf("%s: start → visible %v without a warm-up", tc.mode, rf.StartToVisibleSeconds)
		}
		if !near(lf.Seconds, tc.loadSecs) || !near(lf.RowsPerSec, tc.loadRowsPerSec) || !near(lf.TxnsPerSec, tc.loadTxnsPerSec) ||
			lf.Rows != 1000 || lf.Txns != 10 || lf.SourceRows != 1200 || lf.PayloadBytes != 2_000_000 {
			t.Errorf("%s: load figures %+v", tc.mode, lf)
		}
		m.sysStart, m.started = at(-1), at(-0.75)
		if _, rf, _ := runFigures(m); !near(rf.StartToVisibleSeconds, 0.25) {
			t.Errorf("%s: start → visible %v, want 0.25", tc.mode, rf.StartToVisibleSeconds)
		}
		if wf.SourceBytes != tc.srcBytes || wf.TargetBytes != tc.tgtBytes || !near(wf.Ratio, tc.walRatio) {
			t.Errorf("%s: WAL figures %+v", tc.mode, wf)
		}
	}
	// Degenerate readings divide by nothing.
	lf, rf, wf := runFigures(readings{mode: ModeBacklog})
	if lf.RowsPerSec != 0 || rf.RowsPerSec != 0 || rf.MBPerSec != 0 || wf.Ratio != 0 {
		t.Errorf("empty readings: %+v %+v %+v", lf, rf, wf)
	}
}
