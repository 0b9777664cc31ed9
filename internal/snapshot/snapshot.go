// Package snapshot copies the rows that exist when a slot is created, from
// the slot's exported snapshot, so that streaming from the slot's consistent
// point continues exactly where the copy ends.
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// ErrTargetNotEmpty is returned when a target table has rows and truncation
// was not asked for.
var ErrTargetNotEmpty = errors.New("target table is not empty")

// Options configure a copy.
type Options struct {
	SourceDSN, TargetDSN string
	SnapshotName         string // exported by CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')
	// Publication's row filters and column lists (PostgreSQL 15+) decide
	// which rows and columns are copied, as they decide what streams.
	Publication string
	Tables      []schema.TableName
	Workers     int  // tables copied at once
	Truncate    bool // empty non-empty target tables instead of failing
	Stats       *stats.Registry
	Logger      *slog.Logger
	// OnTable, if set, is called once a table's copy is complete (from the
	// copying workers: calls may be concurrent). Its error ends the copy.
	OnTable func(ctx context.Context, t schema.TableName, rows, bytes int64) error
}

// Result sums up a copy.
type Result struct {
	Tables int
	Rows   int64
	Bytes  int64
	Time   time.Duration
}

// CheckTargets verifies, before the slot exists, that every target table is
// empty (or truncates it with truncate).
func CheckTargets(ctx context.Context, conn *pgx.Conn, tables []schema.TableName, truncate bool) error {
	for _, t := range tables {
		// A partitioned target table holds its rows in its partitions: look
		// (and truncate) through it; an ordinary one without its
		// inheritance children.
		var partitioned bool
		if err := conn.QueryRow(ctx, "SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = $1::regclass", t.Quoted()).Scan(&partitioned); err != nil {
			return fmt.Errorf("check target table %s: %w", t, err)
		}
		only := "ONLY "
		if partitioned {
			only = ""
		}
		var nonEmpty bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+only+t.Quoted()+")").Scan(&nonEmpty); err != nil {
			return fmt.Errorf("check target table %s: %w", t, err)
		}
		if !nonEmpty {
			continue
		}
		if !truncate {
			return fmt.Errorf("%w: %s has rows; empty it or pass --truncate to let repstream empty it before the initial copy", ErrTargetNotEmpty, t)
		}
		if _, err := conn.Exec(ctx, "TRUNCATE "+only+t.Quoted()); err != nil {
			return fmt.Errorf("truncate target table %s: %w", t, err)
		}
	}
	return nil
}

