package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestObjectRefTypes: columns of the object identifier types (regclass,
// regtype, regrole, ... and their arrays) name the target's objects of the
// source's names, with binary on (the default) too: their binary form is
// the source's OID, which names another object on the target, or none, so
// such a table travels as text (target.BinaryCompatible). The target makes
// a table first, so that its OIDs are not the source's. So does one with
// an aclitem[] column, which has no binary form (its binary copy failed).
func TestObjectRefTypes(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.tgtExec(`CREATE TABLE shifts_oids (x int); CREATE TYPE shifts_type AS (x int)`)
	e.both(`CREATE TYPE mood AS ENUM ('ok'); CREATE TABLE other (id int);
		CREATE TABLE refs (id int PRIMARY KEY, r regclass, rs regclass[], ty regtype, ro regrole);
		CREATE TABLE acl (id int PRIMARY KEY, a aclitem[])`)
	ins := func(id int) {
		e.srcExec(fmt.Sprintf(`INSERT INTO refs VALUES (%d, 'public.other', ARRAY['public.refs', 'public.other']::regclass[], 'public.mood', current_user::regrole)`, id))
		e.srcExec(fmt.Sprintf(`INSERT INTO acl VALUES (%d, ARRAY[makeaclitem(10, 10, 'SELECT', false)])`, id))
	}
	ins(1)
	cfg := e.config("public.refs", "public.acl")
	e.catchUp(cfg)
	ins(2)
	e.srcExec(`UPDATE refs SET r = 'public.refs' WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("refs", "id")
	e.assertSame("acl", "id")
}

// TestTargetTypesOtherNames: a target column whose user-defined type has
// another name than the source's is refused at the start when the two
// differ inside (a composite's values travel as text by position: pt2
// (y, x) would swap them; an attribute of another type; an enum lacking a
// label), as a type of the same name is (TestTargetTypesDifferInside); so
// is an array of a domain whose base type would round the source's
// array's elements. Types of other names alike inside replicate.
func TestTargetTypesOtherNames(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TYPE pt AS (x int, y int); CREATE TYPE stamp AS (at timestamp); CREATE TYPE mood AS ENUM ('ok', 'sad');
		CREATE TYPE same AS (a int, b text);
		CREATE TABLE on1 (id int PRIMARY KEY, p pt, s stamp, m mood, ns numeric[], ps pt[], ok same)`)
	e.tgtExec(`CREATE TYPE pt2 AS (y int, x int); CREATE TYPE stamp2 AS (at timestamptz); CREATE TYPE mood2 AS ENUM ('ok');
		CREATE DOMAIN dnum AS numeric(10,2); CREATE TYPE same2 AS (a int, b text);
		CREATE TABLE on1 (id int PRIMARY KEY, p pt2, s stamp2, m mood2, ns dnum[], ps pt2[], ok same2)`)
	cfg := e.config("public.on1")
	e.mustFail(cfg, `column "p" is of type public.pt on the source but public.pt2 on the target, which differ: attribute 1 is y integer on the target, x integer on the source`,
		`column "s" is of type public.stamp on the source but public.stamp2 on the target, which differ: attribute 1 is at timestamp with time zone on the target, at timestamp without time zone on the source`,
		`column "m" is of type public.mood on the source but public.mood2 on the target, which differ: enum label "sad" is missing on the target`,
		`column "ns" is numeric[] on the source but public.dnum[] (a domain over numeric(10,2)[]) on the target: digits beyond the target's scale are rounded away`,
		`column "ps" is of type public.pt[] on the source but public.pt2[] on the target, which differ`)
	if err := e.mustFail(cfg); strings.Contains(err.Error(), `column "ok"`) {
		t.Errorf("alike types of other names refused: %v", err)
	}

	e.tgtExec(`DROP TABLE on1; CREATE TYPE pt3 AS (x int, y int); CREATE TYPE mood3 AS ENUM ('ok', 'sad', 'glad');
		CREATE TABLE on1 (id int PRIMARY KEY, p pt3, m mood3, ns numeric[], ps pt3[], ok same2)`)
	e.srcExec(`ALTER TABLE on1 DROP COLUMN s`)
	e.srcExec(`INSERT INTO on1 VALUES (1, row(1, 2), 'sad', '{1.2345}', ARRAY[row(3, 4)::pt], row(5, 'x'))`)
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO on1 VALUES (2, row(6, 7), 'ok', '{2.5}', ARRAY[row(8, 9)::pt], row(10, 'y')); UPDATE on1 SET p = row(11, 12) WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("on1", "id")
	var y int
	if err := e.Tgt.QueryRow(t.Context(), `SELECT (p).y FROM on1 WHERE id = 1`).Scan(&y); err != nil || y != 12 {
		t.Errorf("target's p.y of row 1: %d (%v), want 12", y, err)
	}
}

// TestRestartStopsAtTargetDomain: as TestRestartStopsWhereTargetWouldRound,
// with the target's column made by hand, between two runs, a domain over
// a type that would round the source's values, or an array of one: the
// first row the stream describes stops the run, naming the column and the
// domain's base type; nothing of it is applied.
func TestRestartStopsAtTargetDomain(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, col := range []struct{ src, tgt, val, base string }{
		{"numeric(12,4)", "dnum", "2.3456", "numeric(12,2)"},
		{"numeric[]", "dnum[]", "'{2.3456}'", "numeric(12,2)[]"},
	} {
		t.Run(col.tgt, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TABLE amounts (id int PRIMARY KEY, amount ` + col.src + `)`)
			e.tgtExec(`CREATE DOMAIN dnum AS numeric(12,2)`)
			cfg := e.config("public.amounts")
			e.catchUp(cfg)
			e.tgtExec(`ALTER TABLE amounts ALTER COLUMN amount TYPE ` + col.tgt)
			e.srcExec(`INSERT INTO amounts VALUES (2, ` + col.val + `)`)
			_, err := e.tryCatchUp(cfg)
			if err == nil {
				t.Fatal("the run applied a row into a domain over a type that rounds it")
			}
			wantInError(t, err, `"amount"`, "(a domain over "+col.base+")", "rounded")
			if n := e.count(e.Tgt, `SELECT count(*) FROM amounts WHERE id = 2`); n != 0 {
				t.Errorf("the row the run stopped at was applied")
			}
		})
	}
}

// TestTargetStringTypesCut: a target column of a string type takes any
// source type's values, as their text; the start refuses one that would
// store it cut without an error: name (63 bytes) for a jsonb, a bytea or
// an array, character varying(n) and character(n) for a JSON text's or a
// character(m)'s trailing spaces (beyond n); and a macaddr8 column for a
// macaddr (stored widened). Each was stored so before.
func TestTargetStringTypesCut(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE sc (id int PRIMARY KEY, j jsonb, b bytea, a text[], js json, c char(10), jc json, m macaddr, ok integer)`)
	e.tgtExec(`CREATE TABLE sc (id int PRIMARY KEY, j name, b name, a name, js varchar(10), c varchar(5), jc char(20), m macaddr8, ok name)`)
	err := e.mustFail(e.config("public.sc"),
		`column "j" is jsonb on the source but name on the target: values longer than 63 bytes are cut`,
		`column "b" is bytea on the source but name on the target`,
		`column "a" is text[] on the source but name on the target`,
		`column "js" is json on the source but character varying(10) on the target: trailing spaces beyond the target's length are cut`,
		`column "c" is character(10) on the source but character varying(5) on the target`,
		`column "jc" is json on the source but character(20) on the target: trailing spaces are not kept`,
		`column "m" is macaddr on the source but macaddr8 on the target: a 6-byte address is stored as an 8-byte one`)
	if strings.Contains(err.Error(), `column "ok"`) {
		t.Errorf("an integer into name refused: %v", err)
	}
}
