package target

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/schema"
)

// typesSchema creates repstream.types: per slot, each user-defined type
// (composite, enum, range, domain) a replicated column of the target
// holds, with its structure (schema.UserType.Structure) as the target had
// it when it was known to be what the stream writes into:
//
//   - recorded where absent when the target's type was checked equal to
//     the source's: a start's tables check (install.PrepareTables), a
//     table added (install.CheckAddable), a table or column a schema
//     change made (with the types repstream made for it);
//   - replaced by a start whose tables check requires the target's types
//     to be the source's (no schema change of a type can be pending:
//     a first start, a resumed copy, a run that follows no type changes),
//     and by every schema change of a type repstream applies on the
//     target (ALTER TYPE of an enum or a composite), in the same target
//     transaction as the change.
//
// So a recorded type whose target structure differs from its record was
// changed by someone other than repstream: a restart (and every schema
// change) stops there instead of taking the difference for a schema change
// still in the stream, as the stream's rows, written by position or by
// label, would land changed without an error (TypeDrift).
const typesSchema = `
CREATE TABLE IF NOT EXISTS repstream.types (
	slot text NOT NULL,
	type_schema text NOT NULL,
	type_name text NOT NULL,
	structure text NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (slot, type_schema, type_name)
);`

// TypeRecord is one row of repstream.types.
type TypeRecord struct {
	Schema, Name string
	Structure    string // schema.UserType.Structure, as recorded
}

// String is the type's quoted, schema-qualified name.
func (r TypeRecord) String() string {
	return change.QuoteIdent(r.Schema) + "." + change.QuoteIdent(r.Name)
}

// LoadTypeRecords returns slot's recorded types, by name.
func LoadTypeRecords(ctx context.Context, q schema.Querier, slot string) ([]TypeRecord, error) {
	rows, err := q.Query(ctx, `SELECT type_schema, type_name, structure FROM repstream.types WHERE slot = $1 ORDER BY 1, 2`, slot)
	if err != nil {
		return nil, fmt.Errorf("read the recorded types of slot %q: %w", slot, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TypeRecord])
	if err != nil {
		return nil, fmt.Errorf("read the recorded types of slot %q: %w", slot, err)
	}
	return out, nil
}

// RecordTypes records types (as the target has them) for slot: those not
// recorded yet, and with replace those recorded too.
func RecordTypes(ctx context.Context, conn *pgx.Conn, slot string, types []*schema.UserType, replace bool) error {
	if len(types) == 0 {
		return nil
	}
	var schemas, names, structs []string
	for _, t := range types {
		schemas, names, structs = append(schemas, t.Schema), append(names, t.Name), append(structs, t.Structure())
	}
	conflict := "DO NOTHING"
	if replace {
		conflict = "DO UPDATE SET structure = excluded.structure, recorded_at = now() WHERE repstream.types.structure <> excluded.structure"
	}
	if _, err := conn.Exec(ctx, `INSERT INTO repstream.types (slot, type_schema, type_name, structure)
SELECT $1, s, n, t FROM unnest($2::text[], $3::text[], $4::text[]) AS u(s, n, t)
ON CONFLICT (slot, type_schema, type_name) `+conflict, slot, schemas, names, structs); err != nil {
		return fmt.Errorf("record the target's types of slot %q: %w", slot, err)
	}
	return nil
}

// ForgetTypes removes slot's records of the types named (schema.name).
func ForgetTypes(ctx context.Context, conn *pgx.Conn, slot string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, `DELETE FROM repstream.types WHERE slot = $1 AND type_schema || '.' || type_name = ANY($2)`, slot, names); err != nil {
		return fmt.Errorf("forget recorded types of slot %q: %w", slot, err)
	}
	return nil
}

// TablesTypes returns the user-defined types that the target tables' columns
// hold (schema.TypesFor, through arrays, domains, composites and ranges),
// each with the columns ("schema.table"."column") holding it. A column of a
// type repstream cannot describe is passed over.
func TablesTypes(ctx context.Context, q schema.Querier, tables []*schema.Table) ([]*schema.UserType, map[string][]string, error) {
	var out []*schema.UserType
	holders := map[string][]string{}
	for _, t := range tables {
		for _, c := range t.Columns {
			if c.TypeOID < FirstNormalOID {
				continue
			}
			types, _, err := schema.TypesFor(ctx, q, []*schema.Table{{Schema: t.Schema, Name: t.Name, Columns: []schema.Column{c}}})
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, err
				}
				continue // a base type of the user's: not recorded
			}
			for _, u := range types {
				k := u.String()
				if _, ok := holders[k]; !ok {
					out = append(out, u)
				}
				holders[k] = append(holders[k], fmt.Sprintf("%s.%q", t.TableName(), c.Name))
			}
		}
	}
	return out, holders, nil
}

// TypeDrift is a recorded type whose structure on the target is no longer
// its record's: changed there by someone other than repstream.
type TypeDrift struct {
	Type     TypeRecord // the record
	Now      string     // the target's structure now
	HeldBy   []string   // the columns holding it ("schema.table"."column")
	ViaTable string     // a schema change's table that found it ("" at a start)
}

// ErrTypeChanged is wrapped by the error of a recorded type changed on the
// target by someone other than repstream.
var ErrTypeChanged = errors.New("a type of the target changed since repstream recorded it")

