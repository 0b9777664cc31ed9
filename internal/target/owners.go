package target

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
)

// Table owners. Writing a table runs code that others may have chosen:
// an index expression or predicate, a column default or generated
// column, a CHECK or a domain's check, a partition key expression, a
// trigger or rule set ENABLE ALWAYS or ENABLE REPLICA (the others do not
// fire in apply's replica sessions), each a function or an operator's. A
// superuser session that writes a table another role owns runs that
// role's code with a superuser's rights, and so does one that writes a
// table whose expressions call a function another role owns (its owner
// may replace its body at any time): that role could make itself a
// superuser (ALTER ROLE ... SUPERUSER in a column default's function).
// A superuser's table in a schema such a role owns is its too: a
// schema's owner may drop what is in it and make a table of its own
// under the name, which the writer, writing by name, writes next.
// PostgreSQL 16's subscriptions apply as the table's owner for the first;
// a client session cannot shed a superuser's rights for good (the owner's
// code could RESET ROLE). So a superuser target role writes only tables a
// superuser owns whose code (the functions their objects above name
// directly, operators' functions, an index's operator class's functions)
// superusers own, and refuses the
// others before it writes a row of them — at the start, before a copy,
// at a table's first change or schema change in a writer (once per table
// in its life: what a superuser adds to a table later is trusted) —
// unless told that those roles are trusted (--trust-table-owners). A
// role that has a superuser's rights otherwise (a member of a superuser
// role, of pg_execute_server_program: superuserHowSQL) counts as one
// here, and what it owns itself is trusted as a superuser's is. A target role that is neither (docs/security.md, least
// privilege) gives away nothing but its own grants. Not followed: what a
// trusted function calls in turn.

// ErrUntrustedOwner: a superuser target role would write a table whose
// code a role that is not a superuser controls (CheckOwners).
var ErrUntrustedOwner = errors.New("a role that is not a superuser could run its code as the superuser repstream writes the target as")

// superuserHowSQL says how the session's role has a superuser's rights,
// or an empty string when it has not: it is a superuser; or a member, at any depth, of
// a role that is one, to which it — and any code it runs, a table
// owner's trigger or default — may SET ROLE at any time
// (TestSuperuserMemberTrap: such a trigger made its owner a superuser);
// or a member of pg_execute_server_program (a program it runs, as the
// server's operating-system user, connects as any role) or of
// pg_write_server_files (it may rewrite the server's configuration); or,
// before PostgreSQL 16, a role with CREATEROLE, which may grant itself
// those. Every check of a superuser target role here takes such a role
// for one. ('MEMBER' also counts a PostgreSQL 16+ membership granted WITH
// SET FALSE, which cannot SET ROLE: a refusal too many, never one too
// few.) The third column is the superuser role of a membership, empty for
// the others.
const superuserHowSQL = `SELECT pg_catalog.quote_ident(r.rolname::text), CASE
	WHEN r.rolsuper THEN 'is a superuser'
	WHEN m.name IS NOT NULL THEN 'is a member of the superuser role ' || m.name || ' (it may SET ROLE to it: a superuser''s rights)'
	WHEN pg_catalog.pg_has_role(r.oid, 'pg_execute_server_program', 'MEMBER')
		THEN 'is a member of pg_execute_server_program (a program it runs, as the server''s operating-system user, may connect as a superuser)'
	WHEN pg_catalog.pg_has_role(r.oid, 'pg_write_server_files', 'MEMBER')
		THEN 'is a member of pg_write_server_files (it may rewrite the server''s configuration: a superuser''s rights)'
	WHEN r.rolcreaterole AND pg_catalog.current_setting('server_version_num')::int < 160000
		THEN 'has CREATEROLE (before PostgreSQL 16 it may grant itself pg_execute_server_program: a superuser''s rights)'
	ELSE '' END, COALESCE(m.name, '')
FROM pg_catalog.pg_roles r
LEFT JOIN LATERAL (SELECT pg_catalog.quote_ident(x.rolname::text) AS name FROM pg_catalog.pg_roles x
	WHERE x.rolsuper AND pg_catalog.pg_has_role(r.oid, x.oid, 'MEMBER') ORDER BY 1 LIMIT 1) m ON NOT r.rolsuper
WHERE r.rolname = current_user`

