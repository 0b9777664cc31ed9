package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/repstream/repstream/internal/change"
)

// verifySession makes row text identical on both sides whatever the servers'
// defaults.
const verifySession = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 3; SET IntervalStyle = 'postgres'; SET bytea_output = 'hex'"

// tableSum is one table's checksum.
type tableSum struct {
	rows    int64
	md5     string
	payload int64
}

// checksumTable returns the row count, the md5 of the md5s of its rows in
// primary-key order, and the payload bytes (sum of pg_column_size of the rows).
func checksumTable(ctx context.Context, c *pgx.Conn, table string) (tableSum, error) {
	var order string
	err := c.QueryRow(ctx, `SELECT coalesce(string_agg('t.' || quote_ident(a.attname), ', ' ORDER BY array_position(i.indkey, a.attnum)), '')
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary`, "public."+change.QuoteIdent(table)).Scan(&order)
	if err != nil {
		return tableSum{}, fmt.Errorf("primary key of %s: %w", table, err)
	}
	if order == "" {
		order = "t::text"
	}
	var s tableSum
	q := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(md5(t::text), '' ORDER BY %s)), ''), coalesce(sum(pg_column_size(t.*)), 0)::bigint
		FROM public.%s t`, order, change.QuoteIdent(table))
	if err := c.QueryRow(ctx, q).Scan(&s.rows, &s.md5, &s.payload); err != nil {
		return tableSum{}, fmt.Errorf("checksum %s: %w", table, err)
	}
	return s, nil
}

func connectVerify(ctx context.Context, dsn string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, verifySession); err != nil {
		c.Close(context.Background())
		return nil, err
	}
	return c, nil
}

// verify compares every replicated table (plus the probe table) on the
// source and the target, and checks that unreplicated tables stay empty on
// the target. It returns the checks, whether all passed, and the payload
// bytes of the replicated workload tables on the source.
func verify(ctx context.Context, srcDSN, tgtDSN string, replicated, unreplicated []string) ([]TableCheck, bool, int64, error) {
	src, err := connectVerify(ctx, srcDSN)
	if err != nil {
		return nil, false, 0, fmt.Errorf("verify: connect to the source: %w", err)
	}
	defer src.Close(context.Background())
	tgt, err := connectVerify(ctx, tgtDSN)
	if err != nil {
		return nil, false, 0, fmt.Errorf("verify: connect to the target: %w", err)
	}
	defer tgt.Close(context.Background())

	var checks []TableCheck
	ok := true
	var payload int64
	for _, t := range append(append([]string{}, replicated...), ProbeTable) {
		var a, b tableSum
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) { a, err = checksumTable(gctx, src, t); return })
		g.Go(func() (err error) { b, err = checksumTable(gctx, tgt, t); return })
		if err := g.Wait(); err != nil {
			return checks, false, payload, err
		}
		eq := a.rows == b.rows && a.md5 == b.md5
		ok = ok && eq
		if t != ProbeTable {
			payload += a.payload
		}
		checks = append(checks, TableCheck{Table: t, Replicated: true, SourceRows: a.rows, TargetRows: b.rows,
			SourceMD5: a.md5, TargetMD5: b.md5, Equal: eq})
	}
	for _, t := range unreplicated {
		var n, m int64
		if err := src.QueryRow(ctx, "SELECT count(*) FROM public."+change.QuoteIdent(t)).Scan(&n); err != nil {
			return checks, false, payload, fmt.Errorf("count %s on the source: %w", t, err)
		}
		if err := tgt.QueryRow(ctx, "SELECT count(*) FROM public."+change.QuoteIdent(t)).Scan(&m); err != nil {
			return checks, false, payload, fmt.Errorf("count %s on the target: %w", t, err)
		}
		eq := m == 0
		ok = ok && eq
		checks = append(checks, TableCheck{Table: t, Replicated: false, SourceRows: n, TargetRows: m, Equal: eq})
	}
	return checks, ok, payload, nil
}

// counts returns the row counts of tables.
func counts(ctx context.Context, c *pgx.Conn, tables []string) ([]int64, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = "(SELECT count(*) FROM public." + change.QuoteIdent(t) + ")"
	}
	out := make([]int64, len(tables))
	dst := make([]any, len(tables))
	for i := range out {
		dst[i] = &out[i]
	}
	if err := c.QueryRow(ctx, "SELECT "+strings.Join(parts, ", ")).Scan(dst...); err != nil {
		return nil, fmt.Errorf("count rows: %w", err)
	}
	return out, nil
}

// setVerified records the verification's outcome in res: Verified, and an
// Error naming every table that differs.
func setVerified(res *RunResult, checks []TableCheck, ok bool) {
	res.Verified = ok
	if ok {
		return
	}
	var bad []string
	for _, c := range checks {
		if !c.Equal {
			bad = append(bad, fmt.Sprintf("%s (source %d rows, target %d)", c.Table, c.SourceRows, c.TargetRows))
		}
	}
	res.Error = "verification failed: target differs from source: " + strings.Join(bad, ", ")
}
