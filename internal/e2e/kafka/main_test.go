package kafka

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, kafkatest.CloseShared) }

// builtBinary is the repstream binary the tests run, built once.
var (
	buildOnce   sync.Once
	builtBinary string
	buildErr    error
)

func repstreamBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if b := os.Getenv("REPSTREAM_TEST_BINARY"); b != "" { // make test's, built from this tree
			builtBinary = b
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		out := filepath.Join(os.TempDir(), fmt.Sprintf("repstream-kafka-e2e-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", out, "./cmd/repstream")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build repstream: %v\n%s", err, b)
			return
		}
		builtBinary = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBinary
}

// syncBuffer keeps what a process prints, for a failing test to show.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(b.buf.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checksum returns the row count and an md5 of the ordered contents.
func checksum(t *testing.T, conn *pgx.Conn, table, orderBy string) (int64, string) {
	t.Helper()
	var n int64
	var h string
	q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY %s)), '') FROM %s x", orderBy, table)
	if err := conn.QueryRow(context.Background(), q).Scan(&n, &h); err != nil {
		t.Fatalf("checksum %s: %v", table, err)
	}
	return n, h
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
