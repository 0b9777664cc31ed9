package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lock waits said aloud. A statement repstream runs on a target table
// outside apply — a start's look at whether a table is empty, the
// TRUNCATE before a copy — waits for any session that holds a conflicting
// lock on it: an application's transaction left open after it wrote the
// table, a LOCK TABLE, a long ALTER TABLE. PostgreSQL waits without a
// limit and without a word, so such a start looked hung. NoteLockWait says
// who holds it up, and keeps saying it until the lock is released; the
// statement still waits (a user's transaction ending is the normal way
// out, and failing the start instead would only move the wait).
const (
	// lockWaitFirst: how long a statement runs before NoteLockWait looks
	// for sessions it waits for (most statements are done long before).
	lockWaitFirst = 5 * time.Second
	// lockWaitEvery: how often it says so again while the wait lasts.
	lockWaitEvery = 30 * time.Second
)

// blockerSQL describes the session a (a row of pg_stat_activity) that
// another waits for.
const blockerSQL = `pg_catalog.format('pid %s (role %s, application %s, %s%s): %s', a.pid,
	coalesce(a.usename::text, '?'), coalesce(nullif(a.application_name, ''), '?'), coalesce(a.state, '?'),
	coalesce(', its transaction open for ' || pg_catalog.round(extract(epoch FROM pg_catalog.now() - a.xact_start))::text || ' s', ''),
	pg_catalog.left(coalesce(a.query, ''), 200))`

// blockersSQL describes the sessions the backend $1 waits for a lock of.
const blockersSQL = `SELECT ` + blockerSQL + `
FROM pg_catalog.pg_stat_activity a WHERE a.pid = ANY (pg_catalog.pg_blocking_pids($1)) ORDER BY a.pid`

// NoteLockWait watches conn while the caller runs one statement on it
// (what says what the statement does, for the log): once the statement
// has run for lockWaitFirst, it asks, on a connection of its own, which
// sessions conn's backend waits for (pg_blocking_pids), and logs them as
// a warning, again every lockWaitEvery, until stop is called. stop waits
// for the watcher to end: nothing is logged after it returns.
func NoteLockWait(ctx context.Context, conn *pgx.Conn, what string, log *slog.Logger) (stop func()) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, pid := conn.Config(), conn.PgConn().PID()
	// A plain socket: not one a LinkWatch of conn's counts as its own
	// (an idle watcher is no silent link).
	cfg.DialFunc = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		timer := time.NewTimer(lockWaitFirst)
		defer timer.Stop()
		var watch *pgx.Conn
		defer func() {
			if watch != nil {
				_ = watch.Close(context.Background())
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			if watch == nil {
				var err error
				if watch, err = pgx.ConnectConfig(ctx, cfg); err != nil {
					return // the statement's own connection says what is wrong
				}
			}
			if by := blockers(ctx, watch, pid); by != "" {
				log.Warn("waiting for a lock another session holds on the target: "+what+" goes on once that session ends its transaction or releases the lock",
					"component", "target", "waiting_pid", pid, "held_by", by)
			}
			timer.Reset(lockWaitEvery)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// blockers describes the sessions pid waits for ("" when none, or when
// the server could not be asked).
func blockers(ctx context.Context, conn *pgx.Conn, pid uint32) string {
	rows, err := conn.Query(ctx, blockersSQL, pid)
	if err != nil {
		return ""
	}
	by, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return ""
	}
	return strings.Join(by, "; ")
}

// ExecNoting is conn.Exec of sql under NoteLockWait (what: what it does).
func ExecNoting(ctx context.Context, conn *pgx.Conn, what string, log *slog.Logger, sql string, args ...any) error {
	stop := NoteLockWait(ctx, conn, what, log)
	defer stop()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
