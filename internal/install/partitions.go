package install

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/schema"
)

// Partitions under a root publication (publish_via_partition_root): pgoutput
// sends their rows under the root's name, and nothing of what changes the
// partitions themselves — a TRUNCATE of one partition, an ATTACH PARTITION
// of a table that holds rows, a DETACH PARTITION — although each changes
// the rows the root holds. Installed with the event trigger (--ddl=true),
// in the schema repstream:
//
//   - repstream.partition_state: each partition's parent, partition
//     constraint, bound and its parent's partition key, as last seen
//     (UNLOGGED, like ddl_state: a crash empties it, and the next DDL of a
//     partitioned table then takes its partitions as attached — a root
//     copied again, nothing lost);
//   - the event trigger repstream_ddl_partitions (ddl_command_end of CREATE
//     TABLE and ALTER TABLE, after repstream_ddl): for a partitioned table,
//     a partition that is in the catalog but not in the state was attached,
//     one in the state but no longer in the catalog was detached; each
//     becomes a message (tag ATTACH PARTITION / DETACH PARTITION);
//   - a statement trigger repstream_truncate AFTER TRUNCATE on every leaf
//     partition (made by the event trigger as partitions appear): a TRUNCATE
//     of the leaf becomes a message (tag TRUNCATE PARTITION). It fires after
//     the truncate's WAL record, so a TRUNCATE of the root (which pgoutput
//     sends) is applied before the messages of its leaves, which then find
//     nothing left to remove.
//
// The event trigger and the TRUNCATE triggers fire always (ENABLE ALWAYS),
// also under session_replication_role = replica, as repstream_ddl and
// repstream_ddl_drop do (ddl.go). Making a TRUNCATE trigger fire always
// takes an ALTER TABLE of the leaf, which the event triggers would take for
// a schema change of it (a partition just attached has none on the
// target): repstream.truncate_always lists the leaf in repstream.self_ddl
// while it alters it, and the event triggers pass over the tables listed
// there. CheckDDLTriggers stops a run that finds one of them disabled,
// firing for one kind of session only, or altered since (its comment
// records its catalog row's xmin as repstream left it).
//
// Each message is a repstream.ddl message of the root (its definition, as
// ddl_def gives it), published to the root publications that publish the
// root (pubs), with "partition": the partition's names, bound, partition
// constraint (pg_get_partition_constraintdef, as it was), its parent's
// partition key, whether it held rows (ATTACH) and the publications that
// publish it as a table of its own (standalone_pubs). Apply (target,
// partition.go) carries it.
const partitionsSQL = `
CREATE UNLOGGED TABLE IF NOT EXISTS repstream.partition_state (
  relid oid PRIMARY KEY, parent oid NOT NULL, cons text, bound text, partkey text);

CREATE OR REPLACE FUNCTION repstream.standalone_pubs(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
SELECT COALESCE(jsonb_agg(p.pubname), '[]'::jsonb) FROM pg_publication p
 WHERE p.puballtables
    OR EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = rel)
    %SCHEMAPUBREL%
$fn$;

-- A message per published ancestor of part, from root (the partition's
-- parent, or the partitioned table itself) up to the top: each
-- publication through the root (publish_via_partition_root) sends a
-- partition's rows as its topmost ancestor that it publishes (a mid-level
-- partitioned table, when the top is not published), so the message for
-- that publication describes that ancestor.
CREATE OR REPLACE FUNCTION repstream.partition_msg(tag text, part oid, root oid, cons text, bound text, partkey text, hasrows boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  a record;
  d jsonb;
  pubs jsonb;
  claimed jsonb := '[]'::jsonb;
BEGIN
  FOR a IN SELECT x.relid FROM pg_partition_ancestors(root) WITH ORDINALITY AS x(relid, n) ORDER BY x.n DESC
  LOOP
    -- A TRUNCATE of a root with N leaves fires the trigger of each leaf:
    -- the root's definition without what takes a walk of its leaves
    -- (ddl_def's leaves), which the apply of a TRUNCATE PARTITION never
    -- reads, keeps it at N times one leaf's cost, not N squared.
    d := repstream.ddl_def(a.relid, tag <> 'TRUNCATE PARTITION');
    SELECT COALESCE(jsonb_agg(p.pubname), '[]'::jsonb) INTO pubs FROM pg_publication p
     WHERE p.pubviaroot AND (d->'pubs') ? p.pubname AND NOT claimed ? p.pubname;
    IF pubs = '[]'::jsonb THEN
      CONTINUE;
    END IF;
    claimed := claimed || pubs;
    PERFORM repstream.ddl_emit((d || jsonb_build_object(
      'tag', tag, 'pubs', pubs, 'partition', jsonb_build_object(
        'schema', n.nspname, 'name', c.relname, 'cons', cons, 'bound', bound, 'partkey', partkey,
        'rows', hasrows, 'standalone_pubs', repstream.standalone_pubs(part),
        'parent', (SELECT i.inhparent::regclass::text FROM pg_inherits i WHERE i.inhrelid = part))))::text)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = part;
  END LOOP;
END
$fn$;

-- The partitions under root (a root at install, each of them; after, the
-- table a command created or altered: then root itself too, if it is a
-- partition), as they are now in partition_state, and a TRUNCATE trigger
-- on each of its leaves that has none. Only that tree: a CREATE TABLE ... PARTITION OF
-- refreshes the new partition, not the whole tree it joins, so that
-- creating N partitions one by one costs linear in N, not N squared.
-- upgrade: also set every existing trigger of the tree to fire always (at
-- install, after the run looked for one turned off: CheckDDLTriggers);
-- else only those it makes, so that one turned off stays so for the runs
-- to see.
DROP FUNCTION IF EXISTS repstream.partition_refresh(oid);
CREATE OR REPLACE FUNCTION repstream.partition_refresh(root oid, upgrade boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
BEGIN
  -- (the catalogs read by oid, row by row: a join would scan pg_class or
  -- pg_trigger whole, however small the tree)
  INSERT INTO repstream.partition_state AS s (relid, parent, cons, bound, partkey)
  SELECT t.relid, t.parentrelid, pg_get_partition_constraintdef(t.relid),
         (SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE c.oid = t.relid), pg_get_partkeydef(t.parentrelid)
    FROM pg_partition_tree(root) t
   WHERE t.parentrelid IS NOT NULL
  ON CONFLICT (relid) DO UPDATE SET parent = EXCLUDED.parent, cons = EXCLUDED.cons, bound = EXCLUDED.bound, partkey = EXCLUDED.partkey
   WHERE (s.parent, s.cons, s.bound, s.partkey) IS DISTINCT FROM (EXCLUDED.parent, EXCLUDED.cons, EXCLUDED.bound, EXCLUDED.partkey);
  FOR r IN SELECT t.relid FROM pg_partition_tree(root) t WHERE t.isleaf AND t.parentrelid IS NOT NULL
  LOOP
    IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = r.relid AND c.relkind = 'r' AND c.relpersistence = 'p'
                  AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'repstream_truncate')) THEN
      EXECUTE format('CREATE TRIGGER repstream_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION repstream.ddl_truncate()', r.relid::regclass);
      PERFORM repstream.truncate_always(r.relid);
    END IF;
  END LOOP;
  IF upgrade THEN
    FOR r IN SELECT g.tgrelid AS relid FROM pg_partition_tree(root) t JOIN pg_trigger g ON g.tgrelid = t.relid
              WHERE g.tgname = 'repstream_truncate'
                AND (g.tgenabled <> 'A' OR obj_description(g.oid, 'pg_trigger') IS DISTINCT FROM 'repstream: set at ' || g.xmin::text)
    LOOP
      PERFORM repstream.truncate_always(r.relid);
    END LOOP;
  END IF;
END
$fn$;

-- A leaf's repstream_truncate fires in every session (ENABLE ALWAYS), also
-- under session_replication_role = replica: another replication's apply
-- (a source that is itself a subscriber), a restore. The ALTER TABLE it
-- takes is repstream's own, not a schema change of the leaf: the event
-- triggers pass over it (repstream.self_ddl).
--
-- The trigger's comment then records its catalog row's xmin, which any
-- later ALTER of it (DISABLE, ENABLE, RENAME) changes: CheckDDLTriggers
-- sees one turned off and on again between two looks.
CREATE OR REPLACE FUNCTION repstream.truncate_always(rel oid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  x text;
BEGIN
  INSERT INTO repstream.self_ddl VALUES (rel) ON CONFLICT DO NOTHING;
  EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER repstream_truncate', rel::regclass);
  DELETE FROM repstream.self_ddl x WHERE x.relid = rel;
  SELECT g.xmin::text INTO x FROM pg_trigger g WHERE g.tgrelid = rel AND g.tgname = 'repstream_truncate';
  EXECUTE format('COMMENT ON TRIGGER repstream_truncate ON %s IS %L', rel::regclass, 'repstream: set at ' || x);
END
$fn$;

-- The TRUNCATE of partition rel (a leaf's repstream_truncate).
CREATE OR REPLACE FUNCTION repstream.truncate_leaf(rel oid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  c record;
BEGIN
  SELECT k.oid, k.relpartbound, i.inhparent INTO c FROM pg_class k JOIN pg_inherits i ON i.inhrelid = k.oid
   WHERE k.oid = rel AND k.relispartition;
  IF FOUND THEN
    BEGIN
      PERFORM repstream.partition_msg('TRUNCATE PARTITION', c.oid, c.inhparent, pg_get_partition_constraintdef(c.oid),
        pg_get_expr(c.relpartbound, c.oid), pg_get_partkeydef(c.inhparent), NULL);
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'repstream: cannot describe the TRUNCATE of partition %: %', rel::regclass, SQLERRM;
      PERFORM repstream.ddl_emit(jsonb_build_object(
        'tag', 'TRUNCATE PARTITION', 'oid', rel::bigint, 'schema', '?', 'name', rel::regclass::text,
        'error', SQLERRM, 'pubs', (SELECT COALESCE(jsonb_agg(pubname), '[]'::jsonb) FROM pg_publication))::text);
    END;
    PERFORM pg_logical_emit_message(false, 'repstream.ddl.sep', '');
  END IF;
END
$fn$;

-- PL/pgSQL compiles a trigger function once per trigger, and keeps each
-- of its statements' plans in the session's plan cache until the session
-- ends: a TRUNCATE of a root with N leaves leaves N copies of this one in
-- the session that ran it, and every catalog change the session makes
-- after walks all their plans (a DROP TABLE of the root: one walk per
-- object it drops, N times N). Its body is thus one statement, the work
-- done in truncate_leaf, compiled once: two plans per leaf, not one per
-- statement of the work.
CREATE OR REPLACE FUNCTION repstream.ddl_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM repstream.truncate_leaf(TG_RELID);
  RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION repstream.ddl_partitions() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
  s record;
  lf record;
  hasrows boolean;
BEGIN
  FOR r IN SELECT DISTINCT e.objid, c.relkind
             FROM pg_event_trigger_ddl_commands() e
             JOIN pg_class c ON c.oid = e.objid
            WHERE e.classid = 'pg_class'::regclass AND c.relpersistence = 'p'
              AND (c.relkind = 'p' OR (c.relkind = 'r' AND c.relispartition))
              AND c.relnamespace <> 'repstream'::regnamespace
              AND NOT EXISTS (SELECT 1 FROM repstream.self_ddl x WHERE x.relid = c.oid)
  LOOP
    BEGIN
      IF r.relkind = 'p' THEN
        -- Detached: recorded as a partition of it, no longer one.
        FOR s IN SELECT p.* FROM repstream.partition_state p JOIN pg_class c ON c.oid = p.relid
                  WHERE p.parent = r.objid
                    AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = p.relid AND i.inhparent = r.objid)
        LOOP
          PERFORM repstream.partition_msg('DETACH PARTITION', s.relid, r.objid, s.cons, s.bound, s.partkey, NULL);
          DELETE FROM repstream.partition_state p WHERE p.relid = s.relid;
        END LOOP;
        -- Attached: a partition of it not recorded as one.
        FOR s IN SELECT i.inhrelid AS relid, k.relpartbound FROM pg_inherits i
                   JOIN pg_class k ON k.oid = i.inhrelid
                   LEFT JOIN repstream.partition_state p ON p.relid = i.inhrelid
                  WHERE i.inhparent = r.objid AND p.parent IS DISTINCT FROM r.objid
        LOOP
          -- Whether it holds rows, looking only into plain tables: this
          -- function runs as a superuser, and reading a foreign table
          -- would connect with a superuser's rights through a user
          -- mapping of the table's owner (who then ran code as one). A
          -- foreign leaf may hold rows.
          hasrows := EXISTS (SELECT 1 FROM pg_partition_tree(s.relid) t JOIN pg_class k ON k.oid = t.relid
                              WHERE t.isleaf AND k.relkind NOT IN ('r', 'p'));
          FOR lf IN SELECT t.relid FROM pg_partition_tree(s.relid) t JOIN pg_class k ON k.oid = t.relid
                     WHERE t.isleaf AND k.relkind = 'r'
          LOOP
            EXIT WHEN hasrows;
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', lf.relid::regclass) INTO hasrows;
          END LOOP;
          PERFORM repstream.partition_msg('ATTACH PARTITION', s.relid, r.objid, pg_get_partition_constraintdef(s.relid),
            pg_get_expr(s.relpartbound, s.relid), pg_get_partkeydef(r.objid), hasrows);
        END LOOP;
      END IF;
      -- What the command changed: the table's own tree (a partitioned
      -- table's attached and detached partitions, a new partition), and,
      -- for a partition, its parent's DEFAULT partition, whose partition
      -- constraint excludes every sibling's bound (a DETACH of it carries
      -- the constraint recorded). Not the whole tree of the root: that
      -- would make creating N partitions one by one cost N squared.
      PERFORM repstream.partition_refresh(r.objid, false);
      FOR s IN SELECT pt.partdefid AS relid FROM pg_inherits i JOIN pg_partitioned_table pt ON pt.partrelid = i.inhparent
                WHERE i.inhrelid = r.objid AND pt.partdefid <> 0 AND pt.partdefid <> r.objid
      LOOP
        PERFORM repstream.partition_refresh(s.relid, false);
      END LOOP;
    EXCEPTION WHEN OTHERS THEN
      -- Never fail the user's DDL; make every repstream stop at it instead.
      RAISE WARNING 'repstream: cannot follow the partitions of %: %', r.objid::regclass, SQLERRM;
      PERFORM repstream.ddl_emit(jsonb_build_object(
        'tag', 'ALTER TABLE', 'oid', r.objid::bigint, 'schema', '?', 'name', r.objid::regclass::text,
        'error', 'partitions: ' || SQLERRM, 'pubs', (SELECT COALESCE(jsonb_agg(pubname), '[]'::jsonb) FROM pg_publication))::text);
    END;
  END LOOP;
  PERFORM pg_logical_emit_message(false, 'repstream.ddl.sep', '');
END
$fn$;

%PARTTRIGGER%

-- The partitions as they are now, and the TRUNCATE trigger on every leaf.
SELECT repstream.partition_refresh(c.oid, true)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'p' AND NOT c.relispartition AND c.relpersistence = 'p'
   AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'repstream') AND n.nspname NOT LIKE 'pg\_%';
`

