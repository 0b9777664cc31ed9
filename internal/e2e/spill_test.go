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
