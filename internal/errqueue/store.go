package errqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/target"
)

// Entry is one row of repstream.errors.
type Entry struct {
	ID         int64      `json:"id"`
	Slot       string     `json:"slot"`
	Xid        uint32     `json:"xid"`
	CommitLSN  string     `json:"commit_lsn"`
	EndLSN     string     `json:"end_lsn"`
	CommitTime *time.Time `json:"commit_time,omitempty"`
	Table      string     `json:"table"`
	Key        string     `json:"key"`
	Op         string     `json:"op"`
	Kind       string     `json:"kind"`
	SQLState   string     `json:"sqlstate"`
	Message    string     `json:"message"`
	CreatedAt  time.Time  `json:"created_at"`
	State      string     `json:"state"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Resolution string     `json:"resolution,omitempty"`
	Changes    []byte     `json:"-"` // Encode's JSON; Get only
}

const entryCols = `id, slot, xid, commit_lsn::text, end_lsn::text, commit_time, table_name, key, op, kind, sqlstate, message,
	created_at, state, resolved_at, resolution`

func scanEntry(row pgx.Row, withChanges bool) (Entry, error) {
	var e Entry
	var xid int64
	dst := []any{&e.ID, &e.Slot, &xid, &e.CommitLSN, &e.EndLSN, &e.CommitTime, &e.Table, &e.Key, &e.Op, &e.Kind,
		&e.SQLState, &e.Message, &e.CreatedAt, &e.State, &e.ResolvedAt, &e.Resolution}
	var changes string
	if withChanges {
		dst = append(dst, &changes)
	}
	if err := row.Scan(dst...); err != nil {
		return Entry{}, err
	}
	e.Xid = uint32(xid)
	e.Changes = []byte(changes)
	return e, nil
}

// List returns the slot's parked transactions (all: also those retried or
// skipped), oldest first.
func List(ctx context.Context, conn *pgx.Conn, slot string, all bool) ([]Entry, error) {
	rows, err := conn.Query(ctx, `SELECT `+entryCols+` FROM repstream.errors
WHERE slot = $1 AND ($2 OR state = 'parked') ORDER BY id`, slot, all)
	if err != nil {
		return nil, fmt.Errorf("list the error queue of slot %q: %w", slot, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e, err := scanEntry(rows, false)
		if err != nil {
			return nil, fmt.Errorf("list the error queue of slot %q: %w", slot, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the error queue of slot %q: %w", slot, err)
	}
	return out, nil
}

// ErrNotFound: no such entry for the slot.
var ErrNotFound = errors.New("no such entry in the error queue")

// Get returns one entry with its changes.
func Get(ctx context.Context, conn *pgx.Conn, slot string, id int64) (Entry, error) {
	e, err := scanEntry(conn.QueryRow(ctx, `SELECT `+entryCols+`, changes::text FROM repstream.errors WHERE slot = $1 AND id = $2`, slot, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, fmt.Errorf("entry %d of slot %q: %w", id, slot, ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("read entry %d of slot %q: %w", id, slot, err)
	}
	return e, nil
}

// CountParked returns how many of the slot's entries are parked: source
// transactions the target lacks until they are retried or skipped. 0 when
// the target has no error queue.
func CountParked(ctx context.Context, conn *pgx.Conn, slot string) (int64, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('repstream.errors') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM repstream.errors WHERE slot = $1 AND state = 'parked'`, slot).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the error queue of slot %q: %w", slot, err)
	}
	return n, nil
}

// ParkedIDs returns the ids of the slot's parked entries, oldest first.
func ParkedIDs(ctx context.Context, conn *pgx.Conn, slot string) ([]int64, error) {
	rows, err := conn.Query(ctx, `SELECT id FROM repstream.errors WHERE slot = $1 AND state = 'parked' ORDER BY id`, slot)
	if err != nil {
		return nil, fmt.Errorf("list the error queue of slot %q: %w", slot, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list the error queue of slot %q: %w", slot, err)
	}
	return ids, nil
}

// Retry re-applies parked entry id as it stands now, on conn (an apply
// connection: target.Connect), in one target transaction that also marks it
// retried. If it fails, the transaction is rolled back, the entry stays
// parked, and the error says why.
func Retry(ctx context.Context, conn *pgx.Conn, slot string, id int64) error {
	e, err := Get(ctx, conn, slot, id)
	if err != nil {
		return err
	}
	if e.State != "parked" {
		return fmt.Errorf("entry %d of slot %q is %s, not parked", id, slot, e.State)
	}
	d, err := Decode(e.Changes)
	if err != nil {
		return fmt.Errorf("entry %d: %w", id, err)
	}
	w := target.NewWriter(conn, target.WriterOptions{Slot: slot, Binary: d.Binary})
	fail := func(err error) error {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Rollback(rctx)
		return fmt.Errorf("retry entry %d (source transaction %d, end %s): %w", id, e.Xid, e.EndLSN, err)
	}
	if err := w.Begin(ctx); err != nil {
		return fail(err)
	}
	for _, c := range d.Changes {
		if err := w.Write(ctx, c); err != nil {
			return fail(err)
		}
	}
	// The entry must still be parked when the changes commit: two retries
	// at once apply it once.
	if err := w.ExecInTxn(ctx, `WITH u AS (UPDATE repstream.errors SET state = 'retried', resolved_at = now(), resolution = 'retried'
WHERE slot = $1 AND id = $2 AND state = 'parked' RETURNING 1) SELECT repstream.expect_row(count(*)) FROM u`, slot, id); err != nil {
		return fail(fmt.Errorf("mark it retried: %w", err))
	}
	if err := w.Commit(ctx, nil); err != nil {
		return fail(err)
	}
	return nil
}

// Skip marks parked entry id skipped: its changes are given up (the row
// stays, state 'skipped', as the record of it).
func Skip(ctx context.Context, conn *pgx.Conn, slot string, id int64) error {
	tag, err := conn.Exec(ctx, `UPDATE repstream.errors SET state = 'skipped', resolved_at = now(), resolution = 'skipped by errors skip'
WHERE slot = $1 AND id = $2 AND state = 'parked'`, slot, id)
	if err != nil {
		return fmt.Errorf("skip entry %d of slot %q: %w", id, slot, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("skip entry %d of slot %q: %w (or not parked)", id, slot, ErrNotFound)
	}
	return nil
}

// RequestSkip records that the source transaction whose commit or end LSN is
// lsn is to be skipped by the slot's next run (repstream.skip_requests). It
// returns false when lsn is below the slot's low watermark: that
// transaction is applied, there is nothing to skip. (An LSN the applied
// ranges hold may still be the commit LSN of the next transaction, which
// commits right where another ends: it is recorded.)
func RequestSkip(ctx context.Context, conn *pgx.Conn, slot string, lsn change.LSN) (bool, error) {
	p, err := target.LoadProgress(ctx, conn, slot)
	if err != nil {
		return false, err
	}
	if !p.Exists {
		return false, fmt.Errorf("skip %s: the target has no progress for slot %q", lsn, slot)
	}
	if lsn < p.Low {
		return false, nil
	}
	if _, err := conn.Exec(ctx, `INSERT INTO repstream.skip_requests (slot, lsn) VALUES ($1, $2::pg_lsn) ON CONFLICT DO NOTHING`,
		slot, lsn.String()); err != nil {
		return false, fmt.Errorf("record skip request for %s of slot %q: %w", lsn, slot, err)
	}
	return true, nil
}
