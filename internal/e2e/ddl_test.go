package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/stats"
)

// columnsOf lists a table's columns as "name type", sorted (order on the
// two sides need not match); nil if the table does not exist.
func columnsOf(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY 1`, table)
	if err != nil {
		t.Fatalf("columns of %s: %v", table, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("columns of %s: %v", table, err)
	}
	return cols
}

// assertSameTable fails unless table has the same columns (names and types)
// and the same rows on both sides, compared column by column by name.
func (e *env) assertSameTable(table, orderBy string) {
	e.t.Helper()
	sc, tc := columnsOf(e.t, e.Src, table), columnsOf(e.t, e.Tgt, table)
	if strings.Join(sc, ", ") != strings.Join(tc, ", ") {
		e.t.Fatalf("%s: columns differ:\n  source %v\n  target %v", table, sc, tc)
	}
	var names []string
	for _, c := range sc {
		name, _, _ := strings.Cut(c, " ")
		names = append(names, fmt.Sprintf("%q", name))
	}
	sum := func(conn *pgx.Conn) (n int64, h string) {
		q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(ROW(%s)::text, '|' ORDER BY %s)), '') FROM %s",
			strings.Join(names, ", "), orderBy, table)
		if err := conn.QueryRow(context.Background(), q).Scan(&n, &h); err != nil {
			e.t.Fatalf("checksum %s: %v", table, err)
		}
		return n, h
	}
	n1, h1 := sum(e.Src)
	n2, h2 := sum(e.Tgt)
	if n1 != n2 || h1 != h2 {
		e.t.Fatalf("%s differs: source %d rows %s, target %d rows %s", table, n1, h1, n2, h2)
	}
}

// startOnce is start whose stop may be called again (deferred, to report
// the engine's error when the test fails while waiting): it returns the
// first call's result.
func (e *env) startOnce(cfg config.Config) (stop func() error) {
	e.t.Helper()
	e.waitSlotReleased(cfg.Slot) // so that waitStreaming sees this run's walsender
	halt := e.start(cfg)
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { err = halt() })
		return err
	}
}

// srcMajor is the source server's major version.
func (e *env) srcMajor() int {
	return int(e.count(e.Src, "SELECT current_setting('server_version_num')::int / 10000"))
}

// waitStreaming waits until a walsender streams from the slot: the engine
// has read the schemas (and decided binary or text).
//
// A slot is active also while it is being made (CREATE_REPLICATION_SLOT
// holds it until its snapshot is consistent, which waits for the
// transactions open on the shared source server): a test that wrote then,
// run without a copy (--snapshot=false), wrote before the slot's
// consistent point, and its rows were never in the stream. So the slot's
// walsender must have started replication (catchup or streaming).
func (e *env) waitStreaming(slot string) {
	e.t.Helper()
	waitFor(e.t, "the engine to stream from "+slot, 30*time.Second, func() bool {
		return e.count(e.Src, `SELECT count(*) FROM pg_catalog.pg_replication_slots s JOIN pg_catalog.pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = '`+slot+`' AND r.state IN ('catchup', 'streaming')`) == 1
	})
}

// TestDDLReplicated: with one engine running, the source changes its
// schema between (and amid) writes — ADD COLUMN with a constant and a
// now() default, RENAME COLUMN, ALTER COLUMN TYPE int -> bigint, DROP
// COLUMN, a change in the middle of a transaction, CREATE TABLE (with a
// serial) then inserts, CREATE then DROP TABLE — and every change reaches
// the target before the rows that depend on it, in binary and in text.
// At the end both sides have the same columns and rows; a last run with
// --until-caught-up carries a CREATE TABLE made while no engine ran.
// Without the schema-change capture, the first ADD COLUMN stopped the run.
func TestDDLReplicated(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, binary := range []bool{true, false} {
		t.Run(map[bool]string{true: "binary", false: "text"}[binary], func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE SCHEMA app;
				CREATE TABLE app.t (id int PRIMARY KEY, v text, n int);
				INSERT INTO app.t SELECT g, 'v' || g, g FROM generate_series(1, 200) g;`)
			cfg := e.config("app.*")
			cfg.CreateTables = true
			cfg.Binary = binary
			cfg.ApplyParallelism = 2
			cfg.DecodingWorkMem = "64kB"
			e.catchUp(cfg)
			schemaPubs := e.srcMajor() >= 15 // new tables are published (FOR TABLES IN SCHEMA)
			if schemaPubs {
				var n int
				if err := e.Src.QueryRow(t.Context(), "SELECT count(*) FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid WHERE p.pubname = $1", cfg.Slot).Scan(&n); err != nil || n != 1 {
					t.Fatalf("the publication is not FOR TABLES IN SCHEMA app: %d schemas, %v", n, err)
				}
			}

			stop := e.startOnce(cfg)
			defer func() {
				if err := stop(); err != nil {
					t.Errorf("engine: %v", err)
				}
			}()
			e.waitStreaming(cfg.Slot)
			e.srcExec(`ALTER TABLE app.t ADD COLUMN d int DEFAULT 7`)
			e.srcExec(`INSERT INTO app.t (id, v, n, d) SELECT g, 'v' || g, g, g FROM generate_series(201, 300) g`)
			e.srcExec(`UPDATE app.t SET d = d + 1 WHERE id % 10 = 0`)
			e.srcExec(`ALTER TABLE app.t ADD COLUMN ts timestamptz DEFAULT now()`)
			e.srcExec(`INSERT INTO app.t (id, v, n) VALUES (301, 'x', 1)`)
			e.srcExec(`ALTER TABLE app.t RENAME COLUMN v TO w`)
			e.srcExec(`INSERT INTO app.t (id, w, n) VALUES (302, 'renamed', 2); UPDATE app.t SET w = w || '!' WHERE id % 7 = 0`)
			e.srcExec(`ALTER TABLE app.t ALTER COLUMN n TYPE bigint`)
			e.srcExec(`INSERT INTO app.t (id, w, n) VALUES (303, 'big', 5000000000); UPDATE app.t SET n = n * 3000000000 WHERE id % 11 = 0`)
			e.srcExec(`ALTER TABLE app.t DROP COLUMN d`)
			e.srcExec(`INSERT INTO app.t (id, w, n) VALUES (304, 'after drop', 4)`)
			// A change amid a transaction's rows: applied between them.
			e.srcExec(`BEGIN;
				INSERT INTO app.t (id, w, n) VALUES (305, 'before', 5);
				ALTER TABLE app.t ADD COLUMN e text NOT NULL DEFAULT 'e';
				INSERT INTO app.t (id, w, n, e) VALUES (306, 'after', 6, 'set');
				UPDATE app.t SET e = 'upd' WHERE id = 1;
				COMMIT`)
			// A large transaction, streamed while in progress (and applied
			// eagerly), with a change in the middle.
			e.srcExec(`BEGIN;
				INSERT INTO app.t (id, w, n) SELECT g, repeat('x', 200), g FROM generate_series(1000, 3999) g;
				ALTER TABLE app.t ADD COLUMN big text DEFAULT 'b';
				INSERT INTO app.t (id, w, n, big) SELECT g, repeat('y', 200), g, 'big' || g FROM generate_series(4000, 6999) g;
				UPDATE app.t SET big = 'u' WHERE id % 100 = 0;
				COMMIT`)
			if schemaPubs {
				e.srcExec(`CREATE TABLE app.n (id serial PRIMARY KEY, s text NOT NULL, at date DEFAULT '2020-01-01')`)
				e.srcExec(`INSERT INTO app.n (s) SELECT 's' || g FROM generate_series(1, 50) g`)
				e.srcExec(`ALTER TABLE app.n RENAME TO n2; INSERT INTO app.n2 (s) VALUES ('renamed table')`)
				e.srcExec(`CREATE TABLE app.gone (id int PRIMARY KEY); INSERT INTO app.gone VALUES (1), (2)`)
				e.srcExec(`DROP TABLE app.gone`)
			}
			e.srcExec(`INSERT INTO app.t (id, w, n) VALUES (307, 'last', 7)`)
			e.waitCaughtUp(cfg.Slot, time.Minute)
			if err := stop(); err != nil {
				t.Fatalf("engine: %v", err)
			}
			e.assertSameTable("app.t", "id")
			if schemaPubs {
				e.assertSameTable("app.n2", "id")
				var gone bool
				if err := e.Tgt.QueryRow(t.Context(), "SELECT to_regclass('app.gone') IS NULL").Scan(&gone); err != nil || !gone {
					t.Errorf("app.gone is still on the target (%v)", err)
				}
			}

			// A table created while no engine runs; --until-caught-up
			// still ends.
			if schemaPubs {
				e.srcExec(`CREATE TABLE app.later (id int PRIMARY KEY, v numeric(10,2)); INSERT INTO app.later VALUES (1, 1.5), (2, 2.25)`)
			}
			e.srcExec(`ALTER TABLE app.t ALTER COLUMN w SET NOT NULL; INSERT INTO app.t (id, w, n) VALUES (308, 'nn', 8)`)
			e.catchUp(cfg)
			if schemaPubs {
				e.assertSameTable("app.later", "id")
				// The tables the messages made while the engine ran are
				// recorded as streamed (the renamed one under its new
				// name), not copied anew; the one made while no engine
				// ran was made by the next start, and copied
				// (TestCreateTablesMadeWhileStopped).
				var made []string
				if err := e.Tgt.QueryRow(t.Context(), `SELECT coalesce(array_agg(table_name || ' ' || state || ' ' || (copied_at IS NULL) ORDER BY table_name), '{}')
					FROM repstream.tables WHERE slot = $1 AND table_name IN ('n', 'n2', 'later')`, cfg.Slot).Scan(&made); err != nil {
					t.Fatal(err)
				}
				if want := []string{"later ready false", "n2 ready true"}; !slices.Equal(made, want) {
					t.Errorf("the tables made on the source are recorded %q, want %q (n2 never copied, later copied)", made, want)
				}
			}
			e.assertSameTable("app.t", "id")
			var notNull bool
			if err := e.Tgt.QueryRow(t.Context(), "SELECT attnotnull FROM pg_attribute WHERE attrelid = 'app.t'::regclass AND attname = 'w'").Scan(&notNull); err != nil || !notNull {
				t.Errorf("SET NOT NULL did not reach the target: %v %v", notNull, err)
			}
		})
	}
}

