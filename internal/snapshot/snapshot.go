package snapshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
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
	Workers     int // pieces (tables, or ranges of one) copied at once
	// RangeSize: a table larger than this (bytes of heap) is copied in
	// ranges of about this size, in parallel; 0 chooses (rangeSize).
	RangeSize int64
	// Binary: copy in binary a table whose copied columns have the same
	// built-in type on both sides (text otherwise).
	Binary bool
	// AfterCopy, if set, is called once all of a table's rows are in,
	// before OnTable, with the target connection of the worker that copied
	// its last piece (the engine builds the keys and indexes of a table it
	// created: target.BuildAfterCopy). Calls may be concurrent; its error
	// ends the copy.
	AfterCopy func(ctx context.Context, dst *pgx.Conn, t schema.TableName) error
	Truncate  bool // empty non-empty target tables instead of failing
	// Origins, when set, marks the target connections' writes with
	// replication origins (target.Origins.Use): the copy's rows are
	// replicated ones.
	Origins *target.Origins
	Stats   *stats.Registry
	Logger  *slog.Logger
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
// empty (or truncates it with truncate). A look or a TRUNCATE that waits
// for another session's lock says so in log (target.NoteLockWait).
func CheckTargets(ctx context.Context, conn *pgx.Conn, tables []schema.TableName, truncate bool, log *slog.Logger) error {
	for _, t := range tables {
		only, nonEmpty, err := HasRows(ctx, conn, t, log)
		if err != nil {
			return err
		}
		if !nonEmpty {
			continue
		}
		if !truncate {
			return fmt.Errorf("%w: %s has rows; empty it or pass --truncate to let repstream empty it before the initial copy", ErrTargetNotEmpty, t)
		}
		if err := target.ExecNoting(ctx, conn, "truncate target table "+t.String(), log, "TRUNCATE "+only+t.Quoted()); err != nil {
			return err
		}
	}
	return nil
}

// HasRows reports whether target table t holds rows, and the ONLY it is
// read and emptied with: a partitioned target table holds its rows in its
// partitions (looked at through it, ""), an ordinary one without its
// inheritance children ("ONLY ").
func HasRows(ctx context.Context, conn *pgx.Conn, t schema.TableName, log *slog.Logger) (only string, rows bool, err error) {
	if only, err = target.Only(ctx, conn, t); err != nil {
		return "", false, fmt.Errorf("check target table %s: %w", t, err)
	}
	stop := target.NoteLockWait(ctx, conn, "the look at whether target table "+t.String()+" is empty", log)
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+only+t.Quoted()+")").Scan(&rows)
	stop()
	if err != nil {
		return "", false, fmt.Errorf("check target table %s: %w", t, err)
	}
	return only, rows, nil
}

