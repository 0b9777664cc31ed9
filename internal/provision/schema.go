package provision

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is the schema repstream keeps its objects in, on either side.
const Schema = "repstream"

// Querier is what the checks run on: a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ErrUntrusted marks a schema repstream that another role could use to run
// its code with repstream's privileges.
var ErrUntrusted = errors.New("untrusted schema repstream")

// Lock takes the advisory lock that serialises the installation and removal
// of repstream's objects in the database, until the end of tx's
// transaction. Every path that creates or drops the schema repstream, or the
// objects in it that several replications share, holds it.
func Lock(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('repstream.install'))"); err != nil {
		return fmt.Errorf("lock repstream's installation: %w", err)
	}
	return nil
}

// schemaSQL reads the schema repstream: its owner, whether the owner is
// trusted (the current role or a superuser), and the roles other than the
// owner that may create in it.
const schemaSQL = `
SELECT r.rolname, r.rolsuper OR r.rolname = current_user,
       COALESCE((SELECT pg_catalog.string_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ', ')
                   FROM pg_catalog.aclexplode(n.nspacl) a
                  WHERE a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner), '')
FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
WHERE n.nspname = 'repstream'`

// objectsSQL lists the objects in the schema repstream that a role other
// than the current one and not a superuser owns, or whose tables another
// role may change (INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER).
const objectsSQL = `
WITH nsp AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'repstream'),
objs AS (
  SELECT 'table ' || c.oid::regclass::text AS what, c.relowner AS owner, c.relacl AS acl
    FROM pg_catalog.pg_class c, nsp WHERE c.relnamespace = nsp.oid
  UNION ALL SELECT 'function ' || p.oid::regprocedure::text, p.proowner, NULL FROM pg_catalog.pg_proc p, nsp WHERE p.pronamespace = nsp.oid
  UNION ALL SELECT 'type ' || t.oid::regtype::text, t.typowner, NULL FROM pg_catalog.pg_type t, nsp WHERE t.typnamespace = nsp.oid
  UNION ALL SELECT 'operator ' || o.oid::regoperator::text, o.oprowner, NULL FROM pg_catalog.pg_operator o, nsp WHERE o.oprnamespace = nsp.oid
  UNION ALL SELECT 'collation ' || co.collname::text, co.collowner, NULL FROM pg_catalog.pg_collation co, nsp WHERE co.collnamespace = nsp.oid
  UNION ALL SELECT 'conversion ' || cv.conname::text, cv.conowner, NULL FROM pg_catalog.pg_conversion cv, nsp WHERE cv.connamespace = nsp.oid
)
SELECT * FROM (
SELECT o.what, r.rolname, r.rolsuper OR r.rolname = current_user AS trusted,
       COALESCE((SELECT pg_catalog.string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ', ')
                   FROM pg_catalog.aclexplode(o.acl) a
                  WHERE a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'TRIGGER') AND a.grantee <> o.owner), '') AS writers
FROM objs o JOIN pg_catalog.pg_roles r ON r.oid = o.owner) x
WHERE NOT trusted OR writers <> ''
ORDER BY 1`

// CheckSchema verifies that the schema repstream, if it exists on side
// ("source" or "target"), cannot be used by another role: it and every
// object in it are owned by the current role or a superuser, and no other
// role may create in it or change its tables. It reports whether the schema
// exists. An untrusted schema is an error wrapping ErrUntrusted that names
// the object, its owner and the way out.
func CheckSchema(ctx context.Context, q Querier, side string) (exists bool, err error) {
	var owner, creators string
	var trusted bool
	err = q.QueryRow(ctx, schemaSQL).Scan(&owner, &trusted, &creators)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up the schema repstream on the %s: %w", side, err)
	}
	var me string
	if err := q.QueryRow(ctx, "SELECT current_user::text").Scan(&me); err != nil {
		return true, fmt.Errorf("look up the current role on the %s: %w", side, err)
	}
	if !trusted {
		return true, untrusted(side, fmt.Sprintf("the schema repstream is owned by role %s, which is neither repstream's role %s nor a superuser", owner, me))
	}
	if creators != "" {
		return true, untrusted(side, fmt.Sprintf("role(s) %s may create objects in the schema repstream", creators))
	}
	rows, err := q.Query(ctx, objectsSQL)
	if err != nil {
		return true, fmt.Errorf("look up the objects in the schema repstream on the %s: %w", side, err)
	}
	defer rows.Close()
	if rows.Next() {
		var what, owner, writers string
		var trustedOwner bool
		if err := rows.Scan(&what, &owner, &trustedOwner, &writers); err != nil {
			return true, fmt.Errorf("look up the objects in the schema repstream on the %s: %w", side, err)
		}
		if !trustedOwner {
			return true, untrusted(side, fmt.Sprintf("%s in the schema repstream is owned by role %s, which is neither repstream's role %s nor a superuser", what, owner, me))
		}
		return true, untrusted(side, fmt.Sprintf("role(s) %s may change %s", writers, what))
	}
	if err := rows.Err(); err != nil {
		return true, fmt.Errorf("look up the objects in the schema repstream on the %s: %w", side, err)
	}
	return true, nil
}

func untrusted(side, why string) error {
	return fmt.Errorf("%w on the %s: %s; another role could run its code with repstream's privileges through it. "+
		"Inspect it (\\dn+ repstream, \\df+ repstream.*, \\dt+ repstream.*), then drop it or give it to repstream's role "+
		"(ALTER SCHEMA repstream OWNER TO ..., and the same for each object) and revoke what others were granted",
		ErrUntrusted, side, why)
}

// EnsureSchema makes sure the schema repstream exists on side and is
// trusted (CheckSchema). A missing schema is created owned by the current
// role, with no privileges for PUBLIC. Call it inside a transaction that
// holds Lock. It reports whether it created the schema.
func EnsureSchema(ctx context.Context, tx pgx.Tx, side string) (created bool, err error) {
	exists, err := CheckSchema(ctx, tx, side)
	if err != nil || exists {
		return false, err
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA repstream AUTHORIZATION CURRENT_USER"); err != nil {
		return false, fmt.Errorf("create the schema repstream on the %s: %w", side, err)
	}
	if _, err := tx.Exec(ctx, "REVOKE ALL ON SCHEMA repstream FROM PUBLIC"); err != nil {
		return false, fmt.Errorf("create the schema repstream on the %s: %w", side, err)
	}
	return true, nil
}

// RevokeFunctions revokes EXECUTE from PUBLIC on every function in the
// schema repstream (functions are executable by PUBLIC when created). Only
// repstream's own sessions, as the owner, call them.
func RevokeFunctions(ctx context.Context, q Querier) error {
	_, err := q.Exec(ctx, "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA repstream FROM PUBLIC")
	return err
}

// DropSchemaIfEmpty drops the schema repstream if nothing is left in it. It
// reports what is left when something is (and then keeps the schema).
func DropSchemaIfEmpty(ctx context.Context, q Querier) (left string, err error) {
	err = q.QueryRow(ctx, `
SELECT COALESCE(pg_catalog.string_agg(what, ', ' ORDER BY what), '') FROM (
  SELECT c.oid::regclass::text AS what FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'repstream' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
  UNION ALL SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname = 'repstream') o`).Scan(&left)
	if err != nil {
		return "", fmt.Errorf("look up what is left in the schema repstream: %w", err)
	}
	if left != "" {
		return left, nil
	}
	if _, err := q.Exec(ctx, "DROP SCHEMA IF EXISTS repstream"); err != nil {
		return "", fmt.Errorf("drop the schema repstream: %w", err)
	}
	return "", nil
}
