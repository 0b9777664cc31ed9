package target

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// What the Writer reads from the target's catalog: the table behind each
// relation (its plan, cached per relation), which columns compare only as
// text, and whether folding is safe for a table.

// plan returns the cached plan of rel, loading the target table on first use.
func (w *Writer) plan(ctx context.Context, rel *change.Relation) (*relPlan, error) {
	if p := w.plans[rel]; p != nil {
		return p, nil
	}
	tab, err := schema.LoadTable(ctx, w.conn, rel.Namespace, rel.Name)
	if !w.opts.RelationDDL && errors.Is(err, schema.ErrTableNotFound) {
		// CREATE TABLE AS, SELECT INTO: the rows come before the
		// table's schema-change message (ctas.go). With --ddl=false
		// none comes: the commit fails, naming the table.
		tab, err = w.createAhead(ctx, rel)
	}
	if err != nil && !(w.opts.RelationDDL && errors.Is(err, schema.ErrTableNotFound)) {
		return nil, fmt.Errorf("%w on target", err)
	}
	if err == nil {
		if err := w.checkOwner(ctx, tab.TableName()); err != nil {
			return nil, err
		}
	}
	if w.opts.RelationDDL {
		if tab, err = w.followRelation(ctx, rel, tab, err); err != nil {
			return nil, err
		}
	}
	if w.opts.SchemaChangesStop && tab != nil && rel.Previous != nil && relationChange(rel.Previous, rel) {
		// Unless the target was made so already (the restart after
		// this stop reads the change again).
		differs, err := w.differsFromTarget(ctx, rel, tab)
		if err != nil {
			return nil, err
		}
		if differs != "" {
			return nil, fmt.Errorf("the source changed the schema of %s (%s), and --ddl=false follows no schema change: the rows from here on would be applied to a table that differs; "+
				"make the target table the source's (the rows it holds since the change may need copying anew: repstream tables add --truncate), then restart, or run with --ddl=relation or --ddl=true", rel, differs)
		}
	}
	if w.opts.CopyUnrecorded {
		if err := w.checkRecorded(ctx, rel); err != nil {
			return nil, err // errTakenUp: no plan is cached, the next change looks again
		}
	}
	if err := w.checkStreamTypes(ctx, rel, tab); err != nil {
		return nil, err
	}
	var textEq map[string]bool
	if !rel.HasKey() {
		textEq, err = w.textEqColumns(ctx, tab)
		if err != nil {
			return nil, err
		}
	}
	p, err := newPlan(rel, tab, textEq, w.opts.Binary || rel.Binary)
	if p != nil {
		p.checkLocal = w.opts.CheckLocalWrites
	}
	if errors.Is(err, ErrBinaryIncompatible) {
		advice := w.opts.BinaryAdvice
		if advice == "" {
			advice = "restart repstream, which decides at start whether values travel in binary (it will use text)"
		}
		return nil, fmt.Errorf("%w: %s", err, advice)
	}
	if err != nil {
		return nil, err
	}
	if err := w.userEqualities(ctx, tab, p); err != nil {
		return nil, err
	}
	if p.rules, err = w.replicaRules(ctx, p); err != nil {
		return nil, err
	}
	w.plans[rel] = p
	return p, nil
}

