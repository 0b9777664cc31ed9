package tablesync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// typeDefs are the source's enums and composite types by oid, as a run
// without the event trigger follows them (followTypes): nothing in the
// stream says that one was altered.
type typeDefs map[uint32]typeDef

// typeDef is one enum's or composite type's definition: an enum's labels
// in their order, each with its pg_enum oid (a label renamed keeps it, one
// added back under the old name gets a new one), a composite's attributes
// (name, type oid and modifier: a rename of a type they hold, or of its
// schema, is not an alteration; and attribute number: one dropped and
// added back is another), with shown, as SQL writes them, for messages.
type typeDef struct {
	name  string // schema.name, as the source names it now
	kind  byte   // 'e' enum, 'c' composite
	parts []string
	shown []string
}

const typeDefsSQL = `SELECT t.oid, t.typtype::text, n.nspname::text || '.' || t.typname::text,
	CASE t.typtype WHEN 'e' THEN ARRAY(SELECT e.oid::text || ':' || e.enumlabel::text FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)
	ELSE ARRAY(SELECT a.attname::text || ' ' || a.atttypid::text || '/' || a.atttypmod::text || ' #' || a.attnum::text FROM pg_catalog.pg_attribute a
	           WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum) END,
	CASE t.typtype WHEN 'e' THEN ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)
	ELSE ARRAY(SELECT pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
	           WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum) END
FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid >= 16384 AND (t.typtype = 'e'
	OR t.typtype = 'c' AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid AND c.relkind = 'c'))`

// loadTypeDefs reads every enum and composite type of the source's
// database (one query: a poll's cost does not grow with the tables).
func loadTypeDefs(ctx context.Context, src *pgx.Conn) (typeDefs, error) {
	rows, err := src.Query(ctx, typeDefsSQL)
	if err != nil {
		return nil, fmt.Errorf("read the source's enums and composite types: %w", err)
	}
	defer rows.Close()
	out := typeDefs{}
	for rows.Next() {
		var oid uint32
		var kind string
		var d typeDef
		if err := rows.Scan(&oid, &kind, &d.name, &d.parts, &d.shown); err != nil {
			return nil, fmt.Errorf("read the source's enums and composite types: %w", err)
		}
		d.kind = kind[0]
		out[oid] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the source's enums and composite types: %w", err)
	}
	return out, nil
}

// altered returns the types of was that now defines otherwise, each with
// what changed. Labels only added to an enum (ADD VALUE) are not an
// alteration: no row holding one changed, and a row with a label the
// target lacks stops the run where it comes. A type dropped is not one
// either: no table holds it any more.
func altered(was, now typeDefs) map[uint32]string {
	out := map[uint32]string{}
	for oid, w := range was {
		n, ok := now[oid]
		if !ok || n.kind != w.kind || slices.Equal(w.parts, n.parts) {
			continue
		}
		if w.kind == 'e' && labelsKept(w.parts, n.parts) {
			continue
		}
		what, was, is := "composite type", strings.Join(w.shown, ", "), strings.Join(n.shown, ", ")
		if w.kind == 'e' {
			what = "enum"
		}
		if was == is {
			out[oid] = fmt.Sprintf("%s %s (%s): a label renamed and its old name added back, or an attribute dropped and added back under its name, on the source", what, n.name, is)
			continue
		}
		out[oid] = fmt.Sprintf("%s %s was (%s) and is (%s) on the source now", what, n.name, was, is)
	}
	return out
}

// labelsKept is whether every label of an enum's was ("oid:label") is in
// now under its name: labels were only added (ADD VALUE), none renamed.
func labelsKept(was, now []string) bool {
	have := map[string]bool{}
	for _, l := range now {
		have[l] = true
	}
	for _, l := range was {
		if !have[l] {
			return false
		}
	}
	return true
}

// subsequence is whether every element of a is in b, in a's order.
func subsequence(a, b []string) bool {
	j := 0
	for _, x := range b {
		if j < len(a) && a[j] == x {
			j++
		}
	}
	return j == len(a)
}

// targetDiffers is why the target's type have differs from the source's
// u in a way that changed rows: an enum whose labels are not the target's
// with some added (a label renamed), a composite otherwise (its values
// travel by position); "" for none.
func targetDiffers(u, have *schema.UserType) string {
	switch {
	case u.Kind != have.Kind:
		return u.Incompatible(have)
	case u.Kind == 'e':
		if subsequence(have.Labels, u.Labels) {
			return ""
		}
		return fmt.Sprintf("enum %s has the labels (%s) on the source, (%s) on the target", u, strings.Join(u.Labels, ", "), strings.Join(have.Labels, ", "))
	case u.Kind == 'c':
		if u.Incompatible(have) != "" {
			return fmt.Sprintf("composite type %s has the attributes (%s) on the source, (%s) on the target", u, fields(u.Attrs), fields(have.Attrs))
		}
	}
	return ""
}

