package target

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/provision"
)

// stateSchema creates the progress state. repstream.progress holds, per slot,
// the low watermark L; repstream.applied holds the source transactions applied
// above L, one row per target transaction: the range [first_lsn, end_lsn] of
// end LSNs of the consecutive source transactions (in commit order) it
// applied. A run of consecutive transactions is what apply groups, so one row
// stands for many small source transactions.
//
// Invariants (kept by the callers through Writer.Commit and AdvanceLow):
//   - every applied source transaction's end LSN lies in a range of
//     repstream.applied inserted in the same target transaction as its data,
//     and every source transaction whose end LSN lies in a recorded range is
//     applied (ranges cover consecutive transactions only);
//   - every source transaction with end LSN <= low_lsn is applied, so rows of
//     repstream.applied at or below low_lsn carry no information and are
//     pruned in the same transaction that raises low_lsn;
//   - low_lsn never decreases.
const stateSchema = `
CREATE TABLE IF NOT EXISTS repstream.progress (
	slot text PRIMARY KEY,
	low_lsn pg_lsn NOT NULL,
	snapshot text NOT NULL DEFAULT '',
	created_publication bool NOT NULL DEFAULT false,
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS repstream.applied (
	slot text NOT NULL,
	end_lsn pg_lsn NOT NULL,
	first_lsn pg_lsn,
	PRIMARY KEY (slot, end_lsn)
);
ALTER TABLE repstream.applied ADD COLUMN IF NOT EXISTS first_lsn pg_lsn;
ALTER TABLE repstream.progress ADD COLUMN IF NOT EXISTS kafka_offset bigint NOT NULL DEFAULT -1;
ALTER TABLE repstream.progress ADD COLUMN IF NOT EXISTS kafka_topic_id text NOT NULL DEFAULT '';`

// Progress is the apply position recorded on the target for one slot.
//
// Invariant: every element of Applied is > Low, and Applied is sorted
// ascending without duplicates; AppliedFrom[i] <= Applied[i] starts the range
// that ends at Applied[i], and ranges do not overlap.
type Progress struct {
	Exists             bool // a progress row exists for the slot
	Low                change.LSN
	Applied            []change.LSN  // range ends
	AppliedFrom        []change.LSN  // range starts
	Snapshot           SnapshotState // where the slot's initial copy stands
	CreatedPublication bool          // repstream created the publication (and may drop it)
	// KafkaOffset (apply --kafka) is the offset of the slot's topic to
	// read from again: every transaction not applied by Low starts at or
	// after it. -1: none recorded yet.
	KafkaOffset int64
	// KafkaTopicID is the brokers' id of the topic KafkaOffset is an
	// offset of (kafkalog.TopicID), recorded at this target's first start
	// (or its first start with a version that records it) and never
	// changed: a topic deleted and made again has another. "": none.
	KafkaTopicID string
}

// SnapshotState is where a slot's initial copy stands, as its progress
// record keeps it (the column snapshot). A record made before the slot
// exists (MarkPublicationCreated) has none yet: "".
type SnapshotState string

const (
	SnapshotNone    SnapshotState = "none"    // no initial copy: --snapshot=false, or --adopt-slot
	SnapshotRunning SnapshotState = "running" // the copy began and did not complete: the next start resumes it (or, its slot gone, copies again)
	SnapshotDone    SnapshotState = "done"    // the copy completed
)

// IsApplied reports whether the source transaction ending at end is already
// applied on the target: end <= Low or end lies in a recorded range.
func (p Progress) IsApplied(end change.LSN) bool {
	if end <= p.Low {
		return true
	}
	i, _ := slices.BinarySearch(p.Applied, end) // the first range ending at or after end
	if i == len(p.Applied) {
		return false
	}
	from := p.Applied[i]
	if i < len(p.AppliedFrom) {
		from = p.AppliedFrom[i]
	}
	return from <= end
}

// EnsureState creates the repstream schema and its tables if missing, after
// checking that a schema repstream already there cannot be used by another
// role (provision.CheckSchema).
func EnsureState(ctx context.Context, conn *pgx.Conn) error { return ensureState(ctx, conn, "") }

// Register is EnsureState for a replication's run: in the same transaction
// it records slot in repstream.replications, so that a Release of another
// slot, which drops the schema with the last replication, sees this one
// from now on (even before it has any progress).
func Register(ctx context.Context, conn *pgx.Conn, slot string) error {
	return ensureState(ctx, conn, slot)
}

