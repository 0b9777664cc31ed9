package install

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/provision"
)

// Schema changes on the source (--ddl).
//
// With --ddl=true (the default) repstream installs, in the source database,
// in a schema of its own (repstream):
//
//   - repstream.ddl_def(oid): a table's definition as JSON (columns with
//     attribute number, name, format_type, type OID and modifier, NOT NULL,
//     default, generation expression, identity, the value rows existing at
//     ADD COLUMN got (attmissingval), owned sequence; primary key (its key
//     columns, the first indnkeyatts of indkey; its INCLUDE columns apart;
//     whether it is deferrable), replica identity, the publications that
//     publish it, and the oid of each one's entry that lists it: pubrels;
//     a digest of its storage's relfilenodes, its leaves' for a
//     partitioned table: filenodes, which a rewrite changes);
//     repstream.ddl_def(oid, leaves) the same, and for a partitioned table
//     without leaves false nothing that takes a walk of its leaves (no
//     filenodes, no missing values): a TRUNCATE PARTITION message's;
//   - repstream.ddl_state: the definition last emitted per table (UNLOGGED:
//     never published, not WAL-logged; a crash empties it, which only costs
//     the rename detection of the next change of each table);
//   - the event trigger repstream_ddl (ddl_command_end of CREATE TABLE,
//     ALTER TABLE, CREATE TABLE AS, SELECT INTO, ALTER SCHEMA, and ALTER
//     PUBLICATION, for the tables it adds, and for every table of a
//     replication's publication it leaves leaving out a kind of change,
//     with "partial" naming it; the tables it takes out get
//     their recorded publications updated, with no message, so that
//     their return is an entry) and repstream_ddl_drop
//     (sql_drop of tables), whose functions emit, inside the DDL's
//     transaction, a message per ordinary or partitioned table
//     (repstream.ddl_emit(json): pg_logical_emit_message(true,
//     'repstream.ddl', signature || json), signed with the key in
//     repstream.ddl_key, see ddlmsg/sign.go): the new definition, the command tag and
//     the previous definition ("old", from ddl_state) — or, for a drop, the
//     names and "dropped": true — and "xid", the (sub)transaction that
//     emitted it (the xmin of the ddl_state row it wrote: SQL has no
//     function for a subtransaction's xid). Decoding files the message
//     under that xid, but pgoutput sends a streamed transaction's messages
//     with the top-level xid: capture files it under "xid" again, so that
//     the STREAM ABORT of a rolled-back savepoint drops the schema changes
//     made in it as it drops its rows.
//
//   - repstream.ddl_key: the key that signs the messages (a materialized
//     view of one row, made with the trigger from the server's strong
//     random source and kept until the trigger goes; never published).
//     Only its owner reads it: PUBLIC has nothing on the schema. The
//     event trigger repstream_ddl_key refuses a REFRESH of it; a capture
//     that meets a message signed with another key than its own reads
//     the key again and stops if it changed (capture/ddl.go).
//     repstream.replications.signed_from says, per slot, from which WAL
//     position every message is signed: '0/0', or, for a slot registered
//     while an earlier version's trigger emitted them unsigned, where the
//     install that made the key committed (DDLSigning).
//
//   - repstream.ddl_pubkey: the public key (one row, by its fingerprint)
//     of the Ed25519 key a capture --kafka derives from ddl_key to sign
//     anew the messages it writes to a topic (ddlmsg/topicsign.go;
//     PublishTopicKey at the capture's start, which removes the keys of
//     replaced ddl_keys): an apply's source role reads it (TopicKeys) to
//     check the topic's messages without being able to sign any. Only
//     its owner writes it.
//
//   - the event trigger repstream_ddl_types (ALTER TYPE): for an enum or
//     a composite, a message per published table with a column of it,
//     carrying the enum's labels in order ("enum": the target renames a
//     label renamed, target.enumChanged) or the composite's attributes
//     ("composite": the target's type follows, target.compositeChanged).
//
//   - repstream.replications: the slots whose runs use the trigger, with
//     their publications, one row per slot from its first start with the
//     trigger to its drop.
//
// A table that one of those publications publishes and that has no key
// (created later in a FOR TABLES IN SCHEMA schema, or its primary key
// dropped) would make the source refuse its UPDATEs and DELETEs: ddl_end
// gives it REPLICA IDENTITY FULL in the same transaction (and reports that
// ALTER TABLE too), so that the application's writes keep working and the
// table is replicated with FULL identity.
//
// The functions are SECURITY DEFINER (the installing superuser's), so any
// role's DDL is reported; each pins search_path to pg_catalog, pg_temp and
// names repstream's own objects with their schema, and none is executable
// by PUBLIC (the event trigger calls them without that check). The schema
// is created and checked by provision.EnsureSchema: a schema repstream that
// another role owns or may write to is refused, since the trigger runs its
// functions in every DDL of every role. CREATE EVENT TRIGGER needs a
// superuser; without one, or with --ddl=relation, schema changes are
// followed from pgoutput's Relation messages instead (target/ddl.go; the
// engine decides which, engine/ddl.go).
//
// The trigger belongs to every repstream replication of the database:
// `repstream drop` and a failed first start's undo (ReleaseDDL) remove the
// slot's registration, and the trigger, its functions and the schema only
// with the last one.