// TestDDLRelationFallback: without the event trigger (--ddl=relation),
// schema changes are followed from pgoutput's Relation messages: ADD
// COLUMN (see TestDDLRelationFallbackDefaults), DROP COLUMN and ALTER COLUMN TYPE work; a
// RENAME COLUMN (one column gone, one added) stops the run with an error
// instead of losing the column's values on the target.
func TestDDLRelationFallback(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE f (id int PRIMARY KEY, a text, b int); INSERT INTO f SELECT g, 'a' || g, g FROM generate_series(1, 100) g`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	// New tables are published by a FOR TABLES IN SCHEMA publication
	// (PostgreSQL 15+), which repstream makes only with its event trigger
	// (a keyless table created later would break the source's UPDATEs and
	// DELETEs): the user's own publication here.
	schemaPubs := e.srcMajor() >= 15
	if schemaPubs {
		e.srcExec(`CREATE PUBLICATION ` + cfg.Slot + ` FOR TABLES IN SCHEMA public`)
	}
	e.catchUp(cfg)
	var triggers int
	if err := e.Src.QueryRow(t.Context(), "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%'").Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("--ddl=relation installed %d event triggers (%v)", triggers, err)
	}
	// One engine running: each new Relation is compared with the one before.
	stop := e.startOnce(cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER TABLE f ADD COLUMN c text`)
	e.srcExec(`INSERT INTO f VALUES (101, 'x', 1, 'c101'); UPDATE f SET c = 'u' WHERE id = 5`)
	e.srcExec(`ALTER TABLE f DROP COLUMN a`)
	e.srcExec(`INSERT INTO f VALUES (102, 2, 'c102')`)
	e.srcExec(`ALTER TABLE f ALTER COLUMN b TYPE bigint`)
	e.srcExec(`INSERT INTO f VALUES (103, 9000000000, 'big')`)
	// A new table of the published schema: created from its first
	// Relation message (--create-tables).
	if schemaPubs {
		e.srcExec(`CREATE TABLE fnew (k text PRIMARY KEY, v numeric(8,3)); INSERT INTO fnew VALUES ('a', 1.5), ('b', NULL)`)
	}
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	e.assertSameTable("public.f", "id")
	if schemaPubs {
		e.assertSameTable("public.fnew", "k")
	}
	// A change while no engine runs: compared with the target.
	e.srcExec(`ALTER TABLE f ADD COLUMN e int`)
	e.srcExec(`INSERT INTO f VALUES (110, 10, 'ten', 10)`)
	e.catchUp(cfg)
	e.assertSameTable("public.f", "id")

	e.srcExec(`ALTER TABLE f RENAME COLUMN c TO d`)
	e.srcExec(`INSERT INTO f VALUES (104, 4, 'renamed')`)
	e.mustFail(cfg, "public.f", `"c"`, `"d"`, "RENAME", "at 0/")
	if cols := strings.Join(columnsOf(t, e.Tgt, "public.f"), ", "); !strings.Contains(cols, "c text") {
		t.Errorf("the target lost column c: %s", cols)
	}
}

