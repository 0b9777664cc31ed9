package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
)

// published is what a publication sends of one table (PostgreSQL 15+): its
// row filter and its column list. The initial copy must copy exactly that —
// the rows a filter leaves out never reach the target by streaming either
// (an UPDATE that leaves the filter arrives as a DELETE), and a column the
// list leaves out may be one the user means to keep off the target.
type published struct {
	rowFilter string          // a boolean SQL expression over the table's columns; "" for every row
	columns   map[string]bool // nil for every column
}

// publishedShape reads the publication's row filter and column list for t,
// in the snapshot's transaction. An empty publication name, a server older
// than 15 (neither exists there) or a table the publication does not list
// by name gives every row and column.
func publishedShape(ctx context.Context, src *pgx.Conn, pub string, t schema.TableName) (published, error) {
	if pub == "" {
		return published{}, nil
	}
	var version int
	if err := src.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return published{}, fmt.Errorf("read the source's version: %w", err)
	}
	if version < 150000 {
		return published{}, nil
	}
	var filter *string
	var cols []string
	err := src.QueryRow(ctx, `SELECT rowfilter, attnames::text[] FROM pg_catalog.pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, pub, t.Schema, t.Name).Scan(&filter, &cols)
	if errors.Is(err, pgx.ErrNoRows) {
		return published{}, nil
	}
	if err != nil {
		return published{}, fmt.Errorf("read publication %q's row filter and columns for %s: %w", pub, t, err)
	}
	var p published
	if filter != nil {
		p.rowFilter = *filter
	}
	if cols != nil {
		p.columns = make(map[string]bool, len(cols))
		for _, c := range cols {
			p.columns[c] = true
		}
	}
	return p, nil
}

// includes reports whether the publication sends column name.
func (p published) includes(name string) bool { return p.columns == nil || p.columns[name] }

// PublishedColumns is the column list of publication pub's entry for
// table t: nil when it has none (every column is sent; on PostgreSQL 18
// pg_publication_tables leaves generated columns out of attnames then,
// which are not for the target to lack), or before PostgreSQL 15.
func PublishedColumns(ctx context.Context, src *pgx.Conn, pub string, t schema.TableName) (map[string]bool, error) {
	if pub == "" {
		return nil, nil
	}
	var version int
	if err := src.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return nil, fmt.Errorf("read the source's version: %w", err)
	}
	if version < 150000 {
		return nil, nil
	}
	var cols []string
	err := src.QueryRow(ctx, `SELECT (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
		                           WHERE a.attrelid = r.prrelid AND a.attnum = ANY (r.prattrs))
		FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
		WHERE p.pubname = $1 AND r.prrelid = pg_catalog.to_regclass($2) AND r.prattrs IS NOT NULL`, pub, t.Quoted()).Scan(&cols)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read publication %q's column list for %s: %w", pub, t, err)
	}
	out := make(map[string]bool, len(cols))
	for _, c := range cols {
		out[c] = true
	}
	return out, nil
}