// ddlTriggerSQL installs (or replaces) the source side of --ddl=true;
// %SCHEMAPUB% is schemaPubSQL on PostgreSQL 15+ (empty before). The
// publications of a table are read from the catalogs directly (not
// pg_publication_tables, which expands every publication's tables).
const ddlTriggerSQL = `
-- The key that signs the messages (ddlmsg/sign.go), made once from the
-- server's strong random source, with the pads of HMAC-SHA256 (the key,
-- zero-padded to 64 bytes, XORed with 0x36 and 0x5c). A materialized
-- view: WAL-logged (a crash keeps it) but never published, not even by a
-- FOR ALL TABLES publication, so the key never travels in a stream. It is
-- never refreshed (that would change the key under running captures).
CREATE MATERIALIZED VIEW IF NOT EXISTS repstream.ddl_key AS
SELECT k.key,
       decode((SELECT string_agg(lpad(to_hex(get_byte(k.key, i) # 54), 2, '0'), '' ORDER BY i) FROM generate_series(0, 31) i) || repeat('36', 32), 'hex') AS ikey,
       decode((SELECT string_agg(lpad(to_hex(get_byte(k.key, i) # 92), 2, '0'), '' ORDER BY i) FROM generate_series(0, 31) i) || repeat('5c', 32), 'hex') AS okey
FROM (SELECT sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')) AS key) k;
REVOKE ALL ON repstream.ddl_key FROM PUBLIC;
-- A database restored from a dump of the source has it unpopulated (its
-- REFRESH, at the dump's end, was refused by the guard below, restored
-- before it): a new key then, the guard held off meanwhile.
DO $do$
BEGIN
  IF NOT (SELECT c.relispopulated FROM pg_catalog.pg_class c WHERE c.oid = 'repstream.ddl_key'::regclass) THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'repstream_ddl_key') THEN
      ALTER EVENT TRIGGER repstream_ddl_key DISABLE;
      REFRESH MATERIALIZED VIEW repstream.ddl_key;
      ALTER EVENT TRIGGER repstream_ddl_key ENABLE ALWAYS;
    ELSE
      REFRESH MATERIALIZED VIEW repstream.ddl_key;
    END IF;
  END IF;
END
$do$;

CREATE OR REPLACE FUNCTION repstream.ddl_key_guard() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- Refused only while a replication of this database has its slot (a
  -- database restored from a dump has none: its REFRESH, at the dump's
  -- end, makes its key).
  IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() e
              WHERE e.classid = 'pg_class'::regclass AND e.objid = pg_catalog.to_regclass('repstream.ddl_key'))
     AND EXISTS (SELECT 1 FROM pg_replication_slots s JOIN repstream.replications g ON g.slot = s.slot_name
                  WHERE s.database = current_database()) THEN
    RAISE EXCEPTION 'repstream.ddl_key holds the key that signs repstream''s schema-change messages: a REFRESH would change it under the running captures'
      USING HINT = 'Leave repstream.ddl_key out of REFRESH MATERIALIZED VIEW.';
  END IF;
END
$fn$;

-- ALTER TYPE of an enum (RENAME VALUE, ADD VALUE) or of a composite
-- (ADD, DROP, RENAME or retype an attribute): the enum's labels, or the
-- composite's attributes, as they are now, in a message per published
-- table with a column of it (or an array of it). A renamed label changes
-- every row that holds it, which the stream never shows: the target
-- renames its own. A composite's values travel as text by position: the
-- target's type must be the source's before the next row.
CREATE OR REPLACE FUNCTION repstream.ddl_types() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
  c record;
  d jsonb;
  o jsonb;
  x bigint;
  change jsonb;
BEGIN
  FOR r IN SELECT DISTINCT t.oid AS typoid, t.typarray, n.nspname, t.typname, t.typtype, t.typrelid
             FROM pg_event_trigger_ddl_commands() e
             JOIN pg_type t ON t.oid = e.objid AND e.classid = 'pg_type'::regclass AND t.typtype = 'e'
                            OR t.typrelid = e.objid AND e.classid = 'pg_class'::regclass AND t.typtype = 'c'
             JOIN pg_namespace n ON n.oid = t.typnamespace
  LOOP
    IF r.typtype = 'e' THEN
      SELECT jsonb_build_object('enum', jsonb_build_object('schema', r.nspname, 'name', r.typname,
               'labels', jsonb_agg(l.enumlabel ORDER BY l.enumsortorder)))
        INTO change FROM pg_enum l WHERE l.enumtypid = r.typoid;
    ELSE
      SELECT jsonb_build_object('composite', jsonb_build_object('schema', r.nspname, 'name', r.typname,
               'attrs', COALESCE(jsonb_agg(jsonb_build_object('name', a.attname, 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum), '[]'::jsonb)))
        INTO change FROM pg_attribute a WHERE a.attrelid = r.typrelid AND a.attnum > 0 AND NOT a.attisdropped;
    END IF;
    FOR c IN SELECT DISTINCT a.attrelid AS relid FROM pg_attribute a JOIN pg_class k ON k.oid = a.attrelid
              WHERE a.atttypid IN (r.typoid, r.typarray) AND a.attnum > 0 AND NOT a.attisdropped
                AND k.relkind IN ('r', 'p') AND k.relpersistence = 'p' AND k.relnamespace <> 'repstream'::regnamespace
    LOOP
      BEGIN
        d := repstream.ddl_def(c.relid);
        IF jsonb_array_length(d->'pubs') > 0 THEN
          o := NULL;
          x := NULL;
          UPDATE repstream.ddl_state s SET def = s.def WHERE s.relid = c.relid RETURNING s.def, s.xmin::text::bigint INTO o, x;
          PERFORM repstream.ddl_emit((d || jsonb_build_object('tag', 'ALTER TYPE', 'old', o, 'xid', x) || change)::text);
        END IF;
      EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'repstream: cannot report the change of type % to the targets of table %: %', r.typname, c.relid::regclass, SQLERRM;
      END;
    END LOOP;
  END LOOP;
  PERFORM pg_logical_emit_message(false, 'repstream.ddl.sep', '');
END
$fn$;

-- Emits a schema-change message, signed (ddlmsg/sign.go): the hex
-- HMAC-SHA256 of "<top-level xid>:<content>" (content's bytes in the
-- database encoding, as the message carries them), then content.
CREATE OR REPLACE FUNCTION repstream.ddl_emit(content text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  k record;
BEGIN
  IF NOT (SELECT c.relispopulated FROM pg_class c WHERE c.oid = 'repstream.ddl_key'::regclass) THEN
    -- A database restored from a dump of the source: no replication
    -- runs from it before a repstream start makes the key. Its DDL must
    -- never fail for that.
    RAISE WARNING 'repstream: this database has no key to sign schema-change messages with (restored from a dump?): this change is not reported; a repstream start here makes one';
    RETURN;
  END IF;
  SELECT s.ikey, s.okey INTO k FROM repstream.ddl_key s;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'repstream: the key that signs schema-change messages (repstream.ddl_key) is empty';
  END IF;
  PERFORM pg_logical_emit_message(true, 'repstream.ddl',
    encode(sha256(k.okey || sha256(k.ikey || convert_to((txid_current() % 4294967296)::text || ':' || content, getdatabaseencoding()))), 'hex')
    || content);
END
$fn$;

CREATE UNLOGGED TABLE IF NOT EXISTS repstream.ddl_state (relid oid PRIMARY KEY, def jsonb NOT NULL);
-- The tables repstream's own functions alter (partition_refresh): rows
-- written and removed in the altering transaction, so never seen by
-- another; the triggers pass over these tables' commands.
CREATE UNLOGGED TABLE IF NOT EXISTS repstream.self_ddl (relid oid PRIMARY KEY);
-- The tables whose replica identity repstream made FULL when they had no
-- primary key (ddl_end): given one again, they go back to DEFAULT. A
-- crash empties it; such a table then stays FULL, as before this list.
CREATE UNLOGGED TABLE IF NOT EXISTS repstream.ident_full (relid oid PRIMARY KEY);

-- The publications that publish a table (NULL: no such table). A
-- partition is published on its own by a publication through the root
-- (publish_via_partition_root) only when none of its ancestors is in it:
-- then it is the topmost published ancestor of its leaves, whose rows go
-- out under its name (a mid-level partitioned table).
CREATE OR REPLACE FUNCTION repstream.ddl_pubs(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
SELECT COALESCE((SELECT jsonb_agg(p.pubname) FROM pg_publication p
                  WHERE (p.puballtables
                         OR EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = c.oid)
                         %SCHEMAPUB%)
                    AND NOT (p.pubviaroot AND c.relispartition AND EXISTS (
                         SELECT 1 FROM pg_partition_ancestors(rel) x JOIN pg_class c ON c.oid = x.relid
                          WHERE x.relid <> rel
                            AND (p.puballtables
                                 OR EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = c.oid)
                                 %SCHEMAPUB%)))), '[]'::jsonb)
FROM pg_class c WHERE c.oid = rel
$fn$;

-- The text of defaults and of the values existing rows got (missing) is
-- written in the forms the target reads back whatever its settings
-- (ISO dates, not the session's DateStyle; exact floats).
--
-- leaves: for a partitioned table, also what only a walk of its whole
-- tree tells, each leaf read: filenodes, and the values its leaves' rows
-- got at ADD COLUMN (missing). Without it (partition_msg, for a TRUNCATE
-- PARTITION: the apply reads neither) filenodes is null and no column has
-- a missing value: the definition then costs the same whatever the
-- number of leaves, and a TRUNCATE of a root, which describes the root
-- once per leaf, stays linear in the leaves.
CREATE OR REPLACE FUNCTION repstream.ddl_def(rel oid, leaves boolean) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET DateStyle = 'ISO, YMD' SET IntervalStyle = postgres SET extra_float_digits = 3 SET bytea_output = hex AS $fn$
SELECT jsonb_build_object(
  'oid', c.oid::bigint, 'schema', n.nspname, 'name', c.relname, 'kind', c.relkind::text, 'ident', c.relreplident::text,
  'pubs', repstream.ddl_pubs(c.oid),
  'pubrels', COALESCE((SELECT jsonb_object_agg(p.pubname, r.oid::bigint) FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
                        WHERE r.prrelid = c.oid), '{}'::jsonb),
  'collists', %COLLISTS%,
  'pkey', COALESCE((SELECT jsonb_agg(a.attname ORDER BY k.ord)
                      FROM pg_index i
                      CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                     WHERE i.indrelid = c.oid AND i.indisprimary AND k.ord <= i.indnkeyatts), '[]'::jsonb),
  'pkeyinclude', COALESCE((SELECT jsonb_agg(a.attname ORDER BY k.ord)
                      FROM pg_index i
                      CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                     WHERE i.indrelid = c.oid AND i.indisprimary AND k.ord > i.indnkeyatts), '[]'::jsonb),
  -- (each relfilenode looked up by oid: a join with pg_class would scan
  -- it whole, for a table or a leaf as for a root of many leaves)
  'filenodes', CASE WHEN leaves OR c.relkind <> 'p' THEN
                (SELECT md5(string_agg((SELECT l.relfilenode FROM pg_class l WHERE l.oid = t.relid)::text, ',' ORDER BY t.relid))
                   FROM (SELECT x.relid FROM pg_partition_tree(c.oid) x WHERE x.isleaf UNION SELECT c.oid WHERE c.relkind = 'r') t) END,
  'pkeydeferrable', COALESCE((SELECT CASE WHEN con.condeferred THEN 'DEFERRABLE INITIALLY DEFERRED' WHEN con.condeferrable THEN 'DEFERRABLE' ELSE '' END
                      FROM pg_constraint con WHERE con.conrelid = c.oid AND con.contype = 'p'), ''),
  'columns', COALESCE((SELECT jsonb_agg(jsonb_build_object(
      'num', a.attnum, 'name', a.attname,
      'type', format_type(a.atttypid, a.atttypmod), 'typeoid', a.atttypid::bigint, 'typmod', a.atttypmod,
      'notnull', a.attnotnull,
      'default', CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END,
      'generated', CASE WHEN a.attgenerated <> '' THEN pg_get_expr(d.adbin, d.adrelid) END,
      'identity', a.attidentity::text,
      'hasmissing', a.atthasmissing OR COALESCE(lm.has, false),
      'missing', CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] ELSE lm.val END,
      'seq', (SELECT s.oid::regclass::text FROM pg_depend dep JOIN pg_class s ON s.oid = dep.objid
               WHERE dep.classid = 'pg_class'::regclass AND dep.refclassid = 'pg_class'::regclass
                 AND dep.refobjid = c.oid AND dep.refobjsubid = a.attnum AND dep.deptype = 'a' AND s.relkind = 'S'
               LIMIT 1)
    ) ORDER BY a.attnum)
    FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    -- A partitioned table has no rows of its own: the value its leaves'
    -- rows got when the column was added is on the leaves.
    LEFT JOIN LATERAL (SELECT true AS has, (la.attmissingval::text::text[])[1] AS val
                         FROM pg_partition_tree(c.oid) t
                         JOIN pg_attribute la ON la.attrelid = t.relid AND la.attname = a.attname AND NOT la.attisdropped
                        WHERE c.relkind = 'p' AND leaves AND t.isleaf AND la.atthasmissing LIMIT 1) lm ON true
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'::jsonb))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = rel
$fn$;

CREATE OR REPLACE FUNCTION repstream.ddl_def(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
SELECT repstream.ddl_def(rel, true)
$fn$;

CREATE OR REPLACE FUNCTION repstream.ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
  d jsonb;
  o jsonb;
  x bigint;
  lf oid;
BEGIN
  -- The tables a command changed; for ALTER SCHEMA (RENAME), every
  -- table of the schema: pgoutput does not describe them again under
  -- their new names, and each message moves one on the target. For
  -- ALTER PUBLICATION, the tables it adds (one by one, or a schema's):
  -- their message's publications then name it, and a run of it copies
  -- the table (their rows before never were in the stream). An ALTER
  -- TABLE of a parent changes its children too (a column added, renamed,
  -- retyped or dropped), which the command does not list: each child is
  -- described after its parents; a partition only when it is published
  -- on its own (a mid-level table or a leaf under a root left out of
  -- the publication: the target's root, if it has it, is altered first).
  FOR r IN WITH RECURSIVE named AS (
             SELECT DISTINCT c.oid AS objid, e.command_tag
               FROM pg_event_trigger_ddl_commands() e
               JOIN pg_class c ON c.oid = e.objid AND e.classid = 'pg_class'::regclass
                               OR c.relnamespace = e.objid AND e.classid = 'pg_namespace'::regclass
                               OR e.classid = 'pg_publication_rel'::regclass
                                  AND c.oid = (SELECT pr.prrelid FROM pg_publication_rel pr WHERE pr.oid = e.objid)
                               %PUBSCHEMA%
           ), tree AS (
             SELECT named.objid, named.command_tag, 0 AS depth FROM named
             UNION
             SELECT i.inhrelid, tree.command_tag, tree.depth + 1
               FROM tree JOIN pg_inherits i ON i.inhparent = tree.objid
              WHERE tree.command_tag = 'ALTER TABLE'
           )
           SELECT c.oid AS objid, tree.command_tag, min(tree.depth) AS depth
             FROM tree JOIN pg_class c ON c.oid = tree.objid
            WHERE c.relkind IN ('r', 'p') AND c.relnamespace <> 'repstream'::regnamespace
              AND NOT EXISTS (SELECT 1 FROM repstream.self_ddl x WHERE x.relid = c.oid)
              AND (c.relpersistence = 'p'
                   OR c.relpersistence = 'u' AND (EXISTS (SELECT 1 FROM repstream.ddl_state s WHERE s.relid = c.oid)
                                                  -- SET UNLOGGED of a published table whose description a crash
                                                  -- of the source took (ddl_state is unlogged too)
                                                  OR tree.command_tag = 'ALTER TABLE' AND jsonb_array_length(repstream.ddl_pubs(c.oid)) > 0))
            GROUP BY c.oid, c.relispartition, tree.command_tag
           HAVING min(tree.depth) = 0 OR NOT c.relispartition OR jsonb_array_length(repstream.ddl_pubs(c.oid)) > 0
            ORDER BY max(tree.depth), c.oid
  LOOP
    -- A table described before that is now UNLOGGED (SET UNLOGGED): its
    -- changes are no longer in the WAL, and no replication can carry
    -- them. Every repstream that replicates it stops at this message.
    IF (SELECT c.relpersistence FROM pg_class c WHERE c.oid = r.objid) = 'u' THEN
      -- The written row's xmin is this (sub)transaction's xid (as below).
      -- Without a description (the source crashed since: ddl_state is
      -- unlogged), the table's as it is now.
      SELECT s.def INTO o FROM repstream.ddl_state s WHERE s.relid = r.objid;
      o := COALESCE(o, repstream.ddl_def(r.objid));
      INSERT INTO repstream.ddl_state AS s VALUES (r.objid, o)
        ON CONFLICT (relid) DO UPDATE SET def = s.def
        RETURNING s.xmin::text::bigint INTO x;
      DELETE FROM repstream.ddl_state s WHERE s.relid = r.objid;
      PERFORM repstream.ddl_emit((o || jsonb_build_object(
        'tag', r.command_tag, 'unlogged', true, 'old', o, 'xid', x))::text);
      CONTINUE;
    END IF;
    BEGIN
      d := repstream.ddl_def(r.objid);
      SELECT s.def INTO o FROM repstream.ddl_state s WHERE s.relid = r.objid;
      -- The row's xmin is this (sub)transaction's xid, the one decoding
      -- files the message under (its STREAM ABORT names it).
      INSERT INTO repstream.ddl_state AS s VALUES (r.objid, d)
        ON CONFLICT (relid) DO UPDATE SET def = EXCLUDED.def
        RETURNING s.xmin::text::bigint INTO x;
      -- castonly: the query's text shows an ALTER without USING, so a
      -- type it changed was converted by the plain cast.
      PERFORM repstream.ddl_emit(
        (d || jsonb_build_object('tag', r.command_tag, 'old', o, 'xid', x,
                                 -- (only an ALTER TABLE's: the text of a migration sent as one
                                 -- query is long, and read once per table of each statement)
                                 'castonly', r.command_tag = 'ALTER TABLE' AND coalesce(current_query() ~* 'alter' AND current_query() !~* 'using', false),
                                 -- what the command's casts read (ddlmsg.SessionSettings)
                                 'session', jsonb_build_object('TimeZone', current_setting('TimeZone'), 'DateStyle', current_setting('DateStyle'),
                                   'IntervalStyle', current_setting('IntervalStyle'), 'extra_float_digits', current_setting('extra_float_digits'),
                                   'bytea_output', current_setting('bytea_output'), 'lc_monetary', current_setting('lc_monetary'))))::text);
      -- A table without a key that a repstream publication publishes
      -- (a table created later in a FOR TABLES IN SCHEMA schema, or one
      -- whose primary key was dropped) would make the source refuse its
      -- UPDATEs and DELETEs: the application's writes must never break.
      -- It gets REPLICA IDENTITY FULL (its own ALTER TABLE, which this
      -- trigger reports next). So do a partitioned table's keyless
      -- partitions, which the source asks for one (a partition published
      -- itself or through an ancestor).
      IF d->>'kind' IN ('r', 'p') AND d->>'ident' = 'd' AND jsonb_array_length(d->'pkey') = 0
         AND EXISTS (SELECT 1 FROM repstream.replications g JOIN pg_publication p ON p.pubname = g.publication
                      WHERE (p.pubupdate OR p.pubdelete)
                        AND (d->'pubs' ? g.publication
                             OR EXISTS (SELECT 1 FROM pg_partition_ancestors(r.objid) a WHERE repstream.ddl_pubs(a.relid) ? g.publication))) THEN
        FOR lf IN SELECT r.objid
                  UNION
                  SELECT t.relid FROM pg_partition_tree(r.objid) t JOIN pg_class k ON k.oid = t.relid
                   WHERE k.relreplident = 'd' AND k.relkind IN ('r', 'p')
                     AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = t.relid AND i.indisprimary)
        LOOP
          EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', lf::regclass);
          INSERT INTO repstream.ident_full VALUES (lf) ON CONFLICT DO NOTHING;
          RAISE NOTICE 'repstream: table % has no primary key and is published: its replica identity is now FULL, so that its UPDATEs and DELETEs keep working and are replicated', lf::regclass;
        END LOOP;
      ELSIF r.depth = 0 AND r.command_tag = 'ALTER TABLE' AND current_query() ~* 'replica\s+identity' THEN
        -- The user chose the table's replica identity: it stays theirs
        -- (the command's own table: a child's is not the command's).
        DELETE FROM repstream.ident_full f WHERE f.relid = r.objid;
      ELSIF d->>'ident' = 'f' AND jsonb_array_length(d->'pkey') > 0
            AND EXISTS (SELECT 1 FROM repstream.ident_full f WHERE f.relid = r.objid) THEN
        -- FULL was repstream's stopgap for a table without a key. Kept
        -- once it has one again, every UPDATE would log and match whole
        -- rows, and one of a publication with a column list (which FULL
        -- is never covered by) would fail: the identity is the key again.
        DELETE FROM repstream.ident_full f WHERE f.relid = r.objid;
        EXECUTE format('ALTER TABLE %s REPLICA IDENTITY DEFAULT', r.objid::regclass);
        RAISE NOTICE 'repstream: table % has a primary key again: its replica identity, which repstream made FULL when it had none, is DEFAULT again', r.objid::regclass;
      ELSIF d->>'ident' <> 'f' THEN
        DELETE FROM repstream.ident_full f WHERE f.relid = r.objid;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      -- Never fail the user's DDL; make every repstream stop at it instead.
      RAISE WARNING 'repstream: cannot describe table %: %', r.objid::regclass, SQLERRM;
      PERFORM repstream.ddl_emit(jsonb_build_object(
        'tag', r.command_tag, 'oid', r.objid::bigint, 'schema', '?', 'name', r.objid::regclass::text,
        'error', SQLERRM, 'pubs', (SELECT COALESCE(jsonb_agg(pubname), '[]'::jsonb) FROM pg_publication))::text);
    END;
  END LOOP;
  -- ALTER PUBLICATION ... DROP TABLE (SET TABLE, DROP TABLES IN SCHEMA)
  -- takes tables out: their recorded publications must say so, or their
  -- return to the publication would not be seen as an entry (the changes
  -- they had outside were never in the stream: each target copies them
  -- anew when they enter).
  IF TG_TAG = 'ALTER PUBLICATION' THEN
    BEGIN
      UPDATE repstream.ddl_state s SET def = jsonb_set(s.def, '{pubs}', n.pubs)
        FROM (SELECT s2.relid, repstream.ddl_pubs(s2.relid) AS pubs FROM repstream.ddl_state s2) n
       WHERE n.relid = s.relid AND jsonb_typeof(s.def->'pubs') = 'array' AND n.pubs IS NOT NULL
         AND NOT (n.pubs @> (s.def->'pubs'));
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'repstream: cannot record the tables this ALTER PUBLICATION took out (adding one back will not copy it anew): %', SQLERRM;
    END;
    -- A replication's publication that leaves out a kind of change (SET
    -- (publish = ...)): the changes it leaves out from here on never
    -- reach the stream, even if it is set back before anyone looks. A
    -- message per table it publishes, naming it in 'partial': each run
    -- records the table for a new copy, made once it publishes
    -- everything again (or, if it is left so, the run stops).
    BEGIN
      FOR r IN SELECT DISTINCT c.oid AS objid, p.pubname
                 FROM repstream.replications g
                 JOIN pg_publication p ON p.pubname = g.publication
                 JOIN pg_publication_tables pt ON pt.pubname = p.pubname
                 JOIN pg_namespace n ON n.nspname = pt.schemaname
                 JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
                WHERE NOT (p.pubinsert AND p.pubupdate AND p.pubdelete AND p.pubtruncate) AND n.nspname <> 'repstream'
      LOOP
        d := repstream.ddl_def(r.objid);
        SELECT s.def INTO o FROM repstream.ddl_state s WHERE s.relid = r.objid;
        INSERT INTO repstream.ddl_state AS s VALUES (r.objid, d)
          ON CONFLICT (relid) DO UPDATE SET def = EXCLUDED.def
          RETURNING s.xmin::text::bigint INTO x;
        PERFORM repstream.ddl_emit(
          (d || jsonb_build_object('tag', TG_TAG, 'old', o, 'xid', x, 'partial', jsonb_build_array(r.pubname)))::text);
      END LOOP;
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'repstream: cannot report that this ALTER PUBLICATION leaves changes out (the runs stop at their next look at it): %', SQLERRM;
    END;
  END IF;
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
  allpubs jsonb;
  schemapubs jsonb := '{}'::jsonb;
  x bigint;
BEGIN
  -- The publications of every table, and those of each schema (looked up
  -- once per schema): a DROP of a partitioned table drops each of its
  -- leaves, each a message.
  SELECT COALESCE(jsonb_agg(p.pubname), '[]'::jsonb) INTO allpubs FROM pg_publication p WHERE p.puballtables;
  FOR r IN SELECT * FROM pg_event_trigger_dropped_objects()
            WHERE object_type = 'table' AND NOT is_temporary AND schema_name <> 'repstream'
  LOOP
    -- The definition last recorded (a JSON null if none), and this
    -- (sub)transaction's xid as the written row's xmin (see ddl_end).
    INSERT INTO repstream.ddl_state AS s VALUES (r.objid, 'null'::jsonb)
      ON CONFLICT (relid) DO UPDATE SET def = s.def
      RETURNING s.def, s.xmin::text::bigint INTO o, x;
    DELETE FROM repstream.ddl_state s WHERE s.relid = r.objid;
    -- The table's publications as last recorded, and those that publish
    -- its whole schema or every table.
    pubs := COALESCE(o->'pubs', '[]'::jsonb) || allpubs;
    IF NOT schemapubs ? r.schema_name THEN
      more := '[]'::jsonb;
      IF current_setting('server_version_num')::int >= 150000 THEN
        EXECUTE 'SELECT COALESCE(jsonb_agg(p.pubname), ''[]''::jsonb) FROM pg_catalog.pg_publication p
                   JOIN pg_catalog.pg_publication_namespace pn ON pn.pnpubid = p.oid
                   JOIN pg_catalog.pg_namespace n ON n.oid = pn.pnnspid WHERE n.nspname = $1'
          INTO more USING r.schema_name;
      END IF;
      schemapubs := schemapubs || jsonb_build_object(r.schema_name, more);
    END IF;
    pubs := pubs || (schemapubs -> r.schema_name);
    PERFORM repstream.ddl_emit(jsonb_build_object(
      'tag', 'DROP TABLE', 'dropped', true, 'oid', r.objid::bigint, 'xid', x,
      'schema', r.schema_name, 'name', r.object_name, 'pubs', pubs)::text);
  END LOOP;
  PERFORM pg_logical_emit_message(false, 'repstream.ddl.sep', '');
END
$fn$;

%EVENTTRIGGERS%

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

// colListsSQL: the column list of each publication whose entry for the
// table has one, by column name (PostgreSQL 15+; ddl_def's "collists").
const colListsSQL = `COALESCE((SELECT jsonb_object_agg(p.pubname, (SELECT jsonb_agg(la.attname ORDER BY la.attnum) FROM pg_attribute la
                                                                WHERE la.attrelid = r.prrelid AND la.attnum = ANY (r.prattrs)))
                        FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
                        WHERE r.prrelid = c.oid AND r.prattrs IS NOT NULL), '{}'::jsonb)`

// pubSchemaSQL: the tables of a schema ALTER PUBLICATION ... ADD TABLES IN
// SCHEMA adds (PostgreSQL 15+).
const pubSchemaSQL = `OR e.classid = 'pg_publication_namespace'::regclass
                                AND c.relnamespace = (SELECT pn.pnnspid FROM pg_publication_namespace pn WHERE pn.oid = e.objid)`

// registrySQL creates repstream.replications on the source. A database
// that is the target of another replication as well (a cascade: A -> B
// -> C) has the table already, as the target's registry makes it
// (target/progress.go: without publication): the columns are added, and
// its rows name slots of both roles (a source's are slots of this
// database).
const registrySQL = `
CREATE TABLE IF NOT EXISTS repstream.replications (
  slot text PRIMARY KEY,
  publication text NOT NULL DEFAULT '',
  registered_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS publication text NOT NULL DEFAULT '';
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS signed_from pg_lsn;
-- The public keys that check the schema-change messages a capture signs
-- anew for a Kafka topic (ddlmsg/topicsign.go): written by the captures
-- (PublishTopicKey), read by the applies, whose source roles may be given
-- SELECT on it (not on ddl_key: what reads that key can sign).
CREATE TABLE IF NOT EXISTS repstream.ddl_pubkey (
  fingerprint text PRIMARY KEY,
  key bytea NOT NULL,
  published_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON repstream.ddl_pubkey FROM PUBLIC;`

// dropDDLTriggerSQL removes what ddlTriggerSQL and registrySQL install.
const dropDDLTriggerSQL = dropPartitionsSQL + `
DROP EVENT TRIGGER IF EXISTS repstream_ddl;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_drop;
DROP FUNCTION IF EXISTS repstream.ddl_end();
DROP FUNCTION IF EXISTS repstream.ddl_drop();
DROP FUNCTION IF EXISTS repstream.ddl_def(oid);
DROP FUNCTION IF EXISTS repstream.ddl_def(oid, boolean);
DROP FUNCTION IF EXISTS repstream.ddl_pubs(oid);
DROP EVENT TRIGGER IF EXISTS repstream_ddl_key;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_types;
DROP FUNCTION IF EXISTS repstream.ddl_types();
DROP FUNCTION IF EXISTS repstream.ddl_key_guard();
DROP FUNCTION IF EXISTS repstream.ddl_emit(text);
DROP MATERIALIZED VIEW IF EXISTS repstream.ddl_key;
DROP TABLE IF EXISTS repstream.ddl_state;
DROP TABLE IF EXISTS repstream.self_ddl;
DROP TABLE IF EXISTS repstream.ident_full;
DROP TABLE IF EXISTS repstream.ddl_pubkey;
`

// dropEventTriggersSQL removes repstream's event triggers (their functions
// and tables stay: dropDDLTriggerSQL).
const dropEventTriggersSQL = `
DROP EVENT TRIGGER IF EXISTS repstream_ddl;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_drop;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_key;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_types;
DROP EVENT TRIGGER IF EXISTS repstream_ddl_partitions;
`

// olderWait bounds how long ReleaseDDL waits for the transactions that
// began before it removed the event triggers (waitOlderTransactions).
const olderWait = 30 * time.Second

// waitOlderTransactions waits, at most max, for the transactions of the
// source's database that began before the call to end, and returns those
// still open then (pid, user, application, state, start), or nil.
//
// Why: a backend reads the event triggers into its cache, and sees their
// removal only when it next takes a lock it does not hold yet. So a
// statement that began before ReleaseDDL removed repstream's event
// triggers still fires them when it ends (an application's long ALTER
// TABLE), and fails ("cache lookup failed for function", "relation
// repstream.self_ddl does not exist") if their functions and tables are
// gone. A transaction that begins later reads the catalog anew. Not
// waited for: autovacuum and walsenders (they fire no event trigger), and
// prepared transactions (they run no statement any more).
func waitOlderTransactions(ctx context.Context, src *pgx.Conn, max time.Duration, log *slog.Logger) ([]string, error) {
	var pids []int32
	var starts []time.Time
	rows, err := src.Query(ctx, `SELECT a.pid, a.xact_start FROM pg_catalog.pg_stat_activity a
WHERE a.datname = pg_catalog.current_database() AND a.pid <> pg_catalog.pg_backend_pid()
  AND a.xact_start < pg_catalog.clock_timestamp() AND a.backend_type NOT IN ('autovacuum worker', 'walsender')`)
	if err != nil {
		return nil, fmt.Errorf("look up the source's open transactions: %w", err)
	}
	for rows.Next() {
		var pid int32
		var start time.Time
		if err := rows.Scan(&pid, &start); err != nil {
			rows.Close()
			return nil, fmt.Errorf("look up the source's open transactions: %w", err)
		}
		pids, starts = append(pids, pid), append(starts, start)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up the source's open transactions: %w", err)
	}
	if len(pids) == 0 {
		return nil, nil
	}
	deadline := time.Now().Add(max)
	said := false
	for {
		var open []string
		err := src.QueryRow(ctx, `SELECT COALESCE(array_agg(pg_catalog.format('backend pid %s (user %s, application %L, %s; its transaction began at %s)',
    a.pid, a.usename, a.application_name, a.state, date_trunc('second', a.xact_start)) ORDER BY a.pid), '{}')
FROM pg_catalog.pg_stat_activity a JOIN unnest($1::int4[], $2::timestamptz[]) o(pid, xact_start) ON a.pid = o.pid AND a.xact_start = o.xact_start`,
			pids, starts).Scan(&open)
		if err != nil {
			return nil, fmt.Errorf("look up the source's open transactions: %w", err)
		}
		if len(open) == 0 || !time.Now().Before(deadline) {
			return open, nil
		}
		if !said {
			log.Info("repstream's event triggers are removed; waiting for the transactions that began before to end before removing their functions", "transactions", open, "at_most", max)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropRegistrySQL drops repstream.replications once no row is left: a
// database that is the target of another replication as well keeps it
// (its registry's rows, registrySQL), whose start may have made it first.
const dropRegistrySQL = `DO $drop$
BEGIN
  IF pg_catalog.to_regclass('repstream.replications') IS NOT NULL THEN
    IF NOT EXISTS (SELECT FROM repstream.replications) THEN
      DROP TABLE repstream.replications;
    END IF;
  END IF;
END
$drop$`

// SourceRole reads what the event trigger needs of the source: whether
// its role is a superuser (CREATE EVENT TRIGGER), and its
// server_version_num (logical messages: PostgreSQL 14).
func SourceRole(ctx context.Context, src *pgx.Conn) (super bool, version int, err error) {
	if err := src.QueryRow(ctx, "SELECT rolsuper, current_setting('server_version_num')::int FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super, &version); err != nil {
		return false, 0, fmt.Errorf("--ddl: look up the source role: %w", err)
	}
	return super, version, nil
}

// InstallDDL installs (or replaces) the event trigger, with the
// partitions' triggers (partitions.go), on a source of version (a
// server_version_num, 14 or later) and registers slot, publishing pub, as
// one of its users.
func InstallDDL(ctx context.Context, src *pgx.Conn, version int, slot, pub string) error {
	triggers := ensureEventTrigger(ddlEndTrigger) + ensureEventTrigger(ddlDropTrigger) + ensureEventTrigger(ddlKeyTrigger) + ensureEventTrigger(ddlTypesTrigger)
	install := strings.NewReplacer("%SCHEMAPUB%", "", "%PUBSCHEMA%", "", "%COLLISTS%", "'{}'::jsonb", "%EVENTTRIGGERS%", triggers).Replace(ddlTriggerSQL)
	if version >= 150000 {
		install = strings.NewReplacer("%SCHEMAPUB%", schemaPubSQL, "%PUBSCHEMA%", pubSchemaSQL, "%COLLISTS%", colListsSQL, "%EVENTTRIGGERS%", triggers).Replace(ddlTriggerSQL)
	}
	install += partitionsInstallSQL(version)
	var err error
	for attempt, pause := 1, time.Second; ; attempt, pause = attempt+1, 2*pause {
		err = installDDL(ctx, src, install, slot, pub)
		if !pgerr.Is(err, pgerr.LockNotAvailable) || attempt == installAttempts {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	if pgerr.Is(err, pgerr.LockNotAvailable) {
		return fmt.Errorf("--ddl: install the event trigger on the source: a table's lock was not had within %s, %d times: a transaction on the source holds it "+
			"(pg_locks, pg_stat_activity; a prepared one: pg_prepared_xacts): repstream waits no longer, so as not to hold the application's writes up behind it: "+
			"start again once it is over: %w", installLockTimeout, installAttempts, err)
	}
	if err != nil {
		return fmt.Errorf("--ddl: install the event trigger on the source: %w", err)
	}
	return nil
}

// installLockTimeout bounds each wait of the install for a lock on a
// table (the TRUNCATE triggers of partitions, a row of ddl_state a
// prepared transaction holds): a wait in the lock queue holds every later
// write of the application to that table up behind it. installAttempts
// tries are made, a second, two, four... apart.
const (
	installLockTimeout = "2s"
	installAttempts    = 4
)

// installDDL installs (or replaces) the event trigger and registers slot as
// one of its users, in one transaction under provision.Lock. A trigger
// installed before the registry existed may serve other slots already: the
// registry is then seeded with every pgoutput slot of the database, so that
// none loses the trigger to another's drop.
func installDDL(ctx context.Context, src *pgx.Conn, install, slot, pub string) error {
	tx, err := src.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := provision.Lock(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+installLockTimeout+"'"); err != nil {
		return err
	}
	if _, err := provision.EnsureSchema(ctx, tx, "source"); err != nil {
		return err
	}
	var hadTrigger, hadRegistry, hadKey bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'repstream_ddl'),
       pg_catalog.to_regclass('repstream.replications') IS NOT NULL,
       pg_catalog.to_regclass('repstream.ddl_key') IS NOT NULL`).Scan(&hadTrigger, &hadRegistry, &hadKey); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, install); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, registrySQL); err != nil {
		return err
	}
	if hadTrigger && !hadRegistry {
		if _, err := tx.Exec(ctx, `INSERT INTO repstream.replications (slot)
SELECT slot_name FROM pg_catalog.pg_replication_slots WHERE database = pg_catalog.current_database() AND plugin = 'pgoutput'
ON CONFLICT (slot) DO NOTHING`); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO repstream.replications (slot, publication) VALUES ($1, $2)
ON CONFLICT (slot) DO UPDATE SET publication = EXCLUDED.publication`, slot, pub); err != nil {
		return err
	}
	if err := provision.RevokeFunctions(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	// From where each registered slot's messages are all signed: from
	// the start, unless the trigger emitted unsigned ones until this
	// install (an earlier version's): from here, read after the commit
	// that replaced its functions.
	from := "'0/0'::pg_lsn"
	if hadTrigger && !hadKey {
		from = "pg_catalog.pg_current_wal_insert_lsn()"
	}
	if _, err := src.Exec(ctx, "UPDATE repstream.replications SET signed_from = "+from+" WHERE signed_from IS NULL"); err != nil {
		return fmt.Errorf("record from where schema-change messages are signed: %w", err)
	}
	return nil
}

// DDLSigning reads the key that signs the event trigger's messages, and
// the WAL position from which slot's messages are all signed (before it,
// an earlier version's trigger emitted them unsigned).
func DDLSigning(ctx context.Context, src *pgx.Conn, slot string) (key []byte, signedFrom change.LSN, err error) {
	var from *string
	err = src.QueryRow(ctx, `SELECT k.key, (SELECT r.signed_from::text FROM repstream.replications r WHERE r.slot = $1) FROM repstream.ddl_key k`, slot).Scan(&key, &from)
	if err != nil {
		return nil, 0, fmt.Errorf("--ddl: read the key that signs schema-change messages (repstream.ddl_key) on the source: %w", err)
	}
	if len(key) != ddlmsg.KeyLen {
		return nil, 0, fmt.Errorf("--ddl: the key that signs schema-change messages (repstream.ddl_key) on the source has %d bytes, not %d", len(key), ddlmsg.KeyLen)
	}
	if from != nil {
		if signedFrom, err = change.ParseLSN(*from); err != nil {
			return nil, 0, err
		}
	}
	return key, signedFrom, nil
}

// DDLSignedFrom reads the WAL position from which slot's messages are
// all signed (DDLSigning), without the key: an apply's source role need
// not read it.
func DDLSignedFrom(ctx context.Context, src *pgx.Conn, slot string) (change.LSN, error) {
	var from *string
	if err := src.QueryRow(ctx, `SELECT r.signed_from::text FROM repstream.replications r WHERE r.slot = $1`, slot).Scan(&from); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("--ddl: read from where schema-change messages are signed (repstream.replications) on the source: %w", err)
	}
	if from == nil {
		return 0, nil
	}
	return change.ParseLSN(*from)
}

// PublishTopicKey records on the source the public key that checks the
// schema-change messages a capture signs for a Kafka topic
// (ddlmsg.TopicKey of the source's ddl_key), if it is not there yet, and
// removes every other key, in one transaction; it returns the
// fingerprints it removed.
//
// The table holds the key of the database's ddl_key alone, so that a key
// replaced signs nothing an apply takes from the next capture's start on
// (what an apply trusts is what the source publishes: an epoch marker
// naming a key would not do, any topic writer can write one). Every
// capture of the database signs with the same key (one ddl_key), and a
// key is replaced only while no slot of the database's replications
// exists (the guard repstream_ddl_key refuses a REFRESH otherwise; a
// database restored from a dump has its own key and the rows of the
// dumped one, whose topics its captures and applies refuse:
// kafkalog.Epoch.SameSource), or by a superuser who turned the guard
// off: then an apply still reading records signed with the old key
// stops at the first, and is re-seeded (its messages cannot be told from
// forged ones).
func PublishTopicKey(ctx context.Context, src *pgx.Conn, pub ed25519.PublicKey) (removed []string, err error) {
	fp := ddlmsg.KeyFingerprint(pub)
	err = pgx.BeginFunc(ctx, src, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM repstream.ddl_pubkey WHERE fingerprint <> $1 RETURNING fingerprint`, fp)
		if err != nil {
			return err
		}
		if removed, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO repstream.ddl_pubkey (fingerprint, key) VALUES ($1, $2) ON CONFLICT (fingerprint) DO NOTHING`, fp, []byte(pub))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("--ddl: publish the key that checks the topic's schema-change messages (repstream.ddl_pubkey) on the source: %w", err)
	}
	return removed, nil
}

// TopicKeys reads the public keys the captures published on the source
// (PublishTopicKey), by fingerprint: none if there is no table of them
// yet (a capture of an earlier version installed the trigger).
func TopicKeys(ctx context.Context, src *pgx.Conn) (map[string]ed25519.PublicKey, error) {
	keys := map[string]ed25519.PublicKey{}
	var exists bool
	if err := src.QueryRow(ctx, `SELECT pg_catalog.to_regclass('repstream.ddl_pubkey') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return keys, err
	}
	rows, err := src.Query(ctx, `SELECT fingerprint, key FROM repstream.ddl_pubkey`)
	if err != nil {
		return nil, fmt.Errorf("--ddl: read the keys that check the topic's schema-change messages (repstream.ddl_pubkey) on the source: %w", err)
	}
	var fp string
	var key []byte
	_, err = pgx.ForEachRow(rows, []any{&fp, &key}, func() error {
		pub, err := ddlmsg.ParsePublicKey(fp, key)
		if err != nil {
			return fmt.Errorf("repstream.ddl_pubkey on the source: %w", err)
		}
		keys[fp] = pub
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("--ddl: read the keys that check the topic's schema-change messages (repstream.ddl_pubkey) on the source: %w", err)
	}
	return keys, nil
}

