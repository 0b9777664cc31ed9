package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/bench"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/stats"
)

// Options size the demo.
type Options struct {
	Rows        int // rows inserted (in transactions of TxnRows)
	TxnRows     int
	Parallelism int
	Memory      config.Size
	Out         io.Writer
	Logger      *slog.Logger
}

// Run executes the demo and returns an error if anything fails, including a
// target that does not match the source.
func Run(ctx context.Context, o Options) error {
	if o.Rows <= 0 {
		o.Rows = 300_000
	}
	if o.TxnRows <= 0 {
		o.TxnRows = 100
	}
	if o.Memory <= 0 {
		o.Memory = 256 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	out := o.Out
	fmt.Fprintln(out, "repstream demo: starting a source and a target PostgreSQL cluster ...")
	src, err := pgcluster.Start(ctx, pgcluster.Options{Name: "demo-source", Logger: o.Logger})
	if err != nil {
		return err
	}
	defer src.Remove(context.Background())
	tgt, err := pgcluster.Start(ctx, pgcluster.Options{Name: "demo-target", Logger: o.Logger})
	if err != nil {
		return err
	}
	defer tgt.Remove(context.Background())
	fmt.Fprintf(out, "  source: PostgreSQL %d on port %d; target on port %d\n", src.Version(), src.Port(), tgt.Port())
	w, err := bench.Lookup("conditions") // the same table as the performance lab's
	if err != nil {
		return err
	}
	if err := src.Exec(ctx, "postgres", w.DDL); err != nil {
		return err
	}
	// A first batch exists before replication starts: the initial copy takes it.
	if err := src.Exec(ctx, "postgres", fmt.Sprintf(`INSERT INTO conditions
		SELECT g, g %% 1000, now(), now() + interval '1 hour', random(), random(), 0 FROM generate_series(1, %d) g`, o.Rows/10)); err != nil {
		return err
	}

	cfg := config.Default()
	cfg.Source, cfg.Target = src.DSN("postgres"), tgt.DSN("postgres")
	cfg.Tables = []string{"public.conditions"}
	cfg.CreateTables = true
	cfg.Memory = o.Memory
	if o.Parallelism > 0 {
		cfg.ApplyParallelism = o.Parallelism
	}
	reg := stats.NewRegistry()
	eng := engine.New(cfg, o.Logger, reg)

	start := time.Now()
	engCtx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	engErr := make(chan error, 1)
	go func() { engErr <- eng.Run(engCtx) }()

	fmt.Fprintf(out, "  replicating %d existing rows (initial copy) and %d new rows in %d transactions of %d rows, live ...\n",
		o.Rows/10, o.Rows-o.Rows/10, (o.Rows-o.Rows/10)/o.TxnRows, o.TxnRows)
	g, gctx := errgroup.WithContext(ctx)
	loadDone := make(chan struct{})
	g.Go(func() error {
		defer close(loadDone)
		return load(gctx, src.DSN("postgres"), o.Rows/10+1, o.Rows, o.TxnRows)
	})
	g.Go(func() error {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		prev := reg.Snapshot()
		for {
			select {
			case <-loadDone:
				return nil
			case <-gctx.Done():
				return nil
			case err := <-engErr:
				engErr <- err
				return fmt.Errorf("engine stopped: %w", err)
			case <-t.C:
				cur := reg.Snapshot()
				fmt.Fprintf(out, "  [%4.0fs] %s\n", time.Since(start).Seconds(), engine.ProgressLine(prev, cur))
				prev = cur
			}
		}
	})
	if err := g.Wait(); err != nil {
		return err
	}
	loadTime := time.Since(start)

	// Wait until everything committed on the source is applied.
	srcConn, err := pgx.Connect(ctx, src.DSN("postgres"))
	if err != nil {
		return err
	}
	defer srcConn.Close(context.Background())
	var s string
	if err := srcConn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		return err
	}
	end, _ := change.ParseLSN(s)
	prev := reg.Snapshot()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	for eng.Flushed() < end {
		select {
		case err := <-engErr:
			return fmt.Errorf("engine stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Since(lastPrint) >= time.Second {
			cur := reg.Snapshot()
			fmt.Fprintf(out, "  [%4.0fs] %s\n", time.Since(start).Seconds(), engine.ProgressLine(prev, cur))
			prev, lastPrint = cur, time.Now()
		}
	}
	total := time.Since(start)
	stopEngine()
	if err := <-engErr; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("engine: %w", err)
	}

	// Verify.
	tgtConn, err := pgx.Connect(ctx, tgt.DSN("postgres"))
	if err != nil {
		return err
	}
	defer tgtConn.Close(context.Background())
	const sum = `SELECT count(*), coalesce(md5(string_agg(c::text, ',' ORDER BY id)), '') FROM conditions c`
	var n1, n2 int64
	var h1, h2 string
	if err := srcConn.QueryRow(ctx, sum).Scan(&n1, &h1); err != nil {
		return err
	}
	if err := tgtConn.QueryRow(ctx, sum).Scan(&n2, &h2); err != nil {
		return err
	}
	snap := reg.Snapshot()
	sp, _ := snap.Component("spill")
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  source rows        %d (checksum %s)\n", n1, h1)
	fmt.Fprintf(out, "  target rows        %d (checksum %s)\n", n2, h2)
	fmt.Fprintf(out, "  workload time      %.2f s (source inserts)\n", loadTime.Seconds())
	fmt.Fprintf(out, "  replication time   %.2f s (start to everything applied), %.0f rows/s\n", total.Seconds(), float64(o.Rows)/total.Seconds())
	fmt.Fprintf(out, "  spilled            %d bytes\n", sp.Bytes)
	if n1 != n2 || h1 != h2 {
		return fmt.Errorf("the target does not match the source: %d rows (%s) vs %d rows (%s)", n2, h2, n1, h1)
	}
	fmt.Fprintln(out, "  verification       OK: the target matches the source")
	return nil
}

// load inserts rows [from, to] in transactions of txnRows, updating and
// deleting a few along the way so that the stream is not insert-only.
func load(ctx context.Context, dsn string, from, to, txnRows int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for lo := from; lo <= to; lo += txnRows {
		hi := min(lo+txnRows-1, to)
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		batch.Queue(`INSERT INTO conditions SELECT g, g % 1000, now(), now() + interval '1 hour', random(), random(), 0
			FROM generate_series($1::bigint, $2::bigint) g`, lo, hi)
		if lo%(50*txnRows) == 1 {
			batch.Queue(`UPDATE conditions SET status = status + 1, value = value * 2 WHERE id BETWEEN $1::bigint - 500 AND $1::bigint - 400`, lo)
			batch.Queue(`DELETE FROM conditions WHERE id BETWEEN $1::bigint - 300 AND $1::bigint - 295`, lo)
		}
		batch.Queue("COMMIT")
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("demo workload: %w", err)
		}
	}
	return nil
}
