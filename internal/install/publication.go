package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/schema"
)

// EnsurePublication creates the publication from the table patterns when it
// does not exist. It reports whether it created it.
func EnsurePublication(ctx context.Context, src *pgx.Conn, pub string, patterns []string, guarded bool, log *slog.Logger) (bool, error) {
	var exists bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication %q: %w", pub, err)
	}
	if exists {
		if len(patterns) > 0 {
			log.Info("publication exists: using it as it is (--tables only creates it, or adds tables to one repstream created)", "publication", pub)
		}
		return false, nil
	}
	if len(patterns) == 0 {
		return false, fmt.Errorf("publication %q does not exist on the source: create it, or give --tables to let repstream create it", pub)
	}
	names, sql, err := publicationSQL(ctx, src, pub, patterns, guarded, log)
	if err != nil {
		return false, err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = n.Quoted()
	}
	// A partitioned table named in --tables is replicated as that table:
	// its changes and its initial copy come under the root's name (the
	// target needs the root, partitioned or not, not the same partitions).
	var partitioned bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = ANY($1::regclass[]) AND relkind = 'p')", quoted).Scan(&partitioned); err != nil {
		return false, fmt.Errorf("create publication %q: look for partitioned tables: %w", pub, err)
	}
	if partitioned {
		sql += " WITH (publish_via_partition_root = true)"
	}
	// Marked, in the same transaction, as repstream's: `drop --kafka`,
	// whose capture keeps no record of it on a target, drops only such.
	sql += "; COMMENT ON PUBLICATION " + change.QuoteIdent(pub) + " IS '" + PublicationMark + "'"
	if _, err := src.Exec(ctx, sql); err != nil {
		return false, fmt.Errorf("create publication %q: %w", pub, pgerr.PublicationPrivilege(pub, sqlNames(names), src.Config().User).Explain(err))
	}
	log.Info("created publication", "publication", pub, "tables", len(names))
	return true, nil
}

// PublicationMark is the comment of a publication repstream made
// (EnsurePublication).
const PublicationMark = "made by repstream"