// TestDDLDropRemovesTrigger: `repstream drop` removes the event trigger,
// its functions and state (the signing key too) from the source, and the
// partitions' TRUNCATE triggers.
func TestDDLDropRemovesTrigger(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE dr (id int PRIMARY KEY)`)
	// A partitioned table: its leaf gets the TRUNCATE trigger repstream_truncate.
	e.srcExec(`CREATE TABLE drp (id int PRIMARY KEY) PARTITION BY RANGE (id); CREATE TABLE drp_1 PARTITION OF drp FOR VALUES FROM (0) TO (10)`)
	cfg := e.config("public.dr")
	cfg.CreateTables = true
	e.catchUp(cfg)
	count := func() (n int) {
		if err := e.Src.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%')
			+ (SELECT count(*) FROM pg_proc WHERE proname LIKE 'ddl\_%' AND pronamespace = to_regnamespace('repstream'))
			+ (SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream')
			+ (SELECT count(*) FROM pg_class WHERE relname = 'ddl_key' AND relnamespace = to_regnamespace('repstream'))
			+ (SELECT count(*) FROM pg_trigger WHERE tgname = 'repstream_truncate')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 18 {
		t.Fatalf("after run: %d of the 5 event triggers, 10 functions (ddl_def twice), the schema, the key and the partition's TRUNCATE trigger on the source, want 18", n)
	}
	e.waitSlotReleased(cfg.Slot)
	if err := engine.Drop(t.Context(), cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("after drop: %d event triggers, functions, triggers or schema left on the source", n)
	}
	e.srcExec(`ALTER TABLE dr ADD COLUMN x int`) // no trigger left to fail
}

// TestDDLBinaryRestart: in binary mode, a type change both sides make
// (int -> bigint) keeps binary; one binary cannot carry (to an enum) stops
// the run with an error that says to restart — and the restarted run
// (which then uses text) applies everything.
func TestDDLBinaryRestart(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TYPE mood AS ENUM ('sad', 'ok')`)
	e.srcExec(`CREATE TABLE b (id int PRIMARY KEY, n int, v text); INSERT INTO b VALUES (1, 1, 'ok')`)
	cfg := e.config("public.b")
	cfg.CreateTables = true
	format := func(reg *stats.Registry) string {
		for _, c := range reg.Snapshot().Components {
			if c.Name == "capture" {
				return c.Info["format"]
			}
		}
		return ""
	}
	if f := format(e.catchUp(cfg)); f != "binary" {
		t.Fatalf("format %q, want binary", f)
	}
	stop := e.startOnce(cfg) // binary: the types match
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER TABLE b ALTER COLUMN n TYPE bigint; INSERT INTO b VALUES (2, 5000000000, 'sad')`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	e.assertSameTable("public.b", "id")
	// USING: the table is copied anew (TestDDLRetypeUsing); its next row
	// is the first in the stream with the enum.
	e.srcExec(`ALTER TABLE b ALTER COLUMN v TYPE mood USING v::mood; INSERT INTO b VALUES (3, 3, 'ok')`)
	waitFor(t, "the table copied anew", time.Minute, func() bool { return e.count(e.Tgt, "SELECT count(*) FROM b") == 3 })
	e.srcExec(`INSERT INTO b VALUES (4, 4, 'sad')`)
	e.waitSlotReleased(cfg.Slot) // the engine stopped
	err := stop()
	if err == nil {
		t.Fatal("the run went on after a type binary cannot carry")
	}
	wantInError(t, err, `column "v" of public.b`, "restart repstream")
	if f := format(e.catchUp(cfg)); f != "text" {
		t.Errorf("format %q after the restart, want text", f)
	}
	e.assertSameTable("public.b", "id")
}

// TestDDLMadeTablesRecordedOnUpgrade: a replication that an earlier
// version ran with the event trigger did not record the tables its
// schema-change messages made (this version copies a published table the
// slot does not record). Its first start by this version records them as
// streamed, as that version streamed them, instead of copying each anew.
func TestDDLMadeTablesRecordedOnUpgrade(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 15 {
		t.Skip("a table created later is published through FOR TABLES IN SCHEMA: PostgreSQL 15+")
	}
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10)`)
	cfg := e.config("public.*")
	cfg.CreateTables = true
	e.catchUp(cfg)
	// Made while the engine runs: its message makes it (a table made
	// while none runs is made and copied by the next start).
	stop := e.startOnce(cfg)
	e.waitStreaming(cfg.Slot)
	e.srcExec(`CREATE TABLE made (id int PRIMARY KEY, v text); INSERT INTO made SELECT g, 'v' FROM generate_series(1, 20) g`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	made := "SELECT count(*) FROM repstream.tables WHERE slot = '" + cfg.Slot + "' AND table_name = 'made' AND state = 'ready' AND copied_at IS NULL"
	if n := e.count(e.Tgt, made); n != 1 {
		t.Fatalf("the table a CREATE TABLE made is not recorded as streamed (%d rows)", n)
	}
	// As an earlier version left the target.
	e.tgtExec(`DELETE FROM repstream.tables WHERE table_name = 'made'; UPDATE repstream.replications SET made_recorded = false`)
	e.srcExec(`INSERT INTO made VALUES (21, 'after'); UPDATE made SET v = 'u' WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("made", "id")
	if n := e.count(e.Tgt, made); n != 1 {
		t.Errorf("the table a CREATE TABLE made under an earlier version is not recorded as streamed (%d rows): it was copied anew", n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.replications WHERE slot = '"+cfg.Slot+"' AND made_recorded"); n != 1 {
		t.Errorf("the replication is not marked as recording the tables its schema changes make")
	}
}

// TestDDLRetypeUsing: ALTER COLUMN ... TYPE ... USING rewrites the
// source's rows with an expression no message carries; the target's cast
// alone kept the old values (prices 1, 2 ... for 100, 200 ...), and the run
// said it had caught up. Such a table is now copied anew. A plain type
// change (the cast, as the target makes it) and one that rewrites nothing
// are not; a generated column's new type is set on the target's (it kept
// one decimal where the source computes four).
func TestDDLRetypeUsing(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE p (id int PRIMARY KEY, price numeric, label varchar(10), n int, third numeric(10,1) GENERATED ALWAYS AS (n / 3.0) STORED);
		INSERT INTO p SELECT g, g, 'l' || g, g FROM generate_series(1, 100) g`)
	cfg := e.config("public.p")
	cfg.CreateTables = true
	e.catchUp(cfg)
	copiedAt := func() string { return e.copiedAt(cfg.Slot, "p") }
	first := copiedAt()
	e.srcExec(`ALTER TABLE p ALTER COLUMN id TYPE bigint`)           // the cast: rewritten, not copied
	e.srcExec(`ALTER TABLE p ALTER COLUMN label TYPE text`)          // nothing rewritten
	e.srcExec(`ALTER TABLE p ALTER COLUMN third TYPE numeric(10,4)`) // generated: the target computes it anew
	e.srcExec(`INSERT INTO p VALUES (101, 101, 'plain')`)
	e.catchUp(cfg)
	e.assertSame("p", "id")
	if c := copiedAt(); c != first {
		t.Errorf("a type change by the plain cast, or one rewriting nothing, copied the table anew (%s, was %s)", c, first)
	}
	// A generated column retyped holds its old values cast (15.7000 for
	// 15.7): a copy, which recomputes it, would differ.
	e.srcExec(`ALTER TABLE p DROP COLUMN third`)
	e.srcExec(`ALTER TABLE p ALTER COLUMN price TYPE bigint USING (price * 100)::bigint`)
	e.srcExec(`INSERT INTO p VALUES (102, 10200, 'using')`)
	e.catchUp(cfg)
	e.assertSame("p", "id")
	second := copiedAt()
	if second == first {
		t.Errorf("the table a USING expression rewrote was not copied anew")
	}
	// "Retyped" to its own type: no column changes in the message, but
	// the rows hold what the expression made of them.
	e.srcExec(`ALTER TABLE p ALTER COLUMN label TYPE text USING upper(label)`)
	e.srcExec(`INSERT INTO p VALUES (103, 10300, 'same type')`)
	e.catchUp(cfg)
	e.assertSame("p", "id")
	if copiedAt() == second {
		t.Errorf("the table a USING expression rewrote to the same type was not copied anew")
	}
}