// Copy copies every table from the exported snapshot to the target, Workers
// tables at a time. Each worker imports the snapshot in its own REPEATABLE
// READ transaction; the connection that exported it must stay idle until
// Copy returns.
func Copy(ctx context.Context, opts Options) (Result, error) {
	start := time.Now()
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	if opts.Stats == nil {
		opts.Stats = stats.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger.With("component", "snapshot")
	st := opts.Stats.Component("snapshot")
	st.SetState(stats.Busy)
	defer st.SetState(stats.Idle)
	var rows, bytes atomic.Int64
	for _, t := range opts.Tables {
		tableProgress(opts.Stats, t) // every table listed in the progress from the start
	}

	work := make(chan schema.TableName)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(work)
		for _, t := range opts.Tables {
			select {
			case work <- t:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for i := 0; i < min(opts.Workers, len(opts.Tables)); i++ {
		g.Go(func() error {
			srcCfg, err := pgdsn.ParsePgx(opts.SourceDSN)
			if err != nil {
				return fmt.Errorf("snapshot: source DSN: %w", err)
			}
			src, err := pgx.ConnectConfig(gctx, srcCfg)
			if err != nil {
				return fmt.Errorf("snapshot: connect to source %s: %w", pgdsn.Describe(&srcCfg.Config), err)
			}
			defer src.Close(context.Background())
			if _, err := src.Exec(gctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
				return fmt.Errorf("snapshot: begin: %w", err)
			}
			if _, err := src.Exec(gctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(opts.SnapshotName, "'", "''")+"'"); err != nil {
				return fmt.Errorf("snapshot: import snapshot %s: %w", opts.SnapshotName, err)
			}
			dst, err := target.Connect(gctx, opts.TargetDSN, "repstream-snapshot")
			if err != nil {
				return err
			}
			defer dst.Close(context.Background())
			for t := range work {
				prog := tableProgress(opts.Stats, t)
				if err := estimateTable(gctx, src, t, prog); err != nil {
					log.Warn("no size estimate for the copy's progress", "table", t.String(), "err", err)
					if gctx.Err() != nil {
						return gctx.Err()
					}
				}
				n, b, err := copyTable(gctx, src, dst, t, opts.Publication, prog)
				if err != nil {
					return err
				}
				prog.Gauge(stats.GaugeDone).Store(1)
				rows.Add(n)
				bytes.Add(b)
				st.Add(n, b)
				log.Info("copied table", "table", t.String(), "rows", n, "bytes", b)
				if opts.OnTable != nil {
					if err := opts.OnTable(gctx, t, n, b); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	err := g.Wait()
	return Result{Tables: len(opts.Tables), Rows: rows.Load(), Bytes: bytes.Load(), Time: time.Since(start)}, err
}

// copyTable streams one table: COPY TO STDOUT on the source straight into
// COPY FROM STDIN on the target, in text format, no row decoding — the rows
// and columns the publication pub sends (its row filter and column list).
func copyTable(ctx context.Context, src, dst *pgx.Conn, t schema.TableName, pub string, prog *stats.Component) (rows, bytes int64, err error) {
	st, err := schema.LoadTable(ctx, src, t.Schema, t.Name)
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot of %s: source: %w", t, err)
	}
	shape, err := publishedShape(ctx, src, pub, t)
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot of %s: %w", t, err)
	}
	tt, err := schema.LoadTable(ctx, dst, t.Schema, t.Name)
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot of %s: target: %w", t, err)
	}
	var cols []string
	for _, c := range st.Columns {
		if c.Generated || !shape.includes(c.Name) {
			continue
		}
		i := tt.Column(c.Name)
		if i < 0 {
			return 0, 0, fmt.Errorf("snapshot of %s: the target table has no column %q", t, c.Name)
		}
		if tt.Columns[i].Generated {
			continue
		}
		cols = append(cols, quoteIdent(c.Name))
	}
	list := strings.Join(cols, ", ")
	pr, pw := io.Pipe()
	counter := &countingWriter{w: pw, prog: prog}
	// A partitioned table is read through its root, every partition's rows
	// included (ONLY would read none: a partitioned table holds no rows of
	// its own); an ordinary table without its inheritance children, which
	// are tables of their own.
	from := "ONLY " + t.Quoted()
	if st.Partitioned {
		from = t.Quoted()
	}
	type outResult struct {
		rows int64
		err  error
	}
	copyOut := make(chan outResult, 1)
	go func() {
		tag, err := src.PgConn().CopyTo(ctx, counter, "COPY (SELECT "+list+" FROM "+from+shape.where()+") TO STDOUT")
		pw.CloseWithError(err)
		copyOut <- outResult{tag.RowsAffected(), err}
	}()
	tag, err := dst.PgConn().CopyFrom(ctx, pr, "COPY "+t.Quoted()+" ("+list+") FROM STDIN")
	pr.CloseWithError(errors.New("target copy ended"))
	out := <-copyOut
	// The target's error comes first: when the target's COPY fails, the
	// source's COPY fails only because its pipe was closed. Except when the
	// source refused to read: then the target's COPY failed for that.
	if out.err != nil && pgerr.PermissionDenied(out.err) {
		return 0, 0, fmt.Errorf("snapshot of %s: read from source: %w", t, pgerr.SelectPrivilege(pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), src.Config().User).Explain(out.err))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot of %s: write to target%s: %w", t, targetColumn(err), pgerr.WritePrivilege(pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), dst.Config().User).Explain(err))
	}
	if out.err != nil {
		return 0, 0, fmt.Errorf("snapshot of %s: read from source: %w", t, out.err)
	}
	// Never report a copy complete that is not: the rows written must be
	// the rows read.
	if tag.RowsAffected() != out.rows {
		return 0, 0, fmt.Errorf("snapshot of %s: the source sent %d rows but the target took %d", t, out.rows, tag.RowsAffected())
	}
	return tag.RowsAffected(), counter.n, nil
}

func targetColumn(err error) string {
	if c := target.CopyErrorColumn(err); c != "" {
		return " (column " + c + ")"
	}
	return ""
}

type countingWriter struct {
	w    io.Writer
	n    int64
	prog *stats.Component // the table's progress (progress.go); may be nil
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.prog != nil {
		c.prog.Add(countRows(p[:n]), int64(n))
	}
	return n, err
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
