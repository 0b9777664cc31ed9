package install

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/capture"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
)

// Least privilege: repstream does not need superusers. Before it creates
// the slot or copies a row, Run checks what the roles of its connections need and reports
// every missing privilege with the statement that grants it
// (pgerr.Privilege); the operations themselves explain a permission-denied
// error the same way, for what these checks cannot see.
//
//   - source: the REPLICATION attribute (replication connection, slot);
//     SELECT on every published table (some column of it) when the initial
//     copy will read it, and every row of it: no row-level security policy
//     that applies to the role (BYPASSRLS, or the owner of a table without
//     FORCE ROW LEVEL SECURITY);
//     CREATE PUBLICATION is explained where it runs (it needs ownership of
//     the tables: an owner can make the publication beforehand);
//   - target: SET on session_replication_role (target.Connect), CREATE on
//     the database for the repstream schema (EnsureState), and SELECT,
//     INSERT, UPDATE, DELETE and TRUNCATE on every replicated table, with
//     no row-level security policy that applies to the role there.

// CheckReplicationAttribute fails unless the source role may open a
// replication connection: a superuser or a role with REPLICATION. Managed
// services can allow it otherwise (Amazon RDS: membership in
// rds_replication), so when the catalog says no, a replication connection
// is tried: only its refusal is an error.
func CheckReplicationAttribute(ctx context.Context, src *pgx.Conn, dsn string) error {
	var role string
	var ok bool
	if err := src.QueryRow(ctx, `SELECT current_user::text, rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user`).Scan(&role, &ok); err != nil {
		return fmt.Errorf("read the source role's attributes: %w", err)
	}
	if ok {
		return nil
	}
	repl, err := capture.Connect(ctx, dsn, "")
	if err == nil {
		repl.Close(ctx)
		return nil
	}
	if pgerr.PermissionDenied(err) {
		return pgerr.ReplicationPrivilege(role).Explain(err)
	}
	return nil // another failure: the slot's connection reports it
}

// CheckTablePrivileges fails, naming every missing GRANT, unless the
// source role can read every table (only when willCopy: the initial copy reads
// them; streaming does not) and the target role can write every table.
func CheckTablePrivileges(ctx context.Context, src, tgt *pgx.Conn, tables []schema.TableName, willCopy bool) error {
	var errs []error
	// SELECT on some column passes: a publication's column list may be
	// all a role can read (a column it cannot read fails the copy, which
	// names the GRANT too).
	if willCopy {
		missing, role, err := lacking(ctx, src, tables, `has_any_column_privilege(t, 'SELECT')`)
		if err != nil {
			return fmt.Errorf("check the source role's privileges: %w", err)
		}
		for _, t := range missing {
			errs = append(errs, pgerr.SelectPrivilege(t, role).Missing())
		}
		// Row-level security that applies to the role would leave rows
		// out of the copy (its sessions refuse such a table).
		hidden, role, err := lacking(ctx, src, tables, `NOT row_security_active(t)`)
		if err != nil {
			return fmt.Errorf("check the source role's privileges: %w", err)
		}
		for _, t := range hidden {
			errs = append(errs, pgerr.RowSecurityPrivilege(t, role).Missing())
		}
	}
	// SELECT on any column is enough to read keys (column privileges).
	missing, role, err := lacking(ctx, tgt, tables, `has_any_column_privilege(t, 'SELECT') AND has_table_privilege(t, 'INSERT')
		AND has_table_privilege(t, 'UPDATE') AND has_table_privilege(t, 'DELETE') AND has_table_privilege(t, 'TRUNCATE')`)
	if err != nil {
		return fmt.Errorf("check the target role's privileges: %w", err)
	}
	for _, t := range missing {
		errs = append(errs, pgerr.WritePrivilege(t, role).Missing())
	}
	hidden, role, err := lacking(ctx, tgt, tables, `NOT row_security_active(t)`)
	if err != nil {
		return fmt.Errorf("check the target role's privileges: %w", err)
	}
	for _, t := range hidden {
		errs = append(errs, pgerr.TargetRowSecurityPrivilege(t, role).Missing())
	}
	return errors.Join(errs...)
}

// lacking returns the tables (existing ones only, as sqlName) for which
// cond, an expression over the regclass t, is false for the current user,
// and the current user's name.
func lacking(ctx context.Context, conn *pgx.Conn, tables []schema.TableName, cond string) ([]string, string, error) {
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = t.Quoted()
	}
	var role string
	if err := conn.QueryRow(ctx, `SELECT current_user::text`).Scan(&role); err != nil {
		return nil, "", err
	}
	rows, err := conn.Query(ctx, `SELECT i FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i), LATERAL (SELECT to_regclass(name) AS t) r
		WHERE t IS NOT NULL AND NOT (`+cond+`) ORDER BY i`, quoted)
	if err != nil {
		return nil, "", err
	}
	idx, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, "", err
	}
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = sqlName(tables[i-1])
	}
	return out, role, nil
}

