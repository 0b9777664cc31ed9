package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
)

// COPY FREEZE (issue 18). Rows a plain COPY writes carry the copying
// transaction's xid: the first reads on the target set their hint bits and
// a later (anti-wraparound) vacuum freezes them, writing every page of a
// freshly copied database again. A table copied in one piece is instead
// copied as
//
//	BEGIN ISOLATION LEVEL READ COMMITTED
//	LOCK TABLE ONLY t IN ACCESS EXCLUSIVE MODE  -- waiting at most freezeLockTimeout
//	SELECT EXISTS (SELECT 1 FROM ONLY t)        -- still empty?
//	TRUNCATE ONLY t
//	COPY t (...) FROM STDIN WITH (FREEZE[, FORMAT binary])
//	COMMIT
//
// COPY FREEZE needs the table created or truncated in the copying
// transaction; its rows are then written frozen, and (PostgreSQL 14+) its
// pages all-visible and all-frozen in the visibility map. READ COMMITTED:
// under REPEATABLE READ (a default_transaction_isolation) the first
// statement's snapshot would stay registered and FREEZE would refuse
// ("prior transaction activity").
//
// The TRUNCATE drops nothing: every path that copies a table has emptied it
// just before (CheckTargets: checked empty, or emptied with --truncate, or
// emptied as belonging to an interrupted copy), and apply writes nothing to
// a table before its copy is complete (apply.TableFilter). The emptiness
// check under the lock makes that so whatever else writes to the target:
// rows found there keep the table out of FREEZE (plain COPY, as without it).
//
// FREEZE is skipped — the plain autocommit COPY — for a table smaller than
// freezeMinSize (logged at debug level), and when it cannot work (logged
// once at info level, with the reason): a table copied in ranges (each
// range is a transaction of its own, and only the one that truncated the
// table could freeze); a partitioned target table (COPY FREEZE refuses it) or one that
// is not an ordinary table; a foreign key of another target table
// referencing it (TRUNCATE refuses); no TRUNCATE privilege; a trigger that
// fires on TRUNCATE even in replica sessions (ENABLE ALWAYS), or a
// publication of the target that sends the table's TRUNCATEs on (its
// subscribers would get a TRUNCATE the source never ran); these are read
// up front (noFreezeReason). At copy time, a TRUNCATE or lock refused for
// such a reason (pgerr.TruncateRefused: also a lock held by someone else
// beyond freezeLockTimeout) falls back the same way.

// freezeLockTimeout bounds the wait for the ACCESS EXCLUSIVE lock the
// TRUNCATE needs: a target session reading the table (a report, pg_dump)
// makes the copy fall back to a plain COPY rather than wait for it.
const freezeLockTimeout = "2s"

// freezeMinSize is the smallest table (bytes of heap on the source) copied
// with COPY FREEZE. Its TRUNCATE and the commit that follows cost the
// target a few milliseconds a table (new files for the table, its TOAST
// table and indexes; measured 3-4 ms on PostgreSQL 15, against under 1 ms
// for the plain COPY's commit) — a fifth of the copy of a 1 MiB table, a
// fortieth of that of an 8 MiB one — while what it saves, a later freeze of
// the table by vacuum, is small for a small table. A database of many
// small tables would copy markedly slower with FREEZE on every one.
const freezeMinSize = 8 << 20

// planFreeze decides whether tp, of size bytes on the source, is copied
// with COPY FREEZE (tp.freeze), and logs why not.
func planFreeze(ctx context.Context, dst *pgx.Conn, tp *tablePlan, size int64, log *slog.Logger) error {
	t := tp.name
	switch {
	case len(tp.ranges) > 1:
		return nil // the "copying a table in ranges" line says why
	case size < freezeMinSize:
		log.Debug("copying without FREEZE", "table", t.String(), "reason", fmt.Sprintf("smaller than %d MiB", freezeMinSize>>20))
		return nil
	}
	reason, err := noFreezeReason(ctx, dst, t)
	if err != nil {
		return err
	}
	tp.freeze = reason == ""
	if !tp.freeze {
		log.Info("copying without FREEZE", "table", t.String(), "reason", reason)
	}
	return nil
}

