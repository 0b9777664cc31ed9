package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// dblSeedRows is the rows each DBL test inserts at scale 1.
const dblSeedRows = 10_000

// dblRowsPerCommit are DBL-12's steps (single job).
var dblRowsPerCommit = []int{1, 2, 4, 5, 10, 20, 50, 100}

const dblDDL = `CREATE TABLE dbl_rows (
	id      bigint PRIMARY KEY,
	job     integer NOT NULL,
	created timestamptz NOT NULL,
	value   double precision,
	payload varchar(100));`

const dblInsert = `INSERT INTO dbl_rows SELECT g, $3, now(), random(), 'benchware row ' || g FROM generate_series($1::bigint, $2::bigint) g`

func init() {
	register(&Workload{
		Name: "dbl",
		Description: "Benchware DBL on the source: DBL-12 single job with 1…100 rows per commit, DBL-11 2 rows per commit " +
			"with 1, 2, 4 … N jobs, DBL-22 bulk load with one commit per job; first without replication, then with " +
			"repstream and with native replication running (what replication costs the application)",
		Tables: []string{"dbl_rows"},
		DDL:    dblDDL,
		Load:   loadDBL,
	})
}

// dblSink collects the DBL results of one load (set on LoadEnv by runDBL).
type dblSink struct {
	replication string
	mu          sync.Mutex
	results     []DBLResult
}

func loadDBL(ctx context.Context, env *LoadEnv) (LoadStats, error) {
	n := env.Params.rows(dblSeedRows)
	jobs := env.Params.Jobs
	if jobs <= 0 {
		jobs = 2 * runtime.NumCPU()
	}
	var jobSteps []int
	for j := 1; j <= jobs; j *= 2 {
		jobSteps = append(jobSteps, j)
	}
	if jobSteps[len(jobSteps)-1] != jobs {
		jobSteps = append(jobSteps, jobs)
	}
	total := n * int64(len(dblRowsPerCommit)+2*len(jobSteps))
	env.Total.Store(total)
	admin, err := connect(ctx, env.DSN)
	if err != nil {
		return LoadStats{}, err
	}
	defer admin.Close(context.Background())
	var nextID atomic.Int64
	var st LoadStats
	run := func(test string, perCommit, nJobs int, rowsPerJob int64) error {
		res, err := dblTest(ctx, env, admin, &nextID, test, perCommit, nJobs, rowsPerJob)
		if err != nil {
			return err
		}
		st.Rows += res.Rows
		st.Txns += res.Txns
		env.Done.Add(res.Rows)
		if env.dbl != nil {
			res.Replication = env.dbl.replication
			env.dbl.mu.Lock()
			env.dbl.results = append(env.dbl.results, res)
			env.dbl.mu.Unlock()
		}
		return nil
	}
	for _, k := range dblRowsPerCommit {
		if err := run("DBL-12", k, 1, n); err != nil {
			return st, err
		}
	}
	for _, j := range jobSteps {
		if err := run("DBL-11", 2, j, max(2, n/int64(j))); err != nil {
			return st, err
		}
	}
	for _, j := range jobSteps {
		if err := run("DBL-22", 0, j, max(1, n/int64(j))); err != nil {
			return st, err
		}
	}
	st.SourceRows = st.Rows
	return st, nil
}