// superuserSQL is true when the session's role has a superuser's rights
// (superuserHowSQL).
const superuserSQL = `COALESCE((SELECT h.how <> '' FROM (` + superuserHowSQL + `) AS h(me, how, su)), false)`

// superuserRights says how the session's role, me, has a superuser's
// rights (superuserHowSQL), for an error naming it ("is a superuser", "is
// a member of the superuser role R (...)", ...); su is the role an error
// suggests giving objects to: R, or me (whose own objects are trusted).
func superuserRights(ctx context.Context, q schema.Querier) (me, how, su string, err error) {
	if err = q.QueryRow(ctx, superuserHowSQL).Scan(&me, &how, &su); err != nil {
		return "", "", "", fmt.Errorf("look up the target role: %w", err)
	}
	if how == "" {
		how = "is not a superuser"
	}
	if su == "" {
		su = me
	}
	return me, how, su, nil
}

// untrustedCallSQL joins each pg_depend row dep of the objects looked at to
// the function it names (or an operator's function, or the support
// functions and operators' functions of an index's operator class: a
// btree's comparison runs on every insert), f.fn, and its owner r,
// keeping those a role that is not a superuser owns. (A built-in
// operator class is pinned: no pg_depend row names it.)
const untrustedCallSQL = `JOIN LATERAL (
	SELECT p.oid::regprocedure::text AS fn, p.proowner FROM pg_catalog.pg_proc p
	WHERE dep.refclassid = 'pg_catalog.pg_proc'::regclass AND p.oid = dep.refobjid
	UNION ALL
	SELECT 'operator ' || op.oid::regoperator::text, p.proowner FROM pg_catalog.pg_operator op JOIN pg_catalog.pg_proc p ON p.oid = op.oprcode
	WHERE dep.refclassid = 'pg_catalog.pg_operator'::regclass AND op.oid = dep.refobjid
	UNION ALL
	SELECT 'operator class ' || pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(oc.opcname) || ': ' || p.oid::regprocedure::text, p.proowner
	FROM pg_catalog.pg_opclass oc JOIN pg_catalog.pg_namespace n ON n.oid = oc.opcnamespace
	JOIN pg_catalog.pg_amproc ap ON ap.amprocfamily = oc.opcfamily JOIN pg_catalog.pg_proc p ON p.oid = ap.amproc
	WHERE dep.refclassid = 'pg_catalog.pg_opclass'::regclass AND oc.oid = dep.refobjid
	UNION ALL
	SELECT 'operator class ' || pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(oc.opcname) || ': operator ' || op.oid::regoperator::text, p.proowner
	FROM pg_catalog.pg_opclass oc JOIN pg_catalog.pg_namespace n ON n.oid = oc.opcnamespace
	JOIN pg_catalog.pg_amop ao ON ao.amopfamily = oc.opcfamily JOIN pg_catalog.pg_operator op ON op.oid = ao.amopopr
	JOIN pg_catalog.pg_proc p ON p.oid = op.oprcode
	WHERE dep.refclassid = 'pg_catalog.pg_opclass'::regclass AND oc.oid = dep.refobjid
) f ON true
JOIN pg_catalog.pg_roles r ON r.oid = f.proowner
WHERE NOT (r.rolsuper OR r.rolname = current_user)`

