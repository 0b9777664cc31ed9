package queue

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
)

// privateTempDir is a t.TempDir (mode 0755 under umask 022) made 0700.
func privateTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// A missing spill directory is created 0700; so is the per-user directory
// of the default, and both are checked.
func TestSpillDirCreatedPrivate(t *testing.T) {
	tmp := privateTempDir(t)
	t.Setenv("TMPDIR", tmp)
	def := DefaultSpillDir("s1")
	if want := filepath.Join(tmp, "repstream-"+strconv.Itoa(os.Geteuid()), "spill-s1"); def != want {
		t.Fatalf("DefaultSpillDir = %s, want %s", def, want)
	}
	explicit := filepath.Join(tmp, "a", "b", "spill")
	for _, dir := range []string{def, explicit} {
		q, err := New(Options{Budget: 1 << 20, SpillDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if m := mode(t, d); !m.IsDir() || m.Perm() != 0o700 {
				t.Errorf("%s: mode %v, want a directory with 0700", d, m)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		// Now existing, it is checked and accepted.
		q, err = New(Options{Budget: 1 << 20, SpillDir: dir})
		if err != nil {
			t.Fatalf("again: %v", err)
		}
		q.Close()
	}
	// The per-user directory of the default is checked too.
	user := filepath.Dir(def)
	if err := os.Chmod(user, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Budget: 1 << 20, SpillDir: DefaultSpillDir("s2")})
	if err == nil || !strings.Contains(err.Error(), user) || !strings.Contains(err.Error(), "mode 0777") {
		t.Fatalf("New with a per-user directory of mode 0777: %v", err)
	}
	if _, err := os.Lstat(DefaultSpillDir("s2")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("spill directory created under a refused per-user directory: %v", err)
	}
}

// An existing spill directory that is not a private directory of ours is
// refused with an error naming it, its owner and mode and what to do, and
// nothing in it is touched.
func TestSpillDirRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a directory to another user")
	}
	const nobody = 65534
	for _, tc := range []struct {
		name string
		make func(t *testing.T, dir string)
		want []string
	}{
		{"mode 0777", func(t *testing.T, dir string) { mkdir(t, dir, 0o777) }, []string{"owned by uid 0 with mode 0777", "chmod 0700"}},
		{"mode 0750", func(t *testing.T, dir string) { mkdir(t, dir, 0o750) }, []string{"mode 0750"}},
		{"other owner", func(t *testing.T, dir string) {
			mkdir(t, dir, 0o700)
			if err := os.Chown(dir, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, []string{"owned by uid 65534 with mode 0700", "choose another --spill-dir"}},
		{"symlink", func(t *testing.T, dir string) {
			real := filepath.Join(filepath.Dir(dir), "real")
			mkdir(t, real, 0o700)
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}, []string{"symbolic link"}},
		{"file", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(privateTempDir(t), "spill")
			tc.make(t, dir)
			planted := filepath.Join(dir, "txn-1-1.spill")
			if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
				if err := os.WriteFile(planted, []byte("planted"), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			q, err := New(Options{Budget: 1 << 20, SpillDir: dir})
			if err == nil {
				q.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrSpill) || pgerr.Transient(err) {
				t.Errorf("not a spill error, or retryable: %v", err)
			}
			for _, w := range append(tc.want, dir, "refusing") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q: %v", w, err)
				}
			}
			if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
				if _, err := os.Stat(planted); err != nil {
					t.Errorf("file in a refused directory touched: %v", err)
				}
			}
		})
	}
}

func mkdir(t *testing.T, dir string, perm fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, perm); err != nil { // past the umask
		t.Fatal(err)
	}
}