// schemaPubRelSQL: a publication FOR TABLES IN SCHEMA of rel's schema
// (PostgreSQL 15+).
const schemaPubRelSQL = `OR EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid
                   AND pn.pnnspid = (SELECT relnamespace FROM pg_class WHERE oid = rel))`

// dropPartitionsSQL removes what partitionsSQL installs; the functions'
// CASCADE drops the repstream_truncate triggers of the partitions, which
// ReleaseDDL has dropped one leaf at a time before (dropTruncateTriggers)
// and locked (a partition made since).
const dropPartitionsSQL = `
DROP EVENT TRIGGER IF EXISTS repstream_ddl_partitions;
DROP FUNCTION IF EXISTS repstream.ddl_partitions();
DROP FUNCTION IF EXISTS repstream.ddl_truncate() CASCADE;
DROP FUNCTION IF EXISTS repstream.truncate_leaf(oid);
DROP FUNCTION IF EXISTS repstream.partition_refresh(oid);
DROP FUNCTION IF EXISTS repstream.partition_refresh(oid, boolean);
DROP FUNCTION IF EXISTS repstream.truncate_always(oid);
DROP FUNCTION IF EXISTS repstream.partition_msg(text, oid, oid, text, text, text, boolean);
DROP FUNCTION IF EXISTS repstream.standalone_pubs(oid);
DROP TABLE IF EXISTS repstream.partition_state;
`

