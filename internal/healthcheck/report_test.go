package healthcheck

import (
	"strings"
	"testing"
)

func TestReportText(t *testing.T) {
	var r Report
	r.add(OK, "source", "wal_level", "", "logical")
	r.add(Fail, "target", "table public.t", "run with --create-tables, or create it on the target", "missing")
	r.add(Warn, "source", "max_slot_wal_keep_size", "set a limit", "-1: unbounded")
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `OK    source  wal_level: logical
FAIL  target  table public.t: missing (fix: run with --create-tables, or create it on the target)
WARN  source  max_slot_wal_keep_size: -1: unbounded (fix: set a limit)
1 OK, 1 WARN, 1 FAIL
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if r.Count(Fail) != 1 || r.Count(OK) != 1 {
		t.Errorf("counts: %d OK, %d FAIL", r.Count(OK), r.Count(Fail))
	}
}

func TestBytesText(t *testing.T) {
	for in, want := range map[int64]string{0: "0 bytes", 2048: "2.0 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := bytesText(in); got != want {
			t.Errorf("bytesText(%d) = %q, want %q", in, got, want)
		}
	}
}
