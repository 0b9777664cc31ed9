package monitor

import (
	"context"
	"fmt"

	"github.com/repstream/repstream/internal/schema"
)

// indexHeavy is how many indexes make a table worth naming: every applied
// row maintains each of them.
const indexHeavy = 4

// ReadTargetFacts lists, from the target's catalog, what makes applying a
// row expensive there: user triggers that fire in replica sessions (ENABLE
// ALWAYS or ENABLE REPLICA — apply sessions run with session_replication_role
// = replica, so only those fire) and tables with indexHeavy or more indexes.
// System schemas and repstream's own state are left out. It only reads.
func ReadTargetFacts(ctx context.Context, q schema.Querier) (*TargetFacts, error) {
	f := &TargetFacts{}
	rows, err := q.Query(ctx, `
SELECT format('%I.%I', n.nspname, c.relname), t.tgname,
       CASE t.tgenabled WHEN 'A' THEN 'ENABLE ALWAYS' ELSE 'ENABLE REPLICA' END
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE NOT t.tgisinternal AND t.tgenabled IN ('A', 'R')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'repstream') AND n.nspname NOT LIKE 'pg\_%'
ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("read the target's triggers: %w", err)
	}
	for rows.Next() {
		var table, name, mode string
		if err := rows.Scan(&table, &name, &mode); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the target's triggers: %w", err)
		}
		f.Triggers = append(f.Triggers, fmt.Sprintf("%s on %s (%s)", name, table, mode))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the target's triggers: %w", err)
	}
	rows, err = q.Query(ctx, `
SELECT format('%I.%I', n.nspname, c.relname), count(*)
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'repstream') AND n.nspname NOT LIKE 'pg\_%'
GROUP BY 1 HAVING count(*) >= $1 ORDER BY 2 DESC, 1 LIMIT 10`, indexHeavy)
	if err != nil {
		return nil, fmt.Errorf("read the target's indexes: %w", err)
	}
	for rows.Next() {
		var table string
		var n int64
		if err := rows.Scan(&table, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the target's indexes: %w", err)
		}
		f.IndexHeavy = append(f.IndexHeavy, fmt.Sprintf("%s (%d indexes)", table, n))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the target's indexes: %w", err)
	}
	return f, nil
}