// New removes the spill files of an earlier run, and only those: regular
// files named as repstream names them.
func TestStaleSpillFilesRemoved(t *testing.T) {
	dir := privateTempDir(t)
	outside := filepath.Join(t.TempDir(), "outside.spill")
	write := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := []string{write("txn-7-1.spill"), write("txn-4294967295-18446744073709551615.spill")}
	kept := []string{write("keep.txt"), write("other.spill"), write("txn-7-1.spill.bak"), write("txn--1.spill"), write("txn-a-1.spill")}
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "txn-9-1.spill")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, link, outside)
	sub := filepath.Join(dir, "txn-8-1.spill")
	mkdir(t, sub, 0o700)
	kept = append(kept, sub)

	q, err := New(Options{Budget: 1 << 20, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, p := range stale {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stale spill file %s survived New: %v", p, err)
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// spillOne spills and commits transaction 1 of 50 changes and returns it
// taken, with the changes and the path of its file (found in dir).
func spillOne(t *testing.T, q testQueue, dir string) (*Txn, []*change.Change, string) {
	t.Helper()
	var want []*change.Change
	for i := uint64(1); i <= 50; i++ {
		c := insert(relA, 1, i, 100)
		want = append(want, c)
		mustAdd(t, q.Queue, 1, c)
	}
	mustCommit(t, q.Queue, 1)
	txn := mustNext(t, q.Queue)
	files, err := filepath.Glob(filepath.Join(dir, "*.spill"))
	if err != nil {
		t.Fatal(err)
	}
	if !txn.Spilled() || len(files) != 1 {
		t.Fatalf("spilled %v, files %v", txn.Spilled(), files)
	}
	return txn, want, files[0]
}

// A spill file is read back through the descriptor it was written with:
// a file put in its place under its name (a valid spill file of other
// changes), or its removal, changes nothing of what the consumer reads.
func TestSpillReadBackThroughHandle(t *testing.T) {
	q := newTestQueue(t, 1000)
	txn, want, path := spillOne(t, q, q.SpillDir())

	var forged []*change.Change
	for i := uint64(1); i <= 50; i++ {
		forged = append(forged, insert(relA, 1, 1000+i, 100))
	}
	data := encodeAll(t, &q.rels, forged)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	checkTxn(t, txn, want)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	checkTxn(t, txn, want)
	txn.Release()
}

// The spill directory is used through the descriptor opened and checked by
// New: a directory put in its place afterwards (here one anyone can write
// to) receives nothing.
func TestSpillDirReplacedAfterNew(t *testing.T) {
	q := newTestQueue(t, 1000)
	dir := q.SpillDir()
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	mkdir(t, dir, 0o777)
	txn, want, _ := spillOne(t, q, moved)
	names := func(d string) []string {
		m, err := filepath.Glob(filepath.Join(d, "*.spill"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := names(dir); len(got) != 0 {
		t.Fatalf("spill files in the replacing directory: %v", got)
	}
	checkTxn(t, txn, want)
	txn.Release()
	if got := names(moved); len(got) != 0 {
		t.Fatalf("spill files after release: %v", got)
	}
}

// failingRead fails reads with EIO.
type failingRead struct{ spillHandle }

func (failingRead) ReadAt([]byte, int64) (int, error) {
	return 0, &os.PathError{Op: "read", Path: "x", Err: syscall.EIO}
}

// Spill file errors are local faults: they match ErrSpill, name the file
// and the system error, and are not taken for a lost connection.
func TestSpillErrorsAreLocalFaults(t *testing.T) {
	q := newTestQueue(t, 1000)
	create := q.create
	q.create = func(name string) (spillHandle, error) {
		h, err := create(name)
		return failingRead{h}, err
	}
	txn, _, path := spillOne(t, q, q.SpillDir())
	var err error
	for _, e := range txn.Changes() {
		err = e
	}
	if !errors.Is(err, ErrSpill) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), path) || pgerr.Transient(err) {
		t.Fatalf("read error: %v (spill %v, transient %v)", err, errors.Is(err, ErrSpill), pgerr.Transient(err))
	}
	txn.Release()

	q.create = func(name string) (spillHandle, error) {
		return nil, &os.PathError{Op: "openat", Path: name, Err: syscall.EACCES}
	}
	for i := uint64(1); i <= 50; i++ {
		if err = q.Add(context.Background(), 2, insert(relA, 2, i, 100)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrSpill) || !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), q.SpillDir()) || pgerr.Transient(err) {
		t.Fatalf("create error: %v (spill %v, transient %v)", err, errors.Is(err, ErrSpill), pgerr.Transient(err))
	}
}

// A spill directory is used by one Queue at a time: a second New of the
// same directory (as a second repstream process sharing it would) is
// refused, naming it, before it removes anything — not the first's live
// spill files — and so is a drop's RemoveSpillDir; once the first is
// closed the directory is free.
func TestSpillDirLocked(t *testing.T) {
	dir := filepath.Join(privateTempDir(t), "spill")
	first, err := New(Options{Budget: 1000, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue{Queue: first}
	txn, want, path := spillOne(t, q, dir)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrSpillDirInUse) || !errors.Is(err, ErrSpill) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another repstream process") {
			t.Fatalf("%s of a directory in use: %v, want an error matching ErrSpillDirInUse and ErrSpill naming %s", what, err, dir)
		}
	}
	second, err := New(Options{Budget: 1000, SpillDir: dir})
	if err == nil {
		second.Close()
	}
	refused("New", err)
	_, err = LockSpillDir(dir)
	refused("LockSpillDir", err)
	gone, err := RemoveSpillDir(dir, nil)
	refused("RemoveSpillDir", err)
	if gone {
		t.Fatal("RemoveSpillDir reports a directory in use gone")
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the first queue's live spill file: %v", err)
	}
	checkTxn(t, txn, want)
	txn.Release()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err = New(Options{Budget: 1000, SpillDir: dir})
	if err != nil {
		t.Fatalf("New after the first queue closed: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if gone, err := RemoveSpillDir(dir, nil); !gone || err != nil {
		t.Fatalf("RemoveSpillDir of a free directory: %v %v", gone, err)
	}
}

// A lock the caller holds (LockSpillDir: the engine's, for its whole run)
// serves the Queues it passes it to, one after another, and keeps the
// directory from others in between; a Queue given the lock of another
// directory is refused.
func TestSpillDirLockHeldByCaller(t *testing.T) {
	tmp := privateTempDir(t)
	dir := filepath.Join(tmp, "spill")
	lock, err := LockSpillDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	for range 2 {
		q, err := New(Options{Budget: 1000, SpillDir: dir, Lock: lock})
		if err != nil {
			t.Fatalf("New with the caller's lock: %v", err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		if q, err := New(Options{Budget: 1000, SpillDir: dir}); !errors.Is(err, ErrSpillDirInUse) {
			if err == nil {
				q.Close()
			}
			t.Fatalf("New without the lock while the caller holds it: %v", err)
		}
	}
	if q, err := New(Options{Budget: 1000, SpillDir: filepath.Join(tmp, "other"), Lock: lock}); err == nil || !errors.Is(err, ErrSpill) {
		if err == nil {
			q.Close()
		}
		t.Fatalf("New with the lock of another directory: %v", err)
	}
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	q, err := New(Options{Budget: 1000, SpillDir: dir})
	if err != nil {
		t.Fatalf("New after the caller's lock is released: %v", err)
	}
	q.Close()
}
