package e2e

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDDLRelationFallbackDefaults: without the event trigger
// (--ddl=relation), pgoutput's Relation message does not say what the rows
// that existed before an ADD COLUMN got; repstream asks the source's
// catalog. With one engine running on non-empty tables: a constant default
// (and texts with quotes, commas, braces and backslashes, the text 'NULL',
// an array, now(), a default dropped again before the next row) gives the
// target's existing rows the source's values, and the target column the
// source's default; a column without a default stays NULL; a volatile
// default on an empty table is added as it is. A volatile default
// (random(), an identity) on a non-empty table adds the column and copies
// the table anew. Before, existing target rows got NULL and only a
// warning was logged; then the run stopped, asking the user to copy the
// values over.
func TestDDLRelationFallbackDefaults(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE g (id int PRIMARY KEY, a text); INSERT INTO g SELECT i, 'a' || i FROM generate_series(1, 50) i;
		CREATE TABLE ge (id int PRIMARY KEY)`)
	cfg := e.config("public.g", "public.ge")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	e.catchUp(cfg)

	stop := e.startOnce(cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER TABLE g ADD COLUMN c int DEFAULT 7`)
	e.srcExec(`INSERT INTO g (id, a) VALUES (51, 'x'); UPDATE g SET c = 8 WHERE id = 3`)
	// Several columns in one new version of the relation.
	e.srcExec(`ALTER TABLE g ADD COLUMN s text DEFAULT 'q,''u'' "o" {b} \ t',
		ADD COLUMN sn text DEFAULT 'NULL',
		ADD COLUMN n int,
		ADD COLUMN ts timestamptz DEFAULT now(),
		ADD COLUMN arr text[] DEFAULT '{"a,b",NULL,"{c}"}',
		ADD COLUMN num numeric(10,3) DEFAULT 1.5,
		ADD COLUMN f float8 DEFAULT 0.1,
		ADD COLUMN iv interval DEFAULT '1 day 02:03:04'`)
	e.srcExec(`ALTER TABLE g ADD COLUMN d int DEFAULT 42; ALTER TABLE g ALTER COLUMN d DROP DEFAULT`)
	// An ADD COLUMN amid a transaction's rows.
	e.srcExec(`BEGIN; INSERT INTO g (id, a) VALUES (52, 'y'); ALTER TABLE g ADD COLUMN k bigint DEFAULT 5; INSERT INTO g (id, a) VALUES (53, 'z'); COMMIT`)
	// A volatile default on a table with no rows on either side.
	e.srcExec(`ALTER TABLE ge ADD COLUMN r float8 DEFAULT random()`)
	e.srcExec(`INSERT INTO ge (id) VALUES (1), (2)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	e.assertSameTable("public.g", "id")
	e.assertSameTable("public.ge", "id")
	defaults := func(conn *pgx.Conn) (s string) {
		if err := conn.QueryRow(t.Context(), `SELECT string_agg(column_name || '=' || coalesce(column_default, '-'), ', ' ORDER BY column_name)
			FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'g'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if src, tgt := defaults(e.Src), defaults(e.Tgt); src != tgt {
		t.Errorf("column defaults differ:\n  source %s\n  target %s", src, tgt)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM g WHERE c = 7 AND n IS NULL AND d = 42 AND sn = 'NULL'"); n != 50 {
		t.Errorf("%d target rows with the source's values for the existing rows, want 50", n)
	}

	// A volatile default on a non-empty table: the column is added and
	// the table copied anew (its rows' values are in no message).
	copied := e.copiedAt(cfg.Slot, "g")
	if copied == "" {
		t.Fatalf("g not recorded as copied")
	}
	e.srcExec(`ALTER TABLE g ADD COLUMN r float8 DEFAULT random(), ADD COLUMN i int GENERATED ALWAYS AS IDENTITY`)
	e.srcExec(`INSERT INTO g (id, a) VALUES (54, 'w'); UPDATE g SET a = 'u' WHERE id = 2`)
	e.catchUp(cfg)
	e.assertSameTable("public.g", "id")
	if e.copiedAt(cfg.Slot, "g") == copied {
		t.Errorf("g was not copied anew after a column with a volatile default was added")
	}
}

