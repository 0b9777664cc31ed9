package target

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Event triggers. An event trigger runs its function in the session that
// runs the DDL, as that session's role, whoever owns the function: a
// superuser target role that creates, alters or drops anything on the
// target (its schema repstream, a --create-tables table, a source's
// schema change, a key built after a copy) runs the function of every
// event trigger that fires in its session. Apply's sessions run with
// session_replication_role = replica, so those set ENABLE ALWAYS or
// ENABLE REPLICA fire there. A function a role that is not a superuser
// owns is that role's code (it may replace its body at any time): run by
// repstream's superuser it could make that role a superuser. So is one
// whose trigger such a role owns (a superuser demoted since: ALTER ROLE
// ... NOSUPERUSER), whatever it is set to fire in now, since its owner
// may set it ENABLE ALWAYS at any time. Only superusers make event
// triggers, and only a superuser may give one's function, or one, to
// another role: what a superuser does so while a run goes is seen at the
// next schema change the writer applies (each looks again), not by the
// DDL a run makes otherwise after its start.

// untrustedEventTriggerSQL lists, for a superuser session, the event
// triggers whose function a role that is not a superuser owns, and that
// fire in apply's replica sessions or whose owner is not a superuser
// either: name, event, how it is enabled, its owner, its function and the
// function's owner.
const untrustedEventTriggerSQL = `
SELECT quote_ident(e.evtname::text), e.evtevent::text,
	CASE e.evtenabled WHEN 'A' THEN 'ENABLE ALWAYS' WHEN 'R' THEN 'ENABLE REPLICA' WHEN 'D' THEN 'DISABLE' ELSE 'ENABLE' END,
	quote_ident(eo.rolname), eo.rolsuper OR eo.rolname = current_user, e.evtfoid::regprocedure::text, quote_ident(fo.rolname)
FROM pg_catalog.pg_event_trigger e
JOIN pg_catalog.pg_roles eo ON eo.oid = e.evtowner
JOIN pg_catalog.pg_proc p ON p.oid = e.evtfoid
JOIN pg_catalog.pg_roles fo ON fo.oid = p.proowner
WHERE ` + superuserSQL + `
	AND NOT (fo.rolsuper OR fo.rolname = current_user) AND (e.evtenabled IN ('A', 'R') OR NOT (eo.rolsuper OR eo.rolname = current_user))
ORDER BY 1`

// CheckEventTriggers returns ErrUntrustedOwner, naming each event trigger
// of the target whose function a role that is not a superuser controls
// and that would fire (or its owner, not a superuser, could have fire) for
// the DDL repstream runs there (untrustedEventTriggerSQL), when the
// session's role is a superuser; nil when trust is set
// (--trust-table-owners: those roles are trusted) or the session's role
// is not a superuser (the function runs with no more than its grants).
func CheckEventTriggers(ctx context.Context, conn *pgx.Conn, trust bool) error {
	if trust {
		return nil
	}
	rows, err := conn.Query(ctx, untrustedEventTriggerSQL)
	if err != nil {
		return fmt.Errorf("look up the target's event triggers: %w", err)
	}
	var found []string
	for rows.Next() {
		var name, event, enabled, owner, fn, fnOwner string
		var ownerSuper bool
		if err := rows.Scan(&name, &event, &enabled, &owner, &ownerSuper, &fn, &fnOwner); err != nil {
			rows.Close()
			return fmt.Errorf("look up the target's event triggers: %w", err)
		}
		s := fmt.Sprintf("event trigger %s (%s, %s) runs %s, owned by %s", name, event, enabled, fn, fnOwner)
		if !ownerSuper {
			s += fmt.Sprintf("; the trigger is owned by %s, not a superuser, who may set it ENABLE ALWAYS at any time", owner)
		}
		found = append(found, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("look up the target's event triggers: %w", err)
	}
	if len(found) == 0 {
		return nil
	}
	me, how, su, err := superuserRights(ctx, conn)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: the target role %s %s, and an event trigger runs its function as the role whose DDL fires it "+
		"(repstream's schema, the tables it creates, the source's schema changes it applies): %s; that code could make its owner a superuser. "+
		"Apply as a target role that is not a superuser (docs/security.md: least privilege), or have a superuser own the function and the trigger once you have checked what it runs "+
		"(ALTER FUNCTION ... OWNER TO %s; ALTER EVENT TRIGGER ... OWNER TO %s), or drop or disable the trigger (ALTER EVENT TRIGGER ... DISABLE), "+
		"or pass --trust-table-owners if those roles may have a superuser's rights",
		ErrUntrustedOwner, me, how, strings.Join(found, "; "), su, su)
}
