package target

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
)

// errorQueueSchema creates the error queue (EnsureState runs it with
// stateSchema).
//
// repstream.errors holds, per slot, source transactions apply did not apply
// (--on-error park, or skipped by a skip request): the transaction's
// identity, the change that failed (table, key, kind, SQLSTATE, message)
// and all its changes (changes, errqueue's JSON encoding), so that it can be
// re-applied. state is 'parked' until `repstream errors retry` applies it
// ('retried') or `repstream errors skip` gives it up ('skipped').
//
// Invariant: a row is inserted in the same target transaction that records
// its end LSN in repstream.applied — the transaction counts as applied for
// exactly-once and the watermark, and is never lost: it is either on the
// target or in this table (or both, once retried).
//
// repstream.skip_requests holds LSNs a user asked to skip (`repstream errors
// skip --lsn`): the commit or end LSN of a source transaction a --on-error
// stop run stopped on. The next run treats the transaction with that LSN as
// parked-and-skipped (a row of state 'skipped' in repstream.errors, in the
// same transaction that records it as applied and deletes the request).
//
// repstream.expect_row raises RS001 (pgerr.RowMissing) when n is 0, RS002
// (pgerr.RowsMany) when it is more than 1: apply's UPDATE and DELETE
// statements pass it their row count, so that a row missing on the target,
// or a key that matches several there, fails the statement (and the target
// transaction) on the server.
//
// repstream.local_older(xmin, source commit time) is true unless the row
// version was written by a transaction of the target's own (replication
// origin 0, per track_commit_timestamp) committed at or after the source
// transaction; then it raises RS003 (pgerr.LocalNewer). It is true for a
// version of the running transaction, a frozen one, one older than the
// commit timestamps kept, one a replication wrote (an origin), and when
// the commit time is NULL (not known: not checked). Apply's UPDATEs and
// DELETEs call it with CheckLocalWrites.
const errorQueueSchema = `
CREATE TABLE IF NOT EXISTS repstream.errors (
	id bigserial PRIMARY KEY,
	slot text NOT NULL,
	xid bigint NOT NULL,
	commit_lsn pg_lsn NOT NULL,
	end_lsn pg_lsn NOT NULL,
	commit_time timestamptz,
	table_name text NOT NULL DEFAULT '',
	key text NOT NULL DEFAULT '',
	op text NOT NULL DEFAULT '',
	kind text NOT NULL,
	sqlstate text NOT NULL DEFAULT '',
	message text NOT NULL DEFAULT '',
	changes jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	state text NOT NULL DEFAULT 'parked' CHECK (state IN ('parked', 'retried', 'skipped')),
	resolved_at timestamptz,
	resolution text NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS errors_slot_state ON repstream.errors (slot, state, id);
CREATE TABLE IF NOT EXISTS repstream.skip_requests (
	slot text NOT NULL,
	lsn pg_lsn NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (slot, lsn)
);
CREATE OR REPLACE FUNCTION repstream.expect_row(n bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN
	IF n = 0 THEN
		RAISE EXCEPTION 'no row to change on the target' USING ERRCODE = 'RS001';
	ELSIF n > 1 THEN
		RAISE EXCEPTION 'the key matched % rows on the target, not one', n USING ERRCODE = 'RS002';
	END IF;
	RETURN n;
END
$f$;
CREATE OR REPLACE FUNCTION repstream.local_older(x xid, src timestamptz) RETURNS boolean LANGUAGE plpgsql STABLE AS $f$
DECLARE
	r record;
BEGIN
	IF src IS NULL THEN
		RETURN true;
	END IF;
	-- An assignment, not a SELECT: a third of the cost per row.
	r := pg_catalog.pg_xact_commit_timestamp_origin(x);
	IF r.timestamp IS NULL OR r.roident <> 0 OR r.timestamp < src THEN
		RETURN true;
	END IF;
	RAISE EXCEPTION 'the target''s row was written by a transaction of the target itself (xid %, committed at %), not before the source transaction (committed at %): both sides wrote it at once', x, r.timestamp, src USING ERRCODE = 'RS003';
END
$f$;`

// Parked is one source transaction put into repstream.errors.
type Parked struct {
	Info     change.TxnInfo
	Table    string // schema.table of the change that failed
	Key      string
	Op       change.Op
	Kind     string // a ConflictKind, or "skip_lsn" for a skip request
	SQLState string
	Message  string
	State    string // "parked" or "skipped"
	Changes  []byte // the transaction's changes (errqueue.Encode), JSON
}

