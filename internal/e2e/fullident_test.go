package e2e

import (
	"testing"
)

// TestFullIdentityLookAlikes: with REPLICA IDENTITY FULL, rows that are
// equal but not the same (1.0 and 1.00, -0 and 0, 'A' and 'a' under a
// case-insensitive collation) are told apart: an UPDATE or DELETE changes
// the row that has exactly the old values, not the first equal one.
func TestFullIdentityLookAlikes(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, binary := range []bool{true, false} {
		name := "text"
		if binary {
			name = "binary"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
			e.both(`CREATE TABLE la (n numeric, f float8, s text COLLATE ci); ALTER TABLE la REPLICA IDENTITY FULL`)
			// The look-alike comes first in the heap on both sides.
			e.srcExec(`INSERT INTO la VALUES (1.00, 0, 'a'), (1.0, '-0', 'A')`)
			cfg := e.config("public.la")
			cfg.Binary = binary
			e.catchUp(cfg)
			const order = `x::text COLLATE "C"`
			e.srcExec(`UPDATE la SET n = 5 WHERE n::text = '1.0'`)
			e.catchUp(cfg)
			e.assertSame("la", order)
			e.srcExec(`DELETE FROM la WHERE n = 5`)
			e.catchUp(cfg)
			e.assertSame("la", order)
			if n := e.count(e.Tgt, "SELECT count(*) FROM la WHERE n::text = '1.00' AND f::text = '0' AND s = 'a' COLLATE \"C\""); n != 1 {
				t.Fatalf("the look-alike row is gone from the target")
			}
		})
	}
}

// TestFullIdentityCompositeWithPoint: a FULL-identity table with a
// composite column holding a point (no equality operator) replicates its
// UPDATEs and DELETEs (compared as text) instead of stopping at the first.
func TestFullIdentityCompositeWithPoint(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TYPE loc AS (p point, label text)`)
	e.both(`CREATE TABLE cp (id int, l loc); ALTER TABLE cp REPLICA IDENTITY FULL`)
	e.srcExec(`INSERT INTO cp VALUES (1, ROW(point(1,2), 'a')), (2, ROW(point(3,4), 'b'))`)
	cfg := e.config("public.cp")
	e.catchUp(cfg)
	e.srcExec(`UPDATE cp SET id = 10 WHERE id = 1; DELETE FROM cp WHERE id = 2`)
	e.catchUp(cfg)
	e.assertSame("cp", "id")
}
