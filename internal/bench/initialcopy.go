package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
)

// The initial-copy workload: a multi-table source of a few hundred MB
// (one 3M-row table and three of 500K at scale 1), loaded and vacuumed
// before the system starts; the target database starts empty (repstream
// and pgcopydb create the tables, building the indexes after the data) or
// with the tables pre-created (native and pglogical, which need them). The
// measured time runs from the system's start until it reports the copy done
// (repstream: `run --snapshot --until-caught-up` exits 0; native: every
// table 'r' in pg_subscription_rel; pglogical: the subscription replicating
// with every table synchronised; pgcopydb: `clone` exits 0) and every
// table's row count equals the source's.

const (
	initialCopyBigRows   = 3_000_000
	initialCopySmallRows = 500_000
	initialCopyChunk     = 250_000 // rows per INSERT of the load (progress granularity)
)

// initialCopyDDL: a PK and at least one secondary index per table, a mix of
// types (integers, numeric, floats, text, timestamptz, date, uuid, jsonb,
// bytea, boolean, arrays, a composite key).
const initialCopyDDL = `CREATE TABLE ic_orders (
	id       bigint PRIMARY KEY,
	account  integer NOT NULL,
	created  timestamptz NOT NULL,
	amount   numeric(12,2) NOT NULL,
	score    double precision,
	paid     boolean NOT NULL,
	status   smallint NOT NULL,
	note     text);
CREATE INDEX ic_orders_account ON ic_orders (account, created);
CREATE TABLE ic_customers (
	id       integer PRIMARY KEY,
	uid      uuid NOT NULL,
	name     text NOT NULL,
	email    varchar(80) NOT NULL,
	born     date,
	tags     text[],
	profile  jsonb);
CREATE UNIQUE INDEX ic_customers_uid ON ic_customers (uid);
CREATE INDEX ic_customers_email ON ic_customers (email);
CREATE TABLE ic_events (
	id       bigint PRIMARY KEY,
	order_id bigint NOT NULL,
	at       timestamptz NOT NULL,
	kind     text NOT NULL,
	payload  bytea,
	weight   real);
CREATE INDEX ic_events_order ON ic_events (order_id);
CREATE TABLE ic_stock (
	warehouse integer NOT NULL,
	item      integer NOT NULL,
	qty       integer NOT NULL,
	price     numeric(10,2) NOT NULL,
	updated   timestamp NOT NULL,
	PRIMARY KEY (warehouse, item));
CREATE INDEX ic_stock_updated ON ic_stock (updated);`

// initialCopyInserts generate rows $1..$2 of each table, deterministically.
var initialCopyInserts = map[string]string{
	"ic_orders": `INSERT INTO ic_orders SELECT g, (g * 7919) % 100000, timestamptz '2024-01-01' + g * interval '7 seconds',
		((g * 31) % 1000000) / 100.0, (g % 9973) / 97.0, g % 3 = 0, (g % 5)::smallint,
		CASE WHEN g % 4 = 0 THEN NULL ELSE 'order ' || g || ' ' || left(md5(g::text), 10 + (g % 13)::int) END
		FROM generate_series($1::bigint, $2::bigint) g`,
	"ic_customers": `INSERT INTO ic_customers SELECT g, md5('c' || g)::uuid, 'customer ' || left(md5(g::text), 12),
		'user' || g || '@example.org', date '1950-01-01' + (g % 20000)::int, ARRAY['t' || (g % 7), 't' || (g % 11)],
		jsonb_build_object('level', g % 10, 'city', 'city ' || (g % 500), 'vip', g % 17 = 0)
		FROM generate_series($1::bigint, $2::bigint) g`,
	"ic_events": `INSERT INTO ic_events SELECT g, (g * 6) % 3000000 + 1, timestamptz '2024-01-01' + g * interval '41 seconds',
		(ARRAY['created','paid','shipped','returned'])[1 + g % 4], decode(md5(g::text), 'hex'), (g % 1000) / 10.0
		FROM generate_series($1::bigint, $2::bigint) g`,
	"ic_stock": `INSERT INTO ic_stock SELECT 1 + (g - 1) / 10000, (g - 1) % 10000, (g * 13) % 500, ((g * 17) % 100000) / 100.0,
		timestamp '2024-01-01' + g * interval '3 seconds'
		FROM generate_series($1::bigint, $2::bigint) g`,
}

