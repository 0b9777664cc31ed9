package target

import (
	"context"
	"fmt"
	"strings"

	"github.com/repstream/repstream/internal/schema"
)

// Types made from the source. repstream makes on the target the
// user-defined types that a table (--create-tables, `tables add`) or a
// schema change's column needs, from the source's definition. The type
// made is the target role's, but a domain's default and CHECK
// constraints are code its owner on the source wrote: the target runs it
// as the target role for every value written to a column of the domain,
// and for the rows a column of it is added to. A role that is not a
// superuser and owns a domain of a published table's column on the source
// (or may create one there and add a column of it) could so have a
// superuser-only function (lo_import, pg_read_file) or one that acts with
// its caller's rights run as the target's superuser. So, with a
// superuser target role, a domain a role that is not a superuser owns on
// the source is made only if its default and constraints call nothing
// but IMMUTABLE functions and operators (a comparison, a pattern match,
// a constant); otherwise it is refused (--trust-table-owners lets it be),
// before anything evaluates it, in the transaction that made it.

// madeDomainCallsSQL lists, for a superuser session, the functions the
// domain $1 (quoted, qualified) calls in its default and its constraints,
// directly or through an operator, that are not IMMUTABLE: what calls,
// the function, its volatility. They are read from the stored expression
// trees: pg_depend records no dependency on a built-in function.
const madeDomainCallsSQL = `
WITH d AS (
	SELECT t.typdefaultbin::text AS expr, 'its default' AS what FROM pg_catalog.pg_type t
	WHERE t.oid = pg_catalog.to_regtype($1) AND t.typdefaultbin IS NOT NULL
	UNION ALL
	SELECT k.conbin::text, 'constraint ' || pg_catalog.quote_ident(k.conname) FROM pg_catalog.pg_constraint k
	WHERE k.contypid = pg_catalog.to_regtype($1) AND k.conbin IS NOT NULL
)
SELECT DISTINCT d.what, p.oid::regprocedure::text, CASE p.provolatile WHEN 's' THEN 'stable' ELSE 'volatile' END
FROM d CROSS JOIN LATERAL pg_catalog.regexp_matches(d.expr, ':(?:funcid|opfuncid) ([0-9]+)', 'g') AS m(id)
JOIN pg_catalog.pg_proc p ON p.oid = m.id[1]::oid
WHERE p.provolatile <> 'i' AND ` + superuserSQL + `
ORDER BY 1, 2`

// CheckMadeType returns ErrUntrustedOwner when u, just made on the target
// (through q, in the transaction that made it) from the source's
// definition, is a domain that a role that is not a superuser owns on the
// source and whose default or constraints call a function that is not
// IMMUTABLE (madeDomainCallsSQL), and the session's role is a superuser;
// nil when trust is set (--trust-table-owners) or for any other type.
func CheckMadeType(ctx context.Context, q schema.Querier, u *schema.UserType, trust bool) error {
	if trust || u.Kind != 'd' || u.OwnerSuper || u.Default == "" && len(u.Checks) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, madeDomainCallsSQL, u.QualifiedName())
	if err != nil {
		return fmt.Errorf("look up what domain %s calls on the target: %w", u, err)
	}
	var found []string
	for rows.Next() {
		var what, fn, vol string
		if err := rows.Scan(&what, &fn, &vol); err != nil {
			rows.Close()
			return fmt.Errorf("look up what domain %s calls on the target: %w", u, err)
		}
		found = append(found, fmt.Sprintf("%s calls %s (%s)", what, fn, vol))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("look up what domain %s calls on the target: %w", u, err)
	}
	if len(found) == 0 {
		return nil
	}
	me, how, _, err := superuserRights(ctx, q)
	if err != nil {
		return err
	}
	owner := u.Owner
	if owner == "" {
		owner = "a role"
	}
	return fmt.Errorf("%w: the target role %s %s, and domain %s, made on the target from the source's definition, is owned on the source by %s, which is not a superuser: %s; "+
		"every value written to a column of it would run that code as the superuser. Make the domain on the target yourself, once you have checked what it runs, "+
		"or apply as a target role that is not a superuser (docs/security.md: least privilege), or pass --trust-table-owners if the source's roles may have a superuser's rights",
		ErrUntrustedOwner, me, how, u, owner, strings.Join(found, "; "))
}
