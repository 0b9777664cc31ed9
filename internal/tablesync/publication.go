package tablesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/apply"
	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// publicationPoll follows what pgoutput never reports: whether the
// publication still publishes every kind of change, and which tables it
// publishes. Without the source's event trigger (--ddl=relation, false;
// tables) nothing else says; with it, a session that turned it off
// (PostgreSQL 17's event_triggers = off) may have changed them unseen.
// The writer copies a table the stream carries that the slot never
// recorded (target/unrecorded.go); this poll also finds
//   - a table published and not recorded that has no change in the stream
//     yet (ALTER PUBLICATION ... ADD TABLE of a table nobody writes):
//     recorded pending, copied (with the trigger, once apply has passed
//     where the poll first saw it, so that a table a CREATE TABLE's
//     message on its way records is not taken for one: pendUnseen);
//   - a recorded table the publication no longer publishes (ALTER
//     PUBLICATION ... DROP TABLE, RENAME, SET SCHEMA out, DROP TABLE, SET
//     UNLOGGED), first seen at source WAL position X. Once apply has
//     passed X (none of its changes from before is still on the way) and
//     it is still out, its record is removed: it is no longer replicated,
//     and if it comes back, it is unrecorded, so copied anew (its changes
//     outside were never in the stream). A table set UNLOGGED stops the
//     run, as the trigger's message does. If it is back before that, it
//     is recorded pending at once and copied anew;
//   - without the trigger, a recorded table whose source identity (its
//     oid, the publication's entries that publish it, the xmin of the
//     publication's row: install.PublicationIdents) is not the one
//     recorded with its copy, or at the first poll after it: dropped and
//     made again, out of the publication and back, or the publication's
//     options altered (and perhaps set back: changes may have been left
//     out), between two polls or while no engine ran. It is copied anew
//     (followIdent); the writer sees a table made again too, at its first
//     change (with the trigger, a ready table recorded without an identity
//     gets one, for the writer's look);
//   - without the trigger, an enum or composite type a recorded table holds
//     altered on the source (followTypes): the run stops, the table
//     recorded pending;
//   - a publication changed to leave out inserts, updates, deletes or
//     truncates (ALTER PUBLICATION ... SET (publish = ...)): the run stops,
//     as a start would refuse it (install.CheckPublishes), and every
//     table it publishes is recorded pending (target.PendAll): the next
//     start, which the publication must publish everything for, copies
//     them anew, since the changes left out were never in the stream.
//
// Not seen: a table whose identity does not change when it leaves and
// comes back (SET SCHEMA out of a published schema and back, SET UNLOGGED
// and back) within one poll: docs/schema-changes.md says so.
type publicationPoll struct {
	every  time.Duration // config.PublicationPoll
	tables bool          // no event trigger: follow the tables' identities, copy the unrecorded at once
	last   time.Time
	out    map[schema.TableName]change.LSN // recorded, seen out of the publication at this source position
	unseen map[schema.TableName]change.LSN // with the event trigger: published, not recorded, first seen at this source position
	types  typeDefs                        // without it: the source's enums and composites at the poll before (nil: none yet; followTypes)
}

// pendUnseen is the poll's look, with the event trigger, at the
// published tables the slot does not record: a schema-change message on
// its way may record it (a table made: SetTableMade), so a table is first
// noted with the source's WAL position at. Once apply has passed it (low)
// and it is still published and not recorded, no message said that it
// entered the publication (a session with the trigger off: PostgreSQL
// 17's event_triggers = off): it is recorded pending, and copied.
func (ts *Syncer) pendUnseen(ctx context.Context, tgt *pgx.Conn, pp *publicationPoll, filter *apply.TableFilter, at, low change.LSN, syncs []target.TableSync, published []schema.TableName) error {
	if pp.unseen == nil {
		pp.unseen = map[schema.TableName]change.LSN{}
	}
	seen := map[schema.TableName]bool{}
	for _, t := range published {
		if target.Records(syncs, t) {
			continue
		}
		seen[t] = true
		since, noted := pp.unseen[t]
		switch {
		case !noted:
			pp.unseen[t] = at
		case low >= since:
			delete(pp.unseen, t)
			if err := ts.recopy(ctx, tgt, filter, t); err != nil {
				return err
			}
			ts.log.Warn("a table is in the publication that this replication never copied, and no schema-change message said it entered (a session with the event trigger off, "+
				"PostgreSQL 17's event_triggers = off): it is copied from a new snapshot, then streamed", "component", "tablesync", "table", t.String(), "source_position", since)
		}
	}
	for t := range pp.unseen {
		if !seen[t] {
			delete(pp.unseen, t)
		}
	}
	return nil
}

