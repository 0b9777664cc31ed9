package target

import (
	"errors"
	"testing"

	"github.com/repstream/repstream/internal/schema"
)

// TestOwnerChecksShared: a table's owner check passed by one writer of a
// run is not made again by another writer sharing its OwnerChecks, while a
// writer with none checks it itself. The table is handed to a role that is
// not a superuser after the first check — as only a superuser could do —
// so the second writers' answers tell which of them looked.
func TestOwnerChecksShared(t *testing.T) {
	e := newEnv(t, `CREATE TABLE public.o (id int PRIMARY KEY);
		DROP ROLE IF EXISTS owners_shared_r; CREATE ROLE owners_shared_r`)
	t.Cleanup(func() {
		_, _ = e.check.Exec(e.ctx, `DROP TABLE IF EXISTS public.o; DROP ROLE IF EXISTS owners_shared_r`)
	})
	tn := schema.TableName{Schema: "public", Name: "o"}
	shared := &OwnerChecks{}
	first := NewWriter(e.conn, WriterOptions{OwnerChecks: shared})
	if err := first.checkOwner(e.ctx, tn); err != nil {
		t.Fatalf("first check: %v", err)
	}
	if _, err := e.check.Exec(e.ctx, `ALTER TABLE public.o OWNER TO owners_shared_r`); err != nil {
		t.Fatal(err)
	}
	if err := NewWriter(e.conn, WriterOptions{OwnerChecks: shared}).checkOwner(e.ctx, tn); err != nil {
		t.Errorf("a writer sharing the run's checks looked again: %v", err)
	}
	if err := NewWriter(e.conn, WriterOptions{}).checkOwner(e.ctx, tn); !errors.Is(err, ErrUntrustedOwner) {
		t.Errorf("a writer of its own: %v, want ErrUntrustedOwner", err)
	}
}
