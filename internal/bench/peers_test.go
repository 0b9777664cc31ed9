package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestParsePeerSystems(t *testing.T) {
	var l Systems
	if err := l.Set("repstream, native,pglogical,pgstream,pgcopydb"); err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != "repstream,native,pglogical,pgstream,pgcopydb" {
		t.Errorf("Systems = %s", got)
	}
	if err := l.Set("native,slony"); err == nil || !strings.Contains(err.Error(), `unknown system "slony"`) || !strings.Contains(err.Error(), "pgcopydb") {
		t.Errorf("unknown system: %v", err)
	}
	for s, peer := range map[System]bool{SystemRepstream: false, SystemNative: false, SystemPglogical: true, SystemPgstream: true, SystemPgcopydb: true} {
		if s.IsPeer() != peer {
			t.Errorf("%s.IsPeer() = %v", s, !peer)
		}
	}
}

// TestSelectSystems: a peer that is not installed, or that cannot run the
// workload, is skipped with the reason (and the install command); the
// others stay in order.
func TestSelectSystems(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	t.Setenv("HOME", empty)
	t.Setenv("GOPATH", empty)
	t.Setenv("GOBIN", empty)
	ic, _ := Lookup("initial-copy")
	sr, _ := Lookup("single-row")
	o := Options{Systems: []System{SystemRepstream, SystemPgcopydb, SystemNative, SystemPgstream}}
	skipped := selectSystems(&o, ic)
	if Systems(o.Systems).String() != "repstream,native" {
		t.Errorf("kept %s", Systems(o.Systems))
	}
	if !strings.Contains(skipped["pgcopydb"], "not installed") || !strings.Contains(skipped["pgcopydb"], "apt-get install pgcopydb") {
		t.Errorf("pgcopydb: %q", skipped["pgcopydb"])
	}
	if !strings.Contains(skipped["pgstream"], "initial-copy") {
		t.Errorf("pgstream: %q", skipped["pgstream"])
	}
	o = Options{Systems: []System{SystemPgcopydb, SystemPgstream, SystemNative}}
	skipped = selectSystems(&o, sr)
	if Systems(o.Systems).String() != "native" {
		t.Errorf("kept %s", Systems(o.Systems))
	}
	if !strings.Contains(skipped["pgcopydb"], "initial-copy workload only") {
		t.Errorf("pgcopydb: %q", skipped["pgcopydb"])
	}
	if !strings.Contains(skipped["pgstream"], "go install github.com/xataio/pgstream@"+PgstreamVersion) {
		t.Errorf("pgstream: %q", skipped["pgstream"])
	}
}

func TestWithPreload(t *testing.T) {
	in := map[string]string{"work_mem": "8MB"}
	if got := withPreload(in, []System{SystemNative}); got["shared_preload_libraries"] != "" {
		t.Errorf("without pglogical: %v", got)
	}
	got := withPreload(in, []System{SystemPglogical})
	if got["shared_preload_libraries"] != "pglogical" || got["work_mem"] != "8MB" || in["shared_preload_libraries"] != "" {
		t.Errorf("with pglogical: %v (input %v)", got, in)
	}
	got = withPreload(map[string]string{"shared_preload_libraries": "'pg_stat_statements'"}, []System{SystemPglogical})
	if got["shared_preload_libraries"] != "pg_stat_statements,pglogical" {
		t.Errorf("appended: %v", got)
	}
}

func TestPgURL(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=127.0.0.1 port=5433 user=rs dbname=bench_1 sslmode=disable": "postgres://rs@127.0.0.1:5433/bench_1?sslmode=disable",
		"host=/tmp/d port=5433 user=rs dbname=b sslmode=disable":          "postgres://rs@:5433/b?host=%2Ftmp%2Fd&sslmode=disable",
		"postgres://u@h:1/db": "postgres://u@h:1/db",
	} {
		got, err := pgURL(dsn)
		if err != nil || got != want {
			t.Errorf("pgURL(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
}

func TestInitialCopyRows(t *testing.T) {
	r := initialCopyRows(Params{Scale: 1})
	if r["ic_orders"] != 3_000_000 || r["ic_customers"] != 500_000 || r["ic_events"] != 500_000 || r["ic_stock"] != 500_000 {
		t.Errorf("scale 1: %v", r)
	}
	r = initialCopyRows(Params{Rows: 600})
	if r["ic_orders"] != 600 || r["ic_stock"] != 100 {
		t.Errorf("rows 600: %v", r)
	}
	for _, tb := range initialCopyTables {
		if initialCopyInserts[tb] == "" {
			t.Errorf("no generator for %s", tb)
		}
	}
}

// TestCopyMarkdown: an initial-copy report shows every system with its
// ratio to native, the CPU by process group and the per-table times.
func TestCopyMarkdown(t *testing.T) {
	mk := func(sys System, secs, cpu float64) *RunResult {
		r := &RunResult{System: sys, Label: sys.String(), Verified: true}
		r.Replication = ReplFigures{Seconds: secs}
		r.Resources = Resources{EngineCPUSeconds: cpu, SourceBackendsCPUSeconds: 1, TotalCPUSeconds: cpu + 1}
		r.CopyTables = []CopyTableTime{{Table: "ic_orders", Rows: 100, Seconds: secs / 2}, {Table: "ic_stock", Rows: 10, Seconds: -1}}
		return r
	}
	rep := &Report{Workload: "initial-copy", Mode: ModeLive, Description: "d",
		Settings: Settings{Native: map[string]string{}, Skipped: map[string]string{"pgstream": "not for this workload"},
			Peers: map[string]string{"pgcopydb": "pgcopydb clone --table-jobs 2"}},
		Runs: []*RunResult{mk(SystemRepstream, 4, 3), mk(SystemNative, 8, 0), mk(SystemPgcopydb, 6, 5)}}
	var b bytes.Buffer
	WriteMarkdown(&b, rep, nil)
	md := b.String()
	for _, want := range []string{
		"| figure | repstream | native | pgcopydb | repstream / native | pgcopydb / native |",
		"| copy time (start → every row on the target, done) (s) | 4.00 | 8.00 | 6.00 | 0.50 | 0.75 |",
		"| source backends CPU (COPY TO …) (s) | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 |",
		"| ic_orders | 100 | 2.00 | 4.00 | 3.00 |",
		"| ic_stock | 10 | — | — | — |",
		"**skipped pgstream**: not for this workload",
		"- pgcopydb: pgcopydb clone --table-jobs 2",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "probe latency") {
		t.Errorf("an initial-copy report shows probe latency:\n%s", md)
	}
}
