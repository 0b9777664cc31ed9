package pgtest

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
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