// noFreezeReason returns why the target table t cannot take COPY FREEZE,
// "" when it can.
func noFreezeReason(ctx context.Context, dst *pgx.Conn, t schema.TableName) (string, error) {
	var relkind string
	var mayTruncate bool
	var referencedBy, trigger, publication *string
	err := dst.QueryRow(ctx, `SELECT c.relkind::text, pg_catalog.has_table_privilege(c.oid, 'TRUNCATE'),
			(SELECT n.nspname || '.' || r.relname FROM pg_catalog.pg_constraint f
			  JOIN pg_catalog.pg_class r ON r.oid = f.conrelid JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace
			  WHERE f.contype = 'f' AND f.confrelid = c.oid AND f.conrelid <> c.oid
			  ORDER BY 1 LIMIT 1),
			(SELECT g.tgname::text FROM pg_catalog.pg_trigger g
			  WHERE g.tgrelid = c.oid AND g.tgenabled = 'A' AND g.tgtype::int & 32 <> 0 ORDER BY 1 LIMIT 1),
			(SELECT p.pubname::text FROM pg_catalog.pg_publication p JOIN pg_catalog.pg_publication_tables pt ON pt.pubname = p.pubname
			  WHERE p.pubtruncate AND pt.schemaname = cn.nspname AND pt.tablename = c.relname ORDER BY 1 LIMIT 1)
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace cn ON cn.oid = c.relnamespace
		WHERE c.oid = $1::regclass`, t.Quoted()).Scan(&relkind, &mayTruncate, &referencedBy, &trigger, &publication)
	if err != nil {
		return "", fmt.Errorf("snapshot of %s: read whether the target table can take COPY FREEZE: %w", t, err)
	}
	switch {
	case relkind == "p":
		return "the target table is partitioned", nil
	case relkind != "r":
		return "the target is not an ordinary table (relkind " + relkind + ")", nil
	case referencedBy != nil:
		return "a foreign key of " + *referencedBy + " references the target table (TRUNCATE would refuse)", nil
	case !mayTruncate:
		return "the target role lacks the TRUNCATE privilege", nil
	case trigger != nil:
		return "trigger " + *trigger + " of the target table fires on TRUNCATE (ENABLE ALWAYS)", nil
	case publication != nil:
		return "the target's publication " + *publication + " publishes the table's TRUNCATEs", nil
	}
	return "", nil
}

// beginFreeze opens the target transaction of a COPY FREEZE of tp (freeze.go's
// comment): it reports true with the transaction open and the table
// truncated in it (the caller commits after the COPY, or rolls back), or
// false, with no transaction open, when the table must be copied the plain
// way: the lock or the TRUNCATE refused (pgerr.TruncateRefused), or rows
// found in the table. Any other failure is an error (the transaction
// rolled back where the connection still allows).
func beginFreeze(ctx context.Context, dst *pgx.Conn, tp *tablePlan, log *slog.Logger) (bool, error) {
	t := tp.name
	rollback := func() error {
		if _, err := dst.Exec(ctx, "ROLLBACK"); err != nil {
			return fmt.Errorf("snapshot of %s: roll back on the target: %w", t, err)
		}
		return nil
	}
	if _, err := dst.Exec(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '"+freezeLockTimeout+"'; "+
		"LOCK TABLE ONLY "+t.Quoted()+" IN ACCESS EXCLUSIVE MODE; SET LOCAL lock_timeout TO DEFAULT"); err != nil {
		if !pgerr.TruncateRefused(err) {
			return false, errors.Join(fmt.Errorf("snapshot of %s: lock the target table for COPY FREEZE: %w", t, err), rollback())
		}
		log.Info("copying without FREEZE", "table", t.String(), "reason", "lock on the target table not had: "+pgerr.Message(err))
		return false, rollback()
	}
	var nonEmpty bool
	if err := dst.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM ONLY "+t.Quoted()+")").Scan(&nonEmpty); err != nil {
		return false, errors.Join(fmt.Errorf("snapshot of %s: check the target table is empty: %w", t, err), rollback())
	}
	if nonEmpty {
		log.Warn("copying without FREEZE: the target table has rows this copy did not write; they are kept", "table", t.String())
		return false, rollback()
	}
	if _, err := dst.Exec(ctx, "TRUNCATE ONLY "+t.Quoted()); err != nil {
		if !pgerr.TruncateRefused(err) {
			return false, errors.Join(fmt.Errorf("snapshot of %s: truncate the target table for COPY FREEZE: %w", t, err), rollback())
		}
		log.Info("copying without FREEZE", "table", t.String(), "reason", "TRUNCATE refused: "+pgerr.Message(err))
		return false, rollback()
	}
	return true, nil
}
