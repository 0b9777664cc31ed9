package probe

import (
	"context"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

// WALInterval is how often WALLoop reads the source's WAL position.
const WALInterval = 250 * time.Millisecond

// WALLoop reads the source's WAL position (on a standby, the position
// replayed) every WALInterval on a small connection of its own
// (application_name repstream-monitor), reopened after a failure, and
// passes it to f; 0 while the source does not answer. It returns when ctx
// ends. capture --kafka uses it to tell a backlog from a live stream.
func WALLoop(ctx context.Context, dsn string, f func(change.LSN)) {
	p := &prober{side: stats.CompSource, dsn: dsn} // connect and close only
	defer p.close()
	t := time.NewTicker(WALInterval)
	defer t.Stop()
	for {
		lsn, err := readWAL(ctx, p)
		if err != nil {
			p.close()
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

func readWAL(ctx context.Context, p *prober) (change.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.connect(ctx); err != nil {
		return 0, err
	}
	var s string
	err := p.conn.QueryRow(ctx, `SELECT (CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
		ELSE pg_catalog.pg_current_wal_lsn() END)::text`).Scan(&s)
	if err != nil {
		return 0, err
	}
	return change.ParseLSN(s)
}