// sqlName is t as a user would write it in SQL: quoted only where needed.
func sqlName(t schema.TableName) string {
	return pgerr.QuoteName(t.Schema) + "." + pgerr.QuoteName(t.Name)
}

// sqlNames is sqlName of every table.
func sqlNames(tables []schema.TableName) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = sqlName(t)
	}
	return out
}

// DSNUser is the role a connection string logs in as, for messages ("" if
// it does not parse: the connection then fails with its own error).
func DSNUser(dsn string) string {
	cfg, err := pgdsn.Parse(dsn)
	if err != nil {
		return ""
	}
	return cfg.User
}

// applySourceTables are the tables of the schema repstream on the source
// that an apply (Kafka mode) reads: the public keys that check the
// topic's schema-change messages, the registry (from where the slot's
// messages are signed) and the published partitions (whether their
// TRUNCATE triggers are there). Not repstream.ddl_key: a role that reads
// it can sign schema changes that every target applies.
var applySourceTables = []string{"ddl_pubkey", "replications", "partition_state"}

// ApplySourceReadsError says what an apply's source role lacks to read
// what an apply reads in the schema repstream on the source
// (CheckApplySourceReads).
type ApplySourceReadsError struct {
	Role    string   // the role, quoted for SQL
	Usage   bool     // it lacks USAGE on the schema repstream
	Lacking []string // the tables it may not SELECT, as repstream.name
}

// Missing names the privileges the role lacks: "USAGE on schema
// repstream, SELECT on repstream.ddl_pubkey".
func (e *ApplySourceReadsError) Missing() string {
	var m []string
	if e.Usage {
		m = append(m, "USAGE on schema repstream")
	}
	if len(e.Lacking) > 0 {
		m = append(m, "SELECT on "+strings.Join(e.Lacking, ", "))
	}
	return strings.Join(m, ", ")
}

// Grants is the statements that give the role what it lacks, to run on
// the source as repstream's source role or a superuser.
func (e *ApplySourceReadsError) Grants() string {
	var g []string
	if e.Usage {
		g = append(g, "GRANT USAGE ON SCHEMA repstream TO "+e.Role+";")
	}
	if len(e.Lacking) > 0 {
		g = append(g, "GRANT SELECT ON "+strings.Join(e.Lacking, ", ")+" TO "+e.Role+";")
	}
	return strings.Join(g, " ")
}

func (e *ApplySourceReadsError) Error() string {
	return fmt.Sprintf("the source role %s cannot read what an apply reads in the schema repstream on the source (it lacks %s), among it the public keys that check schema-change messages (repstream.ddl_pubkey): "+
		"the apply checks every schema-change message of the topic with them, for one it cannot check could run SQL of whoever may write to the topic on this target; "+
		"run on the source, as repstream's source role or a superuser: %s "+
		"(not SELECT on repstream.ddl_key: a role that reads it can sign schema changes for every target)", e.Role, e.Missing(), e.Grants())
}

// CheckApplySourceReads checks that src's role can read what an apply
// (Kafka mode) reads in the schema repstream on the source
// (applySourceTables): USAGE on the schema and SELECT on them, or an
// *ApplySourceReadsError naming what it lacks and the GRANTs. An apply's
// start calls it before it makes anything, and `check --kafka` reports
// it. made is false when the source has no table of public keys yet (no
// schema repstream, or a trigger a capture of an earlier version
// installed): nothing to check until a capture --kafka makes it.
func CheckApplySourceReads(ctx context.Context, src *pgx.Conn) (made bool, err error) {
	var usage bool
	var role string
	var lack []string
	err = src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class k WHERE k.relnamespace = n.oid AND k.relname = 'ddl_pubkey'),
       pg_catalog.has_schema_privilege(n.oid, 'USAGE'),
       coalesce(array_agg('repstream.' || c.relname ORDER BY c.relname) FILTER (WHERE NOT pg_catalog.has_table_privilege(c.oid, 'SELECT')), '{}'),
       current_user
FROM pg_catalog.pg_namespace n
LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = ANY ($1)
WHERE n.nspname = 'repstream'
GROUP BY n.oid`, applySourceTables).Scan(&made, &usage, &lack, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // no schema repstream: no trigger
	}
	if err != nil {
		return false, fmt.Errorf("source: look up the keys that check schema-change messages (repstream.ddl_pubkey): %w", err)
	}
	if !made || usage && len(lack) == 0 {
		return made, nil
	}
	return true, &ApplySourceReadsError{Role: pgx.Identifier{role}.Sanitize(), Usage: !usage, Lacking: lack}
}
