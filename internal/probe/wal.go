package probe

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgdsn"
)

// WALInterval is how often WALLoop reads the source's WAL position.
const WALInterval = 250 * time.Millisecond

// WALLoop reads the source's WAL position (on a standby, the position
// replayed) every WALInterval on a small connection of its own
// (application_name repstream-monitor), reopened after a failure, and
// passes it to f; 0 while the source does not answer. It returns when ctx
// ends. capture --kafka uses it to tell a backlog from a live stream.
func WALLoop(ctx context.Context, dsn string, f func(change.LSN)) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}
	}()
	t := time.NewTicker(WALInterval)
	defer t.Stop()
	for {
		lsn, err := readWAL(ctx, dsn, &conn)
		if err != nil && conn != nil {
			_ = conn.Close(context.Background())
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		f(lsn)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func readWAL(ctx context.Context, dsn string, conn **pgx.Conn) (change.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if *conn == nil || (*conn).IsClosed() {
		cfg, err := pgdsn.ParsePgx(dsn)
		if err != nil {
			return 0, err
		}
		cfg.RuntimeParams["application_name"] = "repstream-monitor"
		if *conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return 0, err
		}
	}
	var s string
	err := (*conn).QueryRow(ctx, `SELECT (CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
		ELSE pg_catalog.pg_current_wal_lsn() END)::text`).Scan(&s)
	if err != nil {
		return 0, err
	}
	return change.ParseLSN(s)
}