// TestDDLRelationRetypeCopied: without the event trigger, a type change
// reaches the target as the plain cast of its rows, but the source's rows
// hold what a USING expression, or a cast under the source session's
// TimeZone, made of them: the target differed while the run said it had
// caught up. Now the table is copied anew after a type change; one that
// adds a column is not.
func TestDDLRelationRetypeCopied(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE p (id int PRIMARY KEY, price numeric, ts timestamp);
		INSERT INTO p SELECT g, g, '2020-01-01 10:00'::timestamp + g * interval '1 hour' FROM generate_series(1, 100) g`)
	cfg := e.config("public.p")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	e.catchUp(cfg)
	copiedAt := func() string { return e.copiedAt(cfg.Slot, "p") }
	first := copiedAt()
	e.srcExec(`ALTER TABLE p ADD COLUMN note text`)
	e.srcExec(`INSERT INTO p (id, price) VALUES (101, 101)`)
	e.catchUp(cfg)
	e.assertSame("p", "id")
	if c := copiedAt(); c != first {
		t.Fatalf("a column added copied the table anew")
	}
	stop := e.startOnce(cfg)
	defer func() {
		if stop != nil {
			_ = stop()
		}
	}()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`UPDATE p SET note = 'before' WHERE id = 4`) // the session's first description of p
	e.srcExec(`ALTER TABLE p ALTER COLUMN price TYPE bigint USING (price * 100)::bigint`)
	e.srcExec(`INSERT INTO p (id, price) VALUES (102, 10200)`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	e.assertSame("p", "id")
	second := copiedAt()
	if second == first {
		t.Errorf("the table a USING expression rewrote was not copied anew")
	}
	e.srcExec(`UPDATE p SET note = 'before' WHERE id = 4`)
	e.srcExec(`SET TimeZone = 'Asia/Tokyo'; ALTER TABLE p ALTER COLUMN ts TYPE timestamptz; RESET TimeZone`)
	e.srcExec(`UPDATE p SET note = 'after' WHERE id = 5`)
	e.waitCaughtUp(cfg.Slot, time.Minute)
	e.assertSame("p", "id")
	if copiedAt() == second {
		t.Errorf("the table retyped under the source session's TimeZone was not copied anew")
	}
	if err := stop(); err != nil {
		t.Fatalf("engine: %v", err)
	}
	stop = nil

	// Retyped while no engine ran, and a table retyped after its copy
	// before anything wrote it: the stream's first description of them
	// is compared with the types recorded.
	third := copiedAt()
	e.srcExec(`ALTER TABLE p ALTER COLUMN price TYPE numeric USING price / 100.0`)
	e.srcExec(`INSERT INTO p (id, price) VALUES (103, 103)`)
	e.catchUp(cfg)
	e.assertSame("p", "id")
	if copiedAt() == third {
		t.Errorf("the table retyped while no engine ran was not copied anew")
	}
	e.srcExec(`CREATE TABLE q (id int PRIMARY KEY, d date); INSERT INTO q SELECT g, '2020-01-01'::date + g FROM generate_series(1, 20) g`)
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE q`)
	e.catchUp(cfg)
	e.assertSame("q", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.tables WHERE table_name = 'q' AND source_types LIKE '%\"d\"%'"); n != 1 {
		t.Fatalf("the copy of q did not record its column types")
	}
	e.srcExec(`SET DateStyle = 'SQL, DMY'; ALTER TABLE q ALTER COLUMN d TYPE text; RESET DateStyle`)
	e.srcExec(`INSERT INTO q VALUES (100, 'x')`)
	e.catchUp(cfg)
	e.assertSame("q", "id")
}