// leaf is a leaf partition with repstream's TRUNCATE trigger: its oid and
// its name as SQL (regclass: quoted, qualified unless on the search path).
type leaf struct {
	rel  uint32
	name string
}

// truncateTriggerLeaves lists the leaves with a repstream_truncate that
// calls repstream.ddl_truncate() (a user's trigger of that name calling
// another function is not repstream's).
func truncateTriggerLeaves(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]leaf, error) {
	rows, err := q.Query(ctx, `SELECT g.tgrelid, g.tgrelid::regclass::text FROM pg_catalog.pg_trigger g
WHERE g.tgname = 'repstream_truncate' AND g.tgfoid = pg_catalog.to_regprocedure('repstream.ddl_truncate()') ORDER BY g.tgrelid`)
	if err != nil {
		return nil, fmt.Errorf("look up the partitions' TRUNCATE triggers on the source: %w", err)
	}
	leaves, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leaf, error) {
		var l leaf
		return l, r.Scan(&l.rel, &l.name)
	})
	if err != nil {
		return nil, fmt.Errorf("look up the partitions' TRUNCATE triggers on the source: %w", err)
	}
	return leaves, nil
}

// dropTruncateTriggers drops the leaves' TRUNCATE triggers while slot is
// the last user of the event trigger (ReleaseDDL removes the rest after),
// each leaf in a transaction of its own under provision.Lock that checks
// that again: a DROP TRIGGER takes ACCESS EXCLUSIVE on its table, held so
// only for that statement, instead of on every leaf at once until the
// whole removal commits. A lock not had within releaseLockTimeout is a
// lockBusy naming the leaf; the leaves done stay done.
func dropTruncateTriggers(ctx context.Context, src *pgx.Conn, slot string) error {
	leaves, err := truncateTriggerLeaves(ctx, src)
	if err != nil {
		return err
	}
	for _, l := range leaves {
		if last, err := dropTruncateTrigger(ctx, src, slot, l); err != nil || !last {
			return err
		}
	}
	return nil
}

