package kafkatest

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
	"sync"
	"syscall"
	"time"
)

// Reaping policy for cluster directories left behind by killed processes
// (the same as internal/pgcluster's).
const (
	// ReapMinAge protects a directory whose owner is gone but that is
	// younger than this.
	ReapMinAge = time.Minute
	// ReapOwnerlessAge is the age after which a directory without a
	// readable owner file is reaped.
	ReapOwnerlessAge = 3 * time.Hour
)

const ownerFile = "owner"

// reapOnce runs ReapStale once per process, at the first StartCluster.
var reapOnce sync.Once

// writeOwner records the current process as the owner of dir.
func writeOwner(dir string) error {
	pid := os.Getpid()
	content := fmt.Sprintf("%d %s\n", pid, procStartTime(pid))
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(content), 0o644); err != nil {
		return fmt.Errorf("kafkatest: write owner file: %w", err)
	}
	return nil
}

// procStartTime returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/<pid>/stat), or "" if unknown.
func procStartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	if f := strings.Fields(string(b[i+1:])); len(f) >= 20 {
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
		return false, true
	}
	if len(f) > 1 && f[1] != "" {
		if st := procStartTime(pid); st != "" && st != f[1] {
			return false, true // pid reused
		}
	}
	return true, true
}

// ReapStale kills the brokers of, and deletes, cluster directories under
// os.TempDir() left by processes that died without closing them. A
// directory is stale when its owner is gone and it is older than
// ReapMinAge, or when it has no readable owner file and is older than
// ReapOwnerlessAge. It returns how many directories it removed.
func ReapStale(ctx context.Context, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	matches, err := filepath.Glob(filepath.Join(os.TempDir(), DirPrefix+"*"))
	if err != nil {
		return 0, fmt.Errorf("kafkatest: list stale clusters: %w", err)
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
		killBrokers(dir)
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("kafkatest: remove stale cluster %s: %w", dir, err))
			continue
		}
		removed++
		logger.Info("kafkatest: removed stale cluster", "dir", dir, "age", age.Round(time.Second))
	}
	return removed, errors.Join(errs...)
}

// killBrokers SIGKILLs the broker JVMs recorded in dir/broker-*/pid whose
// command line still names dir (a reused pid is left alone).
func killBrokers(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "broker-*", "pid"))
	for _, pf := range pids {
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(filepath.Dir(pf))) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if err := syscall.Kill(pid, 0); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