// TestDDLSessionSettings: what a type change's cast makes of a value, and
// the text of a default or of the value existing rows got, follow the
// settings of the source session that ran the command (TimeZone for a
// timestamp made timestamptz, DateStyle for a date made text, ...). The
// target converted under its own, and its rows differed from the
// source's while the run said it had caught up. Now it converts under the
// source session's, and the trigger writes defaults in forms any session
// reads back alike.
func TestDDLSessionSettings(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE a (id int PRIMARY KEY, ts timestamp, tz timestamptz, tz2 timestamptz, d date, iv interval, b bytea, f float8)`)
	e.srcExec(`INSERT INTO a SELECT g, '2020-01-01 10:00'::timestamp + g * interval '1 hour', '2020-01-01 22:00+00'::timestamptz + g * interval '5 hour',
		'2020-01-01 22:00+00'::timestamptz + g * interval '5 hour', '2020-01-02'::date + g, g * interval '1 day 2 hours', '\x00ff'::bytea, 1.0/3 + g
		FROM generate_series(1, 10) g`)
	cfg := e.config("public.a")
	e.catchUp(cfg)
	for _, alter := range []string{
		`SET TimeZone = 'America/New_York'; ALTER TABLE a ALTER COLUMN ts TYPE timestamptz`,
		`SET TimeZone = 'Asia/Tokyo'; ALTER TABLE a ALTER COLUMN tz TYPE date, ALTER COLUMN tz2 TYPE timestamp`,
		`SET DateStyle = 'SQL, DMY'; ALTER TABLE a ALTER COLUMN d TYPE text`,
		`SET IntervalStyle = 'sql_standard'; ALTER TABLE a ALTER COLUMN iv TYPE text`,
		`SET bytea_output = 'escape'; ALTER TABLE a ALTER COLUMN b TYPE text`,
		`SET extra_float_digits = -3; ALTER TABLE a ALTER COLUMN f TYPE text`,
		`SET DateStyle = 'SQL, DMY'; ALTER TABLE a ADD COLUMN d2 date DEFAULT '2020-02-01', ADD COLUMN d3 date DEFAULT '2020-02-01'::date + 1`,
		`SET extra_float_digits = -3; ALTER TABLE a ADD COLUMN p float8 DEFAULT pi()`,
		`SET IntervalStyle = 'sql_standard'; ALTER TABLE a ADD COLUMN iv2 interval DEFAULT '-1 day 2 hours'`,
	} {
		e.srcExec(alter + "; RESET ALL")
		e.srcExec(`INSERT INTO a (id) SELECT max(id) + 1 FROM a`)
		e.catchUp(cfg)
		e.assertSame("a", "id")
	}
}

// TestDDLColumnOfNewType: a CREATE TYPE reaches no target (it changes
// no table), so a column added with a type made on the source since, or a
// table made with one, stopped the run ("type ... does not exist") until
// the user made the type on every target. Now the target makes the types
// the change needs from the source's definitions (an enum, a domain over
// it with a CHECK, a composite holding both, an array of it, a range),
// and one it has already is taken as it is.
func TestDDLColumnOfNewType(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10)`)
	cfg := e.config("public.a")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`CREATE TYPE status AS ENUM ('new', 'done');
		CREATE DOMAIN short_status AS status CHECK (VALUE <> 'done');
		CREATE TYPE pair AS (s status, n int);
		CREATE TYPE numrange2 AS RANGE (SUBTYPE = numeric)`)
	e.tgtExec(`CREATE TYPE numrange2 AS RANGE (SUBTYPE = numeric)`) // had already
	e.srcExec(`ALTER TABLE a ADD COLUMN s status DEFAULT 'new', ADD COLUMN ss short_status`)
	e.srcExec(`INSERT INTO a (id, s, ss) VALUES (11, 'done', 'new')`)
	e.srcExec(`CREATE TABLE n (id int PRIMARY KEY, p pair, ps pair[], r numrange2)`)
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE n`)
	e.srcExec(`INSERT INTO n VALUES (1, ROW('done', 1), ARRAY[ROW('new', 2)::pair], numrange2(1, 2))`)
	e.catchUp(cfg)
	e.assertSame("a", "id")
	e.assertSame("n", "id")
	if _, err := e.Tgt.Exec(t.Context(), `INSERT INTO a (id, ss) VALUES (100, 'done')`); err == nil || !strings.Contains(err.Error(), "short_status_check") {
		t.Errorf("the domain made on the target lacks its CHECK: %v", err)
	}
}

// TestDDLVolatileDefaultCopied: a column added with a value computed for
// each existing row (random(), an identity, a serial, gen_random_uuid())
// made the source rewrite the table, and no message carries those values:
// the run stopped, asking the user to copy them over by hand. Now the
// table is copied anew from a new snapshot, then streamed; a column added
// with a constant default copies nothing.
func TestDDLVolatileDefaultCopied(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY, v text);
		INSERT INTO a SELECT g, 'x' FROM generate_series(1, 200) g;
		CREATE TABLE pm (id int, k int, PRIMARY KEY (id, k)) PARTITION BY RANGE (k);
		CREATE TABLE pm_1 PARTITION OF pm FOR VALUES FROM (0) TO (10);
		CREATE TABLE pm_2 PARTITION OF pm FOR VALUES FROM (10) TO (20);
		INSERT INTO pm SELECT g, g % 20 FROM generate_series(1, 200) g`)
	cfg := e.config("public.a", "public.pm")
	cfg.CreateTables = true
	e.catchUp(cfg)
	copiedAt := func(table string) string { return e.copiedAt(cfg.Slot, table) }
	first := copiedAt("a")
	e.srcExec(`ALTER TABLE a ADD COLUMN c int DEFAULT 7`) // stored once: nothing copied
	e.srcExec(`INSERT INTO a (id, v) VALUES (201, 'y')`)
	e.catchUp(cfg)
	e.assertSame("a", "id")
	if c := copiedAt("a"); c != first {
		t.Fatalf("a column with a constant default copied the table anew")
	}
	for _, add := range []string{
		`ALTER TABLE a ADD COLUMN r float8 DEFAULT random()`,
		`ALTER TABLE a ADD COLUMN i int GENERATED ALWAYS AS IDENTITY`,
		`ALTER TABLE a ADD COLUMN s bigserial, ADD COLUMN u uuid DEFAULT gen_random_uuid()`,
		`ALTER TABLE pm ADD COLUMN r float8 DEFAULT random()`,
	} {
		e.srcExec(add)
		e.srcExec(`INSERT INTO a (id, v) SELECT max(id) + 1, 'z' FROM a; INSERT INTO pm (id, k) SELECT max(id) + 1, 3 FROM pm; UPDATE a SET v = 'w' WHERE id = 5`)
		e.catchUp(cfg)
		e.assertSame("a", "id")
		e.assertSame("pm", "id, k")
	}
	if copiedAt("a") == first || copiedAt("pm") == "" {
		t.Errorf("the tables were not copied anew")
	}
}