// TypeDriftError says what drifted and the way out.
func TypeDriftError(drift []TypeDrift) error {
	if len(drift) == 0 {
		return nil
	}
	lines := make([]string, len(drift))
	for i, d := range drift {
		lines[i] = fmt.Sprintf("type %s, held by %s: recorded as %s, the target's is now %s",
			d.Type, strings.Join(d.HeldBy, ", "), d.Type.Structure, d.Now)
	}
	return fmt.Errorf("%w, not by a schema change repstream applied (the source's rows, whose values travel as the type's text, by position or by label, would be stored changed):\n  %s\n"+
		"make the target's type as it was recorded (ALTER TYPE ...), then restart; or drop the tables holding it on the target, and copy them again: "+
		"repstream tables add --create-tables (or make them yourself, with the type as the source has it, and repstream tables add --truncate)",
		ErrTypeChanged, strings.Join(lines, "\n  "))
}

// holdersSQL names the columns of tables (ordinary and partitioned, outside
// the system's schemas and repstream's) whose type holds type $1: it, an
// array of it, a domain over it, a composite or range holding it, at any
// depth.
const holdersSQL = `WITH RECURSIVE h(oid) AS (
	SELECT $1::oid
	UNION
	SELECT t.oid FROM pg_catalog.pg_type t, h
	WHERE t.typelem = h.oid AND t.typcategory = 'A' OR t.typbasetype = h.oid
	   OR t.oid IN (SELECT r.rngtypid FROM pg_catalog.pg_range r WHERE r.rngsubtype = h.oid)
	   OR t.typrelid IN (SELECT a.attrelid FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
	                     WHERE c.relkind = 'c' AND a.atttypid = h.oid AND NOT a.attisdropped)
)
SELECT pg_catalog.format('%I.%I.%I', n.nspname, c.relname, a.attname)
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE a.atttypid IN (SELECT oid FROM h) AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'repstream')
ORDER BY 1`

// checkTypeRecords stops a schema change (before it is applied, in its
// target transaction) when a type slot records is no longer on the target
// as recorded: changed by hand since, the change would take it into the
// record, and the rows after it would land changed. A recorded type the
// target no longer has, or that no column holds now, is forgotten.
func (w *Writer) checkTypeRecords(ctx context.Context, table schema.TableName) error {
	if w.opts.Slot == "" {
		return nil
	}
	recs, err := LoadTypeRecords(ctx, w.conn, w.opts.Slot)
	if err != nil {
		return err
	}
	var drift []TypeDrift
	var gone []string
	for _, r := range recs {
		now, err := schema.LoadType(ctx, w.conn, r.Schema, r.Name)
		if err != nil {
			return fmt.Errorf("look up recorded type %s on the target: %w", r, err)
		}
		if now != nil && now.Structure() == r.Structure {
			continue
		}
		var held []string
		if now != nil {
			rows, err := w.conn.Query(ctx, holdersSQL, now.OID)
			if err != nil {
				return fmt.Errorf("look up the columns holding type %s on the target: %w", r, err)
			}
			if held, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return fmt.Errorf("look up the columns holding type %s on the target: %w", r, err)
			}
		}
		if len(held) == 0 {
			gone = append(gone, r.Schema+"."+r.Name)
			continue
		}
		drift = append(drift, TypeDrift{Type: r, Now: now.Structure(), HeldBy: held, ViaTable: table.String()})
	}
	if err := TypeDriftError(drift); err != nil {
		return err
	}
	return ForgetTypes(ctx, w.conn, w.opts.Slot, gone)
}

// recordTypesAfter records, in the target transaction of schema change
// msg, the types it leaves on the target: an enum's or a composite's ALTER
// TYPE replaces the type's record (repstream made it so; the types its
// attributes hold are recorded where absent); a table made or altered has
// the types of its columns recorded where absent (made from the source's
// definitions, or taken as the target has them).
func (w *Writer) recordTypesAfter(ctx context.Context, msg *ddlmsg.Message) error {
	if w.opts.Slot == "" || msg.Partition != nil || msg.Dropped {
		return nil
	}
	var nsp, name string
	switch {
	case msg.Enum != nil:
		nsp, name = msg.Enum.Schema, msg.Enum.Name
	case msg.Composite != nil:
		nsp, name = msg.Composite.Schema, msg.Composite.Name
	}
	if name != "" {
		have, err := schema.LoadType(ctx, w.conn, nsp, name)
		if err != nil || have == nil {
			return err
		}
		types, _, err := schema.TypesFor(ctx, w.conn, []*schema.Table{{Schema: "-", Name: "-", Columns: []schema.Column{{Name: name, TypeOID: have.OID}}}})
		if err != nil {
			return err
		}
		if err := RecordTypes(ctx, w.conn, w.opts.Slot, types, false); err != nil {
			return err
		}
		return RecordTypes(ctx, w.conn, w.opts.Slot, []*schema.UserType{have}, true)
	}
	tn := schema.NameFromDDL(&msg.Table)
	tab, err := schema.LoadTable(ctx, w.conn, tn.Schema, tn.Name)
	if errors.Is(err, schema.ErrTableNotFound) {
		return nil // taken up (copied anew), or left to the stream
	}
	if err != nil {
		return err
	}
	types, _, err := TablesTypes(ctx, w.conn, []*schema.Table{tab})
	if err != nil {
		return err
	}
	return RecordTypes(ctx, w.conn, w.opts.Slot, types, false)
}
