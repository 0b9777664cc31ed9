package target

import (
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
)

// TestWaitForPreviousApply: an engine starting up waits while a session of
// a previous run still holds the slot's apply lock (it may be finishing a
// commit) and goes on once that session is gone; other slots do not wait.
func TestWaitForPreviousApply(t *testing.T) {
	e := newEnv(t, "")
	old, err := Connect(e.ctx, e.dsn, "old-apply")
	if err != nil {
		t.Fatal(err)
	}
	if err := HoldApplyLock(e.ctx, old, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := WaitForPreviousApply(e.ctx, e.conn, "other", time.Second, nil); err != nil {
		t.Fatalf("another slot waited: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- WaitForPreviousApply(e.ctx, e.conn, "s1", time.Minute, nil) }()
	select {
	case err := <-done:
		t.Fatalf("did not wait for the previous run's session (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	old.Close(e.ctx)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the previous session closed")
	}
	// A session that stays (another engine) makes the wait fail, not hang.
	other, err := Connect(e.ctx, e.dsn, "other-engine")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(e.ctx)
	if err := HoldApplyLock(e.ctx, other, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := WaitForPreviousApply(e.ctx, e.conn, "s2", 300*time.Millisecond, nil); err == nil {
		t.Fatal("waited past the deadline without an error")
	}
	// The lock is free again for the new run's sessions.
	if err := HoldApplyLock(e.ctx, e.conn, "s1"); err != nil {
		t.Fatal(err)
	}
}

// TestIsAppliedOverlappingRanges: a range that contains an older one (a
// group spanning a transaction applied by an earlier run) must not hide the
// transactions around it.
func TestIsAppliedOverlappingRanges(t *testing.T) {
	from, to := mergeRanges([]change.LSN{200, 100, 500}, []change.LSN{200, 300, 600})
	p := Progress{Low: 10, AppliedFrom: from, Applied: to}
	for _, tc := range []struct {
		end  change.LSN
		want bool
	}{{5, true}, {100, true}, {150, true}, {200, true}, {300, true}, {301, false}, {499, false}, {500, true}, {600, true}, {601, false}} {
		if got := p.IsApplied(tc.end); got != tc.want {
			t.Errorf("IsApplied(%d) = %v, want %v (ranges %v..%v)", tc.end, got, tc.want, from, to)
		}
	}
}

// TestEndPreviousApply: the sessions an engine left behind on a silent
// link — holding the slot's apply lock and an open transaction with row
// locks — are ended, so its reconnect neither waits for them nor blocks
// on their locks; sessions of other slots are left alone.
func TestEndPreviousApply(t *testing.T) {
	e := newEnv(t, "")
	if _, err := e.conn.Exec(e.ctx, "CREATE TABLE public.locked (id int PRIMARY KEY); INSERT INTO public.locked VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	zombie, err := Connect(e.ctx, e.dsn, "repstream-apply.0")
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close(e.ctx)
	if err := HoldApplyLock(e.ctx, zombie, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := zombie.Exec(e.ctx, "BEGIN; UPDATE public.locked SET id = 2"); err != nil {
		t.Fatal(err)
	}
	bystander, err := Connect(e.ctx, e.dsn, "repstream-apply.0")
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close(e.ctx)
	if err := HoldApplyLock(e.ctx, bystander, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := EndPreviousApply(e.ctx, e.conn, "s1", nil); err != nil {
		t.Fatal(err)
	}
	if err := WaitForPreviousApply(e.ctx, e.conn, "s1", 10*time.Second, nil); err != nil {
		t.Fatalf("the ended session still holds the lock: %v", err)
	}
	if _, err := e.conn.Exec(e.ctx, "SET lock_timeout = '5s'; UPDATE public.locked SET id = 3"); err != nil {
		t.Fatalf("the ended session's row lock is still held: %v", err)
	}
	if err := bystander.Ping(e.ctx); err != nil {
		t.Fatalf("a session of another slot was ended: %v", err)
	}
	if err := WaitForPreviousApply(e.ctx, e.conn, "s2", 300*time.Millisecond, nil); err == nil {
		t.Fatal("the other slot's session no longer holds its lock")
	}
}