// fields is a composite type's attributes as SQL writes them.
func fields(fs []schema.TypeField) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = change.QuoteIdent(f.Name) + " " + f.Type
	}
	return strings.Join(parts, ", ")
}

// followTypes stops, without the event trigger, a run whose source
// altered an enum or a composite type that a replicated table holds
// (ALTER TYPE ... RENAME VALUE; DROP, ADD or RENAME ATTRIBUTE): nothing in
// the stream says so, and the table's rows differ on the target from then
// on (a renamed label's rows keep the old one; composite values travel by
// position and fill the wrong fields). was is the source's types at the
// poll before; nil (the first poll, the end of a run) compares the
// target's types of the same names instead (what happened since the start
// checked them). Each such table is recorded for a new copy (its changes
// are no longer applied) and the run stops: the target's type must be
// made the source's before the copy, which the next start makes. It
// returns the source's types now.
func (ts *Syncer) followTypes(ctx context.Context, src, tgt *pgx.Conn, filter *apply.TableFilter, syncs []target.TableSync, published []schema.TableName, was typeDefs, at change.LSN) (typeDefs, error) {
	now, err := loadTypeDefs(ctx, src)
	if err != nil {
		return was, err
	}
	var changed map[uint32]string
	if was != nil {
		if changed = altered(was, now); len(changed) == 0 {
			return now, nil
		}
	} else if len(now) == 0 {
		return now, nil
	}
	affected := map[schema.TableName][]string{}
	for _, sy := range syncs {
		t := schema.TableName{Schema: sy.Schema, Name: sy.Name}
		if sy.State != target.TableReady || !slices.Contains(published, t) {
			continue
		}
		st, err := schema.LoadTable(ctx, src, t.Schema, t.Name)
		if err != nil || st == nil {
			continue // gone since: the publication's poll follows it
		}
		types, _, err := schema.TypesFor(ctx, src, []*schema.Table{st})
		if err != nil {
			return was, fmt.Errorf("read the types %s holds on the source: %w", t, err)
		}
		for _, u := range types {
			if u.Kind != 'e' && u.Kind != 'c' {
				continue
			}
			if changed != nil {
				if why, ok := changed[u.OID]; ok {
					affected[t] = append(affected[t], why)
				}
				continue
			}
			have, err := schema.LoadType(ctx, tgt, u.Schema, u.Name)
			if err != nil {
				return was, fmt.Errorf("look up type %s on the target: %w", u, err)
			}
			if have == nil {
				continue
			}
			if why := targetDiffers(u, have); why != "" {
				affected[t] = append(affected[t], why)
			}
		}
	}
	if len(affected) == 0 {
		return now, nil
	}
	names := make([]schema.TableName, 0, len(affected))
	for t := range affected {
		names = append(names, t)
	}
	slices.SortFunc(names, schema.TableName.Compare)
	var whys []string
	for _, t := range names {
		if err := ts.recopy(ctx, tgt, filter, t); err != nil {
			return now, err
		}
		whys = append(whys, fmt.Sprintf("%s: %s", t, strings.Join(slices.Compact(affected[t]), "; ")))
	}
	return now, fmt.Errorf("a type that replicated tables hold was altered on the source while the engine ran without the event trigger (seen at source WAL position %s; nothing in the stream says so): %s. "+
		"Their rows on the target hold the old form since (a renamed enum label's rows keep the old label; composite values travel by position and fill other fields), "+
		"so these tables are recorded for a new copy: make the target's types the source's (ALTER TYPE ... RENAME VALUE, DROP and ADD ATTRIBUTE), then restart, and the start copies them anew",
		at, strings.Join(whys, "; "))
}

// FollowTypes is followTypes at the end of a run without the event
// trigger that caught up (the poll may not have looked since the start):
// against the target's types.
func (ts *Syncer) FollowTypes(ctx context.Context, src, tgt *pgx.Conn, filter *apply.TableFilter, syncs []target.TableSync, published []schema.TableName) error {
	var at change.LSN
	var s string
	if err := src.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_lsn()::text").Scan(&s); err == nil {
		at, _ = change.ParseLSN(s)
	}
	_, err := ts.followTypes(ctx, src, tgt, filter, syncs, published, nil, at)
	return err
}
