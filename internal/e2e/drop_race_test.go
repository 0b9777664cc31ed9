package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// TestDropDuringSourceDDL: `repstream drop` while an application's ALTER
// TABLE runs on the source. The ALTER read the source's event triggers
// before drop removed repstream's, so its ddl_command_end still fires
// repstream's trigger function once the ALTER's work is done: the function
// and the tables it writes must still be there then, or the application's
// ALTER fails ("relation repstream.self_ddl does not exist"). drop removes
// them only once the transactions that began before its event triggers
// were gone are over, and nothing of repstream is left on the source
// after it.
func TestDropDuringSourceDDL(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE r (id int PRIMARY KEY, v int)`)
	cfg := e.config("public.r")
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO r VALUES (1, 1)`)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app, pid := e.appSession(ctx, false)
	// The ALTER checks its constraint on the one row for 4 s: drop runs
	// meanwhile.
	done := make(chan error, 1)
	go func() {
		_, err := app.Exec(ctx, `ALTER TABLE r ADD CONSTRAINT slow CHECK (length(pg_sleep(4)::text) = 0 OR v > 0)`)
		done <- err
	}()
	pgtest.WaitFor(t, "the application's ALTER TABLE to check its row", 30*time.Second, func() (bool, error) {
		return e.count(e.Src, "SELECT count(*) FROM pg_stat_activity WHERE pid = "+strconv.FormatUint(uint64(pid), 10)+" AND wait_event = 'PgSleep'") == 1, nil
	})
	bin := testbin.Repstream(t)
	if out, err := exec.Command(bin, "drop", "--source", cfg.Source, "--target", cfg.Target, "--slot", cfg.Slot).CombinedOutput(); err != nil {
		t.Fatalf("drop: %v\n%s", err, out)
	}
	if err := <-done; err != nil {
		t.Fatalf("the application's ALTER TABLE, run while repstream drop removed its event trigger: %v", err)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%'"); n != 0 {
		t.Errorf("%d event triggers of repstream are left on the source after drop", n)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'"); n != 0 {
		t.Errorf("the schema repstream is left on the source after drop")
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_constraint WHERE conname = 'slow'"); n != 1 {
		t.Errorf("the application's constraint is not there")
	}
}
