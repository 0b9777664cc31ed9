package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The spill directory.
//
// Spill files hold the changes of source transactions until they are
// applied: whoever can replace or edit them decides what repstream writes to
// the target, and whoever can read them reads the source's data. So the
// directory must be private to the user repstream runs as, and is checked
// rather than trusted:
//
//   - Missing, it is created by os.Mkdir with mode 0700 (missing parents by
//     MkdirAll, 0700 too).
//   - Existing, it must be a real directory (not a symbolic link: Lstat),
//     owned by the process's effective uid, with no group or other
//     permission (mode & 0077 == 0). Otherwise New refuses it, naming its
//     owner and mode: a directory someone else made (say a local user who
//     pre-created a predictable name in /tmp) is never used.
//   - It is then opened once (os.OpenRoot) and the opened directory is
//     checked again (it must be the very directory checked by name:
//     os.SameFile), and every later operation — creating, removing and
//     listing spill files — goes through that descriptor: a directory
//     renamed or replaced after the check, or a symbolic link planted in
//     it, is not followed.
//   - Spill files are created O_EXCL with mode 0600 and read back through
//     the descriptor they were written with, never reopened by name. They
//     keep their names while they live (an operator sees them, and their
//     size, in the directory); unlinking them at once would hide them from
//     du and ls for no gain in safety, since no one else can reach them.
//   - The opened directory is locked (flock, exclusive, not waiting) for as
//     long as it is used: by the Queue from New to Close, or by the caller
//     for longer (LockSpillDir: the engine holds it for its whole run, from
//     before it touches a database). A second user of the same directory —
//     another repstream process, or another Queue of this one — is refused
//     at once ([ErrSpillDirInUse]), naming the directory. Without the lock
//     two runs sharing a directory (two replications of different sources
//     with the same slot name and the default directory, or the same
//     --spill-dir) would each remove the other's live spill files at start
//     (their data stays readable through the open descriptors, but the
//     files vanish from du and ls), stop on an O_EXCL collision of two
//     files of the same name (txn-<xid>-<seq>.spill: both xid spaces and
//     both sequences are small numbers), release each other's files by name,
//     and a drop of one would remove the directory under the other, whose
//     next spill would then fail. The lock dies with the process: a crashed
//     run leaves nothing to clean up but its files. RemoveSpillDir (drop)
//     takes the lock too, and leaves a directory in use alone.
//   - At start New removes the spill files an earlier run left (a crash),
//     only regular files named as repstream names them (txn-<xid>-<seq>.spill).
//     Under the lock, these cannot be another live run's.
//
// The default directory (no --spill-dir) is DefaultSpillDir: spill-<slot> in
// a per-user directory repstream-<euid> in os.TempDir(). It is stable per
// slot, so that the stale files of a crashed run are found and removed by the
// next, and per user, so that two users' runs of slots with the same name do
// not collide. Both levels are created 0700 and both are checked as above:
// the per-user directory is repstream's own too. Two replications of the
// same slot name (of different sources) on one host and user share it: the
// second is refused at start by the lock, and one of them needs its own
// --spill-dir.

// DefaultSpillDir returns the spill directory of slot when none is
// configured: $TMPDIR/repstream-<euid>/spill-<slot>.
func DefaultSpillDir(slot string) string {
	return filepath.Join(userSpillRoot(), "spill-"+slot)
}

// userSpillRoot is the per-user directory of the default spill directories.
func userSpillRoot() string {
	return filepath.Join(os.TempDir(), "repstream-"+strconv.Itoa(os.Geteuid()))
}

// openSpillDir creates or checks dir (see above) and returns it opened.
// When dir is in the per-user directory of the defaults, that directory is
// created or checked the same way first.
func openSpillDir(dir string) (*os.Root, error) {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if parent == userSpillRoot() {
		root, err := privateDir(parent)
		if err != nil {
			return nil, err
		}
		root.Close()
	} else if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, spillErrorf("create the parent of spill directory %s: %w", dir, err)
	}
	return privateDir(dir)
}

// privateDir creates dir with mode 0700 or checks the existing one, and
// returns it opened, checked again through the descriptor.
func privateDir(dir string) (*os.Root, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, spillErrorf("create spill directory %s: %w", dir, err)
	}
	byName, err := os.Lstat(dir)
	if err != nil {
		return nil, spillErrorf("spill directory %s: %w", dir, err)
	}
	if err := checkPrivate(dir, byName); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, spillErrorf("open spill directory %s: %w", dir, err)
	}
	opened, err := root.Stat(".")
	if err != nil {
		root.Close()
		return nil, spillErrorf("spill directory %s: %w", dir, err)
	}
	if !os.SameFile(byName, opened) {
		root.Close()
		return nil, spillErrorf("spill directory %s was replaced while it was opened: refusing it; make sure no one else can write to %s", dir, filepath.Dir(dir))
	}
	if err := checkPrivate(dir, opened); err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// ErrSpillDirInUse is matched (errors.Is) by the error of opening a spill
// directory another user holds locked: another repstream process (or
// another Queue of this one) uses it. It matches [ErrSpill] too.
var ErrSpillDirInUse = errors.New("spill directory in use")

// SpillDirLock is a spill directory opened, checked and locked, held by the
// caller for longer than one Queue (Options.Lock): a run of the engine,
// which makes a Queue per streaming attempt, holds it from its start to its
// end.
type SpillDirLock struct {
	dir string
	f   *os.File // the directory, locked
}

