package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// EnvBinary names the variable that gives the tests a binary built
// beforehand (make test sets it to bin/repstream).
const EnvBinary = "REPSTREAM_TEST_BINARY"

var (
	once  sync.Once
	path  string
	built string // the directory Path built into, removed by Remove
	err   error
)

// Repstream returns the repstream binary's path, failing t when it cannot
// be built.
func Repstream(t testing.TB) string {
	t.Helper()
	p, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Path returns $REPSTREAM_TEST_BINARY, else a binary built from this tree
// the first time it is called (go build, about 2.5 s of CPU); every later
// call returns the same.
func Path() (string, error) {
	once.Do(func() {
		if b := os.Getenv(EnvBinary); b != "" {
			path = b
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, e := os.MkdirTemp("", "repstream-test-bin-")
		if e != nil {
			err = fmt.Errorf("build repstream: %w", e)
			return
		}
		built = dir
		out := filepath.Join(dir, "repstream")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/repstream")
		cmd.Dir = root
		if b, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("build repstream: %v\n%s", e, b)
			return
		}
		path = out
	})
	return path, err
}

// Remove removes the binary Path built, if it built one: call it once the
// tests are over (pgtest.Main's atExit).
func Remove() {
	if built != "" {
		_ = os.RemoveAll(built)
	}
}
