package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/target"
)

// identity reads the identity of the database conn reaches; the source's
// system identifier, where its role may not read pg_control_system(),
// through IDENTIFY_SYSTEM (dsn: the source, else "").
func identity(ctx context.Context, conn *pgx.Conn, dsn string) (provision.Identity, error) {
	id, err := provision.Identify(ctx, conn)
	if err != nil || id.SystemID != "" || dsn == "" {
		return id, err
	}
	id.SystemID, _ = identifySystem(ctx, dsn) // unknown: not recorded
	return id, nil
}

// refuseLoop stops a run whose target replicates into its source (a
// repstream replication into the source records the target as its
// source: target.SetSource) when either leaves in what the other applied:
// this run with --origin any, or the one back recorded with it. Every
// change would go back, for ever or once (a write echoed back over a later
// one). A cascade (A -> B -> C) passes; so does a loop that the records do
// not show (recorded by earlier versions, or not readable), and one whose
// way back is an apply --kafka, whose capture's --origin the target does
// not know.
func (e *Engine) refuseLoop(ctx context.Context, src, tgt *pgx.Conn) error {
	back, err := e.replicatesBack(ctx, src, tgt)
	if err != nil || len(back) == 0 {
		return err
	}
	var slots, anyBack []string
	for _, b := range back {
		slots = append(slots, b.Slot)
		if b.Origin == config.OriginAny {
			anyBack = append(anyBack, b.Slot)
		}
	}
	if e.cfg.Origin != config.OriginAny && len(anyBack) == 0 {
		return e.needCommitTimestamps(ctx, src, tgt, slots)
	}
	tid, err := identity(ctx, tgt, "")
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	sid, err := provision.Identify(ctx, src)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if e.cfg.Origin == config.OriginAny {
		return fmt.Errorf("a replication loop: the target (database %q, system identifier %s) replicates into the source (database %q, port %s) through slot %s, "+
			"and this run (slot %q) would send it back with --origin any: every change would go back and forth for ever; "+
			"run both replications with --origin none (each leaves out what the other applied)",
			tid.Database, tid.SystemID, sid.Database, sid.Port, quoteList(slots), e.cfg.Slot)
	}
	return fmt.Errorf("a replication loop: the target (database %q, system identifier %s) replicates into the source (database %q, port %s) through slot %s with --origin any, "+
		"which sends what this run (slot %q) applies back into the source, over what the source wrote since; "+
		"stop it and run it again with --origin none, then start this run",
		tid.Database, tid.SystemID, sid.Database, sid.Port, quoteList(anyBack), e.cfg.Slot)
}

// replicatesBack returns the repstream replications into the source
// whose recorded source is the target (none when the records do not show
// it: recorded by earlier versions, or not readable).
func (e *Engine) replicatesBack(ctx context.Context, src, tgt *pgx.Conn) ([]target.Back, error) {
	tid, err := identity(ctx, tgt, "")
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	back, err := target.ReplicationsFrom(ctx, src, tid.SystemID, tid.DatabaseOID)
	if err != nil {
		e.log.Debug("cannot tell whether the target replicates into the source", "component", "engine", "err", err)
		return nil, nil
	}
	return back, nil
}

// needCommitTimestamps stops a start of one of two replications in
// opposite directions (the target replicates into the source through
// slots back, both with --origin none) unless both servers keep commit
// timestamps (track_commit_timestamp): without them apply cannot tell a
// row written on both sides at once (prepareLocalChecks), which would end
// as each side last applied it, different and unsaid. Checked before the
// start makes anything.
func (e *Engine) needCommitTimestamps(ctx context.Context, src, tgt *pgx.Conn, back []string) error {
	if e.cfg.Role == config.RoleApply {
		return nil // apply --kafka: the capture's --origin (not known here)
	}
	var off []string
	for _, s := range []struct {
		side string
		conn *pgx.Conn
	}{{"the source", src}, {"the target", tgt}} {
		on, err := target.CommitTimestamps(ctx, s.conn)
		if err != nil {
			return fmt.Errorf("%s: %w", s.side, err)
		}
		if !on {
			off = append(off, s.side)
		}
	}
	if len(off) == 0 {
		return nil
	}
	return fmt.Errorf("two replications in opposite directions: the target replicates into the source through slot %s, and this run (slot %q) replicates back: "+
		"a row written on both sides at once is found only with track_commit_timestamp = on on both servers, and it is off on %s: "+
		"set it (ALTER SYSTEM SET track_commit_timestamp = on, then restart that server), then start both replications again",
		quoteList(back), e.cfg.Slot, strings.Join(off, " and "))
}

// prepareLocalChecks decides whether apply checks each update and delete
// against the target's own writes (checkLocal: target.WriterOptions'
// CheckLocalWrites): with --origin none (a run's: an apply --kafka does
// not know its capture's) and track_commit_timestamp on the target. Its
// sessions must then mark their writes with an origin (Origins.Require),
// or their own would count as the target's.
func (e *Engine) prepareLocalChecks(ctx context.Context, tgt *pgx.Conn) error {
	e.checkLocal = false
	if e.cfg.Role == config.RoleApply || e.cfg.Origin != config.OriginNone {
		return nil
	}
	on, err := target.CommitTimestamps(ctx, tgt)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	e.checkLocal = on
	if on {
		// A write of this apply's without an origin would look like the
		// target's own, newer than the source's next change of the row.
		e.origins.Require()
		e.log.Info("updates and deletes are checked against the target's own writes: a row that a transaction of the target's own committed after the source transaction is a conflict (update_origin_differs, delete_origin_differs)",
			"component", "engine")
	}
	return nil
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// prepareOrigins, at a start (run, apply --kafka), once the slot is
// registered on the target: records the source there (target.SetSource,
// src's identity or srcID if known); makes marking required when the
// target replicates back into the source (a replication into the source
// records the target as its source: two in opposite directions, which
// refuseLoop let pass with --origin none), where a write without an origin
// would be sent back; says once what a target role that may not use
// replication origins means; and marks the start's own target connection
// (its --truncate, the tables it makes) with a replication origin.
func (e *Engine) prepareOrigins(ctx context.Context, src, tgt *pgx.Conn) error {
	sid := e.srcID
	if sid.SystemID == "" {
		var err error
		if sid, err = identity(ctx, src, e.cfg.Source); err != nil {
			return fmt.Errorf("source: %w", err)
		}
	}
	origin := e.cfg.Origin
	if e.cfg.Role == config.RoleApply {
		origin = "" // the capture's
	}
	if err := target.SetSource(ctx, tgt, e.cfg.Slot, sid.SystemID, sid.DatabaseOID, origin); err != nil {
		return err
	}
	back, err := e.replicatesBack(ctx, src, tgt)
	if err != nil {
		return err
	}
	if len(back) > 0 {
		e.origins.Require()
	}
	if err := e.prepareLocalChecks(ctx, tgt); err != nil {
		return err
	}
	ok, err := target.OriginsAllowed(ctx, tgt)
	if err != nil {
		return err
	}
	if !ok && !e.origins.Required() {
		e.log.Warn(target.OriginsWithout+"; "+target.OriginsGrant+"it, or make it a superuser", "component", "engine", "role", tgt.Config().User)
		return nil
	}
	_, err = e.origins.Use(ctx, tgt)
	return err
}
