package pgerr

import (
	"errors"
	"fmt"
	"strings"
)

// Privileges: what a permission-denied error (42501) means when repstream
// hits it during a known operation, and the statement that fixes it. The
// call site names the operation (SelectPrivilege, ...) and wraps its error
// with Explain; any other error passes through unchanged.
//
//	if err != nil {
//		return fmt.Errorf("snapshot of %s: %w", t, pgerr.SelectPrivilege(t.Quoted(), role).Explain(err))
//	}

// Privilege is a privilege one of repstream's operations needs.
type Privilege struct {
	// Need says what the role lacks, for a sentence: "role repl needs
	// SELECT on public.t".
	Need string
	// Fix is what an administrator runs (a superuser or the object's owner).
	Fix string
}

// SelectPrivilege is SELECT on a source table, which the initial copy
// reads. table is quoted already (schema.table).
func SelectPrivilege(table, role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("the source role %s needs SELECT on %s for the initial copy", role, table),
		Fix:  fmt.Sprintf("GRANT SELECT ON %s TO %s", table, QuoteName(role)),
	}
}

// RowSecurityPrivilege is reading every row of a source table whose
// row-level security policies apply to the role: the initial copy would
// otherwise copy only the rows they show (its sessions run with
// row_security = off, so PostgreSQL refuses instead: RowSecurity).
// table is quoted already.
func RowSecurityPrivilege(table, role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("row-level security policies of %s apply to the source role %s: the initial copy would copy only the rows they show it", table, role),
		Fix:  fmt.Sprintf("ALTER ROLE %s BYPASSRLS (or disable row-level security on the table)", QuoteName(role)),
	}
}

// TargetRowSecurityPrivilege is writing every row of a target table whose
// row-level security policies apply to the role: apply would not find the
// rows they hide (its sessions run with row_security = off, so PostgreSQL
// refuses instead). table is quoted already.
func TargetRowSecurityPrivilege(table, role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("row-level security policies of %s apply to the target role %s: apply must see and write every row", table, role),
		Fix:  fmt.Sprintf("ALTER ROLE %s BYPASSRLS (or disable row-level security on the table)", QuoteName(role)),
	}
}

// ReplicationPrivilege is the REPLICATION attribute a role needs to open a
// replication connection (and create or stream from a slot).
func ReplicationPrivilege(role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("the source role %s needs the REPLICATION attribute to stream from a replication slot", role),
		Fix:  fmt.Sprintf("ALTER ROLE %s REPLICATION", QuoteName(role)),
	}
}

// PublicationPrivilege is what CREATE PUBLICATION needs: ownership of every
// table it lists (and CREATE on the database). The fix is to have an owner
// make the publication beforehand; tables are quoted already.
func PublicationPrivilege(publication string, tables []string, role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("the source role %s cannot create publication %s: CREATE PUBLICATION needs ownership of the tables and CREATE on the database", role, publication),
		Fix: fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s (as the tables' owner; repstream then uses it as it is)",
			QuoteName(publication), strings.Join(tables, ", ")),
	}
}

// ReplicationRolePrivilege is SET on session_replication_role, which every
// apply session sets to replica (triggers and foreign keys not fired twice).
// PostgreSQL 15 and later can grant it; older servers need a superuser.
func ReplicationRolePrivilege(role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("the target role %s needs to set session_replication_role (apply sessions run with replica: triggers and foreign-key checks off)", role),
		Fix: fmt.Sprintf("GRANT SET ON PARAMETER session_replication_role TO %s (PostgreSQL 15+; before 15 the role must be a superuser)",
			QuoteName(role)),
	}
}

// WritePrivilege is what apply needs on a target table: it reads keys
// (SELECT, for the WHERE of updates and deletes) and inserts, updates,
// deletes and truncates. table is quoted already.
func WritePrivilege(table, role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("the target role %s needs to write %s", role, table),
		Fix:  fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %s TO %s", table, QuoteName(role)),
	}
}

// CreateSchemaPrivilege is CREATE on the target database, which the first
// run needs to create the repstream schema holding the progress state.
func CreateSchemaPrivilege(database, role string) Privilege {
	return Privilege{
		Need: fmt.Sprintf("the target role %s needs CREATE on database %s for repstream's state (schema repstream)", role, database),
		Fix:  fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", QuoteName(database), QuoteName(role)),
	}
}

// Explain returns err unchanged unless it is a permission-denied error
// (42501); then a *PrivilegeError that names the fix and wraps err. nil
// stays nil.
func (p Privilege) Explain(err error) error {
	if err == nil || !PermissionDenied(err) {
		return err
	}
	var pe *PrivilegeError
	if errors.As(err, &pe) {
		return err // explained already, closer to the cause
	}
	return &PrivilegeError{Privilege: p, Err: err}
}

// Missing returns the privilege as an error of its own, for checks that find
// it missing before any statement fails.
func (p Privilege) Missing() error { return &PrivilegeError{Privilege: p} }

// PrivilegeError is a permission-denied error with the privilege it needs.
type PrivilegeError struct {
	Privilege
	Err error // the server's error; nil when a check found the privilege missing
}

func (e *PrivilegeError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s; run: %s", e.Need, e.Fix)
	}
	return fmt.Sprintf("%v; %s; run: %s", e.Err, e.Need, e.Fix)
}

func (e *PrivilegeError) Unwrap() error { return e.Err }

// QuoteName quotes a role, database, schema or table name as an SQL
// identifier when it is not a plain lower-case one (for messages: it does
// not know SQL's reserved words).
func QuoteName(name string) string {
	plain := name != ""
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r == '_' || i > 0 && (r >= '0' && r <= '9' || r == '$')) {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