// Copy copies every table from the exported snapshot to the target, Workers
// pieces at a time. A table larger than the range size is split into ranges
// of heap blocks (ranges.go) copied in parallel, so one large table is not
// the copy's long pole; tables go largest first (in the order given with
// one worker). Each worker imports the
// snapshot in its own REPEATABLE READ transaction — every piece of every
// table reads the same snapshot; the connection that exported it must stay
// idle until Copy returns.
//
// Each piece is its own COPY, committed on the target on its own: a table is
// complete (AfterCopy, then OnTable) only once every one of its pieces is
// in. A copy that stops before leaves the table incomplete with some of its
// rows: the caller empties it before copying it again.
//
// A table copied in one piece (of freezeMinSize or more) is copied with
// COPY FREEZE in a transaction that truncates it first (freeze.go): its
// rows arrive frozen, and vacuum need not write its pages again. The
// target table must be empty, as the caller has made it; rows found there
// anyway are kept (plain COPY). A table copied in ranges cannot be frozen
// — its ranges are transactions of their own — and neither can one whose
// TRUNCATE would be refused or act beyond the table (a foreign key
// referencing it, no TRUNCATE privilege, a partitioned target, ...:
// freeze.go): those are copied with a plain COPY, as before.
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
	if len(opts.Tables) == 0 {
		return Result{Time: time.Since(start)}, nil
	}

	work := make(chan *piece)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(work)
		return planCopy(gctx, opts, log, work)
	})
	for range opts.Workers {
		g.Go(func() error {
			var src, dst *pgx.Conn
			defer func() {
				if dst != nil {
					dst.Close(context.Background())
				}
				if src != nil {
					src.Close(context.Background())
				}
			}()
			for p := range work {
				if src == nil { // connect on the first piece: fewer pieces than workers leave some idle
					var err error
					if src, err = openSnapshot(gctx, opts.SourceDSN, opts.SnapshotName); err != nil {
						return err
					}
					if dst, err = connectTarget(gctx, opts, log); err != nil {
						return err
					}
				}
				n, b, err := copyPiece(gctx, src, dst, p, log)
				if err != nil {
					return err
				}
				tp := p.table
				tp.rows.Add(n)
				tp.bytes.Add(b)
				if len(tp.ranges) > 1 {
					log.Debug("copied a range of a table", "table", tp.name.String(), "range", p.rng.String(), "rows", n, "bytes", b)
				}
				if tp.left.Add(-1) > 0 {
					continue
				}
				// The table's last piece: every row is in.
				n, b = tp.rows.Load(), tp.bytes.Load()
				if opts.AfterCopy != nil {
					if err := opts.AfterCopy(gctx, dst, tp.name); err != nil {
						return fmt.Errorf("snapshot of %s: after the copy: %w", tp.name, err)
					}
				}
				tp.prog.Gauge(stats.GaugeDone).Store(1)
				rows.Add(n)
				bytes.Add(b)
				st.Add(n, b)
				log.Info("copied table", "table", tp.name.String(), "rows", n, "bytes", b, "ranges", len(tp.ranges),
					"frozen", tp.frozen.Load(), "elapsed", time.Since(tp.started).Round(time.Millisecond))
				if opts.OnTable != nil {
					if err := opts.OnTable(gctx, tp.name, n, b); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	err := g.Wait()
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) && pgerr.ConnectionLost(err) {
		// A stop (SIGTERM) during the copy: pgx tears a connection down on
		// cancellation, and which error a COPY then reports is a race —
		// the context's, or the socket's ("use of closed network
		// connection") when its two goroutines see the close in the other
		// order. Both are the stop; the caller tells a stop by the
		// context's error.
		err = fmt.Errorf("%w (the copy was stopped: %w)", ctx.Err(), err)
	}
	return Result{Tables: len(opts.Tables), Rows: rows.Load(), Bytes: bytes.Load(), Time: time.Since(start)}, err
}

// openSnapshot connects to the source and imports the exported snapshot in
// a REPEATABLE READ READ ONLY transaction; its errors are the source's
// (SourceError).
func openSnapshot(ctx context.Context, dsn, snapshotName string) (*pgx.Conn, error) {
	srcCfg, err := pgdsn.ParsePgx(dsn)
	if err != nil {
		return nil, &SourceError{fmt.Errorf("snapshot: source DSN: %w", err)}
	}
	srcCfg.RuntimeParams["application_name"] = "repstream-snapshot"
	// A table whose row-level security policies apply to the role fails
	// the copy instead of giving it only the rows they show.
	srcCfg.RuntimeParams["row_security"] = "off"
	src, err := pgx.ConnectConfig(ctx, srcCfg)
	if err != nil {
		return nil, &SourceError{fmt.Errorf("snapshot: connect to source %s: %w", pgdsn.Describe(&srcCfg.Config), err)}
	}
	if _, err := src.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		src.Close(context.Background())
		return nil, &SourceError{fmt.Errorf("snapshot: begin: %w", err)}
	}
	if _, err := src.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshotName, "'", "''")+"'"); err != nil {
		src.Close(context.Background())
		return nil, &SourceError{fmt.Errorf("snapshot: import snapshot %s: %w", snapshotName, err)}
	}
	return src, nil
}

// tablePlan is how one table is copied: the COPY statements' parts and its
// ranges. Its counters add up its pieces as they complete; left counts the
// pieces not yet in (the table is complete at 0). freeze is set only for a
// table of one piece (a freeze of a range would be a COPY FREEZE into a table
// other ranges write to in other transactions: PostgreSQL refuses it).
type tablePlan struct {
	name    schema.TableName
	from    string // "ONLY t" or, partitioned, "t"
	list    string // the copied columns, quoted
	where   string // the publication's row filter ("" for every row)
	binary  bool   // every copied column has the same built-in type on both sides
	ranges  []tidRange
	freeze  bool // one piece, and the target table can take COPY FREEZE (freeze.go)
	prog    *stats.Component
	started time.Time

	frozen atomic.Bool // its rows were copied with COPY FREEZE

	left        atomic.Int32
	rows, bytes atomic.Int64
}

