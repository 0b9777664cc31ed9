package e2e

import "testing"

// TestDDLInheritanceParentAltered: an ALTER TABLE of an inheritance
// parent changes its children too (a column added, renamed, retyped,
// dropped), and the command names the parent only. The event trigger
// describes each child after its parent: with only the child replicated
// (the parent left out of the publication), its rows with the new column
// stopped the run ("column ... is missing on the target"); with both
// (the target's child then inherits too), the parent's statements reach
// the target's child first and the child's message finds it done.
// Likewise a partitioned table's root left out of the publication, which
// publishes a mid-level partitioned table or a leaf.
func TestDDLInheritanceParentAltered(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, c := range []struct{ name, tables string }{{"child only", "public.chi"}, {"both", "public.*"}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE par (a int PRIMARY KEY);
				CREATE TABLE chi (b text) INHERITS (par); ALTER TABLE chi ADD PRIMARY KEY (a);
				INSERT INTO par VALUES (10); INSERT INTO chi VALUES (1, 'x')`)
			cfg := e.config(c.tables)
			cfg.CreateTables = true
			e.catchUp(cfg)
			e.srcExec(`ALTER TABLE par ADD COLUMN c int DEFAULT 7`)
			e.srcExec(`INSERT INTO chi VALUES (2, 'y', 2); INSERT INTO par VALUES (11, 11)`)
			e.srcExec(`ALTER TABLE par RENAME COLUMN c TO cc`)
			e.srcExec(`ALTER TABLE par ALTER COLUMN cc TYPE bigint`)
			e.srcExec(`INSERT INTO chi VALUES (3, 'z', 3000000000)`)
			e.srcExec(`ALTER TABLE par ADD COLUMN d text`)
			e.srcExec(`INSERT INTO chi VALUES (4, 'w', 4, 'dee')`)
			e.srcExec(`ALTER TABLE par DROP COLUMN cc`)
			e.srcExec(`INSERT INTO chi VALUES (5, 'v', 'five'); UPDATE chi SET d = 'one' WHERE a = 1`)
			e.catchUp(cfg)
			e.assertSameTable("chi", "a")
			if c.tables == "public.*" {
				e.assertSame("ONLY par", "a")
			}
		})
	}
	for _, published := range []string{"tab4_1", "tab4_1_1"} {
		t.Run("partition "+published, func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE tab4 (a int PRIMARY KEY) PARTITION BY LIST (a);
				CREATE TABLE tab4_1 PARTITION OF tab4 FOR VALUES IN (0, 1, 2, 3, 4) PARTITION BY LIST (a);
				CREATE TABLE tab4_1_1 PARTITION OF tab4_1 FOR VALUES IN (0, 1, 2);
				CREATE TABLE tab4_1_2 PARTITION OF tab4_1 FOR VALUES IN (3, 4);
				CREATE TABLE tab4_2 PARTITION OF tab4 FOR VALUES IN (5, 6);
				INSERT INTO tab4 VALUES (0), (3), (5)`)
			cfg := e.config("public." + published)
			cfg.CreateTables = true
			e.catchUp(cfg)
			e.srcExec(`ALTER TABLE tab4 ADD COLUMN c int DEFAULT 7`)
			e.srcExec(`INSERT INTO tab4 VALUES (1, 1), (4, 4), (6, 6)`)
			e.srcExec(`ALTER TABLE tab4 RENAME COLUMN c TO cc`)
			e.srcExec(`INSERT INTO tab4 VALUES (2, 2)`)
			e.srcExec(`ALTER TABLE tab4 DROP COLUMN cc, ADD COLUMN d text`)
			e.srcExec(`UPDATE tab4 SET d = 'dee' WHERE a < 3`)
			e.catchUp(cfg)
			e.assertSameTable(published, "a")
		})
	}
}

