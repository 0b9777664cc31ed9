package sequences

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
)

// Action is what Sync did to one target sequence.
type Action string

const (
	Set       Action = "set"               // moved to the source's position
	Unchanged Action = "unchanged"         // already at the source's position
	KeptAhead Action = "kept (ahead)"      // the target was ahead: left alone
	Missing   Action = "missing on target" // only with an error
)

// Position is a sequence's state: last_value and is_called, as setval takes
// them.
type Position struct {
	LastValue int64
	IsCalled  bool
}

// next is the value nextval would return, for a sequence stepping by inc.
func (p Position) next(inc int64) int64 {
	if p.IsCalled {
		return p.LastValue + inc
	}
	return p.LastValue
}

// Result is one sequence's outcome.
type Result struct {
	Sequence schema.TableName
	Source   Position
	Target   Position // before Sync
	Action   Action
}

// usedQuery lists the sequences owned by (deptype 'a' serial, 'i' identity)
// or named in a default of the given tables' columns — or of their
// partitioned ancestors', for a publication that lists leaf partitions.
const usedQuery = `
WITH named AS (SELECT to_regclass(n) AS oid FROM unnest($1::text[]) AS n),
     t AS (SELECT oid FROM named
           UNION SELECT pg_catalog.pg_partition_ancestors(oid) FROM named)
SELECT sn.nspname::text, s.relname::text
FROM pg_catalog.pg_depend d
JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S'
JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
  AND d.deptype IN ('a', 'i') AND d.refobjid IN (SELECT oid FROM t)
UNION
SELECT sn.nspname::text, s.relname::text
FROM pg_catalog.pg_attrdef ad
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
     AND d.refclassid = 'pg_catalog.pg_class'::regclass
JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
WHERE ad.adrelid IN (SELECT oid FROM t)
ORDER BY 1, 2`

// Used returns the sequences that tables use on the source, in name order.
func Used(ctx context.Context, src schema.Querier, tables []schema.TableName) ([]schema.TableName, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Quoted()
	}
	rows, err := src.Query(ctx, usedQuery, names)
	if err != nil {
		return nil, fmt.Errorf("list the sequences of the replicated tables: %w", err)
	}
	seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schema.TableName, error) {
		var n schema.TableName
		err := r.Scan(&n.Schema, &n.Name)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the sequences of the replicated tables: %w", err)
	}
	return seqs, nil
}

// ErrMissing is wrapped when a sequence does not exist on the target.
var ErrMissing = errors.New("sequence missing on the target")

// read returns a sequence's position and increment.
//
// Only a sequence is read: a view of that name (made where the sequence
// is missing, or in its place) would run what it calls as repstream's
// role, a superuser's often, even an IMMUTABLE function while the read
// is planned. So its catalog rows are read first, in the transaction of
// the read, and locked FOR SHARE (when the role may: a superuser's), so
// that neither it nor its schema can be dropped or renamed before the
// read names it.
func read(ctx context.Context, q schema.Querier, seq schema.TableName) (Position, int64, error) {
	var p Position
	var inc int64
	if b, ok := q.(interface {
		Begin(context.Context) (pgx.Tx, error)
	}); ok {
		tx, err := b.Begin(ctx)
		if err != nil {
			return p, 0, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		q = tx
	}
	var super bool
	if err := q.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return p, 0, err
	}
	lock := ""
	if super {
		lock = " FOR SHARE OF c, n"
	}
	var kind string
	err := q.QueryRow(ctx, `SELECT c.relkind::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = pg_catalog.to_regclass($1)`+lock, seq.Quoted()).Scan(&kind)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return p, 0, fmt.Errorf("%s does not exist", seq)
	case err != nil:
		return p, 0, err
	case kind != "S":
		return p, 0, fmt.Errorf("%s is not a sequence there (relkind %s): it is not read, since reading it would run what it calls", seq, kind)
	}
	err = q.QueryRow(ctx, `SELECT s.last_value, s.is_called, p.seqincrement FROM `+seq.Quoted()+` s, pg_catalog.pg_sequence p
		WHERE p.seqrelid = $1::regclass`, seq.Quoted()).Scan(&p.LastValue, &p.IsCalled, &inc)
	return p, inc, err
}