var initialCopyTables = []string{"ic_orders", "ic_customers", "ic_events", "ic_stock"}

func init() { register(initialCopyWorkload()) }

func initialCopyWorkload() *Workload {
	return &Workload{
		Name: "initial-copy",
		Description: "initial copy of a multi-table source (ic_orders 3,000,000 rows, ic_customers, ic_events and ic_stock " +
			"500,000 each: ≈430 MB of row payload, ≈800 MB on disk with indexes at scale 1; a PK and secondary indexes on each, mixed types) into an empty target database, or with --pre-made into tables made beforehand with their keys and indexes",
		Tables: initialCopyTables,
		DDL:    initialCopyDDL,
		Copy:   true,
		Load:   loadInitialCopy,
	}
}

// initialCopyRows is how many rows each table gets.
func initialCopyRows(p Params) map[string]int64 {
	big := p.rows(initialCopyBigRows)
	small := max(1, big/6)
	if p.Rows <= 0 {
		small = p.rows(initialCopySmallRows)
	}
	return map[string]int64{"ic_orders": big, "ic_customers": small, "ic_events": small, "ic_stock": small}
}

func loadInitialCopy(ctx context.Context, env *LoadEnv) (LoadStats, error) {
	rows := initialCopyRows(env.Params)
	var total int64
	for _, n := range rows {
		total += n
	}
	env.Total.Store(total)
	c, err := connect(ctx, env.DSN)
	if err != nil {
		return LoadStats{}, err
	}
	defer c.Close(context.Background())
	var st LoadStats
	for _, t := range initialCopyTables {
		n := rows[t]
		for first := int64(1); first <= n; first += initialCopyChunk {
			last := min(first+initialCopyChunk-1, n)
			env.markFirst()
			if err := execSQL(ctx, c, initialCopyInserts[t], first, last); err != nil {
				return st, err
			}
			st.Txns++
			st.Rows += last - first + 1
			env.Done.Store(st.Rows)
		}
	}
	st.SourceRows = st.Rows
	// An existing database: hint bits set, visibility map and statistics
	// up to date, nothing left for a checkpoint to flush during the copy.
	if err := execSQL(ctx, c, "VACUUM (ANALYZE)"); err != nil {
		return st, err
	}
	if err := execSQL(ctx, c, "CHECKPOINT"); err != nil {
		return st, err
	}
	return st, nil
}

// createsTables is true for the systems that create the target tables
// themselves in the initial-copy workload; with pre-made tables (--pre-made)
// none does.
func createsTables(s System, p Params) bool {
	return !p.PreMade && (s == SystemRepstream || s == SystemPgcopydb)
}

// copySystem is a system run by the initial-copy workload.
type copySystem interface {
	replSystem
	// copyDone tells whether the system says the copy is complete (and,
	// for streaming systems, replicating); c is a connection to the target
	// database. An error means the copy failed.
	copyDone(ctx context.Context, c *pgx.Conn) (bool, error)
}

// CopyTableTime is when one table's rows were all on the target.
type CopyTableTime struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	// Seconds from the system's start until the target's statistics
	// counted every row inserted (pg_stat_user_tables.n_tup_ins, which a
	// backend reports at most once a second: ±1 s); -1 if never seen.
	Seconds float64 `json:"seconds"`
}

// newCopySystem makes the system of a copy run.
func (s *systemRun) newCopySystem() (copySystem, error) {
	env := sysEnv{srcDSN: s.srcDSN, tgtDSN: s.tgtDSN, slot: s.slot, pub: "bench_pub", outDir: s.r.o.Out, label: s.sp.label,
		log: s.r.log.With("system", s.sp.label)}
	switch s.sp.system {
	case SystemRepstream:
		rs := newRepstream(env, s.r.o.Binary, s.sp.flags)
		rs.copyMode, rs.preMade = true, s.r.o.Params.PreMade
		s.rsys = rs
		return rs, nil
	case SystemNative:
		n := newNative(env, s.r.version)
		n.binary = s.r.o.NativeBinary
		n.copyData = true
		return n, nil
	case SystemPglogical:
		return newPglogical(env, qualifiedTables(s.r.wl), true), nil
	case SystemPgcopydb:
		return &pgcopydbSys{env: env, done: make(chan struct{}), preMade: s.r.o.Params.PreMade}, nil
	}
	return nil, fmt.Errorf("%s does not run the initial-copy workload", s.sp.system)
}