// TestGeneratedSourcePlainTarget: a column generated on the source has no
// values in the stream or the copy; a plain column of its name on the
// target held NULL where the source computes values, and the run said it
// had caught up. Now the start refuses it, naming the column and the fix;
// and a column plain on the source but generated on the target too, and
// one generated on both sides by other expressions.
func TestGeneratedSourcePlainTarget(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE q (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED); INSERT INTO q SELECT g, g FROM generate_series(1, 10) g`)
	e.tgtExec(`CREATE TABLE q (id int PRIMARY KEY, a int, b int)`)
	cfg := e.config("public.q")
	e.mustFail(cfg, `column "b" is generated on the source, but not on the target`, "GENERATED ALWAYS AS")
	// Generated on both, by another expression: every row's value
	// differs (PostgreSQL's 011_generated does this on purpose; here it
	// is a target that differs).
	e.tgtExec(`ALTER TABLE q DROP COLUMN b; ALTER TABLE q ADD COLUMN b int GENERATED ALWAYS AS (a * 22) STORED`)
	e.mustFail(cfg, `column "b" is generated on both sides, by other expressions: (a * 2) on the source, (a * 22) on the target`)
	e.tgtExec(`ALTER TABLE q DROP COLUMN b; ALTER TABLE q ADD COLUMN b int GENERATED ALWAYS AS (a * 2) STORED`)
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO q VALUES (11, 11)`)
	e.catchUp(cfg)
	e.assertSame("q", "id")

	// The other way round: plain on the source, generated on the target.
	// The writes left the column out, and the target computed its own
	// values where the source's differ (native replication refuses it).
	e.srcExec(`CREATE TABLE r (id int PRIMARY KEY, a int, b int); INSERT INTO r VALUES (1, 1, 100)`)
	e.tgtExec(`CREATE TABLE r (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED)`)
	cfgR := e.config("public.r")
	cfgR.Slot = cfg.Slot + "_r"
	e.mustFail(cfgR, `column "b" is generated on the target, but not on the source`, `ALTER COLUMN "b" DROP EXPRESSION`)
	e.tgtExec(`ALTER TABLE r ALTER COLUMN b DROP EXPRESSION`)
	e.catchUp(cfgR)
	e.srcExec(`INSERT INTO r VALUES (2, 2, 200)`)
	e.catchUp(cfgR)
	e.assertSame("r", "id")
}