// TestInheritanceChangesOwnRows: a change of an inheritance parent's row
// is that row's alone. A target whose tables inherit as the source's do
// (made by hand, or from pg_dump) matched the parent's UPDATE and DELETE
// against its children's rows too: a child row with the same key was
// changed or deleted with it, silently, and a TRUNCATE of the parent
// emptied them. Keyed and FULL identity.
func TestInheritanceChangesOwnRows(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE par (a int PRIMARY KEY, v text);
		CREATE TABLE chi (b text) INHERITS (par); ALTER TABLE chi ADD PRIMARY KEY (a);
		CREATE TABLE fpar (a int, v text); ALTER TABLE fpar REPLICA IDENTITY FULL;
		CREATE TABLE fchi () INHERITS (fpar); ALTER TABLE fchi REPLICA IDENTITY FULL`)
	e.srcExec(`INSERT INTO par VALUES (1, 'p1'), (2, 'p2'), (3, 'p3'); INSERT INTO chi VALUES (1, 'c1', 'b'), (2, 'c2', 'b'), (3, 'c3', 'b');
		INSERT INTO fpar VALUES (1, 'same'), (2, 'same'); INSERT INTO fchi VALUES (1, 'same'), (2, 'same')`)
	cfg := e.config("public.par", "public.chi", "public.fpar", "public.fchi")
	e.catchUp(cfg)
	e.srcExec(`UPDATE ONLY par SET v = 'parent changed' WHERE a = 1; DELETE FROM ONLY par WHERE a = 2;
		UPDATE ONLY par SET a = 30 WHERE a = 3;
		UPDATE ONLY fpar SET v = 'parent changed' WHERE a = 1; DELETE FROM ONLY fpar WHERE a = 2`)
	e.catchUp(cfg)
	for _, tab := range []string{"ONLY par", "chi", "ONLY fpar", "fchi"} {
		e.assertSame(tab, "a")
	}
	// A TRUNCATE of the parent alone: the children keep their rows.
	e.srcExec(`TRUNCATE ONLY fpar`)
	e.catchUp(cfg)
	for _, tab := range []string{"ONLY fpar", "fchi"} {
		e.assertSame(tab, "a")
	}
}

// TestDDLCompositeTypeAltered: ALTER TYPE of a composite type a published
// column holds (002_types.pl's types, altered). Its values travel as text
// by position: the target's type kept its old attributes, and after
// DROP ATTRIBUTE x, ADD ATTRIBUTE x the source's (y, x) rows filled the
// target's (x, y) fields, silently. The trigger now reports the type's
// attributes to every table holding it, and the target's type follows;
// a change it cannot tell apart (a rename) stops the run, naming both
// lists, until the target's type is the source's.
func TestDDLCompositeTypeAltered(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TYPE pt AS (x int, y int);
		CREATE TABLE tt (id int PRIMARY KEY, p pt, ps pt[]);
		INSERT INTO tt VALUES (1, ROW(1, 2), ARRAY[ROW(1, 2)::pt])`)
	cfg := e.config("public.tt")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`ALTER TYPE pt DROP ATTRIBUTE x; ALTER TYPE pt ADD ATTRIBUTE x int`)
	e.srcExec(`UPDATE tt SET p.x = 10 WHERE id = 1; INSERT INTO tt VALUES (2, ROW(30, 40), ARRAY[ROW(5, 6)::pt])`)
	e.catchUp(cfg)
	e.assertSame("(SELECT id, (p).x, (p).y, ps::text FROM tt)", "id")
	e.srcExec(`ALTER TYPE pt ADD ATTRIBUTE z numeric(10,2)`)
	e.srcExec(`INSERT INTO tt VALUES (3, ROW(5, 6, 7.25), NULL)`)
	e.catchUp(cfg)
	e.assertSameTable("tt", "id")
	e.assertSame("(SELECT id, (p).x, (p).y, (p).z FROM tt)", "id")
	// A rename cannot be told from a drop and an add: the run stops
	// before the rows that follow, and goes on once the target's type
	// is the source's.
	e.srcExec(`ALTER TYPE pt RENAME ATTRIBUTE x TO xx`)
	e.srcExec(`INSERT INTO tt VALUES (4, ROW(8, 9, 1.5), NULL)`)
	e.mustFail(cfg, `composite type "public"."pt"`, `"xx" integer`, "ALTER TYPE")
	e.tgtExec(`ALTER TYPE pt RENAME ATTRIBUTE x TO xx`)
	e.catchUp(cfg)
	e.assertSame("(SELECT id, (p).xx, (p).y, (p).z FROM tt)", "id")
}