// TestDDLRelationUserTypes: without the event trigger, a column of a
// user-defined type (an enum made on the source since) added to a
// replicated table, and a table made with one (--create-tables), stopped
// the run: the Relation message names the type by an oid the target
// cannot read. Now the source names it and the target makes it as the
// source has it.
func TestDDLRelationUserTypes(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10)`)
	cfg := e.config("public.a")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	e.catchUp(cfg)
	e.srcExec(`CREATE TYPE status AS ENUM ('new', 'done'); CREATE TYPE pair AS (s status, n int)`)
	e.srcExec(`ALTER TABLE a ADD COLUMN s status DEFAULT 'new', ADD COLUMN ps pair[]`)
	e.srcExec(`INSERT INTO a (id, s, ps) VALUES (11, 'done', ARRAY[ROW('done', 1)::pair])`)
	e.srcExec(`CREATE TABLE n (id int PRIMARY KEY, p pair)`)
	e.srcExec(`ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE n`)
	e.srcExec(`INSERT INTO n VALUES (1, ROW('new', 2))`)
	e.catchUp(cfg)
	e.assertSame("a", "id")
	e.assertSame("n", "id")
}

// TestDDLRelationSerialAdded: ADD COLUMN ... serial without the event
// trigger (017_stream_ddl.pl's serial, --ddl=relation). The column's
// default draws from a sequence the target lacked: every run stopped
// ("relation ... test_tab_s_seq does not exist"). The writer makes the
// sequence first; the table, whose existing rows the source numbered, is
// copied anew.
func TestDDLRelationSerialAdded(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE test_tab (a int PRIMARY KEY, b varchar); INSERT INTO test_tab VALUES (1, 'x')`)
	cfg := e.config("public.test_tab")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	e.catchUp(cfg)
	e.srcExec(`ALTER TABLE test_tab ADD COLUMN s serial`)
	e.srcExec(`INSERT INTO test_tab (a, b) VALUES (2, 'y')`)
	e.catchUp(cfg)
	e.assertSameTable("test_tab", "a")
	e.tgtExec(`INSERT INTO test_tab (a, b) VALUES (100, 'the target numbers its own rows')`)
}

// TestDDLRelationUserTypeColumnBinary: a column of a user-defined type
// added on the source while no engine ran. The start chose binary values
// (every column the target had was built in), the added column's values
// then stopped the run ("restart: it will use text"), and every restart
// chose binary again. The start now counts the columns the target lacks
// yet.
func TestDDLRelationUserTypeColumnBinary(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE u3 (id int PRIMARY KEY); INSERT INTO u3 SELECT generate_series(1, 5)`)
	cfg := e.config("public.u3")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	e.catchUp(cfg)
	e.srcExec(`CREATE TYPE status AS ENUM ('new', 'done'); ALTER TABLE u3 ADD COLUMN s status DEFAULT 'new'`)
	e.srcExec(`INSERT INTO u3 VALUES (6, 'done')`)
	e.catchUp(cfg)
	e.assertSame("u3", "id")
}

// TestDDLFalseStops: --ddl=false says a schema change stops the run, but
// a column retyped (numeric(12,4) to numeric(12,2): the target kept four
// digits the source rounded away) or dropped went on silently: only a
// mismatch the target could not take stopped it. A new description of a
// table that differs from the one before now stops the run, naming it.
func TestDDLFalseStops(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE f1 (id int PRIMARY KEY, x numeric(12,4), c int); INSERT INTO f1 SELECT g, g + 0.1266, g FROM generate_series(1, 5) g`)
	cfg := e.config("public.f1")
	cfg.CreateTables = true
	cfg.DDL = "false"
	e.catchUp(cfg)
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`UPDATE f1 SET c = 10 WHERE id = 1`)
	e.srcExec(`ALTER TABLE f1 ALTER COLUMN x TYPE numeric(12,2)`)
	e.srcExec(`INSERT INTO f1 VALUES (6, 6.5, 6)`)
	stopsWith(t, done, "a retype with --ddl=false", "the source changed the schema of public.f1", "--ddl=false follows no schema change")
	e.tgtExec(`ALTER TABLE f1 ALTER COLUMN x TYPE numeric(12,2)`)
	e.waitSlotReleased(cfg.Slot)
	e.catchUp(cfg)
	e.assertSame("f1", "id")
}

// TestDDLRelationDomainVolatileDefault: a column added of a domain whose
// default is volatile (random()): the source computed a value for each
// existing row, and the target's plain ADD COLUMN computed values of its
// own (the column has no default of its own, so the domain's was not
// looked at). The table is now copied anew, as for a volatile default of
// the column.
func TestDDLRelationDomainVolatileDefault(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE u2 (id int PRIMARY KEY); INSERT INTO u2 SELECT generate_series(1, 5)`)
	cfg := e.config("public.u2")
	cfg.CreateTables = true
	cfg.DDL = "relation"
	e.catchUp(cfg)
	e.srcExec(`CREATE DOMAIN dn AS float8 DEFAULT random(); ALTER TABLE u2 ADD COLUMN n dn`)
	e.srcExec(`INSERT INTO u2 VALUES (6)`)
	e.catchUp(cfg)
	e.assertSame("u2", "id")
}
