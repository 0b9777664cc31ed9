package e2e

import (
	"testing"

	"github.com/repstream/repstream/internal/config"
)

// TestKeyCollation: a replica identity index that compares its column with
// another collation than the column's own (a case-insensitive column, a
// unique index on (a COLLATE "C"): 'abc' and 'ABC' are two rows). An update
// or delete of one changes that one on the target, not every row equal
// under the column's collation — in a small transaction (expect_row) and in
// a large one (plain statements, command tags), text and binary. Before,
// the match used the column's "=": both rows changed, and the run said
// caught up.
func TestKeyCollation(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, binary := range []bool{false, true} {
		name := "text"
		if binary {
			name = "binary"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
				CREATE TABLE k (a text COLLATE ci NOT NULL, b text);
				CREATE UNIQUE INDEX k_a ON k (a COLLATE "C");
				ALTER TABLE k REPLICA IDENTITY USING INDEX k_a;
				CREATE TABLE pk (a text COLLATE ci, c text COLLATE "C", b text, PRIMARY KEY (c, a))`)
			e.srcExec(`INSERT INTO k VALUES ('abc', '1'), ('ABC', '2'), ('x', '1'), ('X', '2');
				INSERT INTO k SELECT 'r' || g, '0' FROM generate_series(1, 300) g;
				INSERT INTO k SELECT 'R' || g, '0' FROM generate_series(1, 300) g;
				INSERT INTO pk VALUES ('q', 'c', '1'), ('Q', 'C', '2')`)
			cfg := e.config("public.k", "public.pk")
			cfg.Binary = binary
			e.catchUp(cfg)
			e.srcExec(`UPDATE k SET b = 'upd' WHERE a = 'ABC' COLLATE "C"; DELETE FROM k WHERE a = 'x' COLLATE "C";
				UPDATE pk SET b = 'upd' WHERE c = 'C'`)
			// A large transaction: its statements are sent plain.
			e.srcExec(`UPDATE k SET b = 'big' WHERE a LIKE 'r%' COLLATE "C"`)
			e.catchUp(cfg)
			e.assertSame("k", `a COLLATE "C"`)
			e.assertSame("pk", `c, a COLLATE "C"`)
		})
	}
}

// TestKeyNotUniqueOnTarget: a target table whose key columns are not
// unique (no unique index; a row added on the target alone duplicates a
// source key). An update or delete of that key matched both rows and
// changed both, silently. Now it is a conflict, multiple_rows, naming the
// table and the key: the run stops (--on-error stop), or parks the
// transaction (park) — in a small transaction and in a large one.
func TestKeyNotUniqueOnTarget(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, large := range []bool{false, true} {
		name := "small"
		if large {
			name = "large"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE TABLE d (id int PRIMARY KEY, v text)`)
			e.tgtExec(`CREATE TABLE d (id int NOT NULL, v text)`)
			e.srcExec(`INSERT INTO d SELECT g, 'a' FROM generate_series(1, 400) g`)
			cfg := e.config("public.d")
			e.catchUp(cfg)
			e.tgtExec(`INSERT INTO d VALUES (7, 'target only')`)
			if large {
				e.srcExec(`UPDATE d SET v = 'b' WHERE id <= 300`)
			} else {
				e.srcExec(`UPDATE d SET v = 'b' WHERE id = 7`)
			}
			_, err := e.tryCatchUp(cfg)
			if err == nil {
				t.Fatal("the run caught up, the update changed both rows of key 7 on the target")
			}
			wantInError(t, err, "multiple_rows", "public.d", "(id)=(7)", "more than one row")
			if n := e.count(e.Tgt, `SELECT count(*) FROM d WHERE v = 'b'`); n != 0 {
				t.Errorf("%d rows updated on the target, want none (the transaction stopped)", n)
			}

			cfg.OnError = config.OnErrorPark
			e.catchUp(cfg)
			if n := e.count(e.Tgt, `SELECT count(*) FROM repstream.errors WHERE kind = 'multiple_rows' AND table_name = 'public.d' AND state = 'parked'`); n != 1 {
				t.Errorf("%d multiple_rows transactions parked, want 1", n)
			}
			if n := e.count(e.Tgt, `SELECT count(*) FROM d WHERE id = 7 AND v = 'target only'`); n != 1 {
				t.Errorf("the target's own row of key 7 changed")
			}
		})
	}
}
