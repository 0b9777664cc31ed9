package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Reaping policy for cluster directories left behind by killed processes.
const (
	// ReapMinAge protects a directory whose owner is gone but that is
	// younger than this (guards against races with a cluster being made).
	ReapMinAge = time.Minute
	// ReapOwnerlessAge is the age after which a directory without a
	// readable owner file is reaped.
	ReapOwnerlessAge = 3 * time.Hour
)

// ownerFile names the file holding "<pid> <start time>" of the process that
// created the cluster.
const ownerFile = "owner"

// WriteOwner records the current process as the owner of dir, for
// ReapDirs.
func WriteOwner(dir string) error { return writeOwner(dir) }

// writeOwner records the current process as the owner of dir.
func writeOwner(dir string) error {
	pid := os.Getpid()
	content := fmt.Sprintf("%d %s\n", pid, procStartTime(pid))
	path := filepath.Join(dir, ownerFile)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write owner file %s: %w", path, err)
	}
	return nil
}

// procStat returns the fields of /proc/<pid>/stat after the command name
// (fields[0] is field 3, the state), or nil if unavailable (non-Linux, gone).
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after the last ')' are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// procStartTime returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/<pid>/stat), or "" if unknown. Together with the
// pid it identifies a process despite pid reuse.
func procStartTime(pid int) string {
	if f := procStat(pid); len(f) >= 20 {
		return f[19]
	}
	return ""
}

// ownerAlive reports whether the process recorded in dir's owner file still
// runs, and whether the owner file was readable at all.
func ownerAlive(dir string) (alive, known bool) {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return false, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return false, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false, true // ESRCH: gone
	}
	if len(f) > 1 && f[1] != "" {
		if st := procStartTime(pid); st != "" && st != f[1] {
			return false, true // pid reused by another process
		}
	}
	return true, true
}

// ReapStale stops the postmasters of, and deletes, cluster directories under
// os.TempDir() left by processes that died without removing them (a test
// binary killed mid-way, a timeout panic). A directory is stale when its
// owner process is gone and it is older than ReapMinAge, or when it has no
// readable owner file and is older than ReapOwnerlessAge. Directories of live
// processes are never touched. Best effort: it returns how many directories
// it removed and the errors met.
func ReapStale(ctx context.Context, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return ReapDirs(ctx, DirPrefix, reapDir, logger.With("component", "pgcluster"))
}

// ReapDirs is ReapStale's policy for any kind of throwaway server directory
// made with WriteOwner: each directory os.TempDir()/prefix* that is stale
// (as ReapStale says) is handed to reap, which stops what runs there and
// removes it. internal/kafkatest reaps its brokers' directories with it.
func ReapDirs(ctx context.Context, prefix string, reap func(ctx context.Context, dir string) error, logger *slog.Logger) (int, error) {
	matches, err := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	if err != nil {
		return 0, fmt.Errorf("list stale clusters: %w", err)
	}
	var errs []error
	removed := 0
	for _, dir := range matches {
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		age := time.Since(fi.ModTime())
		alive, known := ownerAlive(dir)
		switch {
		case alive:
			continue
		case known && age < ReapMinAge:
			continue
		case !known && age < ReapOwnerlessAge:
			continue
		}
		if err := reap(ctx, dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		logger.Info("removed stale cluster", "dir", dir, "age", age.Round(time.Second))
	}
	return removed, errors.Join(errs...)
}

// reapDir kills the postmaster of the cluster in dir, if any, and removes dir.
func reapDir(ctx context.Context, dir string) error {
	dataDir := filepath.Join(dir, "data")
	if pid, ok := postmasterPID(dataDir); ok {
		// SIGQUIT is PostgreSQL's immediate shutdown.
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		deadline := time.Now().Add(10 * time.Second)
		for processRunning(pid) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		if processRunning(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove stale cluster dir %s: %w", dir, err)
	}
	return nil
}

// processRunning reports whether pid exists and is not a zombie.
func processRunning(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	f := procStat(pid)
	return len(f) == 0 || f[0] != "Z" // no /proc: trust kill(0)
}

// postmasterPID returns the pid in dataDir/postmaster.pid if that process is
// a running postgres whose data directory is dataDir.
func postmasterPID(dataDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.SplitN(string(b), "\n", 3)
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != dataDir {
		return 0, false
	}
	if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
		if !bytes.Contains(cmdline, []byte("postgres")) {
			return 0, false // pid reused by something else
		}
	} else if syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	return pid, true
}