// typeTreeSQL is the recursive step from a type (column oid) to the
// types writing a value of it writes too: a domain's base type, an
// array's element, a range's subtype, a composite's attributes. A value
// of any of them runs their code: a domain's constraints, a range's
// functions (subtype_diff, called by a GiST index on every insert).
const typeTreeSQL = `CROSS JOIN LATERAL (
		SELECT y.typbasetype WHERE y.typbasetype <> 0
		UNION ALL SELECT y.typelem WHERE y.typelem <> 0
		UNION ALL SELECT g.rngsubtype FROM pg_catalog.pg_range g WHERE g.rngtypid = y.oid
		UNION ALL SELECT ca.atttypid FROM pg_catalog.pg_attribute ca
		WHERE y.typtype = 'c' AND ca.attrelid = y.typrelid AND ca.attnum > 0 AND NOT ca.attisdropped
	) AS x(next)`

// typeKindSQL names the kind of the pg_type row y: "domain", "enum", ...
const typeKindSQL = `CASE y.typtype WHEN 'd' THEN 'domain' WHEN 'e' THEN 'enum' WHEN 'c' THEN 'composite type' WHEN 'r' THEN 'range type' WHEN 'm' THEN 'multirange type' ELSE 'type' END`

// untrustedSQL lists, for a superuser session, the tables of $1 (quoted
// names; existing ones) in a schema a role that is not a superuser owns
// (through pg_database_owner: the database's owner), and those and their
// partitions at every level (a row written to a partitioned table runs
// its leaf's code too) owned by a role that is not a superuser, with a
// column whose type is, or holds (typeTreeSQL), a type such a role owns
// (it may add a constraint to a domain, or a cast of its type to text,
// that calls its code at any time: an implicit cast makes a key's "m = $1"
// text = text through it, and a FULL identity's match casts to text), or
// a cast from or to such a type whose function such a role owns, or whose
// objects that run when it is written (its own, and those of the types
// its columns hold) name a function (or an operator whose function) such
// a role owns: the table or partition, what runs, the function and its owner.
const untrustedSQL = `
WITH RECURSIVE t AS (
	SELECT c.oid, c.relowner, true AS named FROM unnest($1::text[]) AS u(name)
	JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(u.name)
	WHERE ` + superuserSQL + `
	UNION
	SELECT c.oid, c.relowner, false FROM t JOIN pg_catalog.pg_inherits h ON h.inhparent = t.oid
	JOIN pg_catalog.pg_class c ON c.oid = h.inhrelid AND c.relispartition
), types AS (
	SELECT t.oid AS rel, a.attname, a.atttypid AS oid
	FROM t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
	UNION
	SELECT types.rel, types.attname, x.next FROM types JOIN pg_catalog.pg_type y ON y.oid = types.oid
	` + typeTreeSQL + `
), objs AS (
	SELECT t.oid AS rel, 'pg_catalog.pg_attrdef'::regclass AS classid, d.oid AS objid, 'the default of column ' || quote_ident(a.attname) AS what
	FROM t JOIN pg_catalog.pg_attrdef d ON d.adrelid = t.oid JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
	UNION ALL SELECT t.oid, 'pg_catalog.pg_constraint'::regclass, k.oid, 'constraint ' || quote_ident(k.conname)
	FROM t JOIN pg_catalog.pg_constraint k ON k.conrelid = t.oid
	UNION ALL SELECT types.rel, 'pg_catalog.pg_constraint'::regclass, k.oid, 'constraint ' || quote_ident(k.conname) || ' of domain ' || k.contypid::regtype::text
	FROM types JOIN pg_catalog.pg_constraint k ON k.contypid = types.oid
	UNION ALL SELECT types.rel, 'pg_catalog.pg_type'::regclass, types.oid, 'column ' || quote_ident(types.attname)
	FROM types WHERE types.oid >= 16384
	UNION ALL SELECT t.oid, 'pg_catalog.pg_class'::regclass, x.indexrelid, 'index ' || x.indexrelid::regclass::text
	FROM t JOIN pg_catalog.pg_index x ON x.indrelid = t.oid
	UNION ALL SELECT t.oid, 'pg_catalog.pg_trigger'::regclass, g.oid, 'trigger ' || quote_ident(g.tgname)
	FROM t JOIN pg_catalog.pg_trigger g ON g.tgrelid = t.oid AND g.tgenabled IN ('A', 'R')
	UNION ALL SELECT t.oid, 'pg_catalog.pg_rewrite'::regclass, w.oid, 'rule ' || quote_ident(w.rulename)
	FROM t JOIN pg_catalog.pg_rewrite w ON w.ev_class = t.oid AND w.ev_enabled IN ('A', 'R')
	UNION ALL SELECT t.oid, 'pg_catalog.pg_class'::regclass, t.oid, 'the partition key' FROM t
), found AS (
	SELECT t.oid AS rel, 'the table' AS what, '' AS fn, quote_ident(r.rolname) AS owner
	FROM t JOIN pg_catalog.pg_roles r ON r.oid = t.relowner WHERE NOT (r.rolsuper OR r.rolname = current_user)
	UNION ALL
	SELECT t.oid, 'the schema', quote_ident(n.nspname),
		quote_ident(r.rolname) || CASE WHEN n.nspowner <> r.oid THEN ' (the database''s owner, through pg_database_owner)' ELSE '' END
	FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	JOIN pg_catalog.pg_roles r ON r.oid = CASE WHEN n.nspowner = (SELECT o.oid FROM pg_catalog.pg_roles o WHERE o.rolname = 'pg_database_owner')
		THEN (SELECT d.datdba FROM pg_catalog.pg_database d WHERE d.datname = current_database()) ELSE n.nspowner END
	WHERE t.named AND NOT (r.rolsuper OR r.rolname = current_user)
	UNION ALL
	SELECT DISTINCT types.rel, 'column ' || quote_ident(types.attname), ` + typeKindSQL + ` || ' ' || y.oid::regtype::text, quote_ident(r.rolname)
	FROM types JOIN pg_catalog.pg_type y ON y.oid = types.oid
	JOIN pg_catalog.pg_roles r ON r.oid = y.typowner
	WHERE NOT (r.rolsuper OR r.rolname = current_user)
	UNION ALL
	SELECT DISTINCT types.rel, 'column ' || quote_ident(types.attname), 'cast (' || k.castsource::regtype::text || ' AS ' || k.casttarget::regtype::text || '): ' || p.oid::regprocedure::text, quote_ident(r.rolname)
	FROM types JOIN pg_catalog.pg_cast k ON (k.castsource = types.oid OR k.casttarget = types.oid) AND types.oid >= 16384
	JOIN pg_catalog.pg_proc p ON p.oid = k.castfunc JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
	WHERE NOT (r.rolsuper OR r.rolname = current_user)
	UNION ALL
	SELECT DISTINCT o.rel, o.what, f.fn, quote_ident(r.rolname)
	FROM objs o
	JOIN pg_catalog.pg_depend dep ON dep.classid = o.classid AND dep.objid = o.objid
	` + untrustedCallSQL + `
)
SELECT n.nspname::text, c.relname::text, found.what, found.fn, found.owner
FROM found JOIN pg_catalog.pg_class c ON c.oid = found.rel JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
ORDER BY 1, 2, 3, 4`

