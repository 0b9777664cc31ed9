package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Schema changes on the source (--ddl).
//
// With --ddl=true (the default) repstream installs, in the source database,
// in a schema of its own (repstream):
//
//   - repstream.ddl_def(oid): a table's definition as JSON (columns with
//     attribute number, name, format_type, type OID and modifier, NOT NULL,
//     default, generation expression, identity, the value rows existing at
//     ADD COLUMN got (attmissingval), owned sequence; primary key, replica
//     identity, the publications that publish it);
//   - repstream.ddl_state: the definition last emitted per table (UNLOGGED:
//     never published, not WAL-logged; a crash empties it, which only costs
//     the rename detection of the next change of each table);
//   - the event trigger repstream_ddl (ddl_command_end of CREATE TABLE,
//     ALTER TABLE, CREATE TABLE AS, SELECT INTO) and repstream_ddl_drop
//     (sql_drop of tables), whose functions emit, inside the DDL's
//     transaction, pg_logical_emit_message(true, 'repstream.ddl', json) per
//     ordinary or partitioned table: the new definition, the command tag and
//     the previous definition ("old", from ddl_state) — or, for a drop, the
//     names and "dropped": true.
//
// The functions are SECURITY DEFINER (the installing superuser's), so any
// role's DDL is reported. CREATE EVENT TRIGGER needs a superuser; without
// one, or with --ddl=relation, schema changes are followed from pgoutput's
// Relation messages instead (target/ddl.go). `repstream drop` removes all of
// it (dropDDLTrigger).

// ddlMode is how a run follows schema changes.
type ddlMode int

const (
	ddlOff      ddlMode = iota // --ddl=false: a schema change stops the run (the plan finds a mismatch)
	ddlTrigger                 // event trigger messages
	ddlRelation                // diff of pgoutput Relation messages
)

func (m ddlMode) String() string {
	return [...]string{"off", "event trigger", "relation messages"}[m]
}

