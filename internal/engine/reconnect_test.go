package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/queue"
)

// A spill file error reaches the reconnect loop as capture returns it (a
// queue error wrapped with the change, on the source side). It is a local
// fault: not transient, and it ends the run with its cause and what to do.
// A lost connection still is transient.
func TestSpillFaultIsNotTransient(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	q, err := queue.New(queue.Options{Budget: 1 << 10, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// The directory goes away under the queue: creating a spill file fails
	// with a system error (ENOENT), as ENOSPC or EIO would.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	rel := &change.Relation{ID: 1, Namespace: "public", Name: "t", Columns: []change.Column{{Name: "v", TypeOID: 25, TypeMod: -1}}}
	var addErr error
	for i := 0; i < 100 && addErr == nil; i++ {
		c := &change.Change{Op: change.OpInsert, Xid: 7, LSN: change.LSN(i + 1), Rel: rel,
			New: change.Tuple(change.AppendTuple(nil, []byte{change.KindText}, [][]byte{[]byte(strings.Repeat("x", 100))}))}
		addErr = q.Add(context.Background(), 7, c)
	}
	if !errors.Is(addErr, syscall.ENOENT) {
		t.Fatalf("Add: %v", addErr)
	}
	err = onSide("source", fmt.Errorf("queue change of public.t at 0/1: %w", addErr))
	if transient(err) {
		t.Fatalf("spill fault taken for a lost connection: %v", err)
	}
	explained := explainLocal(err, dir)
	for _, w := range []string{dir, "txn-7-", "no such file or directory", "not retried", "--spill-dir"} {
		if !strings.Contains(explained.Error(), w) {
			t.Errorf("error does not contain %q: %v", w, explained)
		}
	}
	if !errors.Is(explained, queue.ErrSpill) || !errors.Is(explained, syscall.ENOENT) {
		t.Errorf("explained error lost its cause: %v", explained)
	}
	if again := explainLocal(fmt.Errorf("run: %w", explained), dir); strings.Count(again.Error(), "not retried") != 1 {
		t.Errorf("explained twice: %v", again)
	}

	lost := onSide("target", fmt.Errorf("apply: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}))
	if !transient(lost) || explainLocal(lost, dir) != lost {
		t.Errorf("a lost connection: transient %v, %v", transient(lost), explainLocal(lost, dir))
	}
}
