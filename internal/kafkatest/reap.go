package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/repstream/repstream/internal/pgcluster"
)

// reapOnce runs ReapStale once per process, at the first StartCluster.
var reapOnce sync.Once

// writeOwner records the current process as the owner of dir
// (pgcluster.WriteOwner: the same policy reaps both kinds of directory).
func writeOwner(dir string) error { return pgcluster.WriteOwner(dir) }

// ReapStale kills the brokers of, and deletes, cluster directories under
// os.TempDir() left by processes that died without closing them, by
// internal/pgcluster's policy (pgcluster.ReapDirs: the owner gone and older
// than pgcluster.ReapMinAge, or no readable owner file and older than
// pgcluster.ReapOwnerlessAge). It returns how many directories it removed.
func ReapStale(ctx context.Context, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return pgcluster.ReapDirs(ctx, DirPrefix, func(_ context.Context, dir string) error {
		killBrokers(dir)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("kafkatest: remove stale cluster %s: %w", dir, err)
		}
		return nil
	}, logger.With("component", "kafkatest"))
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