// ddlTriggerSQL installs (or replaces) the source side of --ddl=true;
// %SCHEMAPUB% is schemaPubSQL on PostgreSQL 15+ (empty before). The
// publications of a table are read from the catalogs directly (not
// pg_publication_tables, which expands every publication's tables).
const ddlTriggerSQL = `
CREATE SCHEMA IF NOT EXISTS repstream;
CREATE UNLOGGED TABLE IF NOT EXISTS repstream.ddl_state (relid oid PRIMARY KEY, def jsonb NOT NULL);

CREATE OR REPLACE FUNCTION repstream.ddl_def(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
SELECT jsonb_build_object(
  'oid', c.oid::bigint, 'schema', n.nspname, 'name', c.relname, 'kind', c.relkind::text, 'ident', c.relreplident::text,
  'pubs', COALESCE((SELECT jsonb_agg(p.pubname) FROM pg_publication p
                     WHERE NOT (p.pubviaroot AND c.relispartition)
                       AND (p.puballtables
                            OR EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = c.oid)
                            %SCHEMAPUB%)), '[]'::jsonb),
  'pkey', COALESCE((SELECT jsonb_agg(a.attname ORDER BY k.ord)
                      FROM pg_index i
                      CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                     WHERE i.indrelid = c.oid AND i.indisprimary), '[]'::jsonb),
  'columns', COALESCE((SELECT jsonb_agg(jsonb_build_object(
      'num', a.attnum, 'name', a.attname,
      'type', format_type(a.atttypid, a.atttypmod), 'typeoid', a.atttypid::bigint, 'typmod', a.atttypmod,
      'notnull', a.attnotnull,
      'default', CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END,
      'generated', CASE WHEN a.attgenerated <> '' THEN pg_get_expr(d.adbin, d.adrelid) END,
      'identity', a.attidentity::text,
      'hasmissing', a.atthasmissing,
      'missing', CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END,
      'seq', (SELECT s.oid::regclass::text FROM pg_depend dep JOIN pg_class s ON s.oid = dep.objid
               WHERE dep.classid = 'pg_class'::regclass AND dep.refclassid = 'pg_class'::regclass
                 AND dep.refobjid = c.oid AND dep.refobjsubid = a.attnum AND dep.deptype = 'a' AND s.relkind = 'S'
               LIMIT 1)
    ) ORDER BY a.attnum)
    FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'::jsonb))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = rel
$fn$;

CREATE OR REPLACE FUNCTION repstream.ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
  d jsonb;
  o jsonb;
BEGIN
  FOR r IN SELECT DISTINCT e.objid, e.command_tag
             FROM pg_event_trigger_ddl_commands() e
             JOIN pg_class c ON c.oid = e.objid
            WHERE e.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
              AND c.relnamespace <> 'repstream'::regnamespace
  LOOP
    BEGIN
      d := repstream.ddl_def(r.objid);
      SELECT s.def INTO o FROM repstream.ddl_state s WHERE s.relid = r.objid;
      INSERT INTO repstream.ddl_state AS s VALUES (r.objid, d)
        ON CONFLICT (relid) DO UPDATE SET def = EXCLUDED.def;
      PERFORM pg_logical_emit_message(true, 'repstream.ddl',
        (d || jsonb_build_object('tag', r.command_tag, 'old', o))::text);
    EXCEPTION WHEN OTHERS THEN
      -- Never fail the user's DDL; make every repstream stop at it instead.
      RAISE WARNING 'repstream: cannot describe table %: %', r.objid::regclass, SQLERRM;
      PERFORM pg_logical_emit_message(true, 'repstream.ddl', jsonb_build_object(
        'tag', r.command_tag, 'oid', r.objid::bigint, 'schema', '?', 'name', r.objid::regclass::text,
        'error', SQLERRM, 'pubs', (SELECT COALESCE(jsonb_agg(pubname), '[]'::jsonb) FROM pg_publication))::text);
    END;
  END LOOP;
  -- Decoding orders a message by the END of its record, the changes by
  -- their start: a row written right after it would tie with it, and a tie
  -- between a subtransaction's message (this block, or the user's
  -- SAVEPOINT) and the top transaction's row is broken either way. A record
  -- in between (a non-transactional message, which apply ignores) makes the
  -- message come first.
  PERFORM pg_logical_emit_message(false, 'repstream.ddl.sep', '');
END
$fn$;

CREATE OR REPLACE FUNCTION repstream.ddl_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
  o jsonb;
  pubs jsonb;
  more jsonb;
BEGIN
  FOR r IN SELECT * FROM pg_event_trigger_dropped_objects()
            WHERE object_type = 'table' AND NOT is_temporary AND schema_name <> 'repstream'
  LOOP
    DELETE FROM repstream.ddl_state s WHERE s.relid = r.objid RETURNING s.def INTO o;
    -- The table's publications as last recorded, and those that publish
    -- its whole schema or every table.
    pubs := COALESCE(o->'pubs', '[]'::jsonb);
    SELECT COALESCE(jsonb_agg(p.pubname), '[]'::jsonb) INTO more FROM pg_publication p WHERE p.puballtables;
    pubs := pubs || more;
    IF current_setting('server_version_num')::int >= 150000 THEN
      EXECUTE 'SELECT COALESCE(jsonb_agg(p.pubname), ''[]''::jsonb) FROM pg_catalog.pg_publication p
                 JOIN pg_catalog.pg_publication_namespace pn ON pn.pnpubid = p.oid
                 JOIN pg_catalog.pg_namespace n ON n.oid = pn.pnnspid WHERE n.nspname = $1'
        INTO more USING r.schema_name;
      pubs := pubs || more;
    END IF;
    PERFORM pg_logical_emit_message(true, 'repstream.ddl', jsonb_build_object(
      'tag', 'DROP TABLE', 'dropped', true, 'oid', r.objid::bigint,
      'schema', r.schema_name, 'name', r.object_name, 'pubs', pubs)::text);
  END LOOP;
  PERFORM pg_logical_emit_message(false, 'repstream.ddl.sep', '');
END
$fn$;

DROP EVENT TRIGGER IF EXISTS repstream_ddl;
CREATE EVENT TRIGGER repstream_ddl ON ddl_command_end
  WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'CREATE TABLE AS', 'SELECT INTO')
  EXECUTE FUNCTION repstream.ddl_end();
DROP EVENT TRIGGER IF EXISTS repstream_ddl_drop;
CREATE EVENT TRIGGER repstream_ddl_drop ON sql_drop EXECUTE FUNCTION repstream.ddl_drop();

-- The definitions as they are now: what the next change of each table
-- compares with.
INSERT INTO repstream.ddl_state
SELECT c.oid, repstream.ddl_def(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'repstream') AND n.nspname NOT LIKE 'pg\_%'
ON CONFLICT (relid) DO UPDATE SET def = EXCLUDED.def;
`