// dropTruncateTrigger drops l's TRUNCATE trigger if slot is the last user
// of the event trigger, as it reports.
func dropTruncateTrigger(ctx context.Context, src *pgx.Conn, slot string, l leaf) (last bool, err error) {
	tx, err := src.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := provision.Lock(ctx, tx); err != nil {
		return false, err
	}
	if exists, err := provision.CheckSchema(ctx, tx, "source"); err != nil || !exists {
		return false, err
	}
	if _, _, others, err := ddlUsers(ctx, tx, slot); err != nil || len(others) > 0 {
		return false, err
	}
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+releaseLockTimeout+"'"); err != nil {
		return false, err
	}
	var name *string
	if err := tx.QueryRow(ctx, `SELECT (SELECT c.oid::regclass::text FROM pg_catalog.pg_class c WHERE c.oid = $1)`, l.rel).Scan(&name); err != nil {
		return false, fmt.Errorf("look up partition %s on the source: %w", l.name, err)
	}
	if name == nil {
		return true, nil // dropped meanwhile
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+*name+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return false, fmt.Errorf("drop the TRUNCATE trigger of partition %s on the source: %w", *name, asBusy(err, *name, l.rel))
	}
	var ours bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g WHERE g.tgrelid = $1 AND g.tgname = 'repstream_truncate'
   AND g.tgfoid = pg_catalog.to_regprocedure('repstream.ddl_truncate()'))`, l.rel).Scan(&ours); err != nil {
		return false, fmt.Errorf("look up the TRUNCATE trigger of partition %s on the source: %w", *name, err)
	}
	if ours {
		if _, err := tx.Exec(ctx, "DROP TRIGGER repstream_truncate ON "+*name); err != nil {
			return false, fmt.Errorf("drop the TRUNCATE trigger of partition %s on the source: %w", *name, asBusy(err, *name, l.rel))
		}
	}
	return true, tx.Commit(ctx)
}

// lockHolders names the sessions (pid, user, application, state, since
// when their transaction runs) and prepared transactions that hold a lock
// on rel (0: on a table in the schema repstream or a leaf with repstream's
// TRUNCATE trigger), for an error; what cannot be looked up is said so.
func lockHolders(ctx context.Context, src *pgx.Conn, rel uint32) string {
	var held []string
	err := src.QueryRow(ctx, `SELECT COALESCE(array_agg(DISTINCT CASE WHEN l.pid IS NOT NULL
    THEN pg_catalog.format('backend pid %s (user %s, application %L, %s; its transaction began at %s)', l.pid, a.usename, a.application_name, a.state, date_trunc('second', a.xact_start))
    ELSE pg_catalog.format('prepared transaction %L', p.gid) END), '{}')
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_catalog.pg_prepared_xacts p ON l.pid IS NULL AND p.transaction::text = pg_catalog.split_part(l.virtualtransaction, '/', 2)
WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
  AND (l.relation = $1 OR $1 = 0 AND (l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relnamespace = pg_catalog.to_regnamespace('repstream'))
       OR l.relation IN (SELECT g.tgrelid FROM pg_catalog.pg_trigger g WHERE g.tgname = 'repstream_truncate')))`, rel).Scan(&held)
	switch {
	case err != nil:
		return fmt.Sprintf("a transaction (the lock's holders could not be looked up: %v)", err)
	case len(held) == 0:
		return "a transaction that has let it go since"
	}
	return strings.Join(held, ", ")
}

// partitionsInstallSQL is partitionsSQL for a source of version (a
// server_version_num).
func partitionsInstallSQL(version int) string {
	trigger := ensureEventTrigger(ddlPartitionsTrigger)
	if version >= 150000 {
		return strings.NewReplacer("%SCHEMAPUBREL%", schemaPubRelSQL, "%PARTTRIGGER%", trigger).Replace(partitionsSQL)
	}
	return strings.NewReplacer("%SCHEMAPUBREL%", "", "%PARTTRIGGER%", trigger).Replace(partitionsSQL)
}

// CheckUntrackedPartitions refuses a run without the schema-change event
// trigger that replicates a partitioned table through its root
// (publish_via_partition_root): pgoutput sends nothing for a TRUNCATE of one
// partition, an ATTACH PARTITION or a DETACH PARTITION, and only the
// trigger's messages carry them (partitionsSQL). Without it those changes
// would leave the target different without a word, so the user must say
// they accept that (--allow-untracked-partitions). The caller calls it
// only then: without the trigger (mode says how schema changes are
// followed instead) and without --allow-untracked-partitions.
func CheckUntrackedPartitions(ctx context.Context, src *pgx.Conn, pub string, mode fmt.Stringer, tables []schema.TableName) error {
	if len(tables) == 0 {
		return nil
	}
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = t.Quoted()
	}
	var roots []string
	err := src.QueryRow(ctx, `SELECT COALESCE(array_agg(c.oid::regclass::text ORDER BY 1), '{}')
FROM pg_catalog.pg_class c, pg_catalog.pg_publication p
WHERE c.oid = ANY($1::regclass[]) AND c.relkind = 'p' AND p.pubname = $2 AND p.pubviaroot`, quoted, pub).Scan(&roots)
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