// replicationsSchema lists the replications that use the target's state:
// one row per slot, from its first start (Register) to its drop (Release),
// with the source's schema-change triggers as the replication last saw
// them working (ddl_triggers: install.TriggerDigest; NoTriggers: its last
// start followed schema changes without them; NULL: never recorded), and
// whether repstream.tables records the tables the schema-change messages
// made (made_recorded: false for a replication an earlier version
// registered, until a start records them: MadeRecorded), and the source
// database it replicates from (source_system_id, source_database_oid:
// SetSource; NULL: not recorded, as by earlier versions).
const replicationsSchema = `
CREATE TABLE IF NOT EXISTS repstream.replications (
	slot text PRIMARY KEY,
	registered_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS ddl_triggers text;
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS made_recorded bool NOT NULL DEFAULT false;
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS source_system_id text;
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS source_database_oid oid;
ALTER TABLE repstream.replications ADD COLUMN IF NOT EXISTS origin text;`

func ensureState(ctx context.Context, conn *pgx.Conn, slot string) error {
	// The transaction is idempotent: one that a running apply's own
	// transactions deadlock (its REVOKEs and CREATE ... IF NOT EXISTS
	// against the apply's locks) is tried again.
	for attempt := 1; ; attempt++ {
		err := ensureStateOnce(ctx, conn, slot)
		if err == nil || attempt == 5 || !pgerr.TxnConflict(err) {
			return err
		}
	}
}