// Sync sets every sequence of seqs on the target to its position on the
// source. It reads and checks them all first: a sequence missing on the
// target is an error naming it, and then nothing is changed. (setval is not
// transactional, so the check has to come before the first change.)
func Sync(ctx context.Context, src, tgt schema.Querier, seqs []schema.TableName) ([]Result, error) {
	results := make([]Result, 0, len(seqs))
	incs := make([]int64, 0, len(seqs))
	var missing []string
	for _, s := range seqs {
		p, _, err := read(ctx, src, s)
		if err != nil {
			return nil, fmt.Errorf("read sequence %s on the source: %w", s, err)
		}
		r := Result{Sequence: s, Source: p}
		var exists bool
		if err := tgt.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Quoted()).Scan(&exists); err != nil {
			return nil, fmt.Errorf("look up sequence %s on the target: %w", s, err)
		}
		var inc int64
		if !exists {
			r.Action = Missing
			missing = append(missing, s.String())
		} else if r.Target, inc, err = read(ctx, tgt, s); err != nil {
			return nil, fmt.Errorf("read sequence %s on the target: %w", s, err)
		}
		results = append(results, r)
		incs = append(incs, inc)
	}
	if len(missing) > 0 {
		return results, fmt.Errorf("%w: %s (create them, or run with --create-tables); no sequence was changed",
			ErrMissing, strings.Join(missing, ", "))
	}
	for i := range results {
		r := &results[i]
		switch {
		case r.Target == r.Source:
			r.Action = Unchanged
		case aheadOf(r.Target, r.Source, incs[i]):
			r.Action = KeptAhead
		default:
			var ignored int64
			if err := tgt.QueryRow(ctx, "SELECT pg_catalog.setval($1::regclass, $2, $3)", r.Sequence.Quoted(), r.Source.LastValue, r.Source.IsCalled).Scan(&ignored); err != nil {
				return results[:i], fmt.Errorf("set sequence %s on the target to %d: %w", r.Sequence, r.Source.LastValue, err)
			}
			r.Action = Set
		}
	}
	return results, nil
}

// aheadOf reports whether target would hand out a value past the one source
// would hand out next, for a sequence stepping by inc.
func aheadOf(target, source Position, inc int64) bool {
	if inc < 0 {
		return target.next(inc) < source.next(inc)
	}
	return target.next(inc) > source.next(inc)
}

// CreateSQL returns the statement that recreates seq — its type, start,
// increment, bounds, cache and cycle as on the source, at its start — for a
// column default that draws from it (serial). identity is true for the
// sequence of an identity column, which the column creates itself: then sql
// is "".
func CreateSQL(ctx context.Context, src schema.Querier, seq schema.TableName) (sql string, identity bool, err error) {
	var typ string
	var start, inc, minv, maxv, cache int64
	var cycle bool
	err = src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::regclass
			AND d.objid = $1::regclass AND d.deptype = 'i'),
		pg_catalog.format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle
		FROM pg_catalog.pg_sequence s WHERE s.seqrelid = $1::regclass`, seq.Quoted()).Scan(&identity, &typ, &start, &inc, &minv, &maxv, &cache, &cycle)
	if err != nil {
		return "", false, fmt.Errorf("read sequence %s on the source: %w", seq, err)
	}
	if identity {
		return "", true, nil
	}
	sql = fmt.Sprintf("CREATE SEQUENCE IF NOT EXISTS %s AS %s INCREMENT BY %d MINVALUE %d MAXVALUE %d START WITH %d CACHE %d",
		seq.Quoted(), typ, inc, minv, maxv, start, cache)
	if cycle {
		sql += " CYCLE"
	}
	return sql, false, nil
}
