package engine

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// pushWALPastStop makes the source write and flush one commit record after
// the --until-caught-up position, so that the walsender can reach it.
//
// The walsender decodes only flushed WAL and reports (keepalive) the end of
// the last record it decoded. pg_current_wal_lsn() is the WAL write position:
// it can lie inside a record that is written but not yet flushed (a page the
// background flush wrote, the rest of a record on the next page), and with an
// idle source nothing flushes that record until the next checkpoint or
// running-xacts record, up to 15 s later. Measured: `bench initial-copy`
// waited 9.3 s after its copy for a source with nothing to send. A
// transaction that takes an xid commits a record past the position, and a
// synchronous commit flushes everything before it; pgoutput sends nothing for
// the empty transaction, but the walsender's position passes the stop.
//
// Best effort: a standby source (no xids) or a refused command only costs
// the wait it would have cost anyway.
func pushWALPastStop(ctx context.Context, src *pgx.Conn, log *slog.Logger) {
	tx, err := src.Begin(ctx)
	if err != nil {
		log.Debug("push the source's WAL past the stop position", "err", err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL synchronous_commit = on")
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT pg_current_xact_id()")
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		log.Debug("push the source's WAL past the stop position", "err", err)
	}
}