// WALPosition returns how far the source's WAL has been written (on a
// standby: replayed).
func WALPosition(ctx context.Context, src *pgx.Conn) (change.LSN, error) {
	var at string
	if err := src.QueryRow(ctx, `SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_insert_lsn() END::text`).Scan(&at); err != nil {
		return 0, fmt.Errorf("read the source's WAL position: %w", err)
	}
	return change.ParseLSN(at)
}

// ReleaseDDL removes slot's registration as a user of the event trigger
// and, when it was the last, the trigger, its functions, its tables and the
// schema repstream on the source (if nothing else is in it). It reports
// whether it removed the trigger, and the slots that keep it. An untrusted
// schema repstream is refused before anything is touched.
//
// Removing the trigger takes ACCESS EXCLUSIVE on every leaf partition with
// a TRUNCATE trigger, which an application transaction that merely read
// the leaf holds up, and every later query of the leaf waits behind that
// wait. So, as the install does (installLockTimeout), ReleaseDDL waits for
// no lock longer than releaseLockTimeout, and takes the leaves' triggers
// away one leaf per short transaction first (dropTruncateTriggers), holding
// each lock only for its DROP TRIGGER; it tries installAttempts times, a
// second, two, four... apart, then fails naming the table and the sessions
// that hold it. What it removed before is consistent (the leaves' triggers
// of a database that no replication uses any more; a start that comes
// meanwhile makes them again): it is simply run again.
//
// The event triggers are removed first, in a transaction of their own; the
// functions they call and the tables those write only once the
// transactions that began before have ended (waitOlderTransactions: an
// application's statement running then may still fire them). After
// olderWait, those are kept, with a warning naming the transactions, and
// dropped is false: drop, run again, removes them.
func ReleaseDDL(ctx context.Context, src *pgx.Conn, slot string, log *slog.Logger) (dropped bool, kept []string, err error) {
	var busy *lockBusy
	for attempt, pause := 1, time.Second; ; attempt, pause = attempt+1, 2*pause {
		dropped, kept, err = releaseDDL(ctx, src, slot, log)
		if !errors.As(err, &busy) || attempt == installAttempts {
			break
		}
		log.Info("a lock drop needs on the source is held by a transaction: trying again", "table", busy.what(), "attempt", attempt, "pause", pause)
		select {
		case <-ctx.Done():
			return false, nil, ctx.Err()
		case <-time.After(pause):
		}
	}
	if errors.As(err, &busy) {
		holders := lockHolders(ctx, src, busy.rel)
		return false, nil, fmt.Errorf("remove repstream's event trigger on the source: the lock of %s was not had within %s, %d times: held by %s "+
			"(pg_locks, pg_stat_activity; a prepared transaction: pg_prepared_xacts): repstream waits no longer, so as not to hold the application's queries up behind it; "+
			"what it removed so far leaves the source consistent: run drop again once that transaction is over: %w",
			busy.what(), releaseLockTimeout, installAttempts, holders, busy.err)
	}
	return dropped, kept, err
}