// LockSpillDir creates or checks dir as New does, and locks it until Close;
// a directory another process (or another lock or Queue of this one) holds
// locked is refused with an error matching [ErrSpillDirInUse].
func LockSpillDir(dir string) (*SpillDirLock, error) {
	dir = filepath.Clean(dir)
	root, err := openSpillDir(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return lockRoot(root, dir)
}

// Dir is the locked directory's path.
func (l *SpillDirLock) Dir() string { return l.dir }

// Close releases the lock.
func (l *SpillDirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// same reports whether root is the locked directory.
func (l *SpillDirLock) same(root *os.Root) (bool, error) {
	a, err := l.f.Stat()
	if err != nil {
		return false, err
	}
	b, err := root.Stat(".")
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// lockRoot locks the directory root (of path dir) with flock, exclusive and
// without waiting, through a descriptor of its own opened through root (a
// lock belongs to the open file: a second open of the directory, even in
// this process, is refused). Locked, the directory must still be the one
// of that name: one removed meanwhile (a drop at the same time) is refused.
func lockRoot(root *os.Root, dir string) (*SpillDirLock, error) {
	f, err := root.Open(".")
	if err != nil {
		return nil, spillErrorf("open spill directory %s: %w", dir, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, spillErrorf("lock spill directory %s: %w", dir, err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB); lerr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		lerr = err
	}
	if errors.Is(lerr, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, &spillError{fmt.Errorf("spill directory %s is in use by another repstream process (lsof %s names it): "+
			"two runs cannot share a spill directory; stop the other, or give this run a --spill-dir of its own "+
			"(two replications with the same --slot on one host share the default one): %w", dir, dir, ErrSpillDirInUse)}
	}
	if lerr != nil {
		f.Close()
		return nil, spillErrorf("lock spill directory %s: %w", dir, lerr)
	}
	opened, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, spillErrorf("spill directory %s: %w", dir, err)
	}
	if byName, err := os.Lstat(dir); err != nil || !os.SameFile(byName, opened) {
		f.Close()
		return nil, spillErrorf("spill directory %s was removed or replaced while it was opened (a repstream drop at the same time?): start again", dir)
	}
	return &SpillDirLock{dir: dir, f: f}, nil
}

// checkPrivate refuses fi (of dir) unless it is a directory — not a
// symbolic link — of the effective uid with no group or other permission.
func checkPrivate(dir string, fi fs.FileInfo) error {
	euid := os.Geteuid()
	const fix = "remove it (repstream creates it with mode 0700) or choose another --spill-dir"
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(dir)
		return spillErrorf("spill directory %s is a symbolic link (to %q): refusing it; %s", dir, target, fix)
	case !fi.IsDir():
		return spillErrorf("spill directory %s is not a directory (%s): refusing it; %s", dir, fi.Mode().Type(), fix)
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	if (uid >= 0 && uid != euid) || fi.Mode().Perm()&0o077 != 0 {
		todo := fix
		if uid == euid {
			todo = "chmod 0700 it, " + fix
		}
		return spillErrorf("spill directory %s is owned by uid %d with mode %04o: refusing it, it must belong to uid %d (repstream's user) "+
			"with no group or other permission (0700), or others could read or replace the spilled changes; %s",
			dir, uid, fi.Mode().Perm(), euid, todo)
	}
	return nil
}

// isSpillName reports whether name is a spill file's name, txn-<xid>-<seq>.spill.
func isSpillName(name string) bool {
	rest, ok := strings.CutPrefix(name, "txn-")
	if !ok {
		return false
	}
	rest, ok = strings.CutSuffix(rest, ".spill")
	if !ok {
		return false
	}
	xid, seq, ok := strings.Cut(rest, "-")
	return ok && isDigits(xid) && isDigits(seq)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// removeStale removes the spill files an earlier run left in the directory
// (only regular files named as spill files) and returns how many.
func removeStale(root *os.Root, dir string, log *slog.Logger) (int, error) {
	d, err := root.Open(".")
	if err != nil {
		return 0, spillErrorf("list spill directory %s: %w", dir, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, spillErrorf("list spill directory %s: %w", dir, err)
	}
	n := 0
	for _, name := range names {
		if !isSpillName(name) {
			continue
		}
		fi, err := root.Lstat(name)
		if err != nil {
			return n, spillErrorf("stale spill file %s: %w", filepath.Join(dir, name), err)
		}
		if !fi.Mode().IsRegular() {
			log.Warn("not removing a non-regular file named as a spill file", slog.String("file", filepath.Join(dir, name)),
				slog.String("type", fi.Mode().Type().String()))
			continue
		}
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, spillErrorf("remove stale spill file %s: %w", filepath.Join(dir, name), err)
		}
		n++
	}
	return n, nil
}

// RemoveSpillDir removes a slot's spill directory, for `repstream drop`:
// the spill files in it (only those named as repstream names them), then
// the directory if nothing else is in it, then the per-user directory of
// the defaults if it is left empty. A missing directory is nothing to do; a
// directory that is not repstream's (see checkPrivate), or one that a
// running repstream holds locked ([ErrSpillDirInUse]), is left alone and
// reported. It reports whether the directory is gone.
func RemoveSpillDir(dir string, log *slog.Logger) (bool, error) {
	dir = filepath.Clean(dir)
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, spillErrorf("spill directory %s: %w", dir, err)
	}
	if err := checkPrivate(dir, fi); err != nil {
		return false, err
	}
	root, err := privateDir(dir)
	if err != nil {
		return false, err
	}
	lock, err := lockRoot(root, dir)
	if err != nil {
		root.Close()
		return false, err
	}
	defer lock.Close()
	_, err = removeStale(root, dir, log)
	root.Close()
	if err != nil {
		return false, err
	}
	if err := os.Remove(dir); err != nil {
		return false, spillErrorf("remove spill directory %s (something other than spill files is in it): %w", dir, err)
	}
	if parent := filepath.Dir(dir); parent == userSpillRoot() {
		_ = os.Remove(parent) // only if empty: other slots' directories stay
	}
	return true, nil
}