// A piece is one range of one table.
type piece struct {
	table *tablePlan
	rng   tidRange
}

// connectTarget opens a copy's target connection, with a replication
// origin (Options.Origins).
func connectTarget(ctx context.Context, opts Options, log *slog.Logger) (*pgx.Conn, error) {
	dst, err := target.Connect(ctx, opts.TargetDSN, "repstream-snapshot")
	if err != nil || opts.Origins == nil {
		return dst, err
	}
	if _, err := opts.Origins.Use(ctx, dst); err != nil {
		dst.Close(context.Background())
		return nil, err
	}
	return dst, nil
}

// planCopy orders the tables, plans each in turn (in the snapshot, on
// connections of its own) and sends its pieces to work.
func planCopy(ctx context.Context, opts Options, log *slog.Logger, work chan<- *piece) error {
	src, err := openSnapshot(ctx, opts.SourceDSN, opts.SnapshotName)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	dst, err := connectTarget(ctx, opts, log)
	if err != nil {
		return err
	}
	defer dst.Close(context.Background())
	sizes, blockSize, err := tableSizes(ctx, src, opts.Tables)
	if err != nil {
		return err
	}
	var total int64
	for _, s := range sizes {
		total += s.size
	}
	rsize := rangeSize(opts.RangeSize, total, opts.Workers)
	order := opts.Tables
	if opts.Workers > 1 {
		// Largest first: the last pieces to finish are small ones, and the
		// indexes of a large table are built while the others still copy.
		// (One worker takes as long in any order: the order given.)
		order = slices.Clone(opts.Tables)
		slices.SortStableFunc(order, func(a, b schema.TableName) int { return cmp.Compare(sizes[b].size, sizes[a].size) })
	}
	for _, t := range order {
		tp, err := planTable(ctx, src, dst, t, opts)
		if err != nil {
			return err
		}
		if sizes[t].splittable {
			tp.ranges = splitRanges(sizes[t].size, blockSize, rsize)
		}
		if err := planFreeze(ctx, dst, tp, sizes[t].size, log); err != nil {
			return err
		}
		if err := estimateTable(ctx, src, t, tp.prog); err != nil {
			log.Warn("no size estimate for the copy's progress", "table", t.String(), "err", err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if len(tp.ranges) > 1 {
			log.Info("copying a table in ranges", "table", t.String(), "ranges", len(tp.ranges), "size", sizes[t].size)
		}
		tp.left.Store(int32(len(tp.ranges)))
		tp.started = time.Now()
		for _, r := range tp.ranges {
			select {
			case work <- &piece{table: tp, rng: r}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

type tableSize struct {
	size       int64 // bytes of the main fork (summed over partitions)
	splittable bool  // an ordinary table: ctid ranges apply
}

// tableSizes reads the tables' heap sizes and the block size.
func tableSizes(ctx context.Context, src *pgx.Conn, tables []schema.TableName) (map[schema.TableName]tableSize, int64, error) {
	out := make(map[schema.TableName]tableSize, len(tables))
	var blockSize int64
	if err := src.QueryRow(ctx, "SELECT current_setting('block_size')::bigint").Scan(&blockSize); err != nil {
		return nil, 0, fmt.Errorf("snapshot: read the source's block size: %w", err)
	}
	for _, t := range tables {
		var s tableSize
		var foreign string
		err := src.QueryRow(ctx, `SELECT coalesce(sum(pg_catalog.pg_relation_size(r.relid)), 0)::bigint,
				(SELECT c.relkind = 'r' FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass),
				coalesce(string_agg(r.relid::regclass::text, ', ') FILTER (WHERE (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = r.relid) = 'f'), '')
			FROM (SELECT relid FROM pg_catalog.pg_partition_tree($1::regclass) UNION SELECT $1::regclass) r`, t.Quoted()).Scan(&s.size, &s.splittable, &foreign)
		if err != nil {
			return nil, 0, fmt.Errorf("snapshot: read the size of %s: %w", t, err)
		}
		if foreign != "" {
			// Never read: its rows are another server's, fetched with
			// the copying role's rights through its owner's user
			// mapping (as a superuser, with no password asked), and its
			// changes are in no WAL.
			return nil, 0, fmt.Errorf("snapshot: %s is or holds a foreign table (%s): its rows are on another server and its changes are not in the source's WAL, so repstream does not copy or replicate it: take it out of the publication (or detach the foreign partition)", t, foreign)
		}
		out[t] = s
	}
	return out, blockSize, nil
}

// planTable reads what the copy of t needs: the source's and the target's
// columns, the publication's row filter and column list, whether values
// can travel in binary.
func planTable(ctx context.Context, src, dst *pgx.Conn, t schema.TableName, opts Options) (*tablePlan, error) {
	st, err := schema.LoadTable(ctx, src, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: source: %w", t, err)
	}
	shape, err := publishedShape(ctx, src, opts.Publication, t)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", t, err)
	}
	tt, err := schema.LoadTable(ctx, dst, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: target: %w", t, err)
	}
	// The target table was made or checked before this snapshot was taken.
	// A schema change on the source in between is in the rows copied here,
	// and apply skips it for a table copied after it (apply.skipDDL): so
	// the target must take the source's columns as they are in the
	// snapshot, by the start's own rule (schema.Incompatible), or the copy
	// stops here, before a row of the table is written.
	published := *st
	published.Columns = slices.DeleteFunc(slices.Clone(st.Columns), func(c schema.Column) bool { return !shape.includes(c.Name) })
	if problems := schema.Incompatible(&published, tt); len(problems) > 0 {
		return nil, fmt.Errorf("snapshot of %s: the target table cannot take the source's rows as they are at the copy's snapshot "+
			"(the source's table changed after the target's was made or checked): %s; make the target table match the source's, "+
			"or drop it and run with --create-tables, then run again", t, strings.Join(problems, "; "))
	}
	binary := opts.Binary
	var cols []string
	for _, c := range st.Columns {
		if c.Generated || !shape.includes(c.Name) {
			continue
		}
		i := tt.Column(c.Name)
		if i < 0 {
			return nil, fmt.Errorf("snapshot of %s: the target table has no column %q", t, c.Name)
		}
		if tt.Columns[i].Generated {
			continue
		}
		if target.BinaryCompatible(c.TypeOID, tt.Columns[i].TypeOID) != nil {
			binary = false
		}
		cols = append(cols, quoteIdent(c.Name))
	}
	// A partitioned table is read through its root, every partition's rows
	// included (ONLY would read none: a partitioned table holds no rows of
	// its own); an ordinary table without its inheritance children, which
	// are tables of their own.
	from := "ONLY " + t.Quoted()
	if st.Partitioned {
		from = t.Quoted()
	}
	return &tablePlan{
		name: t, from: from, list: strings.Join(cols, ", "), where: shape.rowFilter, binary: binary,
		ranges: []tidRange{{}}, prog: tableProgress(opts.Stats, t),
	}, nil
}

// SourceError is a copy's error on the source's side (its connection, its
// COPY TO): the caller counts a reconnect it causes on the source.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// copyPiece streams one piece: COPY TO STDOUT on the source straight into
// COPY FROM STDIN on the target, without decoding rows — in binary when
// every column has the same built-in type on both sides, else in text.
//
// A table of one piece that can take COPY FREEZE is copied in a target
// transaction that truncates it first (beginFreeze), committed here.
func copyPiece(ctx context.Context, src, dst *pgx.Conn, p *piece, log *slog.Logger) (rows, bytes int64, err error) {
	tp := p.table
	freeze := false
	if tp.freeze && len(tp.ranges) == 1 {
		if freeze, err = beginFreeze(ctx, dst, tp, log); err != nil {
			return 0, 0, err
		}
		if freeze {
			defer func() {
				if err != nil { // the COPY failed, the rows differ: nothing of it stays
					if _, rerr := dst.Exec(ctx, "ROLLBACK"); rerr != nil {
						log.Debug("roll back the COPY FREEZE transaction", "table", tp.name.String(), "err", rerr)
					}
				}
			}()
		}
	}
	var conds []string
	if tp.where != "" {
		conds = append(conds, "("+tp.where+")")
	}
	if c := p.rng.cond(); c != "" {
		conds = append(conds, c)
	}
	query := "SELECT " + tp.list + " FROM " + tp.from
	if len(conds) > 0 {
		query += " WHERE " + strings.Join(conds, " AND ")
	}
	srcFormat, format := "", ""
	if tp.binary {
		srcFormat = " WITH (FORMAT binary)"
	}
	switch {
	case freeze && tp.binary:
		format = " WITH (FREEZE, FORMAT binary)"
	case freeze:
		format = " WITH (FREEZE)"
	default:
		format = srcFormat
	}
	pipe := newChunkPipe()
	counter := &countingWriter{w: pipe, prog: tp.prog}
	t := tp.name
	type outResult struct {
		rows int64
		err  error
	}
	copyOut := make(chan outResult, 1)
	go func() {
		tag, err := src.PgConn().CopyTo(ctx, counter, "COPY ("+query+") TO STDOUT"+srcFormat)
		counter.flush()
		pipe.CloseWithError(err)
		copyOut <- outResult{tag.RowsAffected(), err}
	}()
	cols := " (" + tp.list + ")"
	if tp.list == "" {
		cols = "" // a table without columns (CREATE TABLE t ()): its rows are empty
	}
	tag, err := dst.PgConn().CopyFrom(ctx, pipe, "COPY "+t.Quoted()+cols+" FROM STDIN"+format)
	pipe.closeRead()
	out := <-copyOut
	// The target's error comes first: when the target's COPY fails, the
	// source's COPY fails only because its pipe was closed. Except when the
	// source refused to read, or its connection was lost: then the target's
	// COPY failed for that (cancelled by the pipe's error: 57014), and the
	// source's error says what to do (a lost connection is retried).
	if out.err != nil && pgerr.PermissionDenied(out.err) {
		priv := pgerr.SelectPrivilege(pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), src.Config().User)
		if pgerr.RowSecurity(out.err) {
			priv = pgerr.RowSecurityPrivilege(pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), src.Config().User)
		}
		return 0, 0, fmt.Errorf("snapshot of %s: read from source: %w", t, priv.Explain(out.err))
	}
	if out.err != nil && pgerr.ConnectionLost(out.err) && (err == nil || pgerr.Is(err, pgerr.QueryCanceled)) {
		return 0, 0, &SourceError{fmt.Errorf("snapshot of %s: read from source: %w", t, out.err)}
	}
	if err != nil {
		priv := pgerr.WritePrivilege(pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), dst.Config().User)
		if pgerr.RowSecurity(err) {
			priv = pgerr.TargetRowSecurityPrivilege(pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), dst.Config().User)
		}
		return 0, 0, fmt.Errorf("snapshot of %s: write to target%s: %w", t, targetColumn(err), priv.Explain(err))
	}
	if out.err != nil {
		return 0, 0, &SourceError{fmt.Errorf("snapshot of %s: read from source: %w", t, out.err)}
	}
	// Never report a copy complete that is not: the rows written must be
	// the rows read.
	if tag.RowsAffected() != out.rows {
		return 0, 0, fmt.Errorf("snapshot of %s: the source sent %d rows but the target took %d", t, out.rows, tag.RowsAffected())
	}
	if freeze {
		if _, err := dst.Exec(ctx, "COMMIT"); err != nil {
			return 0, 0, fmt.Errorf("snapshot of %s: commit the COPY FREEZE on the target: %w", t, err)
		}
		tp.frozen.Store(true)
	}
	// The progress counted COPY messages as rows: make it exact (a binary
	// COPY's trailer is a message of its own).
	tp.prog.Add(tag.RowsAffected()-counter.rows, 0)
	return tag.RowsAffected(), counter.n, nil
}

func targetColumn(err error) string {
	if c := target.CopyErrorColumn(err); c != "" {
		return " (column " + c + ")"
	}
	return ""
}

// countingWriter counts the COPY data the source sends — one Write per
// CopyData message, a row — and adds it to the table's progress every
// progressEvery bytes (and at flush).
type countingWriter struct {
	w       io.Writer
	n, rows int64
	prog    *stats.Component // the table's progress (progress.go); may be nil

	pendRows, pendBytes int64
}

const progressEvery = 256 << 10

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.rows++
	c.pendRows++
	c.pendBytes += int64(n)
	if c.pendBytes >= progressEvery {
		c.flush()
	}
	return n, err
}

// flush adds what was counted since the last flush to the progress.
func (c *countingWriter) flush() {
	if c.prog != nil && (c.pendRows > 0 || c.pendBytes > 0) {
		c.prog.Add(c.pendRows, c.pendBytes)
	}
	c.pendRows, c.pendBytes = 0, 0
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
