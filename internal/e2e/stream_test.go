package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// TestStreamedTransactions makes the walsender stream large transactions
// while they are in progress (logical_decoding_work_mem=64kB) and checks
// rolled-back subtransactions inside them, a streamed transaction aborted at
// the end, and a large transaction interleaved with small ones on the same
// keys.
func TestStreamedTransactions(t *testing.T) {
	for _, mode := range applyModes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TABLE s (id int PRIMARY KEY, v text, n int);
				CREATE TABLE hot (k int PRIMARY KEY, v int)`)
			e.srcExec(`INSERT INTO hot SELECT g, 0 FROM generate_series(1, 100) g`)
			cfg := e.config("public.s", "public.hot")
			cfg.DecodingWorkMem = "64kB"
			cfg.ApplyParallelism, cfg.CommitOrder = mode.parallelism, mode.order
			e.catchUp(cfg) // slot + initial copy
			stop := e.start(cfg)

			// 1. A streamed transaction with rolled-back subtransactions.
			e.srcExec(`BEGIN;
				INSERT INTO s SELECT g, repeat('a', 100), 0 FROM generate_series(1, 20000) g;
				SAVEPOINT a;
				INSERT INTO s SELECT g, 'rolled back', 1 FROM generate_series(20001, 30000) g;
				UPDATE s SET n = 99 WHERE id <= 5000;
				ROLLBACK TO SAVEPOINT a;
				SAVEPOINT b;
				UPDATE s SET n = 2 WHERE id % 3 = 0;
				SAVEPOINT c;
				DELETE FROM s WHERE id % 10 = 0;
				ROLLBACK TO SAVEPOINT c;
				RELEASE SAVEPOINT b;
				INSERT INTO s SELECT g, 'kept', 3 FROM generate_series(40001, 45000) g;
				COMMIT`)
			// 2. A streamed transaction aborted at the end.
			e.srcExec(`BEGIN;
				INSERT INTO s SELECT g, repeat('z', 100), 7 FROM generate_series(100001, 130000) g;
				UPDATE s SET v = 'aborted' WHERE id < 100;
				ROLLBACK`)
			// 3. A large transaction interleaved with small ones touching the same keys.
			ctx := context.Background()
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error {
				c, err := e.srcConn(gctx)
				if err != nil {
					return err
				}
				defer c.Close(ctx)
				_, err = c.Exec(gctx, `BEGIN;
					INSERT INTO s SELECT g, 'big', 4 FROM generate_series(200001, 240000) g;
					UPDATE hot SET v = v + 1000 WHERE k > 50;
					SELECT pg_sleep(0.5);
					INSERT INTO s SELECT g, 'big2', 5 FROM generate_series(240001, 260000) g;
					COMMIT`)
				return err
			})
			g.Go(func() error {
				c, err := e.srcConn(gctx)
				if err != nil {
					return err
				}
				defer c.Close(ctx)
				for i := 0; i < 50; i++ {
					if _, err := c.Exec(gctx, fmt.Sprintf(`UPDATE hot SET v = v + 1 WHERE k = %d`, 1+i%50)); err != nil {
						return err
					}
					time.Sleep(10 * time.Millisecond)
				}
				return nil
			})
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			// Once the background engine has everything, stop it.
			e.waitCaughtUp(cfg.Slot, 2*time.Minute)
			if err := stop(); err != nil {
				t.Fatalf("engine: %v", err)
			}
			e.assertSame("s", "id")
			e.assertSame("hot", "k")
			var streamed int64
			if err := e.Src.QueryRow(ctx, `SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&streamed); err != nil {
				t.Fatal(err)
			}
			if streamed < 2 {
				t.Fatalf("the walsender streamed %d transactions; the test meant to exercise streaming", streamed)
			}
		})
	}
}

// TestRelationFromCommittedStream: when the first transaction to touch a
// table after the slot starts is streamed, pgoutput describes the table only
// inside that stream and, once it commits, never again for the ordinary
// transactions that follow. Capture must keep that description.
func TestRelationFromCommittedStream(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE r (id int PRIMARY KEY, v text)`)
	cfg := e.config("public.r")
	cfg.DecodingWorkMem = "64kB"
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO r SELECT g, repeat('x', 100) FROM generate_series(1, 5000) g`) // streamed
	e.srcExec(`INSERT INTO r VALUES (100000, 'small, not streamed')`)
	e.srcExec(`UPDATE r SET v = 'updated' WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("r", "id")
}
