package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/repstream/repstream/internal/pgcluster"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedAndNewDB(t *testing.T) {
	c1 := Shared(t, "one")
	c2 := Shared(t, "one")
	if c1 != c2 {
		t.Fatal("Shared returned two clusters for one name")
	}
	other := Shared(t, "two")
	if other == c1 || other.Port() == c1.Port() {
		t.Fatal("Shared returned the same cluster for two names")
	}
	a, b := NewDB(t, c1), NewDB(t, c1)
	if a == b {
		t.Fatalf("NewDB returned %q twice", a)
	}
	ctx := context.Background()
	for _, db := range []string{a, b} {
		if err := c1.Exec(ctx, db, "CREATE TABLE t(x int)"); err != nil {
			t.Errorf("db %s: %v", db, err)
		}
	}
}

func TestClusterRemovedOnCleanup(t *testing.T) {
	var dir string
	t.Run("inner", func(t *testing.T) {
		c := Cluster(t, pgcluster.Options{Fast: true})
		dir = c.Dir()
		if err := c.Exec(context.Background(), "", "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s survived the test: %v", dir, err)
	}
}

func TestDBName(t *testing.T) {
	tests := []struct {
		test string
		seq  uint64
		want string
	}{
		{"TestX", 1, "t_testx_1"},
		{"TestX/sub-case #2", 12, "t_testx_sub_case__2_12"},
		{strings.Repeat("A", 100), 7, "t_" + strings.Repeat("a", 59) + "_7"},
	}
	for _, tt := range tests {
		got := dbName(tt.test, tt.seq)
		if got != tt.want || len(got) > 63 {
			t.Errorf("dbName(%q, %d) = %q (%d bytes), want %q", tt.test, tt.seq, got, len(got), tt.want)
		}
	}
}

// fakeTB records Fatalf/Skipf and stops the calling goroutine like testing does.
type fakeTB struct {
	testing.TB
	mu          sync.Mutex
	fatal, skip string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = format
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skip = format
	f.mu.Unlock()
	runtime.Goexit()
}

func runFake(f *fakeTB, fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	<-done
}

func TestMissingBinaries(t *testing.T) {
	t.Setenv(pgcluster.EnvBinDir, t.TempDir())

	t.Setenv(EnvSkip, "")
	f := &fakeTB{TB: t}
	runFake(f, func() { requireBinaries(f) })
	if !strings.Contains(f.fatal, "make test") || f.skip != "" {
		t.Errorf("without %s: fatal=%q skip=%q; want a Fatal telling to run make test", EnvSkip, f.fatal, f.skip)
	}

	t.Setenv(EnvSkip, "1")
	f = &fakeTB{TB: t}
	runFake(f, func() { requireBinaries(f) })
	if f.skip == "" || f.fatal != "" {
		t.Errorf("with %s=1: fatal=%q skip=%q; want a skip", EnvSkip, f.fatal, f.skip)
	}
}

const envSignalHelper = "PGTEST_SIGNAL_HELPER"

// TestSignalHelper is run as a subprocess by TestSignalRemovesClusters: it
// starts a shared and a per-test cluster, prints their dirs and waits for
// the signal (or, should its parent be gone, for its stdin to close).
func TestSignalHelper(t *testing.T) {
	if os.Getenv(envSignalHelper) != "1" {
		t.Skip("helper process for TestSignalRemovesClusters")
	}
	s := Shared(t, "signal")
	c := Cluster(t, pgcluster.Options{Name: "signal", Fast: true})
	fmt.Printf("DIRS %s %s\n", s.Dir(), c.Dir())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func TestSignalRemovesClusters(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), envSignalHelper+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // open while the helper should wait
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var dirs []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "DIRS" {
			dirs = f[1:]
			break
		}
	}
	if len(dirs) != 2 {
		t.Fatal("helper did not report its cluster dirs")
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("helper's cluster dir %s: %v", d, err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	if err := cmd.Wait(); err == nil {
		t.Error("helper exited 0 after SIGINT, want 1")
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cluster dir %s survived SIGINT: %v", d, err)
		}
	}
}
