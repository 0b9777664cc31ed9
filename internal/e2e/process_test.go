package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/testbin"
)

// runBinary runs bin/repstream to completion and returns its stderr and
// peak RSS in bytes: its VmHWM, read every 50 ms while it runs. Not the
// rusage of its wait: Go clones a child sharing the test process's memory
// until exec, and Linux carries that memory's high-water mark into the
// child's ru_maxrss, so with tests running in parallel it reported the
// test process's peak.
func runBinary(t *testing.T, timeout time.Duration, argv ...string) (string, int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Repstream(t), argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var rss int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
			if _, rest, ok := strings.Cut(string(b), "VmHWM:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						rss = max(rss, kb<<10)
					}
				}
			}
		}
		select {
		case err := <-done:
			return stderr.String(), rss, err
		case <-tick.C:
		}
	}
}

// summaryField reads a numeric field of the engine's final "summary" log line.
func summaryField(t *testing.T, log, field string) float64 {
	t.Helper()
	m := regexp.MustCompile(`msg=summary .*\b` + field + `=([0-9.e+]+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no %s in the summary line:\n%s", field, tail(log, 20))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func tail(s string, n int) string {
	lines := bytes.Split([]byte(s), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// TestLargeTransactionSpills replicates one 300,000-row transaction (about
// 40 MiB of changes) with a 16 MiB queue budget. Through the queue (--eager=false) it must spill, the
// peak RSS must stay within the budget plus a fixed overhead, and spill must
// cost little more than the changes themselves. Applied eagerly (the
// default) it must not spill at all, within the same memory.
func TestLargeTransactionSpills(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	if testing.Short() {
		t.Skip("300,000 rows")
	}
	for _, eager := range []bool{false, true} {
		t.Run(fmt.Sprintf("eager=%v", eager), func(t *testing.T) {
			t.Parallel() // own databases
			e := newEnv(t)
			e.both(`CREATE TABLE big1m (id bigint PRIMARY KEY, channel int, value float8, label text)`)
			cfg := e.config("public.big1m")
			cfg.Memory = 16 << 20
			cfg.ApplyParallelism = 2
			e.catchUp(cfg) // create the slot
			e.srcExec(`INSERT INTO big1m SELECT g, g % 1000, g * 0.5, 'label ' || g FROM generate_series(1, 300000) g`)
			log, rss, err := runBinary(t, 5*time.Minute, args(cfg, "--until-caught-up", fmt.Sprintf("--eager=%v", eager))...)
			if err != nil {
				t.Fatalf("repstream: %v\n%s", err, tail(log, 30))
			}
			e.assertSame("big1m", "id")
			spilled := summaryField(t, log, "spilled_bytes")
			accounted := summaryField(t, log, "spilled_accounted_bytes")
			changeBytes := summaryField(t, log, "change_bytes")
			t.Logf("peak RSS %.1f MiB; bytes of changes queued %.1f MiB; spilled %.1f MiB written for %.1f MiB of changes (%.2fx)",
				float64(rss)/(1<<20), changeBytes/(1<<20), spilled/(1<<20), accounted/(1<<20), spilled/max(accounted, 1))
			if limit := int64(16+100) << 20; rss > limit {
				t.Fatalf("peak RSS %d MiB exceeds the budget plus overhead (%d MiB)", rss>>20, limit>>20)
			}
			if eager {
				if spilled != 0 {
					t.Fatalf("applied eagerly, the transaction still spilled %.0f bytes", spilled)
				}
				return
			}
			if spilled == 0 {
				t.Fatalf("a 300,000-row transaction under --memory 16MiB did not spill")
			}
			if spilled > 1.3*accounted {
				t.Fatalf("spill wrote %.0f bytes for %.0f bytes of changes (> 1.3x)", spilled, accounted)
			}
		})
	}
}

// TestCrashRecovery kills the engine with SIGKILL at random moments while a
// mixed workload runs, restarts it each time, and checks at the end that the
// target equals the source: nothing lost, nothing applied twice.
func TestCrashRecovery(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	modes := []struct {
		name        string
		parallelism int
		order       config.CommitOrder
	}{{"p1", 1, "full"}, {"p4-dependent", 4, "dependent"}}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel() // own databases
			e := newEnv(t)
			e.both(`CREATE TABLE acct (id int PRIMARY KEY, balance bigint NOT NULL, note text);
				CREATE TABLE ev (id bigserial PRIMARY KEY, acct int, amount int, payload text);
				CREATE TABLE nk (a int, b int);
				ALTER TABLE nk REPLICA IDENTITY FULL`)
			e.srcExec(`INSERT INTO acct SELECT g, 1000, 'n' FROM generate_series(1, 500) g`)
			cfg := e.config("public.*")
			cfg.Memory = 4 << 20 // small: large transactions spill, backlogs hit flow control
			cfg.ApplyParallelism, cfg.CommitOrder = mode.parallelism, mode.order
			cfg.DecodingWorkMem = "256kB"
			e.catchUp(cfg) // slot and initial copy

			ctx, stopLoad := context.WithCancel(context.Background())
			loadErr := make(chan error, 1)
			go func() { loadErr <- e.mixedLoad(ctx, uint64(time.Now().UnixNano())) }()

			seed := uint64(time.Now().UnixNano())
			t.Logf("kill seed %d", seed)
			r := rand.New(rand.NewPCG(seed, 2))
			var logs []*bytes.Buffer // every run's log, shown when the test fails
			t.Cleanup(func() {
				if t.Failed() {
					for i, l := range logs {
						t.Logf("run %d:\n%s", i+1, tail(l.String(), 60))
					}
					rows, err := e.Tgt.Query(context.Background(), `SELECT coalesce(first_lsn::text, ''), end_lsn::text, xmin::text FROM repstream.applied WHERE slot = $1 ORDER BY end_lsn`, cfg.Slot)
					if err == nil {
						var b strings.Builder
						for rows.Next() {
							var f, en, x string
							_ = rows.Scan(&f, &en, &x)
							fmt.Fprintf(&b, "  %s..%s xmin %s\n", f, en, x)
						}
						rows.Close()
						var low string
						_ = e.Tgt.QueryRow(context.Background(), `SELECT low_lsn::text FROM repstream.progress WHERE slot = $1`, cfg.Slot).Scan(&low)
						t.Logf("target progress: low %s, applied ranges:\n%s", low, b.String())
					}
				}
			})
			for kill := 0; kill < 5; kill++ {
				cmd := exec.Command(testbin.Repstream(t), args(cfg, "--log-level", "debug")...)
				var stderr bytes.Buffer
				logs = append(logs, &stderr)
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(300+r.IntN(2200)) * time.Millisecond)
				if cmd.ProcessState != nil {
					t.Fatalf("engine exited early:\n%s", tail(stderr.String(), 30))
				}
				_ = cmd.Process.Signal(syscall.SIGKILL)
				err := cmd.Wait()
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
					t.Fatalf("engine ended by itself before the kill (%v):\n%s", err, tail(stderr.String(), 200))
				}
			}
			stopLoad()
			if err := <-loadErr; err != nil {
				t.Fatalf("workload: %v", err)
			}
			log, _, err := runBinary(t, 3*time.Minute, args(cfg, "--until-caught-up")...)
			if err != nil {
				t.Fatalf("final catch-up: %v\n%s", err, tail(log, 30))
			}
			e.assertSame("acct", "id")
			e.assertSame("ev", "id")
			e.assertSame("nk", "a, b")
			if os.Getenv("REPSTREAM_TEST_VERBOSE") != "" {
				t.Log(tail(log, 10))
			}
		})
	}
}

// mixedLoad runs transactions of every shape until ctx ends: single-row and
// multi-row inserts, updates that move money between accounts (hot keys),
// deletes, keyless-table changes, rolled-back transactions and
// subtransactions, and now and then a large transaction that streams.
func (e *env) mixedLoad(ctx context.Context, seed uint64) error {
	conn, err := e.srcConn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; ctx.Err() == nil; i++ {
		var sql string
		switch k := r.IntN(100); {
		case k < 35:
			a, b := 1+r.IntN(500), 1+r.IntN(500)
			sql = fmt.Sprintf(`BEGIN; UPDATE acct SET balance = balance - 10 WHERE id = %d; UPDATE acct SET balance = balance + 10, note = 'tx%d' WHERE id = %d;
				INSERT INTO ev (acct, amount, payload) VALUES (%d, -10, 'move'), (%d, 10, 'move'); COMMIT`, a, i, b, a, b)
		case k < 55:
			sql = fmt.Sprintf(`INSERT INTO ev (acct, amount, payload) SELECT g %% 500, g, md5(g::text) FROM generate_series(1, %d) g`, 1+r.IntN(200))
		case k < 65:
			// A few rows from a random place, found through the key (an
			// ORDER BY random() sorted the whole, growing table each time).
			sql = fmt.Sprintf(`DELETE FROM ev WHERE id IN (SELECT id FROM ev WHERE id >= (SELECT (max(id) * random())::bigint FROM ev) ORDER BY id LIMIT %d)`, 1+r.IntN(20))
		case k < 72:
			sql = fmt.Sprintf(`BEGIN; INSERT INTO nk VALUES (%d, %d); UPDATE nk SET b = b + 1 WHERE a = %d; DELETE FROM nk WHERE a = %d; COMMIT`,
				r.IntN(50), i, r.IntN(50), r.IntN(50))
		case k < 80:
			sql = fmt.Sprintf(`BEGIN; UPDATE acct SET balance = 0 WHERE id = %d; INSERT INTO ev (acct) VALUES (-1); ROLLBACK`, 1+r.IntN(500))
		case k < 88:
			sql = fmt.Sprintf(`BEGIN; INSERT INTO ev (acct, amount) VALUES (%d, 1); SAVEPOINT s; UPDATE acct SET balance = -1 WHERE id < 50;
				INSERT INTO ev (acct, amount) SELECT 0, g FROM generate_series(1, 100) g; ROLLBACK TO SAVEPOINT s;
				UPDATE acct SET note = 'sp%d' WHERE id = %d; COMMIT`, r.IntN(500), i, 1+r.IntN(500))
		case k < 90:
			sql = fmt.Sprintf(`BEGIN; INSERT INTO ev (acct, amount, payload) SELECT g %% 500, g, repeat('x', 200) FROM generate_series(1, %d) g;
				SAVEPOINT s; DELETE FROM ev WHERE acct = 7; ROLLBACK TO SAVEPOINT s; UPDATE acct SET balance = balance + 1; COMMIT`, 5000+r.IntN(15000))
		default:
			sql = fmt.Sprintf(`UPDATE acct SET balance = balance + 1, note = 'bulk%d' WHERE id %% 7 = %d`, i, r.IntN(7))
		}
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			return fmt.Errorf("%s: %w", firstLine(sql), err)
		}
		// The pace: a few hundred transactions a second. Unpaced, the
		// load took whatever CPU the machine had left, and the backlog it
		// made, not the kills, set the test's cost.
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}