// releaseLockTimeout bounds each wait of ReleaseDDL for a lock (a leaf
// partition's, for its TRUNCATE trigger): as installLockTimeout.
const releaseLockTimeout = installLockTimeout

// lockBusy: a lock ReleaseDDL needs was not had within
// releaseLockTimeout. table is what it waited for ("" with rel 0: one of
// repstream's own tables, or a leaf partition's).
type lockBusy struct {
	table string
	rel   uint32
	err   error
}

func (b *lockBusy) Error() string { return "lock of " + b.what() + ": " + b.err.Error() }
func (b *lockBusy) Unwrap() error { return b.err }

func (b *lockBusy) what() string {
	if b.table == "" {
		return "a table of repstream's (in its schema, or a leaf partition with its TRUNCATE trigger)"
	}
	return "table " + b.table
}

// asBusy returns err as a lockBusy of table (rel) if it is a lock timeout.
func asBusy(err error, table string, rel uint32) error {
	if pgerr.Is(err, pgerr.LockNotAvailable) {
		return &lockBusy{table: table, rel: rel, err: err}
	}
	return err
}

// releaseDDL is one try of ReleaseDDL.
func releaseDDL(ctx context.Context, src *pgx.Conn, slot string, log *slog.Logger) (dropped bool, kept []string, err error) {
	if err := dropTruncateTriggers(ctx, src, slot); err != nil {
		return false, nil, err
	}
	tx, err := src.Begin(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("remove repstream's event trigger on the source: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := provision.Lock(ctx, tx); err != nil {
		return false, nil, err
	}
	exists, err := provision.CheckSchema(ctx, tx, "source")
	if err != nil || !exists {
		return false, nil, err
	}
	haveTrigger, haveRegistry, kept, err := ddlUsers(ctx, tx, slot)
	if err != nil {
		return false, nil, err
	}
	if haveRegistry {
		if _, err := tx.Exec(ctx, "DELETE FROM repstream.replications WHERE slot = $1", slot); err != nil {
			return false, nil, fmt.Errorf("unregister slot %q on the source: %w", slot, err)
		}
	}
	if len(kept) > 0 {
		return false, kept, tx.Commit(ctx)
	}
	// The event triggers go first, on their own: their functions and the
	// tables those write only once no transaction may call them any more
	// (waitOlderTransactions).
	if _, err := tx.Exec(ctx, dropEventTriggersSQL); err != nil {
		return false, nil, fmt.Errorf("drop repstream's event triggers on the source: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, nil, fmt.Errorf("drop repstream's event triggers on the source: %w", err)
	}
	open, err := waitOlderTransactions(ctx, src, olderWait, log)
	if err != nil {
		return false, nil, err
	}
	if len(open) > 0 {
		log.Warn("repstream's event triggers are removed from the source, but their functions and the schema repstream are kept: transactions that began before "+
			"may still call them (a statement of theirs that had read the event triggers before their removal fires them when it ends, and would fail without them); "+
			"run drop again once they are over", "transactions", open, "waited", olderWait)
		return false, nil, nil
	}
	tx, err = src.Begin(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("remove repstream's event trigger on the source: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := provision.Lock(ctx, tx); err != nil {
		return false, nil, err
	}
	if exists, err := provision.CheckSchema(ctx, tx, "source"); err != nil || !exists {
		return false, nil, err
	}
	// A replication that started meanwhile made the event triggers again
	// and needs them.
	if _, _, kept, err = ddlUsers(ctx, tx, slot); err != nil || len(kept) > 0 {
		return false, kept, err
	}
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+releaseLockTimeout+"'"); err != nil {
		return false, nil, err
	}
	// The tables the trigger made FULL (they had no key) stay FULL: set
	// back to DEFAULT while a publication publishes them, the source
	// would refuse their UPDATEs and DELETEs. Named, for the user.
	var full []string
	var listed bool
	err = tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass('repstream.ident_full') IS NOT NULL`).Scan(&listed)
	if err == nil && listed {
		err = tx.QueryRow(ctx, `SELECT COALESCE(array_agg(c.oid::regclass::text ORDER BY 1), '{}') FROM pg_catalog.pg_class c
WHERE c.relreplident = 'f' AND c.oid IN (SELECT relid FROM repstream.ident_full)`).Scan(&full)
	}
	if err != nil {
		return false, nil, fmt.Errorf("look up the tables repstream made REPLICA IDENTITY FULL on the source: %w", err)
	}
	// The leaves' TRUNCATE triggers that dropTruncateTriggers left (a
	// partition made since), locked one by one: a lock not had names its
	// table.
	leaves, err := truncateTriggerLeaves(ctx, tx)
	if err != nil {
		return false, nil, err
	}
	for _, leaf := range leaves {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+leaf.name+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return false, nil, fmt.Errorf("drop repstream's event trigger on the source: %w", asBusy(err, leaf.name, leaf.rel))
		}
	}
	if _, err := tx.Exec(ctx, dropDDLTriggerSQL+";"+dropRegistrySQL); err != nil {
		return false, nil, fmt.Errorf("drop repstream's event trigger on the source: %w", asBusy(err, "", 0))
	}
	left, err := provision.DropSchemaIfEmpty(ctx, tx)
	if err != nil {
		return false, nil, asBusy(err, "", 0)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, nil, err
	}
	if len(full) > 0 {
		log.Warn("tables without a key that repstream's trigger made REPLICA IDENTITY FULL stay so: once no publication publishes them, ALTER TABLE ... REPLICA IDENTITY DEFAULT gives them back what they had (UPDATEs and DELETEs then log less)",
			"tables", full)
	}
	if left != "" {
		log.Warn("the schema repstream on the source is kept: something else is in it", "left", left)
	}
	return haveTrigger, nil, nil
}

// ddlUsers reads, in tx (under provision.Lock), whether the event trigger
// and its registry are there, and the replications other than slot that
// use them.
func ddlUsers(ctx context.Context, tx pgx.Tx, slot string) (haveTrigger, haveRegistry bool, others []string, err error) {
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname IN ('repstream_ddl', 'repstream_ddl_drop'))
         OR pg_catalog.to_regprocedure('repstream.ddl_end()') IS NOT NULL,
       pg_catalog.to_regclass('repstream.replications') IS NOT NULL`).Scan(&haveTrigger, &haveRegistry); err != nil {
		return false, false, nil, fmt.Errorf("look up repstream's event trigger on the source: %w", err)
	}
	if haveRegistry {
		// Not the rows of the replications this database is the target of
		// (a cascade: the target's registry, without a publication; their
		// slots are another database's): they need no trigger here. A
		// source's registration names its publication (one of an earlier
		// version's may not: its slot is this database's).
		err = tx.QueryRow(ctx, `SELECT COALESCE(array_agg(g.slot ORDER BY g.slot), '{}') FROM repstream.replications g
WHERE g.slot <> $1 AND (g.publication <> '' OR g.slot IN (SELECT s.slot_name FROM pg_catalog.pg_replication_slots s WHERE s.database = pg_catalog.current_database()))`, slot).Scan(&others)
	} else if haveTrigger {
		// Installed by a version without the registry: any other pgoutput
		// slot of the database may be a repstream run that needs it.
		err = tx.QueryRow(ctx, `SELECT COALESCE(array_agg(slot_name::text ORDER BY slot_name), '{}') FROM pg_catalog.pg_replication_slots
WHERE database = pg_catalog.current_database() AND plugin = 'pgoutput' AND slot_name <> $1`, slot).Scan(&others)
	}
	if err != nil {
		return false, false, nil, fmt.Errorf("look up the other users of repstream's event trigger on the source: %w", err)
	}
	return haveTrigger, haveRegistry, others, nil
}

// ErrDDLTriggerOff: an event trigger or TRUNCATE trigger of a run with
// --ddl=true is missing or does not fire for every session
// (CheckDDLTriggers).
var ErrDDLTriggerOff = errors.New("the schema-change triggers are off")

// CheckDDLTriggers returns ErrDDLTriggerOff, naming what it found, when
// one of the event triggers InstallDDL makes is gone or does not fire in
// every session (ALTER EVENT TRIGGER ... DISABLE, or ENABLE REPLICA; one
// enabled for the origin alone, as earlier versions made them, misses
// only sessions with session_replication_role = replica, and passes), or
// a leaf partition's repstream_truncate is disabled or fires in replica
// sessions only (one firing for the origin alone, as earlier versions made
// them, passes too): the schema changes made meanwhile were not in the
// stream. So is a repstream_truncate altered since repstream set it (its
// comment names its catalog row's xmin then: truncate_always). An event
// trigger turned off and on again between two looks leaves them as they
// should be: tablesync's CheckDDLTriggers compares TriggerDigest too.
func CheckDDLTriggers(ctx context.Context, src *pgx.Conn) error {
	off, _, err := DDLTriggersOff(ctx, src)
	if err != nil {
		return err
	}
	if len(off) > 0 {
		return fmt.Errorf("%w: %s", ErrDDLTriggerOff, strings.Join(off, "; "))
	}
	return nil
}

// DDLTriggersOff lists what CheckDDLTriggers finds off, each named and
// said how (repstream_ddl_types missing is not listed: versions before it
// did not make it, and TriggerDigest tells when one a replication saw is
// gone); missing says whether all of it is event triggers that are not
// there at all (never installed for this database, as for a replication
// that followed schema changes without them until now).
func DDLTriggersOff(ctx context.Context, src *pgx.Conn) (off []string, missing bool, err error) {
	rows, err := src.Query(ctx, `SELECT w.name || ' ' || coalesce(CASE e.evtenabled WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'enabled for replica sessions only' END, 'missing'), e.evtenabled IS NULL
FROM (VALUES ('repstream_ddl'), ('repstream_ddl_drop'), ('repstream_ddl_partitions'), ('repstream_ddl_types')) w(name)
LEFT JOIN pg_catalog.pg_event_trigger e ON e.evtname = w.name
WHERE e.evtenabled IS NULL AND w.name <> 'repstream_ddl_types' OR e.evtenabled IN ('D', 'R')
UNION ALL
SELECT 'repstream_truncate on ' || g.tgrelid::regclass::text || ' ' || CASE g.tgenabled WHEN 'D' THEN 'disabled' ELSE 'enabled for replica sessions only' END, false
FROM pg_catalog.pg_trigger g WHERE g.tgname = 'repstream_truncate' AND g.tgenabled IN ('D', 'R')
UNION ALL
SELECT 'repstream_truncate on ' || g.tgrelid::regclass::text || ' altered since repstream set it (ALTER TABLE ... DISABLE and ENABLE TRIGGER)', false
FROM pg_catalog.pg_trigger g WHERE g.tgname = 'repstream_truncate' AND g.tgenabled NOT IN ('D', 'R')
 AND pg_catalog.obj_description(g.oid, 'pg_trigger') LIKE 'repstream: set at %'
 AND pg_catalog.obj_description(g.oid, 'pg_trigger') <> 'repstream: set at ' || g.xmin::text
ORDER BY 1`)
	if err != nil {
		return nil, false, fmt.Errorf("look at the schema-change triggers: %w", err)
	}
	missing = true
	for rows.Next() {
		var s string
		var m bool
		if err := rows.Scan(&s, &m); err != nil {
			return nil, false, fmt.Errorf("look at the schema-change triggers: %w", err)
		}
		off, missing = append(off, s), missing && m
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("look at the schema-change triggers: %w", err)
	}
	gone, err := truncateTriggersGone(ctx, src)
	if err != nil {
		return nil, false, err
	}
	if len(gone) > 0 {
		off, missing = append(off, gone...), false
	}
	return off, missing && len(off) > 0, nil
}

// truncateTriggersGone lists the leaf partitions of published partitioned
// tables (those repstream.partition_state knows) that have no TRUNCATE
// trigger calling repstream.ddl_truncate(): the leaf's owner dropped
// repstream_truncate, or made a trigger of another function under that
// name before repstream came to it (which then passed over the leaf). A
// TRUNCATE of that leaf would not reach the targets.
func truncateTriggersGone(ctx context.Context, src *pgx.Conn) ([]string, error) {
	var installed bool
	if err := src.QueryRow(ctx, `SELECT pg_catalog.to_regclass('repstream.partition_state') IS NOT NULL
		AND pg_catalog.to_regprocedure('repstream.ddl_truncate()') IS NOT NULL`).Scan(&installed); err != nil || !installed {
		return nil, err
	}
	rows, err := src.Query(ctx, `SELECT 'partition ' || c.oid::regclass::text || ' has no TRUNCATE trigger of repstream''s ('
	|| coalesce('its trigger repstream_truncate calls ' || (SELECT g.tgfoid::regprocedure::text FROM pg_catalog.pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'repstream_truncate')
	            || ': rename that trigger, and the next start makes repstream''s', 'repstream_truncate was dropped')
	|| '): a TRUNCATE of it would not reach the target'
FROM repstream.partition_state s JOIN pg_catalog.pg_class c ON c.oid = s.relid
WHERE c.relkind = 'r' AND c.relpersistence = 'p' AND c.relispartition
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g WHERE g.tgrelid = c.oid AND g.tgfoid = 'repstream.ddl_truncate()'::regprocedure)
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables pt
              WHERE pg_catalog.to_regclass(pg_catalog.quote_ident(pt.schemaname) || '.' || pg_catalog.quote_ident(pt.tablename)) IN
                    (SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a))
ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("look at the partitions' TRUNCATE triggers: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look at the partitions' TRUNCATE triggers: %w", err)
	}
	return gone, nil
}
