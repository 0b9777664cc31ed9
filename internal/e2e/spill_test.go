package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/queue"
	"github.com/repstream/repstream/internal/stats"
)

// smallDisk mounts a 1 MiB tmpfs (mode 0700) for the test, or skips it
// where mounting is not allowed (not root, no CAP_SYS_ADMIN).
func smallDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a small tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestSpillDiskFullStops: a spill directory on a full file system stops the
// run at once with an error naming the spill file and ENOSPC and saying it
// is local — never a "connection lost" retried for ever (the regression:
// the engine reconnected in a loop while /healthz said ok).
func TestSpillDiskFullStops(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	disk := smallDisk(t)
	e := newEnv(t)
	e.both(`CREATE TABLE big (id int PRIMARY KEY, v text)`)
	cfg := e.config("public.big")
	cfg.SpillDir = filepath.Join(disk, "spill")
	cfg.Memory = 1 << 20
	cfg.Eager = false // through the queue, which must spill
	e.catchUp(cfg)    // slot and (empty) initial copy

	// About 8 MiB of changes in one transaction: it spills past 1 MiB.
	e.srcExec(`INSERT INTO big SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 30000) g`)

	const limit = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cfg.UntilCaughtUp = true
	reg := stats.NewRegistry()
	start := time.Now()
	err := engine.New(cfg, testLogger(t), reg).Run(ctx)
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the run did not stop on its own within %s (a reconnect loop? %d reconnects): %v",
			limit, reg.Component("source").Counter("reconnects").Load(), err)
	}
	if err == nil {
		t.Fatal("the run succeeded on a 1 MiB spill disk")
	}
	t.Logf("error after %s (as the user sees it): %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, queue.ErrSpill) {
		t.Errorf("error does not wrap ENOSPC and queue.ErrSpill: %v", err)
	}
	wantInError(t, err, cfg.SpillDir, "txn-", "no space left on device", "not retried")
	if n := reg.Component("source").Counter("reconnects").Load() + reg.Component("target").Counter("reconnects").Load(); n != 0 {
		t.Errorf("%d reconnects for a local fault", n)
	}
	// The queue deleted what it had spilled.
	if files, err := filepath.Glob(filepath.Join(cfg.SpillDir, "*.spill")); err != nil || len(files) != 0 {
		t.Errorf("spill files left: %v %v", files, err)
	}
	if _, err := os.Stat(cfg.SpillDir); err != nil {
		t.Errorf("spill directory: %v", err)
	}
}

// TestSpillDirShared: two replications (here of different sources, with
// the same --spill-dir; the default directory of two slots of the same
// name is shared the same way) cannot use one spill directory at once:
// the second removed the first's live spill files at its start, could
// collide with them by name and stop, and its drop removed the directory
// under the first. Now the first holds the directory locked for its whole
// run, and the second stops at its start, before it touches its source,
// naming the directory; the first is unaffected.
func TestSpillDirShared(t *testing.T) {
	t.Parallel() // own databases and slots; no server restarts
	a, b := newEnv(t), newEnv(t)
	a.both(acctSchema)
	b.both(acctSchema)
	cfgA, cfgB := a.config("public.acct"), b.config("public.acct")
	cfgB.SpillDir = cfgA.SpillDir
	done, stop := a.runInBackground(cfgA)
	defer stop()
	waitFor(t, "the first replication to stream", 30*time.Second, func() bool {
		return a.count(a.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfgA.Slot+"' AND active") == 1
	})
	b.mustFail(cfgB, "spill directory "+cfgA.SpillDir, "another repstream process", "--spill-dir")
	if n := b.count(b.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfgB.Slot+"'"); n != 0 {
		t.Errorf("the refused run made its slot on its source")
	}
	a.srcExec(`INSERT INTO acct VALUES (1, 1)`)
	waitFor(t, "the first replication's row on its target", 15*time.Second, func() bool {
		return a.count(a.Tgt, "SELECT count(*) FROM acct WHERE id = 1") == 1
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("first replication: %v", err)
	}
	// Its lock ends with its run: the second starts now.
	b.catchUp(cfgB)
}