// Park records p in repstream.errors and its end LSN in repstream.applied
// (with applied, the end LSNs recorded as applied, usually just p's), and
// drops skip requests for its commit or end LSN, in one target transaction.
// It returns the row's id and a target WAL position at or after the commit
// (as CommitLSN does). Call it outside a transaction.
func (w *Writer) Park(ctx context.Context, p Parked, applied []change.LSN) (id int64, lsn change.LSN, err error) {
	if w.state.inTxn() {
		return 0, 0, errors.New("park transaction: a target transaction is open")
	}
	if len(applied) == 0 {
		applied = []change.LSN{p.Info.EndLSN}
	}
	state := p.State
	if state == "" {
		state = "parked"
	}
	var commitTime *time.Time
	if !p.Info.CommitTime.IsZero() {
		commitTime = &p.Info.CommitTime
	}
	op := ""
	if p.Op != 0 {
		op = p.Op.String()
	}
	err = pgx.BeginFunc(ctx, w.conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO repstream.errors
	(slot, xid, commit_lsn, end_lsn, commit_time, table_name, key, op, kind, sqlstate, message, changes, state,
	 resolved_at, resolution)
VALUES ($1, $2, $3::pg_lsn, $4::pg_lsn, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13,
	CASE WHEN $13 = 'skipped' THEN now() END, CASE WHEN $13 = 'skipped' THEN 'skip requested' ELSE '' END)
RETURNING id`,
			w.opts.Slot, int64(p.Info.Xid), p.Info.CommitLSN.String(), p.Info.EndLSN.String(), commitTime,
			p.Table, p.Key, op, p.Kind, p.SQLState, p.Message, string(p.Changes), state).Scan(&id); err != nil {
			return fmt.Errorf("insert into repstream.errors: %w", err)
		}
		first, last := applied[0], applied[0]
		for _, l := range applied[1:] {
			first, last = min(first, l), max(last, l)
		}
		if _, err := tx.Exec(ctx, appliedInsert, w.opts.Slot, last.String(), first.String()); err != nil {
			return fmt.Errorf("record applied: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM repstream.skip_requests WHERE slot = $1 AND lsn IN ($2::pg_lsn, $3::pg_lsn)`,
			w.opts.Slot, p.Info.CommitLSN.String(), p.Info.EndLSN.String()); err != nil {
			return fmt.Errorf("drop skip request: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("park source transaction %d (end %s) of slot %q: %w", p.Info.Xid, p.Info.EndLSN, w.opts.Slot, err)
	}
	var s string
	if err := w.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0, 0, fmt.Errorf("park source transaction %d: read the WAL position: %w", p.Info.Xid, err)
	}
	if lsn, err = change.ParseLSN(s); err != nil {
		return 0, 0, fmt.Errorf("park source transaction %d: %w", p.Info.Xid, err)
	}
	w.applied.Add(int64(len(applied)))
	return id, lsn, nil
}

// ExecInTxn flushes every buffered change and runs sql with args inside the
// Writer's transaction (Begin first): what must commit with the changes,
// such as the error queue's resolution of a retried transaction.
func (w *Writer) ExecInTxn(ctx context.Context, sql string, args ...any) error {
	if err := w.usable("run statement"); err != nil {
		return err
	}
	if err := w.ensureBegun(ctx); err != nil {
		w.fail()
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.fail()
		return err
	}
	if _, err := w.conn.Exec(ctx, sql, args...); err != nil {
		w.fail()
		return fmt.Errorf("run %q: %w", sql, err)
	}
	return nil
}

// SkipRequests are LSNs (commit or end) of source transactions a user asked
// to skip (repstream.skip_requests). Not safe for concurrent use: the
// coordinator alone takes from it.
type SkipRequests map[change.LSN]bool

// Take reports whether info's end or commit LSN is requested to be skipped,
// and forgets the request: one request skips one transaction, the first in
// commit order that matches (the end LSN of one transaction can be the
// commit LSN of the next).
func (s SkipRequests) Take(info change.TxnInfo) bool {
	if len(s) == 0 {
		return false
	}
	for _, l := range [2]change.LSN{info.EndLSN, info.CommitLSN} {
		if s[l] {
			delete(s, l)
			return true
		}
	}
	return false
}

// LoadSkipRequests reads the slot's skip requests, dropping those below low
// (their transactions are applied: low is the end of an applied one, and a
// transaction not applied commits at or after it).
func LoadSkipRequests(ctx context.Context, conn *pgx.Conn, slot string, low change.LSN) (SkipRequests, error) {
	if _, err := conn.Exec(ctx, `DELETE FROM repstream.skip_requests WHERE slot = $1 AND lsn < $2::pg_lsn`, slot, low.String()); err != nil {
		return nil, fmt.Errorf("drop stale skip requests of slot %q: %w", slot, err)
	}
	rows, err := conn.Query(ctx, `SELECT lsn::text FROM repstream.skip_requests WHERE slot = $1`, slot)
	if err != nil {
		return nil, fmt.Errorf("load skip requests of slot %q: %w", slot, err)
	}
	lsns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("load skip requests of slot %q: %w", slot, err)
	}
	out := SkipRequests{}
	for _, s := range lsns {
		l, err := change.ParseLSN(s)
		if err != nil {
			return nil, fmt.Errorf("load skip requests of slot %q: %w", slot, err)
		}
		out[l] = true
	}
	return out, nil
}
