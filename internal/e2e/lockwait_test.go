package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/engine"
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
	app, err := pgx.Connect(ctx, e.tgt.DSN(e.tgtDB))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	var pid uint32
	if err := app.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, "BEGIN; LOCK TABLE held IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("public.held")
	buf := &syncBuffer{}
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
