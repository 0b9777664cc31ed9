package target

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// TestMissingRowsRateLimited: every missing row is counted; a table's first
// is logged at once, then at most one line per interval, saying how many
// were missed since the last line.
func TestMissingRowsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	var upd, del atomic.Int64
	now := time.Unix(1000, 0)
	m := missingRows{
		log: slog.New(slog.NewTextHandler(&buf, nil)), update: &upd, delete: &del,
		every: 10 * time.Second, now: func() time.Time { return now }, tables: map[string]*missedTable{},
	}
	a := &relPlan{rel: rel("public", "a", change.IdentityDefault, "*id")}
	b := &relPlan{rel: rel("public", "b", change.IdentityDefault, "*id")}
	for i := range 100 {
		m.report(batchItem{op: change.OpUpdate, lsn: change.LSN(i), plan: a})
	}
	m.report(batchItem{op: change.OpDelete, lsn: 7, plan: b})
	now = now.Add(11 * time.Second)
	m.report(batchItem{op: change.OpUpdate, lsn: 500, plan: a})
	if upd.Load() != 101 || del.Load() != 1 {
		t.Errorf("counted %d updates and %d deletes, want 101 and 1", upd.Load(), del.Load())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3 (first of a, first of b, a after the interval):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"table=public.a lsn=0/0 missed_since_last_line=0", "table=public.b", "table=public.a lsn=0/1F4 missed_since_last_line=99"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q lacks %q", i, lines[i], want)
		}
	}
}

func TestTxnStateFail(t *testing.T) {
	for _, tc := range []struct{ from, to txnState }{
		{txnPending, txnFailedUnsent}, {txnQueued, txnFailedUnsent}, {txnOpen, txnFailed},
		{txnFailed, txnFailed}, {txnFailedUnsent, txnFailedUnsent}, {txnNone, txnNone},
	} {
		w := &Writer{state: tc.from}
		w.fail()
		if w.state != tc.to {
			t.Errorf("fail in %s: %s, want %s", tc.from, w.state, tc.to)
		}
		if tc.to.failed() && tc.to.sent() != (tc.from == txnOpen || tc.from == txnFailed) {
			t.Errorf("fail in %s: sent() = %v", tc.from, tc.to.sent())
		}
	}
}
