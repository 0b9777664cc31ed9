package e2e

import (
	"testing"
)

// TestSourceRowSecurity: row-level security policies on a source table
// that apply to the source role (not its owner, no BYPASSRLS) show it only
// some rows. The initial copy read them and the run said it had caught up
// with half the table; now the start refuses it before it creates
// anything, naming the table, the role and the fix, and check says so.
// A policy made after that check fails the copy (its sessions run with
// row_security = off) instead of thinning it: a table added later is
// refused so. With BYPASSRLS the copy is whole.
func TestSourceRowSecurity(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE rl (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO rl SELECT g, 'row ' || g FROM generate_series(1, 100) g`)
	r := newLPRoles(e)
	cfg := e.lpConfig(r)
	e.grantLeastPrivilege(r, cfg.Slot, "rl")
	e.srcExec(`ALTER TABLE rl ENABLE ROW LEVEL SECURITY; CREATE POLICY even ON rl FOR SELECT USING (id % 2 = 0)`)
	e.mustFail(cfg, "row-level security policies of public.rl apply to the source role "+r.src, "ALTER ROLE "+r.src+" BYPASSRLS")
	if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
		t.Errorf("the refused start left its slot behind")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM rl"); n != 0 {
		t.Errorf("the refused start copied %d rows", n)
	}
	e.srcExec(`ALTER ROLE ` + r.src + ` BYPASSRLS`)
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO rl VALUES (101, 'odd, streamed')`)
	e.catchUp(cfg)
	e.assertSame("rl", "id")

	// A table added later whose policy applies to the role (its
	// BYPASSRLS taken back): its copy refuses it rather than thin it.
	e.srcExec(`ALTER ROLE ` + r.src + ` NOBYPASSRLS`)
	e.both(`CREATE TABLE rl2 (id int PRIMARY KEY)`)
	e.tgtExec(`ALTER TABLE rl2 OWNER TO ` + r.tgt)
	e.srcExec(`INSERT INTO rl2 SELECT generate_series(1, 10); GRANT SELECT ON rl2 TO ` + r.src + `;
		ALTER TABLE rl2 ENABLE ROW LEVEL SECURITY; CREATE POLICY few ON rl2 FOR SELECT USING (id < 4);
		ALTER PUBLICATION ` + cfg.Slot + ` ADD TABLE rl2`)
	e.srcExec(`INSERT INTO rl2 VALUES (11)`)
	e.mustFail(cfg, "public.rl2", "row-level security policies of public.rl2 apply to the source role "+r.src, "BYPASSRLS")
	if n := e.count(e.Tgt, "SELECT count(*) FROM rl2"); n != 0 {
		t.Errorf("the refused copy left %d rows of rl2", n)
	}
}

// TestTargetRowSecurity: row-level security policies on a target table
// that apply to the target role hide rows from apply: an UPDATE of a
// hidden row found nothing and was taken for a conflict. The start
// refuses such a table, naming the fix; a policy made while the engine
// runs stops it at the first statement the policy would filter (the
// sessions run with row_security = off), saying so, instead of a
// misleading "no row with key" conflict.
func TestTargetRowSecurity(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE tr (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO tr SELECT g, 'row ' || g FROM generate_series(1, 20) g`)
	r := newLPRoles(e)
	cfg := e.lpConfig(r)
	e.grantLeastPrivilege(r, cfg.Slot, "tr")
	// The target role owns the table: FORCE makes the policy apply to it.
	e.tgtExec(`ALTER TABLE tr ENABLE ROW LEVEL SECURITY; ALTER TABLE tr FORCE ROW LEVEL SECURITY;
		CREATE POLICY small ON tr USING (id <= 10) WITH CHECK (true)`)
	e.mustFail(cfg, "row-level security policies of public.tr apply to the target role "+r.tgt, "ALTER ROLE "+r.tgt+" BYPASSRLS")
	e.tgtExec(`ALTER TABLE tr NO FORCE ROW LEVEL SECURITY`)
	e.catchUp(cfg)
	e.assertSame("tr", "id")

	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.tgtExec(`ALTER TABLE tr FORCE ROW LEVEL SECURITY`)
	e.srcExec(`UPDATE tr SET v = 'updated' WHERE id = 15`)
	stopsWith(t, done, "a policy hid a row from apply", "row-level security policies of public.tr apply to the target role "+r.tgt, "BYPASSRLS")
}