// poll runs one comparison when its interval has passed.
func (ts *Syncer) pollPublication(ctx context.Context, tgt *pgx.Conn, pp *publicationPoll, filter *apply.TableFilter, log *slog.Logger) error {
	if time.Since(pp.last) < pp.every {
		return nil
	}
	pp.last = time.Now()
	// A source out of reach is the stream's to report (and ride out):
	// the poll tries again next time.
	src, err := install.ConnectSource(ctx, ts.cfg.Source)
	if err != nil {
		log.Debug("publication poll: source not reached", "err", err)
		return nil
	}
	defer src.Close(context.WithoutCancel(ctx))
	var at change.LSN
	var s string
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		log.Debug("publication poll: source not reached", "err", err)
		return nil
	}
	if at, err = change.ParseLSN(s); err != nil {
		return err
	}
	if !pp.tables {
		if err := ts.CheckDDLTriggers(ctx, src, tgt); err != nil {
			return err
		}
	}
	if err := ts.CheckPublishing(ctx, src, tgt); err != nil {
		return err
	}
	idents, err := install.PublicationIdents(ctx, src, ts.cfg.Publication)
	if err != nil {
		return err
	}
	published := slices.SortedFunc(maps.Keys(idents), schema.TableName.Compare)
	prog, err := target.LoadProgress(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	if pp.tables {
		if pp.types, err = ts.followTypes(ctx, src, tgt, filter, syncs, published, pp.types, at); err != nil {
			return err
		}
	}
	recorded := map[schema.TableName]bool{}
	for _, sy := range syncs {
		t := schema.TableName{Schema: sy.Schema, Name: sy.Name}
		recorded[t] = true
		if sy.State != target.TableReady {
			continue // pending, copying: tablesync's Watch has them
		}
		in := slices.Contains(published, t)
		since, wasOut := pp.out[t]
		switch {
		case in && wasOut:
			delete(pp.out, t)
			if err := ts.recopy(ctx, tgt, filter, t); err != nil {
				return err
			}
			log.Warn("a table left the publication and came back unseen (without the event trigger, or in a session with it off): its changes outside were not in the stream, it is copied anew", "table", t.String())
		case in && pp.tables:
			if err := ts.followIdent(ctx, tgt, filter, sy, idents[t]); err != nil {
				return err
			}
		case in:
			// With the event trigger: a ready table recorded without its
			// source identity (a partition detached into a table of its
			// own, or recorded by an earlier version) gets it, so that the
			// writer copies it anew if its changes come under another oid.
			if sy.SourceIdent == "" {
				if err := target.SetSourceIdent(ctx, tgt, ts.cfg.Slot, t, idents[t]); err != nil {
					return err
				}
			}
		case !wasOut:
			pp.out[t] = at
		case prog.Low >= since:
			delete(pp.out, t)
			if err := ts.forgetOut(ctx, src, tgt, t, since, pp.tables, log); err != nil {
				return err
			}
		}
	}
	for t := range pp.out {
		if !recorded[t] {
			delete(pp.out, t)
		}
	}
	if pp.tables {
		return ts.PendUnrecorded(ctx, tgt, filter, syncs, published)
	}
	return ts.pendUnseen(ctx, tgt, pp, filter, at, prog.Low, syncs, published)
}