// TestDDLGenerationExpression: a generated column's expression changed
// on the source (SET EXPRESSION, PostgreSQL 17+) is set on the target's,
// which computes its rows anew; before, the target went on computing the
// old expression. One dropped (DROP EXPRESSION) is dropped there too, and
// the column's values written from then on; before, the target went on
// computing them while the source's were written.
func TestDDLGenerationExpression(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.srcMajor() < 17 || e.count(e.Tgt, "SELECT current_setting('server_version_num')::int / 10000") < 17 {
		t.Skip("SET EXPRESSION needs PostgreSQL 17+ on both sides")
	}
	e.srcExec(`CREATE TABLE g (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED); INSERT INTO g SELECT i, i FROM generate_series(1, 20) i`)
	cfg := e.config("public.g")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`ALTER TABLE g ALTER COLUMN b SET EXPRESSION AS (a * 3)`)
	e.srcExec(`INSERT INTO g VALUES (21, 21)`)
	e.catchUp(cfg)
	e.assertSame("g", "id")
	e.srcExec(`ALTER TABLE g ALTER COLUMN b DROP EXPRESSION`)
	e.srcExec(`UPDATE g SET b = -1 WHERE id <= 5; INSERT INTO g VALUES (22, 22, 7)`)
	e.catchUp(cfg)
	e.assertSame("g", "id")
}

