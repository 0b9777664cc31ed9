package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/config"
)

// TestUniqueIndexReordering replicates transactions that are independent by
// primary key but depend on each other through another unique index: each
// pair frees a code in one row and takes it in the next. Applied in
// parallel, the second of a pair can run before the first commits and hit a
// unique violation; the worker must roll it back and apply it again after
// the earlier groups commit, not fail.
func TestUniqueIndexReordering(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, order := range []config.CommitOrder{config.CommitFull, config.CommitDependent} {
		t.Run(order.String(), func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TABLE u (id int PRIMARY KEY, code int NOT NULL UNIQUE, pad text)`)
			e.srcExec(`INSERT INTO u SELECT g, g, repeat('x', 100) FROM generate_series(1, 400) g`)
			cfg := e.config("public.u")
			cfg.ApplyParallelism, cfg.CommitOrder, cfg.GroupMaxTxns = 4, order, 1
			e.catchUp(cfg)
			var b strings.Builder
			for i := 1; i <= 200; i++ {
				fmt.Fprintf(&b, "UPDATE u SET code = code + 100000 WHERE id = %d; COMMIT; UPDATE u SET code = %d WHERE id = %d; COMMIT;\n", 2*i-1, 2*i-1, 2*i)
			}
			e.srcExec("CREATE PROCEDURE swaps() LANGUAGE plpgsql AS $$ BEGIN " + b.String() + " END $$")
			e.srcExec("CALL swaps()")
			reg := e.catchUp(cfg)
			e.assertSame("u", "id")
			var retries int64
			for _, c := range reg.Snapshot().Components {
				retries += c.Counters["lock_retries"]
			}
			t.Logf("%d groups applied again", retries)
		})
	}
}
