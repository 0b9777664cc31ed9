package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/syncbuf"
)

// TestFirstStartSaysWhoHoldsItUp: an application's transaction on the
// target holds a lock on a target table (LOCK TABLE, as a long ALTER
// TABLE would) when a first start looks at whether the table is empty.
// The start waits for it, and says so: a warning naming the session that
// holds it up (its pid and its query), again while the wait lasts. Once
// the transaction ends, the start goes on and the target gets the rows.
// Before, the start waited without a word, looking hung.
func TestFirstStartSaysWhoHoldsItUp(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE held (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO held SELECT g, 'v' || g FROM generate_series(1, 50) g`)
	ctx := context.Background()
	app, pid := e.appSession(ctx, true)
	if _, err := app.Exec(ctx, "BEGIN; LOCK TABLE held IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("public.held")
	buf := &syncbuf.Buffer{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, capturingLogger(buf), nil).Run(runCtx) }()
	waitRunning(t, done, "a warning naming the session that holds the start up", time.Minute, func() bool {
		log := buf.String()
		return strings.Contains(log, "waiting for a lock another session holds on the target") &&
			strings.Contains(log, "pid "+strconv.FormatUint(uint64(pid), 10)) && strings.Contains(log, "LOCK TABLE held") &&
			strings.Contains(log, "target table public.held is empty")
	})
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "waiting for a lock") {
			t.Logf("said: %s", l)
			break
		}
	}
	if _, err := app.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, done, "the rows on the target", time.Minute, e.sameRows("held", "held"))
}

// TestApplySaysWhoHoldsItUp: an application's transaction on the target
// holds a row that the source then updates. The apply's update waits for
// it, and the link watch says so once it has waited half
// --target-timeout: a warning naming the session that holds it (its pid
// and its query), while the connection stays open (a lock wait is work,
// not a dead link). Once the transaction ends, apply goes on. Before, the
// apply stalled with only a debug line.
func TestApplySaysWhoHoldsItUp(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE rowheld (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO rowheld SELECT g, 'v' || g FROM generate_series(1, 10) g`)
	cfg := e.config("public.rowheld")
	cfg.TargetTimeout = 4 * time.Second // looked at after 2 s
	buf := &syncbuf.Buffer{}
	ctx := context.Background()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, capturingLogger(buf), nil).Run(runCtx) }()
	waitRunning(t, done, "the rows on the target", time.Minute, e.sameRows("rowheld", "rowheld"))

	app, pid := e.appSession(ctx, true)
	if _, err := app.Exec(ctx, "BEGIN; UPDATE rowheld SET v = 'held' WHERE id = 3"); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`UPDATE rowheld SET v = 'from the source' WHERE id = 3`)
	waitRunning(t, done, "a warning naming the session that holds the apply up", time.Minute, func() bool {
		log := buf.String()
		return strings.Contains(log, "waiting for a lock another session holds on the target") &&
			strings.Contains(log, "pid "+strconv.FormatUint(uint64(pid), 10)) && strings.Contains(log, "UPDATE rowheld SET v = 'held'")
	})
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "waiting for a lock") {
			t.Logf("said: %s", l)
			break
		}
	}
	if strings.Contains(buf.String(), "target connection open but silent") {
		t.Errorf("closed a connection that waits for a lock:\n%s", buf.String())
	}
	if _, err := app.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, done, "the source's update on the target", time.Minute, e.sameRows("rowheld", "rowheld"))
}