// TestDDLEnumRenamed: ALTER TYPE ... RENAME VALUE changes every source row
// holding the label without a row in the stream; the target kept the old
// label and the run said it had caught up. The target now renames its
// own, also a second time; a label only added on the source is left to
// the target until a row holds it.
func TestDDLEnumRenamed(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
		CREATE TABLE m (id int PRIMARY KEY, v mood, vs mood[]);
		INSERT INTO m SELECT g, 'sad', ARRAY['sad', 'ok']::mood[] FROM generate_series(1, 10) g`)
	cfg := e.config("public.m")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`ALTER TYPE mood RENAME VALUE 'sad' TO 'unhappy'`)
	e.srcExec(`ALTER TYPE mood ADD VALUE 'calm' AFTER 'ok'`)
	e.catchUp(cfg)
	e.assertSame("m", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_enum WHERE enumtypid = 'mood'::regtype AND enumlabel = 'calm' AND enumsortorder > (SELECT enumsortorder FROM pg_enum WHERE enumtypid = 'mood'::regtype AND enumlabel = 'ok')"); n != 1 {
		t.Errorf("the label added on the source is not on the target after 'ok'")
	}
	e.srcExec(`ALTER TYPE mood ADD VALUE 'first' BEFORE 'unhappy'`)
	e.srcExec(`INSERT INTO m VALUES (13, 'first', ARRAY['first', 'calm']::mood[])`)
	e.catchUp(cfg)
	e.assertSame("m", "id")
	var order string
	for _, c := range []*pgx.Conn{e.Src, e.Tgt} {
		var o string
		if err := c.QueryRow(t.Context(), "SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'mood'::regtype").Scan(&o); err != nil {
			t.Fatal(err)
		}
		if order != "" && o != order {
			t.Errorf("the enum's labels: source %s, target %s", order, o)
		}
		order = o
	}
	e.srcExec(`BEGIN; ALTER TYPE mood RENAME VALUE 'happy' TO 'glad'; INSERT INTO m VALUES (11, 'glad', NULL); COMMIT`)
	e.srcExec(`INSERT INTO m VALUES (12, 'calm', ARRAY['unhappy']::mood[])`)
	e.catchUp(cfg)
	e.assertSame("m", "id")

	// Its trigger off while no engine ran: the next start copies the
	// tables anew, which stops at the label the target lacks (the
	// rename was not seen) until the user renames it. Dropped under a
	// running engine: it stops, recording them for a copy, which the
	// next start makes.
	e.srcExec(`UPDATE m SET v = 'ok' WHERE id = 1`)
	e.srcExec(`ALTER EVENT TRIGGER repstream_ddl_types DISABLE; ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'; ALTER EVENT TRIGGER repstream_ddl_types ENABLE ALWAYS`)
	if _, err := e.tryCatchUp(cfg); err == nil || !strings.Contains(err.Error(), `invalid input value for enum public.mood: "fine"`) {
		t.Fatalf("a label renamed with the trigger off: %v, want the copy anew to stop at it", err)
	}
	e.tgtExec(`ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`)
	e.catchUp(cfg)
	e.assertSame("m", "id")
	// The last run's walsender gone first: waitStreaming must see this
	// run's, or the trigger is dropped before this run's start, which
	// then copies anew (and stops at the label) instead of stopping.
	e.waitSlotReleased(cfg.Slot)
	cfg.PublicationPoll = time.Second
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`DROP EVENT TRIGGER repstream_ddl_types; ALTER TYPE mood RENAME VALUE 'fine' TO 'good'`)
	stopsWith(t, done, "its trigger dropped", "schema-change triggers were turned off", "repstream_ddl_types:-", "recorded for a new copy")
	e.waitSlotReleased(cfg.Slot)
	e.tgtExec(`ALTER TYPE mood RENAME VALUE 'fine' TO 'good'`)
	e.catchUp(cfg)
	e.assertSame("m", "id")

	// As a version before the trigger left it (no trigger, a record of
	// the others alone): the next start makes it and copies nothing.
	e.srcExec(`DROP EVENT TRIGGER repstream_ddl_types`)
	e.tgtExec(`UPDATE repstream.replications SET ddl_triggers = regexp_replace(ddl_triggers, ',repstream_ddl_types:[^,]*', '') WHERE slot = $1`, cfg.Slot)
	before := e.copiedAt(cfg.Slot, "m")
	e.catchUp(cfg)
	if after := e.copiedAt(cfg.Slot, "m"); after != before {
		t.Errorf("the first start after an upgrade copied the tables anew (copied_at %s, then %s)", before, after)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_event_trigger WHERE evtname = 'repstream_ddl_types' AND evtenabled = 'A'"); n != 1 {
		t.Errorf("repstream_ddl_types not made by the first start after an upgrade")
	}
}