// forgetOut removes the record of a table the publication no longer
// publishes since the source's WAL position since, which apply has
// passed: it is no longer replicated. One set UNLOGGED on the source
// stops the run (with the event trigger, its message would have, unless
// a session with the trigger off set it). untracked: the run follows no
// event trigger.
func (ts *Syncer) forgetOut(ctx context.Context, src, tgt *pgx.Conn, t schema.TableName, since change.LSN, untracked bool, log *slog.Logger) error {
	var exists, unlogged bool
	if err := src.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, coalesce((SELECT relpersistence = 'u' FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), false)",
		t.Quoted()).Scan(&exists, &unlogged); err != nil {
		return fmt.Errorf("look up %s on the source: %w", t, err)
	}
	if err := target.ForgetTable(ctx, tgt, ts.cfg.Slot, t); err != nil {
		return err
	}
	switch {
	case unlogged:
		return fmt.Errorf("table %s was set UNLOGGED on the source (before WAL position %s): its changes are no longer written to the WAL, so they cannot be replicated "+
			"and the target would fall behind without a word; set it LOGGED again on the source (repstream then copies it anew), or take it out of the publication", t, since)
	case !exists && !untracked:
		log.Info("a table dropped on the source is no longer recorded", "table", t.String(), "source_position", since)
	default:
		log.Warn("a table is no longer in the publication: it is no longer replicated, and the target keeps it as it is; if it comes back, it is copied anew, its target table emptied for that only with --truncate",
			"table", t.String(), "publication", ts.cfg.Publication, "source_position", since)
	}
	return nil
}

// CheckPublishing stops a running engine (its error) whose publication no
// longer publishes every kind of change (unless --partial-publication):
// the changes it left out never reached the target, so every table it
// publishes is recorded pending first (target.PendAll), and the next
// start, which refuses the publication until it publishes everything
// again, copies them anew.
func (ts *Syncer) CheckPublishing(ctx context.Context, src, tgt *pgx.Conn) error {
	if ts.cfg.PartialPublication {
		return nil
	}
	err := install.CheckPublishes(ctx, src, ts.cfg.Publication, false, ts.log)
	if !errors.Is(err, install.ErrPartialPublication) {
		return err
	}
	at, n, perr := ts.pendAll(ctx, src, tgt, true)
	if perr != nil {
		return fmt.Errorf("the publication changed while the engine ran (seen at source WAL position %s): the changes it left out since then never reached the target, "+
			"and recording its tables for a new copy failed (%v): once it publishes them again, copy them anew with `repstream tables add --truncate` after taking them out of the publication: %w", at, perr, err)
	}
	return fmt.Errorf("the publication changed while the engine ran (seen at source WAL position %s): the changes it left out since then never reached the target, "+
		"so its %d tables are recorded for a new copy, which the next start makes once it publishes every kind of change again: %w", at, n, err)
}

// CheckDDLTriggers stops a running engine that follows schema changes
// through the source's event trigger (its error) when a trigger of it is
// gone or does not fire in every session (install.CheckDDLTriggers): the
// schema changes, tables added to the publication and partition TRUNCATEs
// made meanwhile were not in the stream. Every table the publication
// publishes is recorded pending first (target.PendAll): the next start,
// which installs the triggers anew, copies them anew.
//
// So does a trigger touched since the replication last saw them working
// (install.TriggerDigest differs from the one the target records: turned
// off and on again between two looks, or while the engine was stopped).
func (ts *Syncer) CheckDDLTriggers(ctx context.Context, src, tgt *pgx.Conn) error {
	err := install.CheckDDLTriggers(ctx, src)
	if err == nil {
		err = ts.checkDigest(ctx, src, tgt)
	}
	if !errors.Is(err, install.ErrDDLTriggerOff) {
		return err
	}
	at, n, perr := ts.pendAll(ctx, src, tgt, true)
	if perr != nil {
		return fmt.Errorf("the source's schema-change triggers were turned off while the engine ran (seen at source WAL position %s): what they would have carried since never reached the target, "+
			"and recording the tables for a new copy failed (%v): copy them anew with `repstream tables add --truncate` after taking them out of the publication: %w", at, perr, err)
	}
	return fmt.Errorf("the source's schema-change triggers were turned off while the engine ran (seen at source WAL position %s): the schema changes, tables added to the publication "+
		"and partition TRUNCATEs made since never reached the target, so its %d tables are recorded for a new copy, which the next start makes (it installs the triggers anew): %w", at, n, err)
}