// PublicationTables lists the tables publication pub publishes, by name:
// repstream's own (schema repstream, which a FOR ALL TABLES publication
// publishes too) never count, on either side.
func PublicationTables(ctx context.Context, src *pgx.Conn, pub string) ([]schema.TableName, error) {
	rows, err := src.Query(ctx, "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1 AND schemaname <> '"+provision.Schema+"' ORDER BY 1, 2", pub)
	if err != nil {
		return nil, fmt.Errorf("list tables of publication %q: %w", pub, err)
	}
	var out []schema.TableName
	for rows.Next() {
		var t schema.TableName
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// PublicationIdents returns the tables pub publishes now (as
// PublicationTables), each with its identity on the source, as text
// "table/entry/schema-entry/publication": its oid, the oids of the
// publication's entries that publish it (pg_publication_rel of it or an
// ancestor, pg_publication_namespace of their schemas; on PostgreSQL 14
// none of schemas), and the xmin of the publication's own row, which
// every ALTER PUBLICATION ... SET (publish = ..., publish_via_partition_root
// = ...), OWNER TO and RENAME writes anew (adding or dropping tables does
// not). The same name with another identity was dropped and made again,
// taken out of the publication and added back, or published by options
// that may have left changes out meanwhile (IdentChange).
func PublicationIdents(ctx context.Context, src *pgx.Conn, pub string) (map[schema.TableName]string, error) {
	var version int
	if err := src.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return nil, fmt.Errorf("list tables of publication %q: %w", pub, err)
	}
	bySchema := "'-'"
	if version >= 150000 {
		bySchema = `coalesce((SELECT max(pn.oid) FROM pg_catalog.pg_publication_namespace pn
		WHERE pn.pnpubid = p.oid AND pn.pnnspid IN (SELECT a.relnamespace FROM pg_catalog.pg_class a WHERE a.oid IN (SELECT c.oid UNION SELECT relid FROM pg_catalog.pg_partition_ancestors(c.oid))))::text, '-')`
	}
	rows, err := src.Query(ctx, `SELECT pt.schemaname::text, pt.tablename::text, c.oid::text || '/' ||
	coalesce((SELECT max(pr.oid) FROM pg_catalog.pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid IN (SELECT c.oid UNION SELECT relid FROM pg_catalog.pg_partition_ancestors(c.oid)))::text, '-') || '/' || `+bySchema+` || '/' || p.xmin::text
FROM pg_catalog.pg_publication_tables pt
JOIN pg_catalog.pg_publication p ON p.pubname = pt.pubname
JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
WHERE pt.pubname = $1 AND pt.schemaname <> '`+provision.Schema+`'`, pub)
	if err != nil {
		return nil, fmt.Errorf("list tables of publication %q: %w", pub, err)
	}
	out := map[schema.TableName]string{}
	for rows.Next() {
		var t schema.TableName
		var ident string
		if err := rows.Scan(&t.Schema, &t.Name, &ident); err != nil {
			return nil, fmt.Errorf("list tables of publication %q: %w", pub, err)
		}
		out[t] = ident
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables of publication %q: %w", pub, err)
	}
	return out, nil
}

// PublicationColumnTypes returns, for each table pub publishes now, its
// columns' types as JSON {"name": [type oid, typmod], ...}, the form
// target.SourceTypes records and schema.TypesChanged compares.
func PublicationColumnTypes(ctx context.Context, src *pgx.Conn, pub string) (map[schema.TableName]string, error) {
	rows, err := src.Query(ctx, `SELECT pt.schemaname::text, pt.tablename::text,
	coalesce((SELECT jsonb_object_agg(a.attname, jsonb_build_array(a.atttypid::bigint, a.atttypmod))
	          FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}')::text
FROM pg_catalog.pg_publication_tables pt
JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
WHERE pt.pubname = $1 AND pt.schemaname <> '`+provision.Schema+`'`, pub)
	if err != nil {
		return nil, fmt.Errorf("read the column types of publication %q's tables: %w", pub, err)
	}
	out := map[schema.TableName]string{}
	for rows.Next() {
		var t schema.TableName
		var types string
		if err := rows.Scan(&t.Schema, &t.Name, &types); err != nil {
			return nil, fmt.Errorf("read the column types of publication %q's tables: %w", pub, err)
		}
		out[t] = types
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the column types of publication %q's tables: %w", pub, err)
	}
	return out, nil
}

// IdentChange compares a table's source identity recorded with its copy
// with the one PublicationIdents reads now. It returns "" when they are
// the same; else what differs: "table" (another oid: the table was
// dropped and made again), "entry" (another publication entry publishes
// it: it was taken out and added back, or its row filter or column list
// was set anew), or "publication" (the publication's row was written
// anew: its options may have left changes out meanwhile, even if they
// are back as they were). adopt reports a recorded identity that an
// earlier version wrote without the publication part, or that names the
// oid alone (a table a schema-change message made:
// target.SetTableMade, then followed by the event trigger), and that
// otherwise matches: the caller records now's without copying anything.
func IdentChange(recorded, now string) (what string, adopt bool) {
	if recorded == now {
		return "", false
	}
	r, n := strings.Split(recorded, "/"), strings.Split(now, "/")
	switch {
	case len(r) == 0 || len(n) == 0 || r[0] != n[0]:
		return "table", false
	case len(r) == 1:
		return "", true
	case len(r) < 3 || len(n) < 3 || r[1] != n[1] || r[2] != n[2]:
		return "entry", false
	case len(r) == 3:
		return "", true
	default:
		return "publication", false
	}
}

// publicationSQL returns the tables --tables names now and the CREATE
// PUBLICATION statement (without WITH options) for them: "schema.*"
// patterns become FOR TABLES IN SCHEMA (PostgreSQL 15+, and it needs a
// superuser), so that tables created there later are published — and
// replicated, their CREATE TABLE reaching the target through the schema
// change messages; named tables stay FOR TABLE. Otherwise (PostgreSQL 14,
// or no superuser) every pattern becomes a FOR TABLE list, as the tables
// are now: a table created later needs adding to the publication. So does
// a run without the schema-change event trigger (guarded false: --ddl
// other than true): a keyless table created later in a published schema
// would make the source refuse its UPDATEs and DELETEs, and only the
// trigger gives such a table a replica identity in time (ddlTriggerSQL).
func publicationSQL(ctx context.Context, src *pgx.Conn, pub string, patterns []string, guarded bool, log *slog.Logger) ([]schema.TableName, string, error) {
	schemas, tablePatterns, err := schema.SplitSchemaPatterns(patterns)
	if err != nil {
		return nil, "", fmt.Errorf("--tables: %w", err)
	}
	var version int
	var super bool
	if err := src.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&version, &super); err != nil {
		return nil, "", fmt.Errorf("create publication %q: look up the source's version and role: %w", pub, err)
	}
	if len(schemas) == 0 || version < 150000 || !super || !guarded {
		if len(schemas) > 0 {
			log.Warn("--tables: schema patterns become a list of the tables there now (FOR TABLES IN SCHEMA needs PostgreSQL 15, a superuser and --ddl=true, whose event trigger keeps a keyless table created later from breaking the source's UPDATEs and DELETEs): a table created later is not replicated until it is added to the publication",
				"publication", pub, "schemas", strings.Join(schemas, ","))
		}
		names, err := schema.ResolveTables(ctx, src, patterns)
		if err != nil {
			return nil, "", fmt.Errorf("resolve --tables on the source: %w", err)
		}
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = n.Quoted()
		}
		return names, "CREATE PUBLICATION " + change.QuoteIdent(pub) + " FOR TABLE " + strings.Join(quoted, ", "), nil
	}
	var parts []string
	var names []schema.TableName
	for _, sch := range schemas {
		var exists bool
		if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", sch).Scan(&exists); err != nil {
			return nil, "", fmt.Errorf("resolve --tables on the source: %w", err)
		}
		if !exists {
			return nil, "", fmt.Errorf("resolve --tables on the source: schema %q does not exist", sch)
		}
		parts = append(parts, "TABLES IN SCHEMA "+change.QuoteIdent(sch))
		// Its tables now (possibly none), for the partitioned-table check.
		if in, err := schema.ResolveTables(ctx, src, []string{change.QuoteIdent(sch) + ".*"}); err == nil {
			names = append(names, in...)
		}
	}
	if len(tablePatterns) > 0 {
		named, err := schema.ResolveTables(ctx, src, tablePatterns)
		if err != nil {
			return nil, "", fmt.Errorf("resolve --tables on the source: %w", err)
		}
		quoted := make([]string, len(named))
		for i, n := range named {
			quoted[i] = n.Quoted()
		}
		parts = append(parts, "TABLE "+strings.Join(quoted, ", "))
		names = append(names, named...)
	}
	return names, "CREATE PUBLICATION " + change.QuoteIdent(pub) + " FOR " + strings.Join(parts, ", "), nil
}