// checkStreamTypes refuses a relation whose columns, as the stream
// describes them (type and modifier, for the rows that follow), the target
// table would store changed without an error (schema.SilentConversion:
// digits rounded away, a time zone dropped or assumed; a domain of the
// target's, or an array of one, by its base type). A start checks the
// tables against the source's catalog, but on a restart it takes a
// difference for a schema change still in the stream (a warning); the
// stream's own description is where that is found true or not: had the
// change come, the target would have it before these rows.
func (w *Writer) checkStreamTypes(ctx context.Context, rel *change.Relation, tab *schema.Table) error {
	cols, err := w.relColumns(ctx, rel)
	if err != nil {
		return err
	}
	for _, c := range cols {
		ti := tab.Column(c.Name)
		if c.Type == "" || ti < 0 || tab.Columns[ti].Generated {
			continue // not built in, or newPlan reports it
		}
		to, shown := tab.Columns[ti].Type, tab.Columns[ti].Type
		if tab.Columns[ti].TypeOID >= FirstNormalOID {
			// A domain (or an array of one) takes values as its base
			// type does.
			if to, err = schema.BaseType(ctx, w.conn, tab.Columns[ti].TypeOID, to); err != nil {
				return fmt.Errorf("look up the type of column %q of the target table %s: %w", c.Name, tab.TableName(), err)
			}
			if to != shown {
				shown += " (a domain over " + to + ")"
			}
		}
		if why := schema.SilentConversion(c.Type, to); why != "" {
			return fmt.Errorf("column %q of %s is %s in the source's stream but %s on the target table %s: %s "+
				"(a schema change the target did not get, or a column changed on the target): make the target column match the source's, then restart",
				c.Name, rel.String(), c.Type, shown, tab.TableName(), why)
		}
	}
	return nil
}

// collapsibleQuery reads, for one target table (oid $1), what makes folding
// repeated changes to one key unsafe: how many unique and exclusion indexes
// it has, how many of them are a plain unique index on exactly the key
// columns $2 (sorted), and how many triggers and rules fire even under
// session_replication_role = replica (ENABLE ALWAYS).
const collapsibleQuery = `
SELECT
  count(*) FILTER (WHERE i.indisunique OR i.indisexclusion),
  count(*) FILTER (WHERE i.indisunique AND NOT i.indisexclusion AND i.indexprs IS NULL AND i.indpred IS NULL
                     AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
                            FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                            JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                           WHERE k.ord <= i.indnkeyatts) = $2::text[]),
  (SELECT count(*) FROM pg_catalog.pg_trigger t WHERE t.tgrelid = $1 AND t.tgenabled = 'A'),
  (SELECT count(*) FROM pg_catalog.pg_rewrite r WHERE r.ev_class = $1 AND r.ev_enabled = 'A' AND r.rulename <> '_RETURN')
FROM pg_catalog.pg_index i
WHERE i.indrelid = $1`

// Collapsible reports whether repeated changes to one key of rel may be
// folded into one within a target transaction (see internal/apply's
// collapse.go): the target table is not partitioned, its only unique index
// is on exactly the source's replica-identity key columns (no exclusion
// constraint, no partial or expression unique index), and no trigger or rule
// fires in replica mode (ENABLE ALWAYS). The answer is cached with the
// relation's plan.
func (w *Writer) Collapsible(ctx context.Context, rel *change.Relation) (bool, error) {
	p, err := w.plan(ctx, rel)
	if errors.Is(err, errTakenUp) {
		return false, nil // none of its changes is written (unrecorded.go)
	}
	if err != nil {
		return false, fmt.Errorf("apply to %s: %w", rel.String(), err)
	}
	if p.collapsible != 0 {
		return p.collapsible > 0, nil
	}
	if p.checkLocal {
		// A folded change would be checked against the last folded
		// transaction's commit time, not its own.
		p.collapsible = -1
		return false, nil
	}
	ok, err := w.collapsible(ctx, p)
	if err != nil {
		return false, fmt.Errorf("read the unique indexes and triggers of %s on target: %w", p.name, err)
	}
	p.collapsible = -1
	if ok {
		p.collapsible = 1
	}
	return ok, nil
}

func (w *Writer) collapsible(ctx context.Context, p *relPlan) (bool, error) {
	if p.partitioned || !p.rel.HasKey() {
		return false, nil
	}
	var key []string
	for _, i := range p.keyCols {
		key = append(key, p.rel.Columns[i].Name)
	}
	slices.Sort(key)
	var uniques, onKey, triggers, rules int64
	if err := w.conn.QueryRow(ctx, collapsibleQuery, p.tableOID, key).Scan(&uniques, &onKey, &triggers, &rules); err != nil {
		return false, err
	}
	return uniques == 1 && onKey == 1 && triggers == 0 && rules == 0, nil
}