// CheckOwners returns ErrUntrustedOwner, naming every table of tables (on
// the target, existing ones) and what in it another role controls, when
// the session's role is a superuser and a role that is not owns the table
// or code it runs (untrustedSQL); nil when trust is set (those roles are
// trusted) or the session's role is not a superuser.
func CheckOwners(ctx context.Context, conn *pgx.Conn, tables []schema.TableName, trust bool) error {
	if trust || len(tables) == 0 {
		return nil
	}
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = t.Quoted()
	}
	me, how, su, err := superuserRights(ctx, conn)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, untrustedSQL, quoted)
	if err != nil {
		return fmt.Errorf("look up who owns the target tables and the code they run: %w", err)
	}
	var found []string
	for rows.Next() {
		var t schema.TableName
		var what, fn, owner string
		if err := rows.Scan(&t.Schema, &t.Name, &what, &fn, &owner); err != nil {
			rows.Close()
			return fmt.Errorf("look up who owns the target tables and the code they run: %w", err)
		}
		if fn == "" {
			found = append(found, fmt.Sprintf("%s is owned by %s (ALTER TABLE %s OWNER TO %s, once you have checked what it runs)", t, owner,
				pgerr.QuoteName(t.Schema)+"."+pgerr.QuoteName(t.Name), su))
			continue
		}
		if what == "the schema" {
			// Its owner may drop the table (a schema's owner may drop
			// what is in it) and make another of its name, of its own.
			found = append(found, fmt.Sprintf("%s is in schema %s, owned by %s, who may drop it and make another of its name with code of its own (ALTER SCHEMA %s OWNER TO %s, or move the table to a schema a superuser owns)",
				t, fn, owner, fn, su))
			continue
		}
		if ownedType(fn) {
			// Its owner may add a constraint or a cast that calls its code.
			found = append(found, fmt.Sprintf("%s of %s is of %s, owned by %s", what, t, fn, owner))
			continue
		}
		if strings.HasPrefix(fn, "cast (") {
			found = append(found, fmt.Sprintf("%s of %s has a %s, owned by %s", what, t, fn, owner))
			continue
		}
		found = append(found, fmt.Sprintf("%s of %s calls %s, owned by %s", what, t, fn, owner))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("look up who owns the target tables and the code they run: %w", err)
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the target role %s %s, and roles that are not control code it would run writing these tables: %s; "+
		"that code could make its owner a superuser. Apply as a target role that is not a superuser (docs/security.md: least privilege), "+
		"or have a superuser own those tables and that code (or drop it), or pass --trust-table-owners if those roles may have a superuser's rights",
		ErrUntrustedOwner, me, how, strings.Join(found, "; "))
}

