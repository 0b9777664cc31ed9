package e2e

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/stats"
)

// TestPerfBacklog is a profiling aid, not a benchmark of record (that is
// `repstream bench`): it loads REPSTREAM_PERF rows in transactions of
// REPSTREAM_PERF_TXN_ROWS rows (default 100)
// with replication stopped, then times repstream's catch-up in-process and
// writes a CPU profile to REPSTREAM_PERF_PROFILE if set.
//
//	REPSTREAM_PERF=1000000 REPSTREAM_PERF_PROFILE=/tmp/cpu.out go test -run TestPerfBacklog -v ./internal/e2e
func TestPerfBacklog(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REPSTREAM_PERF"))
	if n == 0 {
		t.Skip("set REPSTREAM_PERF=<rows> to run")
	}
	e := newEnv(t)
	e.both(conditionsSQL)
	cfg := e.config("public.conditions")
	cfg.Memory = 256 << 20
	if p, _ := strconv.Atoi(os.Getenv("REPSTREAM_PERF_PARALLELISM")); p > 0 {
		cfg.ApplyParallelism = p
	}
	e.catchUp(cfg)
	// Native replication's slot exists before the load too, so both systems
	// catch up the same backlog.
	e.srcExec(`SELECT pg_create_logical_replication_slot('native_' || $1::text, 'pgoutput')`, cfg.Slot)
	start := time.Now()
	per := 100
	if p, _ := strconv.Atoi(os.Getenv("REPSTREAM_PERF_TXN_ROWS")); p > 0 {
		per = p
	}
	loadConditions(e, n, per)
	t.Logf("loaded %d rows in %d-row transactions in %s", n, per, time.Since(start).Round(time.Millisecond))
	if p := os.Getenv("REPSTREAM_PERF_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	reg := stats.NewRegistry()
	cfg.UntilCaughtUp = true
	io0 := procIO(t)
	start = time.Now()
	if err := engine.New(cfg, testLogger(t), reg).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	io1 := procIO(t)
	t.Logf("repstream caught up %d rows in %s: %.0f rows/s (parallelism %d); syscalls: %d reads, %d writes",
		n, d.Round(time.Millisecond), float64(n)/d.Seconds(), cfg.ApplyParallelism, io1["syscr"]-io0["syscr"], io1["syscw"]-io0["syscw"])
	for _, r := range stats.Rates(stats.Snapshot{}, reg.Snapshot()) {
		t.Log(r.String())
	}
	e.assertSame("conditions", "id")
	rsTime := d

	// Native: a subscription on a second target database, same publication.
	var endLSN string
	if err := e.Src.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&endLSN); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cnt, err := nativeCatchUp(t, e, "native_"+cfg.Slot, cfg.Slot, endLSN, false)
	if err != nil {
		t.Fatal(err)
	}
	nd := time.Since(start)
	t.Logf("native caught up %d rows (target has %d) in %s: %.0f rows/s; repstream/native time ratio %.2f",
		n, cnt, nd.Round(time.Millisecond), float64(n)/nd.Seconds(), rsTime.Seconds()/nd.Seconds())
}

// procIO reads this process's /proc/self/io counters.
func procIO(t *testing.T) map[string]int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			out[k] = n
		}
	}
	return out
}

// conditionsSQL is the conditions workload's table.
const conditionsSQL = `CREATE TABLE conditions (id bigint PRIMARY KEY, channel int NOT NULL, since timestamptz NOT NULL,
	till timestamptz NOT NULL, value float8, error real, status smallint NOT NULL DEFAULT 0)`

// loadConditions inserts n rows into conditions on the source, per rows per
// transaction, with a server-side loop.
func loadConditions(e *env, n, per int) {
	e.srcExec(`CREATE PROCEDURE load(n int, per int) LANGUAGE plpgsql AS $$
		BEGIN FOR i IN 0..(n/per - 1) LOOP
			INSERT INTO conditions SELECT g, g % 1000, now(), now() + interval '1 hour', random(), random(), 0
			FROM generate_series(i * per + 1, i * per + per) g;
			COMMIT;
		END LOOP; END $$`)
	e.srcExec(`CALL load($1, $2)`, n, per)
}