func (w *Writer) textEqColumns(ctx context.Context, tab *schema.Table) (map[string]bool, error) {
	rows, err := w.conn.Query(ctx, textEqQuery, tab.OID)
	if err != nil {
		return nil, fmt.Errorf("load column types of %s on target: %w", tab.TableName(), err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("load column types of %s on target: %w", tab.TableName(), err)
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m, nil
}

// userEqualityQuery lists, for the columns of table $1 whose type is
// user-defined, the schema of the type's own "=" operator (both operands
// of the type) whose function a superuser owns: an extension's type
// (hstore, ltree) has its operators in the extension's schema, which
// repstream's search_path (pg_catalog, pg_temp) does not search.
//
// Only an operator that a superuser owns, whose function a superuser
// owns, counts; of several, the one in the type's own schema (another
// role could add an "=" of the type elsewhere, matching other rows).
const userEqualityQuery = `
SELECT DISTINCT ON (a.attnum) a.attname::text, pg_catalog.quote_ident(n.nspname::text)
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_operator o ON o.oprname = '=' AND o.oprleft = a.atttypid AND o.oprright = a.atttypid
JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
JOIN pg_catalog.pg_proc f ON f.oid = o.oprcode
JOIN pg_catalog.pg_roles r ON r.oid = f.proowner
JOIN pg_catalog.pg_roles ro ON ro.oid = o.oprowner
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid >= 16384 AND r.rolsuper AND ro.rolsuper
ORDER BY a.attnum, o.oprnamespace = t.typnamespace DESC, o.oid`

// userEqualities makes p match the columns of a user-defined type by the
// type's own "=" operator, named with its schema (userEqualityQuery). A
// type whose "=" a role that is not a superuser owns keeps the plain "="
// (found on the search path, pg_catalog's, or not at all: the statement
// fails, naming the operator): that role's code is not run as
// repstream's.
func (w *Writer) userEqualities(ctx context.Context, tab *schema.Table, p *relPlan) error {
	rows, err := w.conn.Query(ctx, userEqualityQuery, tab.OID)
	if err != nil {
		return fmt.Errorf("load the equality operators of %s's column types on target: %w", tab.TableName(), err)
	}
	ops := map[string]string{}
	for rows.Next() {
		var col, nsp string
		if err := rows.Scan(&col, &nsp); err != nil {
			rows.Close()
			return fmt.Errorf("load the equality operators of %s's column types on target: %w", tab.TableName(), err)
		}
		ops[col] = " OPERATOR(" + nsp + ".=) "
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load the equality operators of %s's column types on target: %w", tab.TableName(), err)
	}
	for i, c := range p.rel.Columns {
		if op := ops[c.Name]; op != "" && !p.textEq[i] {
			p.eq[i] = op
		}
	}
	return nil
}

// relationChange says whether relation version now differs from was in
// its columns (names, types, modifiers, order) or replica identity.
func relationChange(was, now *change.Relation) bool {
	return was.ReplicaIdentity != now.ReplicaIdentity || !slices.EqualFunc(was.Columns, now.Columns, func(a, b change.Column) bool {
		return a.Name == b.Name && a.TypeOID == b.TypeOID && a.TypeMod == b.TypeMod && a.Key == b.Key
	})
}

// differsFromTarget says how the columns rel describes differ from the
// target table tab's: one missing there, one of another built-in type
// (format_type, modifier included), one the source no longer has (other
// than a generated one); "" when none.
func (w *Writer) differsFromTarget(ctx context.Context, rel *change.Relation, tab *schema.Table) (string, error) {
	cols, err := w.relColumns(ctx, rel)
	if err != nil {
		return "", err
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range cols {
		seen[c.Name] = true
		switch ti := tab.Column(c.Name); {
		case ti < 0:
			out = append(out, fmt.Sprintf("column %q added", c.Name))
		case c.Type != "" && c.Type != tab.Columns[ti].Type:
			out = append(out, fmt.Sprintf("column %q is %s on the source, %s on the target", c.Name, c.Type, tab.Columns[ti].Type))
		}
	}
	for _, c := range tab.Columns {
		if !seen[c.Name] && !c.Generated {
			out = append(out, fmt.Sprintf("column %q dropped", c.Name))
		}
	}
	return strings.Join(out, "; "), nil
}
