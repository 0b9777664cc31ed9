package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/config"
)

// TestCollapseHotKeys replicates a backlog of small transactions that touch
// the same keys again and again — counters, rows inserted then updated or
// deleted, key changes, TOASTed values left unchanged — so that groups fold
// repeated changes. The target must end equal to the source, with folding
// seen in the counters, for every parallelism and commit order; a table with
// a second unique index must not be folded and must stay correct too.
func TestCollapseHotKeys(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, tc := range []struct {
		parallelism int
		order       config.CommitOrder
	}{{1, "full"}, {4, "full"}, {4, "dependent"}} {
		t.Run(fmt.Sprintf("p%d-%s", tc.parallelism, tc.order), func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL, doc text);
CREATE TABLE items (id int PRIMARY KEY, state text NOT NULL, doc text);
CREATE TABLE coded (id int PRIMARY KEY, code int NOT NULL UNIQUE, n int NOT NULL)`)
			e.srcExec(`ALTER TABLE counters ALTER doc SET STORAGE EXTERNAL`)
			e.srcExec(`INSERT INTO counters SELECT g, 0, repeat(md5(g::text), 200) FROM generate_series(1, 10) g`)
			e.srcExec(`INSERT INTO coded SELECT g, g, 0 FROM generate_series(1, 10) g`)
			cfg := e.config("public.counters", "public.items", "public.coded")
			cfg.ApplyParallelism, cfg.CommitOrder = tc.parallelism, tc.order
			e.catchUp(cfg)

			var b strings.Builder
			for i := 1; i <= 300; i++ {
				c := i%10 + 1
				fmt.Fprintf(&b, "UPDATE counters SET n = n + %d WHERE id = %d;\n", i, c)
				fmt.Fprintf(&b, "INSERT INTO items VALUES (%d, 'new', repeat('d', %d));\n", i, 3000+i)
				switch i % 4 {
				case 0:
					fmt.Fprintf(&b, "UPDATE items SET state = 'done' WHERE id = %d;\n", i-1)
				case 1:
					fmt.Fprintf(&b, "DELETE FROM items WHERE id = %d;\n", i)
				case 2:
					fmt.Fprintf(&b, "UPDATE items SET id = id + 100000 WHERE id = %d;\n", i-2)
				}
				// Swap the codes of two rows through a parked value: folding
				// this table (code is unique too) would move row a's final
				// update before row b's and collide.
				fmt.Fprintf(&b, "SELECT code INTO ca FROM coded WHERE id = %[1]d; SELECT code INTO cb FROM coded WHERE id = %[2]d;\n"+
					"UPDATE coded SET code = 0 WHERE id = %[1]d; UPDATE coded SET code = ca WHERE id = %[2]d; UPDATE coded SET code = cb, n = n + 1 WHERE id = %[1]d;\n",
					i%10+1, (i+5)%10+1)
				if i%3 == 0 {
					fmt.Fprintf(&b, "UPDATE counters SET doc = repeat(md5('%d'), 200) WHERE id = %d;\n", i, c)
				}
				b.WriteString("COMMIT;\n")
			}
			e.srcExec("CREATE PROCEDURE hot() LANGUAGE plpgsql AS $$ DECLARE ca int; cb int; BEGIN " + b.String() + " END $$")
			e.srcExec("CALL hot()")
			reg := e.catchUp(cfg)
			e.assertSame("counters", "id")
			e.assertSame("items", "id")
			e.assertSame("coded", "id")
			var collapsed int64
			for _, c := range reg.Snapshot().Components {
				collapsed += c.Counters["collapsed_changes"]
			}
			t.Logf("%d changes folded away", collapsed)
			if collapsed == 0 {
				t.Error("no change was folded")
			}
		})
	}
}
