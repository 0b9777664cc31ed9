package kafkatest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// A broker JVM spends most of its start loading and verifying classes:
// about 4.5 s of CPU and 3.6 s of wall time on a 2-CPU machine, against
// 2.6 s and 1.9 s with a class-data-sharing archive of the broker's
// classes (AppCDS: -XX:SharedArchiveFile). The tests start dozens of
// brokers, beside PostgreSQL servers, on two shared CPUs; the archive
// keeps that within `make test`'s time.
//
// The archive is made once per JVM and jar cache, by a broker started for
// that and stopped cleanly (the JVM writes it at exit:
// -XX:ArchiveClassesAtExit), in <home>/broker-<key>.jsa, key naming the
// java binary (its path, size and time). Processes that start brokers at
// once take a lock on it, so one makes it and the others wait. A JVM that
// cannot use it (another build) warns on the broker's stdout and starts
// without it; one that cannot be made leaves the brokers as they were.

// archives holds, per jar cache, the archive this process uses ("": none).
var archives struct {
	mu   sync.Mutex
	path map[string]string
}

// ensureArchive returns the broker class archive of home and java, making
// it on first use; "" when it cannot be made (the reason is logged).
func ensureArchive(ctx context.Context, home, java string, logger *slog.Logger) string {
	archives.mu.Lock()
	defer archives.mu.Unlock()
	if p, ok := archives.path[home]; ok {
		return p
	}
	if archives.path == nil {
		archives.path = map[string]string{}
	}
	p, err := makeArchive(ctx, home, java, logger)
	if err != nil {
		logger.Warn("kafkatest: brokers start without a class archive", "err", err)
		p = ""
	}
	archives.path[home] = p
	return p
}

func makeArchive(ctx context.Context, home, java string, logger *slog.Logger) (string, error) {
	st, err := os.Stat(java)
	if err != nil {
		return "", err
	}
	key := sha256.Sum256(fmt.Appendf(nil, "%s %d %d", java, st.Size(), st.ModTime().UnixNano()))
	path := filepath.Join(home, fmt.Sprintf("broker-%x.jsa", key[:6]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closed next
	if _, err := os.Stat(path); err == nil {
		return path, nil // another process made it meanwhile
	}
	t0 := time.Now()
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	defer os.Remove(tmp)
	c, err := startOnce(ctx, Options{Name: "archive", Brokers: 1, HeapMB: DefaultHeapMB}, home, java, "", tmp, logger)
	if err != nil {
		return "", err
	}
	// A clean stop: the JVM writes the archive as it exits.
	c.mu.Lock()
	c.signalAndWait(c.brokers[0], syscall.SIGTERM)
	c.mu.Unlock()
	if err := c.Close(); err != nil {
		return "", err
	}
	if st, err := os.Stat(tmp); err != nil || st.Size() == 0 {
		return "", fmt.Errorf("the broker wrote no class archive at %s (%v)", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	logger.Info("kafkatest: broker class archive made", "path", path, "took", time.Since(t0).Round(time.Millisecond))
	return path, nil
}
