package target

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Replications lists the slots whose state the target holds (registered
// in repstream.replications, or with a progress row), sorted; none when
// the target has no repstream state. conn comes from Connect, which has
// checked that the schema repstream can be trusted.
func Replications(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var progress, registry bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('repstream.progress') IS NOT NULL, to_regclass('repstream.replications') IS NOT NULL`).
		Scan(&progress, &registry); err != nil {
		return nil, fmt.Errorf("look up repstream's state on the target: %w", err)
	}
	if !progress {
		return nil, nil
	}
	q := `SELECT slot FROM repstream.progress`
	if registry {
		// Not a replication this database is the source of (a cascade:
		// install/ddl.go registrySQL), which names its publication.
		q += ` UNION SELECT slot FROM repstream.replications WHERE to_jsonb(replications)->>'publication' IS NULL OR to_jsonb(replications)->>'publication' = ''`
	}
	var slots []string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(array_agg(slot ORDER BY slot), '{}') FROM (`+q+`) s`).Scan(&slots); err != nil {
		return nil, fmt.Errorf("list the replications on the target: %w", err)
	}
	return slots, nil
}

// NoTriggers is the TriggerDigest of a replication whose last start
// followed schema changes without the event trigger (--ddl=relation or
// false).
const NoTriggers = "none"

// TriggerDigest returns the source's schema-change triggers as slot's
// replication last saw them working (install.TriggerDigest; NoTriggers:
// its last start did without them; "": never recorded, as by earlier
// versions).
func TriggerDigest(ctx context.Context, conn *pgx.Conn, slot string) (string, error) {
	var d *string
	err := conn.QueryRow(ctx, `SELECT ddl_triggers FROM repstream.replications WHERE slot = $1`, slot).Scan(&d)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && d == nil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read what slot %q last saw of the source's schema-change triggers: %w", slot, err)
	}
	return *d, nil
}

// SetTriggerDigest records digest as what slot's replication last saw of
// the source's schema-change triggers (NoTriggers for a run that does not
// follow schema changes through them).
func SetTriggerDigest(ctx context.Context, conn *pgx.Conn, slot, digest string) error {
	if _, err := conn.Exec(ctx, `UPDATE repstream.replications SET ddl_triggers = nullif($2, '') WHERE slot = $1`, slot, digest); err != nil {
		return fmt.Errorf("record what slot %q saw of the source's schema-change triggers: %w", slot, err)
	}
	return nil
}

// MadeRecorded reports whether repstream.tables records the tables the
// schema-change messages made for slot (SetTableMade): false for a
// replication an earlier version registered, until SetMadeRecorded. A
// slot not registered has nothing of an earlier version: true.
func MadeRecorded(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	var made bool
	err := conn.QueryRow(ctx, `SELECT made_recorded FROM repstream.replications WHERE slot = $1`, slot).Scan(&made)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read whether slot %q records the tables its schema changes made: %w", slot, err)
	}
	return made, nil
}

// SetMadeRecorded records that repstream.tables records the tables the
// schema-change messages made for slot from now on.
func SetMadeRecorded(ctx context.Context, conn *pgx.Conn, slot string) error {
	if _, err := conn.Exec(ctx, `UPDATE repstream.replications SET made_recorded = true WHERE slot = $1 AND NOT made_recorded`, slot); err != nil {
		return fmt.Errorf("record that slot %q records the tables its schema changes made: %w", slot, err)
	}
	return nil
}

// SetSource records, in the target's registry, the source database slot
// replicates from (its system identifier and database OID) and what its
// capture leaves out (origin: --origin any or none; "": not known here, as
// for apply --kafka, whose capture decides): a start of a replication out
// of this database into that one is a loop (ReplicationsFrom) unless both
// leave out what the other applied. A source whose system identifier the
// roles may not read is not recorded.
func SetSource(ctx context.Context, conn *pgx.Conn, slot, systemID string, databaseOID uint32, origin string) error {
	if systemID == "" {
		return nil
	}
	_, err := conn.Exec(ctx, `UPDATE repstream.replications SET source_system_id = $2, source_database_oid = $3, origin = nullif($4, '')
WHERE slot = $1 AND (source_system_id, source_database_oid, origin) IS DISTINCT FROM ($2, $3, nullif($4, ''))`, slot, systemID, databaseOID, origin)
	if err != nil {
		return fmt.Errorf("record the source of slot %q on the target: %w", slot, err)
	}
	return nil
}

// Back is a replication into a database from the one a start replicates
// into (ReplicationsFrom): its slot, and what its capture leaves out as
// recorded (SetSource; "": not known).
type Back struct {
	Slot, Origin string
}

// ReplicationsFrom lists the replications into the database of conn
// whose recorded source is the database systemID and databaseOID name
// (SetSource), by slot. No registry, one without the record (earlier
// versions), or a role that may not read it: none.
func ReplicationsFrom(ctx context.Context, conn *pgx.Conn, systemID string, databaseOID uint32) ([]Back, error) {
	if systemID == "" {
		return nil, nil
	}
	var readable bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('repstream.replications') IS NOT NULL
	AND pg_catalog.has_table_privilege('repstream.replications', 'SELECT')`).Scan(&readable); err != nil {
		return nil, fmt.Errorf("look up the replications into this database: %w", err)
	}
	if !readable {
		return nil, nil
	}
	rows, err := conn.Query(ctx, `SELECT slot, coalesce(to_jsonb(r)->>'origin', '') FROM repstream.replications r
WHERE to_jsonb(r)->>'source_system_id' = $1 AND (to_jsonb(r)->>'source_database_oid')::oid = $2 ORDER BY slot`, systemID, databaseOID)
	if err != nil {
		return nil, fmt.Errorf("look up the replications into this database: %w", err)
	}
	back, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Back])
	if err != nil {
		return nil, fmt.Errorf("look up the replications into this database: %w", err)
	}
	return back, nil
}
