package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/schema"
)

// checkUntrackedPartitions refuses a run without the schema-change event
// trigger that replicates a partitioned table through its root
// (publish_via_partition_root): pgoutput sends nothing for a TRUNCATE of one
// partition, an ATTACH PARTITION or a DETACH PARTITION, and only the
// trigger's messages carry them (partitions.go). Without it those changes
// would leave the target different without a word, so the user must say
// they accept that (--allow-untracked-partitions).
func checkUntrackedPartitions(ctx context.Context, src *pgx.Conn, cfg config.Config, mode ddlMode, tables []schema.TableName) error {
	if mode == ddlTrigger || cfg.AllowUntrackedPartitions || len(tables) == 0 {
		return nil
	}
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = t.Quoted()
	}
	var roots []string
	err := src.QueryRow(ctx, `SELECT COALESCE(array_agg(c.oid::regclass::text ORDER BY 1), '{}')
FROM pg_catalog.pg_class c, pg_catalog.pg_publication p
WHERE c.oid = ANY($1::regclass[]) AND c.relkind = 'p' AND p.pubname = $2 AND p.pubviaroot`, quoted, cfg.Publication).Scan(&roots)
	if err != nil {
		return fmt.Errorf("look for partitioned tables published through their root: %w", err)
	}
	if len(roots) == 0 {
		return nil
	}
	return fmt.Errorf("%s partitioned and published through the root, and schema changes are followed without the event trigger (%s): "+
		"a TRUNCATE of one partition, ATTACH PARTITION and DETACH PARTITION would not reach the target; "+
		"run with --ddl=true (a superuser source role, PostgreSQL 14+), or pass --allow-untracked-partitions to accept that",
		plural(roots, "is", "are"), mode)
}

func plural(names []string, one, many string) string {
	if len(names) == 1 {
		return names[0] + " " + one
	}
	return strings.Join(names, ", ") + " " + many
}