// checkDigest compares the source's schema-change triggers with what the
// target records of them (install.TriggerDigest), recording them if it
// has nothing yet; one that differs is ErrDDLTriggerOff.
func (ts *Syncer) checkDigest(ctx context.Context, src, tgt *pgx.Conn) error {
	now, err := install.TriggerDigest(ctx, src)
	if err != nil {
		return err
	}
	seen, err := target.TriggerDigest(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	switch {
	case seen == "" || seen == target.NoTriggers:
		return target.SetTriggerDigest(ctx, tgt, ts.cfg.Slot, now)
	case !install.SameTriggers(seen, now):
		return fmt.Errorf("%w: dropped, made again or altered (ALTER EVENT TRIGGER) since this replication last saw them working (%s, now %s)", install.ErrDDLTriggerOff, seen, now)
	}
	return nil
}

// TriggersAtStart is a start's look at the source's schema-change
// triggers, for a run that follows schema changes through them: if they
// were turned off since the replication last saw them working, while no
// engine of it ran (a trigger off now, unless resumed is false, a first
// start, or the event triggers are not there at all and nothing is
// recorded, a first start with them; or touched: install.TriggerDigest
// differs from the one recorded),
// the changes they would have carried were never in the stream, and every
// table the publication publishes is recorded pending, for this start to
// copy anew. Then it runs setUp (InstallDDL, which sets the triggers
// right; nil for apply --kafka, whose capture does that: a trigger off
// then stops the start, naming the capture's start as the way out) and
// records the triggers as they are. A resumed replication's first start
// with the triggers it installs also copies the published tables it does
// not record (pendUnrecordedAtFirstUse).
func (ts *Syncer) TriggersAtStart(ctx context.Context, src, tgt *pgx.Conn, resumed bool, setUp func() error) error {
	seen, err := target.TriggerDigest(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	// Its last start did without the triggers: this is its first with
	// them.
	firstUse := resumed && seen == target.NoTriggers
	if seen == target.NoTriggers {
		seen = ""
	}
	now, err := install.TriggerDigest(ctx, src)
	if err != nil {
		return err
	}
	offList, missing, err := install.DDLTriggersOff(ctx, src)
	if err != nil {
		return err
	}
	var off error
	if len(offList) > 0 {
		off = fmt.Errorf("%w: %s", install.ErrDDLTriggerOff, strings.Join(offList, "; "))
	}
	why := ""
	switch {
	case seen != "" && !install.SameTriggers(seen, now):
		why = fmt.Sprintf("dropped, made again or altered (ALTER EVENT TRIGGER) since this replication last saw them working (%s, now %s)", seen, now)
	case off != nil && resumed && (seen != "" || !missing) && !firstUse:
		// Event triggers not there at all, with nothing recorded, are a
		// replication's first start with them (it followed schema
		// changes otherwise until now, or an earlier version recorded
		// nothing): InstallDDL makes them.
		why = off.Error()
	}
	if why != "" {
		// A replication an earlier version ran did not record the
		// tables schema-change messages made (recordMadeByEarlier): one
		// it does not record may hold rows it streamed, so none is taken
		// for a table entering it.
		made, err := target.MadeRecorded(ctx, tgt, ts.cfg.Slot)
		if err != nil {
			return err
		}
		at, n, err := ts.pendAll(ctx, src, tgt, made)
		if err != nil {
			return fmt.Errorf("the source's schema-change triggers were off while no engine of this replication ran (%s): recording its tables for a new copy failed: %w", why, err)
		}
		ts.log.Warn("the source's schema-change triggers were off while no engine of this replication ran: the schema changes, tables added to the publication and partition TRUNCATEs made meanwhile never reached the target, so every table is copied anew",
			"why", why, "tables", n, "source_wal", at)
	}
	if setUp == nil {
		// Only the capture sets them right: an apply that ran with them
		// off would follow a stream that lacks what they carry, and stop
		// at its first poll; one that recorded them as an earlier
		// version made them (nothing recorded yet) would see the
		// capture's start change them, and copy every table anew.
		if now, err = ts.waitForCapture(ctx, src, seen == ""); err != nil {
			return err
		}
	}
	if setUp != nil {
		if err := setUp(); err != nil {
			return err
		}
		if now, err = install.TriggerDigest(ctx, src); err != nil {
			return err
		}
	}
	pendUnrecorded := firstUse || resumed && seen == "" && missing && setUp != nil
	if pendUnrecorded {
		if err := ts.pendUnrecordedAtFirstUse(ctx, src, tgt); err != nil {
			return err
		}
	}
	if err := ts.recordMadeByEarlier(ctx, src, tgt, resumed && why == "" && !pendUnrecorded); err != nil {
		return err
	}
	return target.SetTriggerDigest(ctx, tgt, ts.cfg.Slot, now)
}

// recordMadeByEarlier is the first start, by this version, of a
// replication an earlier version ran with the event trigger
// (target.MadeRecorded false): that version did not record the tables the
// schema-change messages made, and the writer would copy each of them
// anew at its first change, the publication poll the others. When record
// (it followed every schema change until now), the published tables not
// recorded are recorded as streamed (as the earlier version streamed
// them: target.SetTablesStreamed); otherwise they were just recorded
// pending, for a copy. Either way, from now on they are recorded.
func (ts *Syncer) recordMadeByEarlier(ctx context.Context, src, tgt *pgx.Conn, record bool) error {
	made, err := target.MadeRecorded(ctx, tgt, ts.cfg.Slot)
	if err != nil || made {
		return err
	}
	if record {
		unrecorded, err := ts.unrecordedPublished(ctx, src, tgt)
		if err != nil {
			return err
		}
		prog, err := target.LoadProgress(ctx, tgt, ts.cfg.Slot)
		if err != nil {
			return err
		}
		if len(unrecorded) > 0 {
			ts.log.Info("recording the published tables that schema changes made as streamed (a replication an earlier version ran)",
				"component", "tablesync", "tables", len(unrecorded))
			if err := target.SetTablesStreamed(ctx, tgt, ts.cfg.Slot, unrecorded, prog.Low, ts.sourceIdents(ctx, src)); err != nil {
				return err
			}
		}
	}
	return target.SetMadeRecorded(ctx, tgt, ts.cfg.Slot)
}

// captureTriggerWait is how long an apply --kafka start waits for the
// capture to set the schema-change triggers right (both halves started at
// once, after an upgrade).
const captureTriggerWait = 30 * time.Second

// waitForCapture waits up to captureTriggerWait, for apply --kafka, until
// the schema-change triggers are on and, when first (nothing recorded
// yet), as this version's capture makes them
// (install.EventTriggersStale), and returns their digest then. After
// that, it refuses the start, naming the capture's start as the way out.
func (ts *Syncer) waitForCapture(ctx context.Context, src *pgx.Conn, first bool) (string, error) {
	for waited := time.Duration(0); ; waited += time.Second {
		off, _, err := install.DDLTriggersOff(ctx, src)
		if err != nil {
			return "", err
		}
		var stale []string
		if first && len(off) == 0 {
			if stale, err = install.EventTriggersStale(ctx, src); err != nil {
				return "", err
			}
		}
		switch {
		case len(off) == 0 && len(stale) == 0:
			return install.TriggerDigest(ctx, src)
		case waited >= captureTriggerWait && len(off) > 0:
			return "", fmt.Errorf("%w: %s: start the capture again (it sets them right), then this apply", install.ErrDDLTriggerOff, strings.Join(off, "; "))
		case waited >= captureTriggerWait:
			return "", fmt.Errorf("the source's schema-change triggers are not as this version's capture makes them (%s: an earlier version's?): start the capture of this version (it sets them right), then this apply", strings.Join(stale, ", "))
		case waited == 0:
			ts.log.Info("waiting for the capture to set the schema-change triggers right", "off", off, "not_as_made", stale, "up_to", captureTriggerWait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// CopyMade records pending every table of created (made on the target by
// this resumed start: install.PrepareTables, from the source's catalog
// as it is now), and this start copies them before it streams
// (SyncPending):
//   - one the slot records, copied or streamed, was dropped on the
//     target since: made empty, it would take the source's changes
//     without its rows before;
//   - one it does not record is new to the target (made on the source
//     while no engine ran, or entered the publication then): its CREATE
//     TABLE, rows and schema changes still in the stream were made for
//     the definitions it had then, not the one it was made with now
//     (replayed, an ALTER of a column that the table's later primary
//     key holds stopped the run). Copied at a snapshot, what the stream
//     has of it up to there is skipped (apply.TableFilter).
func (ts *Syncer) CopyMade(ctx context.Context, tgt *pgx.Conn, created []schema.TableName) error {
	if len(created) == 0 {
		return nil
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	for _, t := range created {
		if target.Records(syncs, t) {
			ts.log.Warn("a replicated table was missing on the target (dropped there): made again, it is copied from a new snapshot, then streamed", "component", "tablesync", "table", t.String())
		} else {
			ts.log.Info("a published table new to the target (made or published on the source while no engine ran): made from the source's definition as it is now, it is copied from a new snapshot, then streamed", "component", "tablesync", "table", t.String())
		}
	}
	return target.PendAll(ctx, tgt, ts.cfg.Slot, created, false)
}

// pendUnrecordedAtFirstUse records pending the published tables the slot
// does not record, at a replication's first start with the event trigger
// it just installed: until now it followed schema changes otherwise
// (--ddl=relation), whose polls copy a table that enters the publication,
// and one that entered since its last look was described by no message.
func (ts *Syncer) pendUnrecordedAtFirstUse(ctx context.Context, src, tgt *pgx.Conn) error {
	unrecorded, err := ts.unrecordedPublished(ctx, src, tgt)
	if err != nil {
		return err
	}
	for _, t := range unrecorded {
		ts.log.Warn("a table is in the publication that this replication never copied, at its first start with the event trigger (added since its last look without it): it is copied from a new snapshot, then streamed",
			"component", "tablesync", "table", t.String())
	}
	if len(unrecorded) == 0 {
		return nil
	}
	return target.PendAll(ctx, tgt, ts.cfg.Slot, unrecorded, true)
}

// unrecordedPublished returns the tables the publication publishes that
// the slot does not record.
func (ts *Syncer) unrecordedPublished(ctx context.Context, src, tgt *pgx.Conn) ([]schema.TableName, error) {
	published, err := install.PublicationTables(ctx, src, ts.cfg.Publication)
	if err != nil {
		return nil, err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return nil, err
	}
	var unrecorded []schema.TableName
	for _, t := range published {
		if !target.Records(syncs, t) {
			unrecorded = append(unrecorded, t)
		}
	}
	return unrecorded, nil
}

// pendAll records every table the publication publishes pending
// (target.PendAll; entering: one not recorded enters the replication),
// for a run about to stop because the stream lacked changes since the
// source's WAL position at (returned for the error; "unknown" if it
// could not be read); n is how many.
func (ts *Syncer) pendAll(ctx context.Context, src, tgt *pgx.Conn, entering bool) (at string, n int, err error) {
	at = "unknown"
	var lsn string
	if src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn) == nil {
		at = lsn
	}
	published, err := install.PublicationTables(ctx, src, ts.cfg.Publication)
	if err == nil {
		err = target.PendAll(ctx, tgt, ts.cfg.Slot, published, entering)
	}
	return at, len(published), err
}

// FollowIdents compares each ready table of syncs that idents has (the
// publication's tables: install.PublicationIdents) with its recorded
// source identity (followIdent).
func (ts *Syncer) FollowIdents(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, syncs []target.TableSync, idents map[schema.TableName]string) error {
	for _, sy := range syncs {
		ident, in := idents[schema.TableName{Schema: sy.Schema, Name: sy.Name}]
		if sy.State != target.TableReady || !in {
			continue
		}
		if err := ts.followIdent(ctx, tgt, filter, sy, ident); err != nil {
			return err
		}
	}
	return nil
}

// followIdent records the source identity of a ready table sy that has
// none recorded yet; one that has another (dropped and made again, or
// out of the publication and back, since: its changes then were not in
// the stream) is copied anew.
func (ts *Syncer) followIdent(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, sy target.TableSync, ident string) error {
	t := schema.TableName{Schema: sy.Schema, Name: sy.Name}
	if sy.SourceIdent == "" {
		return target.SetSourceIdent(ctx, tgt, ts.cfg.Slot, t, ident)
	}
	what, adopt := install.IdentChange(sy.SourceIdent, ident)
	switch {
	case adopt:
		return target.SetSourceIdent(ctx, tgt, ts.cfg.Slot, t, ident)
	case what == "":
		return nil
	}
	if err := ts.recopy(ctx, tgt, filter, t); err != nil {
		return err
	}
	why := map[string]string{
		"table": "the table was dropped and made again",
		"entry": "the table was taken out of the publication and added back, or its row filter or column list set anew",
		"publication": "the publication was altered (ALTER PUBLICATION ... SET (publish = ...), SET (publish_via_partition_root = ...), OWNER TO or RENAME): " +
			"it may have left changes out meanwhile, even if it publishes everything now",
	}[what]
	ts.log.Warn(why+", since repstream last looked (without the event trigger): "+
		"its changes meanwhile may not be in the stream, so it is copied anew", "component", "tablesync", "table", t.String(), "source_ident", ident, "recorded_ident", sy.SourceIdent)
	return nil
}

// PendUnrecorded records pending, and filters, every published table that
// syncs (the slot's recorded tables) lacks: one added to the publication
// that nothing wrote since, without the event trigger or in a session
// with it off (with it, the caller has applied every schema-change
// message up to the source position it read the publication at: a table
// one made is recorded). Watch copies them (and a run that ends caught
// up, before it ends).
func (ts *Syncer) PendUnrecorded(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, syncs []target.TableSync, published []schema.TableName) error {
	for _, t := range published {
		if target.Records(syncs, t) {
			continue
		}
		if err := ts.recopy(ctx, tgt, filter, t); err != nil {
			return err
		}
		ts.log.Warn("a table is in the publication that this replication never copied (ALTER PUBLICATION ... ADD TABLE without the event trigger, or in a session with it off; "+
			"without it, a table created since): it is copied from a new snapshot, then streamed", "component", "tablesync", "table", t.String())
	}
	return nil
}

// recopy records t pending and filters it: Watch copies it. A table the
// slot does not record enters its replication (target.PendEntering: its
// copy empties a target table holding rows only with --truncate).
func (ts *Syncer) recopy(ctx context.Context, tgt *pgx.Conn, filter *apply.TableFilter, t schema.TableName) error {
	filter.Put(t, apply.TableState{})
	return target.PendEntering(ctx, tgt, ts.cfg.Slot, t)
}
