package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/pgerr"
)

// ConnectSource opens an admin connection to the source
// (application_name repstream-admin).
func ConnectSource(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgdsn.ParsePgx(dsn)
	if err != nil {
		return nil, fmt.Errorf("source DSN: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "repstream-admin"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to source %s: %w", pgdsn.Describe(&cfg.Config), err)
	}
	return conn, nil
}

// CheckSource fails unless the source has wal_level=logical.
func CheckSource(ctx context.Context, src *pgx.Conn) error {
	var level string
	if err := src.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("read the source's wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("the source has wal_level=%s; logical replication needs wal_level=logical (set it in postgresql.conf and restart the server)", level)
	}
	return nil
}

// WaitSlotInactive waits up to wait for the slot (if it exists) not to be in
// use by a walsender.
func WaitSlotInactive(ctx context.Context, src *pgx.Conn, slot string, wait time.Duration, log *slog.Logger) error {
	start := time.Now()
	for logged := false; ; {
		var active bool
		var pid *int32
		err := src.QueryRow(ctx, "SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active, &pid)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !active {
			return nil
		}
		if err != nil {
			return fmt.Errorf("look up replication slot %q: %w", slot, err)
		}
		if time.Since(start) > wait {
			p := int32(0)
			if pid != nil {
				p = *pid
			}
			return fmt.Errorf("replication slot %q is active (in use by walsender PID %d) for more than %s: "+
				"another repstream or client is streaming from it; stop it first", slot, p, wait)
		}
		if !logged {
			log.Info("replication slot is active (a previous run ending?): waiting", "slot", slot)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Slot is what LookupSlot finds of a replication slot.
type Slot struct {
	Exists    bool
	Plugin    string
	Confirmed change.LSN // confirmed_flush_lsn
	WALStatus string     // wal_status ("lost": invalidated)
	Active    bool       // a walsender streams from it
}

// LookupSlot reads the slot name of the source's database (Exists false
// if there is none); a slot of that name in another database is an error.
func LookupSlot(ctx context.Context, src *pgx.Conn, name string) (Slot, error) {
	var s Slot
	var confirmed, plugin, walStatus *string
	err := src.QueryRow(ctx, `SELECT plugin::text, confirmed_flush_lsn::text, wal_status, active
		FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, name).
		Scan(&plugin, &confirmed, &walStatus, &s.Active)
	if errors.Is(err, pgx.ErrNoRows) {
		var other string
		// Not this database's (a slot made here just after the first
		// query is no conflict: it is found at the next look).
		if err := src.QueryRow(ctx, `SELECT coalesce(database, '(physical)') FROM pg_replication_slots
			WHERE slot_name = $1 AND database IS DISTINCT FROM current_database()`, name).Scan(&other); err == nil {
			return s, fmt.Errorf("replication slot %q belongs to database %q, not this one", name, other)
		}
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("look up replication slot %q: %w", name, err)
	}
	s.Exists = true
	if plugin != nil {
		s.Plugin = *plugin
	}
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	if confirmed != nil {
		if s.Confirmed, err = change.ParseLSN(*confirmed); err != nil {
			return s, err
		}
	}
	return s, nil
}

// SlotMissing reports whether the slot does not exist yet (a first start).
//
// A slot of that name in another database (or a physical one) is an
// error, before anything is made: a start that went on made the
// publication, the trigger and the target's state, then failed at the
// slot, and, not a first start by this test, left them all (and `drop`
// failed the same way).
func SlotMissing(ctx context.Context, src *pgx.Conn, slot string) (bool, error) {
	s, err := LookupSlot(ctx, src, slot)
	if err != nil {
		return false, fmt.Errorf("%w: use another --slot", err)
	}
	return !s.Exists, nil
}

// CreateSlot creates the pgoutput slot on the source over a replication
// connection to dsn, exporting its snapshot when export (for the initial
// copy). The connection holds the exported snapshot: closeFn closes it,
// once the copy is done.
func CreateSlot(ctx context.Context, dsn, slot string, export bool) (res pglogrepl.CreateReplicationSlotResult, closeFn func(), err error) {
	repl, err := capture.Connect(ctx, dsn, "")
	if err != nil {
		return res, nil, pgerr.ReplicationPrivilege(DSNUser(dsn)).Explain(err)
	}
	action := "(SNAPSHOT 'nothing')"
	if export {
		action = "(SNAPSHOT 'export')"
	}
	if capture.ServerMajor(repl) < 15 {
		action = "NOEXPORT_SNAPSHOT"
		if export {
			action = "EXPORT_SNAPSHOT"
		}
	}
	res, err = pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	if err != nil {
		repl.Close(context.Background())
		return res, nil, fmt.Errorf("create replication slot %q on the source: %w", slot, err)
	}
	return res, func() { repl.Close(context.Background()) }, nil
}