func ensureStateOnce(ctx context.Context, conn *pgx.Conn, slot string) error {
	// A concurrent CREATE ... IF NOT EXISTS can still fail on the catalog's
	// unique index; the advisory lock serialises repstream processes.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create progress state: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := provision.Lock(ctx, tx); err != nil {
		return err
	}
	if _, err := provision.EnsureSchema(ctx, tx, "target"); err != nil {
		return err
	}
	for _, step := range []struct{ what, sql string }{
		{"error queue", errorQueueSchema},
		{"progress state", stateSchema},
		{"table sync state", tablesSchema},
		{"deferred DDL state", afterCopySchema},
		{"replications", replicationsSchema},
		{"type records", typesSchema},
	} {
		if _, err := tx.Exec(ctx, step.sql); err != nil {
			return fmt.Errorf("create %s: %w", step.what, err)
		}
	}
	if err := provision.RevokeFunctions(ctx, tx); err != nil {
		return fmt.Errorf("create progress state: %w", err)
	}
	if slot != "" {
		if _, err := tx.Exec(ctx, `INSERT INTO repstream.replications (slot, made_recorded) VALUES ($1, true) ON CONFLICT (slot) DO NOTHING`, slot); err != nil {
			return fmt.Errorf("register slot %q on the target: %w", slot, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create progress state: %w", err)
	}
	return nil
}

// stateTables are the tables of the target's state, each with a slot
// column.
var stateTables = []string{"errors", "skip_requests", "applied", "progress", "tables", "deferred_ddl", "unbuilt_indexes", "replications", "types"}

// Release removes slot's state from the target (DropState) and its
// registration and, when no other replication has state or a registration
// left, everything repstream made on the target: its tables, its function
// and the schema repstream. It returns the slots that keep the schema (none
// once it is gone). A missing schema is nothing to release; an untrusted
// one is refused before anything is touched.
func Release(ctx context.Context, conn *pgx.Conn, slot string, log *slog.Logger) (kept []string, err error) {
	exists, err := provision.CheckSchema(ctx, conn, "target")
	if err != nil || !exists {
		return nil, err
	}
	if err := EnsureState(ctx, conn); err != nil {
		return nil, err
	}
	if err := DropState(ctx, conn, slot, log); err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("release the target's state of slot %q: %w", slot, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := provision.Lock(ctx, tx); err != nil {
		return nil, err
	}
	var q strings.Builder
	q.WriteString("SELECT COALESCE(array_agg(DISTINCT slot ORDER BY slot), '{}') FROM (")
	for i, t := range stateTables {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("SELECT slot FROM repstream." + t + " WHERE slot <> $1")
	}
	q.WriteString(") s")
	if err := tx.QueryRow(ctx, q.String(), slot).Scan(&kept); err != nil {
		return nil, fmt.Errorf("look up the other replications on the target: %w", err)
	}
	if len(kept) > 0 {
		return kept, tx.Commit(ctx)
	}
	drops := "DROP FUNCTION IF EXISTS repstream.expect_row(bigint); DROP FUNCTION IF EXISTS repstream.local_older(xid, timestamptz); DROP TABLE IF EXISTS "
	for i, t := range stateTables {
		if i > 0 {
			drops += ", "
		}
		drops += "repstream." + t
	}
	if _, err := tx.Exec(ctx, drops); err != nil {
		return nil, fmt.Errorf("drop repstream's state on the target: %w", err)
	}
	left, err := provision.DropSchemaIfEmpty(ctx, tx)
	if err != nil {
		return nil, err
	}
	if left != "" {
		log.Warn("the schema repstream on the target is kept: something else is in it", "left", left)
	}
	return nil, tx.Commit(ctx)
}

// LoadProgress reads the slot's progress. A slot without a progress row
// yields Progress{Exists: false} and no error.
func LoadProgress(ctx context.Context, conn *pgx.Conn, slot string) (Progress, error) {
	var p Progress
	var low string
	err := conn.QueryRow(ctx,
		// The Kafka columns through to_jsonb: a target whose state an
		// earlier version made has none until an engine's next start
		// (Register) adds them, and status, drop or errors may run first.
		`SELECT low_lsn::text, snapshot, created_publication, coalesce((to_jsonb(p)->>'kafka_offset')::bigint, -1), coalesce(to_jsonb(p)->>'kafka_topic_id', '')
FROM repstream.progress p WHERE slot = $1`, slot).
		Scan(&low, &p.Snapshot, &p.CreatedPublication, &p.KafkaOffset, &p.KafkaTopicID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Progress{}, nil
	}
	if err != nil {
		return Progress{}, fmt.Errorf("load progress of slot %q: %w", slot, err)
	}
	p.Exists = true
	if p.Low, err = change.ParseLSN(low); err != nil {
		return Progress{}, fmt.Errorf("load progress of slot %q: %w", slot, err)
	}
	rows, err := conn.Query(ctx,
		`SELECT end_lsn::text, coalesce(first_lsn, end_lsn)::text FROM repstream.applied WHERE slot = $1 AND end_lsn > $2::pg_lsn ORDER BY end_lsn`, slot, low)
	if err != nil {
		return Progress{}, fmt.Errorf("load applied transactions of slot %q: %w", slot, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s, f string
		if err := rows.Scan(&s, &f); err != nil {
			return Progress{}, fmt.Errorf("load applied transactions of slot %q: %w", slot, err)
		}
		l, err := change.ParseLSN(s)
		if err != nil {
			return Progress{}, fmt.Errorf("load applied transactions of slot %q: %w", slot, err)
		}
		from, err := change.ParseLSN(f)
		if err != nil {
			return Progress{}, fmt.Errorf("load applied transactions of slot %q: %w", slot, err)
		}
		p.Applied = append(p.Applied, l)
		p.AppliedFrom = append(p.AppliedFrom, from)
	}
	if err := rows.Err(); err != nil {
		return Progress{}, fmt.Errorf("load applied transactions of slot %q: %w", slot, err)
	}
	p.AppliedFrom, p.Applied = mergeRanges(p.AppliedFrom, p.Applied)
	return p, nil
}

// mergeRanges returns the union of the ranges [from[i], to[i]] as disjoint
// ranges sorted by their ends, so that IsApplied's binary search is exact
// even if recorded ranges overlap.
func mergeRanges(from, to []change.LSN) ([]change.LSN, []change.LSN) {
	if len(to) == 0 {
		return from, to
	}
	type rng struct{ from, to change.LSN }
	rs := make([]rng, len(to))
	for i := range to {
		rs[i] = rng{min(from[i], to[i]), to[i]}
	}
	slices.SortFunc(rs, func(a, b rng) int { return cmp.Compare(a.from, b.from) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.from <= last.to {
			last.to = max(last.to, r.to)
			continue
		}
		out = append(out, r)
	}
	mf, mt := make([]change.LSN, len(out)), make([]change.LSN, len(out))
	for i, r := range out {
		mf[i], mt[i] = r.from, r.to
	}
	return mf, mt
}

// InitProgress creates or replaces the slot's progress row (low watermark,
// initial-copy state, whether repstream created the publication) and forgets the
// applied set at or below low.
func InitProgress(ctx context.Context, conn *pgx.Conn, slot string, low change.LSN, snapshot SnapshotState, createdPub bool) error {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO repstream.progress (slot, low_lsn, snapshot, created_publication, updated_at)
VALUES ($1, $2::pg_lsn, $3, $4, now())
ON CONFLICT (slot) DO UPDATE SET low_lsn = excluded.low_lsn, snapshot = excluded.snapshot,
	created_publication = excluded.created_publication, updated_at = now()`,
		slot, low.String(), snapshot, createdPub)
	b.Queue(`DELETE FROM repstream.applied WHERE slot = $1 AND end_lsn <= $2::pg_lsn`, slot, low.String())
	if err := sendTx(ctx, conn, b); err != nil {
		return fmt.Errorf("init progress of slot %q at %s: %w", slot, low, err)
	}
	return nil
}

// MarkPublicationCreated records that repstream created the slot's
// publication (so that drop removes it), creating the progress row if needed
// without touching an existing position.
func MarkPublicationCreated(ctx context.Context, conn *pgx.Conn, slot string) error {
	_, err := conn.Exec(ctx, `INSERT INTO repstream.progress (slot, low_lsn, snapshot, created_publication, updated_at)
VALUES ($1, '0/0', '', true, now())
ON CONFLICT (slot) DO UPDATE SET created_publication = true, updated_at = now()`, slot)
	if err != nil {
		return fmt.Errorf("record publication of slot %q: %w", slot, err)
	}
	return nil
}

// SetSnapshot records where the slot's initial copy stands.
func SetSnapshot(ctx context.Context, conn *pgx.Conn, slot string, snapshot SnapshotState) error {
	tag, err := conn.Exec(ctx,
		`UPDATE repstream.progress SET snapshot = $2, updated_at = now() WHERE slot = $1`, slot, snapshot)
	if err != nil {
		return fmt.Errorf("set snapshot of slot %q: %w", slot, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set snapshot of slot %q: no progress row (InitProgress first)", slot)
	}
	return nil
}

// AdvanceLow raises the slot's low watermark to low (never lowers it) and
// prunes the applied set at or below the new watermark, in one transaction.
// The caller guarantees every source transaction ending at or below low is
// applied.
func AdvanceLow(ctx context.Context, conn *pgx.Conn, slot string, low change.LSN) error {
	b := &pgx.Batch{}
	b.Queue(`UPDATE repstream.progress SET low_lsn = greatest(low_lsn, $2::pg_lsn), updated_at = now() WHERE slot = $1`,
		slot, low.String())
	b.Queue(`DELETE FROM repstream.applied a USING repstream.progress p
WHERE a.slot = $1 AND p.slot = $1 AND a.end_lsn <= p.low_lsn`, slot)
	if err := sendTx(ctx, conn, b); err != nil {
		return fmt.Errorf("advance low watermark of slot %q to %s: %w", slot, low, err)
	}
	return nil
}

// SetKafkaTopic records the id of the topic this target reads
// (Progress.KafkaTopicID) unless one is recorded already.
func SetKafkaTopic(ctx context.Context, conn *pgx.Conn, slot, id string) error {
	if _, err := conn.Exec(ctx, `UPDATE repstream.progress SET kafka_topic_id = $2 WHERE slot = $1 AND kafka_topic_id = ''`, slot, id); err != nil {
		return fmt.Errorf("record the topic id of slot %q: %w", slot, err)
	}
	return nil
}

// AdvanceLowAt is AdvanceLow that also records the topic offset to read
// from again (apply --kafka), in the same transaction: offset must be a
// resume point for low (kafkalog.Reader.ResumeOffset).
func AdvanceLowAt(ctx context.Context, conn *pgx.Conn, slot string, low change.LSN, offset int64) error {
	b := &pgx.Batch{}
	b.Queue(`UPDATE repstream.progress SET low_lsn = greatest(low_lsn, $2::pg_lsn), kafka_offset = $3, updated_at = now() WHERE slot = $1`,
		slot, low.String(), offset)
	b.Queue(`DELETE FROM repstream.applied a USING repstream.progress p
WHERE a.slot = $1 AND p.slot = $1 AND a.end_lsn <= p.low_lsn`, slot)
	if err := sendTx(ctx, conn, b); err != nil {
		return fmt.Errorf("advance low watermark of slot %q to %s (topic offset %d): %w", slot, low, offset, err)
	}
	return nil
}

// DropState removes the slot's progress, applied rows and error queue
// (EnsureState first). The keys and indexes of the user's tables set aside
// for a copy that did not complete are made again first, those tables
// emptied (RestoreSetAside); what is deferred on tables --create-tables
// made is built (BuildAllAfterCopy); a build that fails is logged, naming
// the table, and the state is removed anyway.
func DropState(ctx context.Context, conn *pgx.Conn, slot string, log *slog.Logger) error {
	if err := RestoreSetAside(ctx, conn, slot, true, log); err != nil {
		log.Warn("a target table set aside for the copy could not be restored as it was", "slot", slot, "err", err)
	}
	if err := BuildAllAfterCopy(ctx, conn, slot, false, log); err != nil {
		log.Warn("a table --create-tables made keeps going without its keys or indexes", "slot", slot, "err", err)
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM repstream.errors WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.skip_requests WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.applied WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.progress WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.tables WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.deferred_ddl WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.unbuilt_indexes WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.replications WHERE slot = $1`, slot)
	b.Queue(`DELETE FROM repstream.types WHERE slot = $1`, slot)
	if err := sendTx(ctx, conn, b); err != nil {
		return fmt.Errorf("drop progress state of slot %q: %w", slot, err)
	}
	return nil
}

// sendTx runs the batch in one transaction.
func sendTx(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