// CheckPublishes refuses a publication that leaves out inserts, updates,
// deletes or truncates: those changes would never reach the target, without
// a word. With partial (--partial-publication) it only warns.
func CheckPublishes(ctx context.Context, src *pgx.Conn, pub string, partial bool, log *slog.Logger) error {
	var ins, upd, del, trunc bool
	if err := src.QueryRow(ctx, "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_catalog.pg_publication WHERE pubname = $1", pub).
		Scan(&ins, &upd, &del, &trunc); err != nil {
		return fmt.Errorf("read what publication %q publishes: %w", pub, err)
	}
	var missing []string
	for _, a := range []struct {
		on   bool
		name string
	}{{ins, "insert"}, {upd, "update"}, {del, "delete"}, {trunc, "truncate"}} {
		if !a.on {
			missing = append(missing, a.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if partial {
		log.Warn("--partial-publication: the publication leaves out some changes; they never reach the target", "publication", pub, "not_published", strings.Join(missing, ", "))
		return nil
	}
	return fmt.Errorf("%w: publication %q does not publish %s: those changes would never reach the target; "+
		"run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'), or pass --partial-publication if that is meant",
		ErrPartialPublication, pub, strings.Join(missing, ", "), change.QuoteIdent(pub))
}

// ErrPartialPublication is wrapped by CheckPublishes' refusal of a
// publication that leaves out a kind of change.
var ErrPartialPublication = errors.New("partial publication")

// Publish adds the tables not yet in the publication to it.
func Publish(ctx context.Context, src *pgx.Conn, pub string, tables, published []schema.TableName) error {
	var add []string
	for _, n := range tables {
		if !slices.Contains(published, n) {
			add = append(add, n.Quoted())
		}
	}
	if len(add) == 0 {
		return nil
	}
	if _, err := src.Exec(ctx, "ALTER PUBLICATION "+change.QuoteIdent(pub)+" ADD TABLE "+strings.Join(add, ", ")); err != nil {
		return fmt.Errorf("add %s to publication %q: %w", strings.Join(add, ", "), pub, err)
	}
	return nil
}
