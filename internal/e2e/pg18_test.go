package e2e

import (
	"strings"
	"testing"
)

// TestCreateTablesPG18Keys: PostgreSQL 18's temporal keys and NOT NULL
// ... NOT VALID through --create-tables. A PRIMARY KEY or replica-identity
// UNIQUE (id, valid_at WITHOUT OVERLAPS) was made a btree key on the
// plain columns: the target took periods that overlap, which the source
// refuses (after a cutover, its data could break the source's rule). A
// column NOT NULL NOT VALID (its rows may hold NULL) was made NOT NULL, and
// the copy of its NULLs failed at every start.
func TestCreateTablesPG18Keys(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if e.src.Version() < 18 || e.tgt.Version() < 18 {
		t.Skip("needs PostgreSQL 18 on both sides")
	}
	e.srcExec(`CREATE TABLE tpk (id int4range, valid_at daterange, a text, PRIMARY KEY (id, valid_at WITHOUT OVERLAPS));
		CREATE TABLE tun (id int4range NOT NULL, valid_at daterange NOT NULL, a text, UNIQUE (id, valid_at WITHOUT OVERLAPS));
		ALTER TABLE tun REPLICA IDENTITY USING INDEX tun_id_valid_at_key;
		CREATE TABLE nv (id int PRIMARY KEY, n int);
		INSERT INTO tpk VALUES ('[1,2)', '[2000-01-01,2010-01-01)', 'a');
		INSERT INTO tun VALUES ('[1,2)', '[2000-01-01,2010-01-01)', 'a');
		INSERT INTO nv VALUES (1, NULL), (2, 5);
		ALTER TABLE nv ADD CONSTRAINT nv_n_nn NOT NULL n NOT VALID`)
	cfg := e.config("public.tpk", "public.tun", "public.nv")
	cfg.CreateTables = true
	e.catchUp(cfg)
	for _, tb := range []string{"tpk", "tun"} {
		var def string
		if err := e.Tgt.QueryRow(t.Context(), `SELECT coalesce(string_agg(pg_get_constraintdef(oid), '; '), '') FROM pg_constraint WHERE conrelid = $1::regclass AND contype IN ('p', 'u')`, tb).Scan(&def); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(def, "WITHOUT OVERLAPS") {
			t.Errorf("target %s's key is %q, not temporal", tb, def)
		}
		if _, err := e.Tgt.Exec(t.Context(), `INSERT INTO `+tb+` VALUES ('[1,2)', '[2001-06-01,2001-07-01)', 'overlaps')`); err == nil {
			t.Errorf("target %s takes a period overlapping one of its rows, which the source refuses", tb)
		}
	}
	e.srcExec(`INSERT INTO tpk VALUES ('[2,3)', '[2000-01-01,2010-01-01)', 'b'); UPDATE tpk SET a = 'c' WHERE id = '[1,2)';
		INSERT INTO tun VALUES ('[2,3)', '[2000-01-01,2010-01-01)', 'b'); DELETE FROM tun WHERE id = '[1,2)';
		INSERT INTO nv VALUES (3, 7); UPDATE nv SET n = 9 WHERE id = 2`)
	e.catchUp(cfg)
	e.assertSame("tpk", "id, valid_at")
	e.assertSame("tun", "id, valid_at")
	e.assertSame("nv", "id")
}