// dblTest runs one test: nJobs connections each inserting rowsPerJob rows,
// perCommit rows per transaction (0: all in one transaction).
func dblTest(ctx context.Context, env *LoadEnv, admin *pgx.Conn, nextID *atomic.Int64, test string, perCommit, nJobs int, rowsPerJob int64) (DBLResult, error) {
	res := DBLResult{Test: test, RowsPerCommit: perCommit, Jobs: nJobs}
	conns := make([]*pgx.Conn, nJobs)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	for i := range conns {
		c, err := connect(ctx, env.DSN)
		if err != nil {
			return res, err
		}
		conns[i] = c
	}
	var lsn0, lsn1 string
	var w0, s0, w1, s1 int64
	walStats := func(lsn *string, writes, syncs *int64) error {
		return admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, wal_write, wal_sync FROM pg_stat_wal").Scan(lsn, writes, syncs)
	}
	if err := walStats(&lsn0, &w0, &s0); err != nil {
		return res, fmt.Errorf("%s: read pg_stat_wal: %w", test, err)
	}
	busy0, tot0 := cpuTimes()
	var txns, rows atomic.Int64
	var svc atomic.Int64 // ns spent in transactions
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for j, c := range conns {
		g.Go(func() error {
			per := int64(perCommit)
			if per <= 0 {
				per = rowsPerJob
			}
			env.markFirst()
			for done := int64(0); done < rowsPerJob; {
				k := min(per, rowsPerJob-done)
				first := nextID.Add(k) - k + 1
				t := time.Now()
				if _, err := c.Exec(gctx, dblInsert, first, first+k-1, j+1); err != nil {
					return fmt.Errorf("%s job %d: %w", test, j+1, err)
				}
				svc.Add(int64(time.Since(t)))
				txns.Add(1)
				rows.Add(k)
				done += k
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	el := time.Since(start).Seconds()
	busy1, tot1 := cpuTimes()
	if err := walStats(&lsn1, &w1, &s1); err != nil {
		return res, fmt.Errorf("%s: read pg_stat_wal: %w", test, err)
	}
	res.Rows, res.Txns, res.Seconds = rows.Load(), txns.Load(), el
	if el > 0 {
		res.RowsPerSec = float64(res.Rows) / el
		res.TPS = float64(res.Txns) / el
		res.WALMBPerSec = float64(lsnDiff(lsn0, lsn1)) / 1e6 / el
	}
	if res.Txns > 0 {
		res.ServiceMs = float64(svc.Load()) / 1e6 / float64(res.Txns)
	}
	res.WALWrites, res.WALSyncs = w1-w0, s1-s0
	if tot1 > tot0 {
		res.CPUBusyPct = 100 * float64(busy1-busy0) / float64(tot1-tot0)
	}
	return res, nil
}

func lsnDiff(a, b string) int64 {
	var ah, al, bh, bl uint64
	if _, err := fmt.Sscanf(a, "%X/%X", &ah, &al); err != nil {
		return 0
	}
	if _, err := fmt.Sscanf(b, "%X/%X", &bh, &bl); err != nil {
		return 0
	}
	return int64((bh<<32 | bl) - (ah<<32 | al))
}

// runDBL runs the DBL tests on the source alone, then once per system with
// replication running (live), and verifies each replicated run.
func (r *runner) runDBL(ctx context.Context, rep *Report, specs []runSpec) error {
	fmt.Fprintf(r.out, "== dbl: source only (no replication)\n")
	db := "bench_0_none"
	if err := r.createDB(ctx, r.src, db); err != nil {
		return err
	}
	env := &LoadEnv{DSN: r.src.dsnFor(db), Params: r.o.Params, dbl: &dblSink{replication: "none"}}
	err := execOn(ctx, env.DSN, dblDDL)
	if err == nil {
		_, err = loadDBL(ctx, env)
	}
	r.dropDB(r.src, db)
	if err != nil {
		return fmt.Errorf("dbl without replication: %w", err)
	}
	rep.DBL = append(rep.DBL, env.dbl.results...)
	for _, sp := range specs {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(r.out, "== dbl with %s running\n", sp.label)
		sink := &dblSink{replication: sp.label}
		r.dblSink = sink
		res := r.runSystem(ctx, sp)
		r.dblSink = nil
		rep.Runs = append(rep.Runs, res)
		rep.DBL = append(rep.DBL, sink.results...)
		fmt.Fprintf(r.out, "== %s\n", summaryLine(res))
	}
	return nil
}

func writeDBLMarkdown(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "## DBL tests\n\nCPU busy is the whole machine's (source, target and replication share it).\n\n")
	fmt.Fprintf(w, "| test | rows/commit | jobs | replication | rows | s | rows/s | tps | SQL ms/txn | WAL MB/s | WAL writes | WAL syncs | CPU busy %% |\n")
	fmt.Fprintf(w, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, test := range []string{"DBL-12", "DBL-11", "DBL-22"} {
		for _, d := range rep.DBL {
			if d.Test != test {
				continue
			}
			rpc := fmt.Sprint(d.RowsPerCommit)
			if d.RowsPerCommit == 0 {
				rpc = "all"
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %d | %s | %s | %s | %s | %s | %d | %d | %.0f |\n", d.Test, rpc, d.Jobs, d.Replication,
				d.Rows, fmtFig(d.Seconds), fmtFig(d.RowsPerSec), fmtFig(d.TPS), fmtFig(d.ServiceMs), fmtFig(d.WALMBPerSec),
				d.WALWrites, d.WALSyncs, d.CPUBusyPct)
		}
	}
	fmt.Fprintln(w)
}
