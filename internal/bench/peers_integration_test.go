package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPeers runs a tiny bench of every peer beside repstream and native on
// throwaway clusters (pglogical needs them started with
// shared_preload_libraries): the initial copy and a single-row backlog.
// Every run that is not skipped must verify row for row; a peer that is not
// installed is skipped by the bench (settings.skipped names the install
// command), and the test skips when no peer is installed at all.
func TestPeers(t *testing.T) {
	cases := []struct {
		workload string
		mode     Mode
		params   Params
		systems  []System
	}{
		{"initial-copy", ModeLive, Params{Rows: 6000}, []System{SystemRepstream, SystemNative, SystemPgcopydb, SystemPglogical}},
		{"single-row", ModeBacklog, Params{Rows: 300}, []System{SystemRepstream, SystemNative, SystemPglogical, SystemPgstream}},
	}
	for _, tc := range cases {
		t.Run(tc.workload, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			out := t.TempDir()
			var live bytes.Buffer
			rep, err := Run(ctx, Options{Workload: tc.workload, Mode: tc.mode, Params: tc.params, Systems: tc.systems,
				Fast: true, Binary: repstreamBinary, Out: out, Timeout: 2 * time.Minute, Live: &live, NoCharts: true})
			if err != nil {
				t.Fatalf("Run: %v\nlive output:\n%s\nlogs:\n%s", err, live.String(), logs(out))
			}
			ran := map[System]*RunResult{}
			for _, r := range rep.Runs {
				ran[r.System] = r
				if !r.Verified {
					t.Errorf("%s: not verified: %s", r.Label, r.Error)
				}
			}
			peers := 0
			for _, s := range tc.systems {
				if why, ok := rep.Settings.Skipped[string(s)]; ok {
					t.Logf("%s skipped: %s", s, why)
					if !strings.Contains(why, "install") {
						t.Errorf("%s skipped without the install command: %s", s, why)
					}
					continue
				}
				r := ran[s]
				if r == nil {
					t.Errorf("%s neither ran nor was skipped", s)
					continue
				}
				if s.IsPeer() {
					peers++
					if rep.Settings.Peers[string(s)] == "" {
						t.Errorf("%s: no setup described in settings.peers", s)
					}
				}
				if tc.workload == "initial-copy" {
					if len(r.CopyTables) != len(initialCopyTables) || r.Replication.Seconds <= 0 {
						t.Errorf("%s: copy figures %+v, tables %+v", s, r.Replication, r.CopyTables)
					}
					for _, c := range r.Tables {
						if c.SourceRows == 0 && c.Table != ProbeTable {
							t.Errorf("%s: %s empty on the source", s, c.Table)
						}
					}
				}
			}
			md, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			for s := range ran {
				if s != SystemNative && !strings.Contains(string(md), s.String()+" / native |") {
					t.Errorf("report.md has no %s / native column", s)
				}
			}
			if peers == 0 {
				t.Skipf("no peer installed (%v): only repstream and native ran", rep.Settings.Skipped)
			}
		})
	}
}