// TestDDLAddColumnTargetHas: the source adds a column under a name the
// target table has already, a column of its own (PostgreSQL's
// 008_diff_schema: a subscriber's extra columns). repstream made the
// target's column the source's (type, default) and left its rows' values,
// so the source's existing rows said 'src' and the target's 'tgt', and the
// run said caught up. Now the run stops naming the column and what the
// source's rows got; once the target's rows hold the source's values (here
// set by hand), or the target's column is renamed out of the way, the next
// run goes on.
func TestDDLAddColumnTargetHas(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE tt (a int PRIMARY KEY, b text); INSERT INTO tt VALUES (1, 'foo'), (2, 'bar')`)
	e.tgtExec(`CREATE TABLE tt (a int PRIMARY KEY, b text, d bigint DEFAULT 999, f text DEFAULT 'tgt')`)
	cfg := e.config("public.tt")
	e.catchUp(cfg)
	e.srcExec(`ALTER TABLE tt ADD COLUMN f text DEFAULT 'src'`)
	e.srcExec(`ALTER TABLE tt ADD COLUMN d int DEFAULT 1`)
	e.srcExec(`INSERT INTO tt VALUES (3, 'q')`)

	_, err := e.tryCatchUp(cfg)
	if err == nil {
		t.Fatal("the run caught up: the target's rows keep f = 'tgt' where the source's got 'src'")
	}
	wantInError(t, err, `column "f" was added on the source`, `'src'`, "rename the target's column")
	e.tgtExec(`UPDATE tt SET f = 'src'`) // the user gives them the source's values

	_, err = e.tryCatchUp(cfg)
	if err == nil {
		t.Fatal("the run caught up: the target's rows keep d = 999 where the source's got 1")
	}
	wantInError(t, err, `column "d" was added on the source`, `'1'`)
	e.tgtExec(`ALTER TABLE tt RENAME COLUMN d TO d_own`) // or out of the way

	e.catchUp(cfg)
	e.assertSame("(SELECT a, b, f, d FROM tt)", "a")
}