// schemaPubSQL: a publication FOR TABLES IN SCHEMA of the table's schema
// (PostgreSQL 15+).
const schemaPubSQL = `OR EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace)`

// dropDDLTriggerSQL removes what ddlTriggerSQL installs.
const dropDDLTriggerSQL = `
DROP EVENT TRIGGER IF EXISTS repstream_ddl;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_drop;
DROP FUNCTION IF EXISTS repstream.ddl_end();
DROP FUNCTION IF EXISTS repstream.ddl_drop();
DROP FUNCTION IF EXISTS repstream.ddl_def(oid);
DROP TABLE IF EXISTS repstream.ddl_state;
`

// setUpDDL decides how this run follows schema changes and, for the event
// trigger, installs it on the source (in one transaction).
func setUpDDL(ctx context.Context, src *pgx.Conn, setting string, log *slog.Logger) (ddlMode, error) {
	switch setting {
	case "false":
		return ddlOff, nil
	case "relation":
		return ddlRelation, nil
	}
	var super bool
	var version int
	if err := src.QueryRow(ctx, "SELECT rolsuper, current_setting('server_version_num')::int FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super, &version); err != nil {
		return ddlOff, fmt.Errorf("--ddl: look up the source role: %w", err)
	}
	switch {
	case version < 140000:
		log.Warn("schema changes are followed from pgoutput's Relation messages: logical messages need PostgreSQL 14 on the source", "ddl", "relation")
		return ddlRelation, nil
	case !super:
		log.Warn("schema changes are followed from pgoutput's Relation messages: the source role is not a superuser and cannot create the event trigger (a RENAME COLUMN will stop the run)", "ddl", "relation")
		return ddlRelation, nil
	}
	tx, err := src.Begin(ctx)
	if err != nil {
		return ddlOff, fmt.Errorf("--ddl: install the event trigger on the source: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	install := strings.ReplaceAll(ddlTriggerSQL, "%SCHEMAPUB%", "")
	if version >= 150000 {
		install = strings.ReplaceAll(ddlTriggerSQL, "%SCHEMAPUB%", schemaPubSQL)
	}
	if _, err := tx.Exec(ctx, install); err != nil {
		return ddlOff, fmt.Errorf("--ddl: install the event trigger on the source: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ddlOff, fmt.Errorf("--ddl: install the event trigger on the source: %w", err)
	}
	log.Info("schema changes are captured by the event trigger repstream_ddl on the source")
	return ddlTrigger, nil
}

// dropDDLTrigger removes the event trigger and its functions from the
// source, if they are there (the schema repstream stays if anything else is
// in it).
func dropDDLTrigger(ctx context.Context, src *pgx.Conn) (bool, error) {
	var have bool
	if err := src.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname IN ('repstream_ddl', 'repstream_ddl_drop')) OR to_regprocedure('repstream.ddl_end()') IS NOT NULL").Scan(&have); err != nil {
		return false, fmt.Errorf("look up repstream's event trigger on the source: %w", err)
	}
	if !have {
		return false, nil
	}
	if _, err := src.Exec(ctx, dropDDLTriggerSQL); err != nil {
		return false, fmt.Errorf("drop repstream's event trigger on the source: %w", err)
	}
	if _, err := src.Exec(ctx, "DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = 'repstream'::regnamespace) AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE pronamespace = 'repstream'::regnamespace) THEN DROP SCHEMA repstream; END IF; END$$"); err != nil {
		return false, fmt.Errorf("drop the schema repstream on the source: %w", err)
	}
	return true, nil
}