// OwnerChecks is the set of tables a checkOwner passed, shared by the
// writers of one run (WriterOptions.OwnerChecks: its apply workers and
// eager apply, in every stream session, reconnects included), so that
// each table is checked once in the run, not once per session: the check costs a catalog query of 5-20 ms (untrustedSQL),
// and a run of four workers made it four times per table. Once passed, a
// table stays trusted as it does for one writer: a superuser's table and
// code change only by a superuser. Safe for concurrent use; the zero
// value is empty.
type OwnerChecks struct {
	mu     sync.Mutex
	passed map[schema.TableName]bool
}

func (c *OwnerChecks) has(tn schema.TableName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.passed[tn]
}

func (c *OwnerChecks) add(tn schema.TableName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passed == nil {
		c.passed = map[schema.TableName]bool{}
	}
	c.passed[tn] = true
}

// checkOwner is CheckOwners of one table, once per table in the writer's
// life (its owner changes only by its owner or a superuser), and once in
// the run's with WriterOptions.OwnerChecks.
func (w *Writer) checkOwner(ctx context.Context, tn schema.TableName) error {
	if w.opts.TrustTableOwners || w.ownerChecked[tn] {
		return nil
	}
	shared := w.opts.OwnerChecks
	if shared == nil || !shared.has(tn) {
		if err := CheckOwners(ctx, w.conn, []schema.TableName{tn}, false); err != nil {
			return err
		}
		if shared != nil {
			shared.add(tn)
		}
	}
	if w.ownerChecked == nil {
		w.ownerChecked = map[schema.TableName]bool{}
	}
	w.ownerChecked[tn] = true
	return nil
}

// ownedType: fn, as untrustedSQL names what runs, is a type its owner
// controls (typeKindSQL's words), not a function.
func ownedType(fn string) bool {
	for _, k := range []string{"domain ", "enum ", "composite type ", "range type ", "multirange type ", "type "} {
		if strings.HasPrefix(fn, k) {
			return true
		}
	}
	return false
}
