package install

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The event triggers of --ddl=true (repstream_ddl, repstream_ddl_drop,
// repstream_ddl_partitions, repstream_ddl_types) are shared by every repstream replication of
// the source database, and a run can only see what they did while it
// looked. While they are off (disabled, dropped, enabled for replica
// sessions only), schema changes, tables added to a publication and
// partition TRUNCATEs never reach the stream: a replication whose engine
// was stopped then, or that another start set right again before it
// looked, would go on without them.
//
// Each row of pg_event_trigger changes its xmin with every ALTER EVENT
// TRIGGER, and its oid with every DROP and CREATE: TriggerDigest, the four
// rows' oid, xmin and enabled state, changes whenever anyone touches them.
// Each target records the digest it last saw them in, on (after its
// start's install) and at every later look; a digest that differs from
// the one recorded means they may have been off meanwhile (tablesync's
// CheckDDLTriggers copies every table anew). So InstallDDL must not
// touch a trigger that is as it should be (ensureEventTrigger): a start
// of one replication would otherwise make every other one copy anew.
// A change of a trigger's definition in a new version of repstream does
// that once, on purpose: nothing tells which digest it replaced.

// eventTrigger is one of the event triggers of --ddl=true as this
// version makes it: name on event (tags: its WHEN TAG IN list, none:
// every command), executing fn.
type eventTrigger struct {
	name, event string
	tags        []string
	fn          string
}

var (
	ddlEndTrigger = eventTrigger{"repstream_ddl", "ddl_command_end",
		[]string{"CREATE TABLE", "ALTER TABLE", "CREATE TABLE AS", "SELECT INTO", "ALTER SCHEMA", "ALTER PUBLICATION"}, "repstream.ddl_end()"}
	ddlDropTrigger       = eventTrigger{"repstream_ddl_drop", "sql_drop", nil, "repstream.ddl_drop()"}
	ddlPartitionsTrigger = eventTrigger{"repstream_ddl_partitions", "ddl_command_end", []string{"CREATE TABLE", "ALTER TABLE"}, "repstream.ddl_partitions()"}
	// ddlTypesTrigger reports an enum's labels changed (ALTER TYPE ...
	// RENAME VALUE): off, the target keeps the old labels.
	ddlTypesTrigger = eventTrigger{"repstream_ddl_types", "ddl_command_end", []string{"ALTER TYPE"}, "repstream.ddl_types()"}
	eventTriggers   = []eventTrigger{ddlEndTrigger, ddlDropTrigger, ddlPartitionsTrigger, ddlTypesTrigger}
	// ddlKeyTrigger refuses a REFRESH of repstream.ddl_key (a new key
	// under running captures). Not one of eventTriggers: a capture does
	// not depend on it (one that meets another key stops).
	ddlKeyTrigger = eventTrigger{"repstream_ddl_key", "ddl_command_end", []string{"REFRESH MATERIALIZED VIEW"}, "repstream.ddl_key_guard()"}
)

// typesDigestName is repstream_ddl_types's entry in TriggerDigest, which
// versions before it did not have (SameTriggers).
const typesDigestName = "repstream_ddl_types:"

// SameTriggers reports whether the event triggers are as a replication
// recorded them (digests of TriggerDigest): equal, or recorded by a
// version before repstream_ddl_types and equal but for it (that version's
// start did not make it; this one's does, without a copy anew).
func SameTriggers(recorded, now string) bool {
	if recorded == now {
		return true
	}
	if strings.Contains(recorded, typesDigestName) {
		return false
	}
	i := strings.Index(now, ","+typesDigestName)
	if i < 0 {
		return false
	}
	rest := now[i+1:]
	if j := strings.IndexByte(rest, ','); j >= 0 {
		return recorded == now[:i]+rest[j:]
	}
	return recorded == now[:i]
}

// when is the trigger's WHEN clause, and same a condition on
// pg_event_trigger e that holds when e is as this version makes it
// (enabled state aside).
func (t eventTrigger) when() (when, same string) {
	same = "e.evttags IS NULL"
	if len(t.tags) > 0 {
		quoted := make([]string, len(t.tags))
		for i, tag := range t.tags {
			quoted[i] = "'" + tag + "'"
		}
		when = "\n  WHEN TAG IN (" + strings.Join(quoted, ", ") + ")"
		same = "e.evttags = ARRAY[" + strings.Join(quoted, ", ") + "]"
	}
	same = fmt.Sprintf("e.evtname = '%s' AND e.evtevent = '%s' AND e.evtfoid = to_regprocedure('%s') AND %s", t.name, t.event, t.fn, same)
	return when, same
}

// ensureEventTrigger returns SQL that makes the event trigger t and has
// it fire in every session (ENABLE ALWAYS: also under
// session_replication_role = replica: another replication's apply, a
// restore), changing nothing if it does already; one with another
// definition is dropped and made again.
func ensureEventTrigger(t eventTrigger) string {
	when, same := t.when()
	return fmt.Sprintf(`
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger e WHERE %[5]s) THEN
    DROP EVENT TRIGGER IF EXISTS %[1]s;
    CREATE EVENT TRIGGER %[1]s ON %[2]s%[3]s
      EXECUTE FUNCTION %[4]s;
  END IF;
  IF (SELECT e.evtenabled FROM pg_catalog.pg_event_trigger e WHERE e.evtname = '%[1]s') <> 'A' THEN
    ALTER EVENT TRIGGER %[1]s ENABLE ALWAYS;
  END IF;
END
$do$;
`, t.name, t.event, when, t.fn, same)
}

// EventTriggersStale lists the event triggers of --ddl=true that are not
// as this version's capture (or run) makes them: missing, of another
// definition (an earlier version's), or not enabled always. Their next
// install changes them, and with them TriggerDigest.
func EventTriggersStale(ctx context.Context, src *pgx.Conn) ([]string, error) {
	var conds []string
	for _, t := range eventTriggers {
		_, same := t.when()
		conds = append(conds, fmt.Sprintf("SELECT '%s' WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger e WHERE %s AND e.evtenabled = 'A')", t.name, same))
	}
	rows, err := src.Query(ctx, strings.Join(conds, "\nUNION ALL\n"))
	if err != nil {
		return nil, fmt.Errorf("look at the schema-change triggers: %w", err)
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look at the schema-change triggers: %w", err)
	}
	return stale, nil
}

// TriggerDigest describes the event triggers of --ddl=true as they are
// now: each one's oid, row xmin and enabled state ("-" when missing).
// Any DROP, CREATE or ALTER EVENT TRIGGER of one changes it.
func TriggerDigest(ctx context.Context, src *pgx.Conn) (string, error) {
	var d string
	err := src.QueryRow(ctx, `SELECT string_agg(w.name || ':' || coalesce(e.oid::text || '/' || e.xmin::text || '/' || e.evtenabled::text, '-'), ',' ORDER BY w.name)
FROM (VALUES ('repstream_ddl'), ('repstream_ddl_drop'), ('repstream_ddl_partitions'), ('repstream_ddl_types')) w(name)
LEFT JOIN pg_catalog.pg_event_trigger e ON e.evtname = w.name`).Scan(&d)
	if err != nil {
		return "", fmt.Errorf("look at the schema-change triggers: %w", err)
	}
	return d, nil
}
