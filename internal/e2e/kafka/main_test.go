package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

func TestMain(m *testing.M) { pgtest.Main(m, kafkatest.CloseShared, testbin.Remove) }

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
