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
		return nil
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
	if back, err := e.replicatesBack(ctx, src, tgt); err != nil {
		return err
	} else if len(back) > 0 {
		e.origins.Require()
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