// doCopyRun runs the initial-copy workload for one system: load the source,
// start the system on an empty (or table-only) target, wait until it is
// done and every row is there, verify.
func (r *runner) doCopyRun(ctx context.Context, sp runSpec, res *RunResult) error {
	db := fmt.Sprintf("bench_%d_%s", sp.idx, sp.system)
	for _, srv := range []*server{r.src, r.tgt} {
		if err := r.createDB(ctx, srv, db); err != nil {
			return err
		}
	}
	defer r.dropDB(r.src, db)
	defer r.dropDB(r.tgt, db)
	run := &systemRun{r: r, sp: sp, res: res, srcDSN: r.src.dsnFor(db), tgtDSN: r.tgt.dsnFor(db),
		slot: fmt.Sprintf("bench_%d_%s", sp.idx, sp.system), m: readings{mode: r.o.Mode}}
	if err := execOn(ctx, run.srcDSN, r.wl.DDL+"\n"+ProbeDDL); err != nil {
		return fmt.Errorf("create the workload's tables on the source: %w", err)
	}
	if !createsTables(sp.system, r.o.Params) {
		if err := execOn(ctx, run.tgtDSN, r.wl.DDL+"\n"+ProbeDDL); err != nil {
			return fmt.Errorf("create the workload's tables on the target: %w", err)
		}
	}
	if sp.system == SystemRepstream || sp.system == SystemNative {
		if err := execOn(ctx, run.srcDSN, "CREATE PUBLICATION bench_pub FOR TABLE "+strings.Join(qualifiedTables(r.wl), ", ")); err != nil {
			return err
		}
	}
	runCtx, cancelRun := context.WithTimeout(ctx, r.o.Timeout)
	defer cancelRun()
	run.ctx = runCtx

	// Load (not measured).
	run.loadEnv = &LoadEnv{DSN: run.srcDSN, Params: r.o.Params}
	run.probe = NewProbe(withApp(run.srcDSN), withApp(run.tgtDSN), 100*time.Millisecond, r.log)
	sys, err := run.newCopySystem()
	if err != nil {
		return err
	}
	run.sys = sys
	want := initialCopyRows(r.o.Params)
	run.smp = newSampler(r, sp, withApp(run.srcDSN), withApp(run.tgtDSN), run.slot, slices.Clone(r.wl.Tables), run.probe, sys)
	run.smp.sourceBackends = true
	run.smp.load = run.loadEnv
	fmt.Fprintf(r.out, "   loading the source ...\n")
	if err := run.load(); err != nil {
		return err
	}
	var dbBytes int64
	if c, err := pgx.Connect(runCtx, withApp(run.srcDSN)); err == nil {
		_ = c.QueryRow(runCtx, "SELECT pg_database_size(current_database())").Scan(&dbBytes)
		c.Close(context.Background())
	}
	defer sys.cleanup(context.Background())
	if err := sys.prepare(runCtx); err != nil {
		return err
	}
	if sp.system == SystemNative {
		if err := r.nativeSpacing(runCtx, run.tgtDSN); err != nil {
			return err
		}
		defer func() { r.lastNative = time.Now() }()
	}

	// Measure.
	var bg context.Context
	bg, run.cancelBG = context.WithCancel(runCtx)
	run.bg.Add(1)
	go func() { defer run.bg.Done(); run.smp.run(bg) }()
	defer run.stopBG()
	var wal0 change.LSN
	if wal0, err = currentLSN(runCtx, run.tgtDSN); err != nil {
		return err
	}
	run.smp.setPhase("copy")
	start := time.Now()
	if run.rsys != nil {
		run.rsys.setEpoch(start)
	}
	run.smp.begin(runCtx, start)
	if err := sys.start(runCtx); err != nil {
		return err
	}
	doneAt, tables, err := run.waitCopied(sys, start, want)
	if err != nil {
		return err
	}
	run.smp.setPhase("verify")
	wal1, err := currentLSN(runCtx, run.tgtDSN)
	if err != nil {
		return err
	}
	run.smp.sampleNow(runCtx)
	run.stopBG()
	if err := sys.stop(ctx, res); err != nil {
		return err
	}

	// Figures and verification.
	res.CopyTables = tables
	res.Timeline = run.smp.timeline()
	run.smp.fillResources(res)
	checks, ok, payload, err := verify(ctx, run.srcDSN, run.tgtDSN, r.wl.Tables, nil)
	res.Tables = checks
	secs := doneAt.Sub(start).Seconds()
	res.Load = LoadFigures{Seconds: run.m.loadEnd.Sub(run.m.loadStart).Seconds(), Rows: run.m.load.Rows, Txns: run.m.load.Txns,
		SourceRows: run.m.load.SourceRows, PayloadBytes: payload, SourceDBBytes: dbBytes}
	if s := res.Load.Seconds; s > 0 {
		res.Load.RowsPerSec = float64(run.m.load.SourceRows) / s
		res.Load.TxnsPerSec = float64(run.m.load.Txns) / s
	}
	res.Replication = ReplFigures{Seconds: secs, CatchUpSeconds: secs}
	if secs > 0 {
		res.Replication.RowsPerSec = float64(run.m.load.Rows) / secs
		res.Replication.MBPerSec = float64(payload) / 1e6 / secs
	}
	res.WAL = WALFigures{TargetBytes: int64(wal1 - wal0)}
	if err != nil {
		return err
	}
	setVerified(res, checks, ok)
	return nil
}

// waitCopied polls the system until it says it is done, then checks that
// every table's row count equals the source's; on the way it records when
// each table's rows were all inserted (from the target's statistics).
func (s *systemRun) waitCopied(sys copySystem, start time.Time, want map[string]int64) (time.Time, []CopyTableTime, error) {
	ctx := s.ctx
	tgt, err := pgx.Connect(ctx, withApp(s.tgtDSN))
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("connect to the target: %w", err)
	}
	defer tgt.Close(context.Background())
	seen := map[string]float64{}
	statTables := func() {
		rows, err := tgt.Query(ctx, "SELECT relname::text, n_tup_ins FROM pg_stat_user_tables WHERE schemaname = 'public' AND relname = ANY($1)", s.r.wl.Tables)
		if err != nil {
			return
		}
		defer rows.Close()
		now := time.Since(start).Seconds()
		for rows.Next() {
			var t string
			var n int64
			if rows.Scan(&t, &n) == nil {
				if _, ok := seen[t]; !ok && n >= want[t] {
					seen[t] = now
				}
			}
		}
	}
	tables := func() []CopyTableTime {
		out := make([]CopyTableTime, 0, len(s.r.wl.Tables))
		for _, t := range s.r.wl.Tables {
			sec, ok := seen[t]
			if !ok {
				sec = -1
			}
			out = append(out, CopyTableTime{Table: t, Rows: want[t], Seconds: sec})
		}
		return out
	}
	tables0 := slices.Clone(s.r.wl.Tables)
	var doneAt time.Time
	for {
		statTables()
		if doneAt.IsZero() {
			ok, err := sys.copyDone(ctx, tgt)
			if err != nil {
				return time.Time{}, tables(), err
			}
			if ok {
				doneAt = time.Now()
			}
		}
		if !doneAt.IsZero() {
			got, err := counts(ctx, tgt, tables0)
			if err == nil {
				match := true
				for i, t := range tables0 {
					match = match && got[i] == want[t]
				}
				if match {
					// Statistics of the last tables may not be flushed yet.
					deadline := time.Now().Add(1500 * time.Millisecond)
					for len(seen) < len(tables0) && time.Now().Before(deadline) {
						time.Sleep(250 * time.Millisecond)
						statTables()
					}
					return doneAt, tables(), nil
				}
				// Done by its own account, but rows are missing: count again
				// (a streaming system may still apply), and verify decides.
				doneAt = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, tables(), fmt.Errorf("waiting for the initial copy: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// copyDone (native): every table of the subscription is ready.
func (n *nativeSys) copyDone(ctx context.Context, c *pgx.Conn) (bool, error) {
	var total, ready int
	err := c.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE srsubstate = 'r') FROM pg_subscription_rel
		WHERE srsubid = (SELECT oid FROM pg_subscription WHERE subname = $1)`, n.sub).Scan(&total, &ready)
	if err != nil {
		return false, fmt.Errorf("read pg_subscription_rel: %w", err)
	}
	return total > 0 && ready == total, nil
}

// copyDone (pglogical): replicating, every table synchronised.
func (p *pglogicalSys) copyDone(ctx context.Context, c *pgx.Conn) (bool, error) {
	return p.synced(ctx, c)
}

// copyDone (repstream): `run --snapshot --until-caught-up` exited 0.
func (r *repstreamSys) copyDone(ctx context.Context, c *pgx.Conn) (bool, error) {
	if !isClosed(r.done) {
		return false, nil
	}
	if r.waitErr != nil {
		return false, r.deadErr()
	}
	return true, nil
}

// ----- pgcopydb -----

// PgcopydbJobs are pgcopydb clone's concurrency options in the bench: two
// COPY jobs and two CREATE INDEX jobs (one per CPU of a 2-CPU machine), and
// tables larger than 64 MB split into ranges copied concurrently.
var PgcopydbJobs = []string{"--table-jobs", "2", "--index-jobs", "2", "--split-tables-larger-than", "64MB"}

// pgcopydbSys runs `pgcopydb clone` as a subprocess.
type pgcopydbSys struct {
	env     sysEnv
	cmd     *exec.Cmd
	logf    *os.File
	done    chan struct{}
	waitErr error
	once    sync.Once
	// preMade: the target's tables exist (--pre-made): clone drops them
	// and makes them again from the source's (--drop-if-exists), its way
	// with a made schema; the tables' keys and indexes come after the data.
	preMade bool
}

func (p *pgcopydbSys) base() string {
	return filepath.Join(p.env.outDir, "logs", strings.ReplaceAll(p.env.label, " ", "_"))
}

func (p *pgcopydbSys) logPath() string { return p.base() + ".pgcopydb.log" }

func (p *pgcopydbSys) prepare(ctx context.Context) error { return nil }

func (p *pgcopydbSys) start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(p.logPath()), 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	f, err := os.OpenFile(p.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open pgcopydb log: %w", err)
	}
	p.logf = f
	dir := p.base() + ".pgcopydb"
	_ = os.RemoveAll(dir)
	args := append([]string{"clone", "--source", p.env.srcDSN, "--target", p.env.tgtDSN, "--dir", dir,
		"--no-owner", "--no-acl", "--skip-extensions"}, PgcopydbJobs...)
	if p.preMade {
		args = append(args, "--drop-if-exists")
	}
	p.cmd = exec.Command("pgcopydb", args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start pgcopydb: %w", err)
	}
	p.env.log.Info("pgcopydb started", "pid", p.cmd.Process.Pid, "log", p.logPath())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

func (p *pgcopydbSys) dead() <-chan struct{} { return p.done }

func (p *pgcopydbSys) deadErr() error {
	return fmt.Errorf("pgcopydb clone failed (%v); log %s:\n%s", p.waitErr, p.logPath(), tail(p.logPath(), 15))
}

func (p *pgcopydbSys) poll(ctx context.Context) {}
func (p *pgcopydbSys) live() string             { return "" }

func (p *pgcopydbSys) copyDone(ctx context.Context, c *pgx.Conn) (bool, error) {
	if !isClosed(p.done) {
		return false, nil
	}
	if p.waitErr != nil {
		return false, p.deadErr()
	}
	return true, nil
}

func (p *pgcopydbSys) stop(ctx context.Context, res *RunResult) error {
	if p.cmd == nil {
		return nil
	}
	<-p.done
	p.closeLog()
	if ps := p.cmd.ProcessState; ps != nil {
		// The process's rusage counts its waited-for children (the COPY
		// and index workers, pg_dump and pg_restore) too. Its peak RSS
		// is the largest of theirs, or this process's own at the fork
		// if that is larger (watchPeakRSS): an upper bound.
		res.Resources.EngineCPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.Resources.EnginePeakRSSBytes = ru.Maxrss << 10
		}
	}
	return nil
}

func (p *pgcopydbSys) closeLog() {
	p.once.Do(func() {
		if p.logf != nil {
			p.logf.Close()
		}
	})
}

func (p *pgcopydbSys) cleanup(ctx context.Context) {
	if p.cmd != nil && p.cmd.Process != nil && !isClosed(p.done) {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.closeLog()
	dropDBSlots(ctx, p.env.srcDSN)
}
