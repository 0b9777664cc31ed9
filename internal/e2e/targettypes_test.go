package e2e

import (
	"fmt"
	"testing"
)

// TestObjectRefTypes: columns of the object identifier types (regclass,
// regtype, regrole, ... and their arrays) name the target's objects of the
// source's names, with binary on (the default) too: their binary form is
// the source's OID, which names another object on the target, or none, so
// such a table travels as text (target.BinaryCompatible). The target makes
// a table first, so that its OIDs are not the source's.
func TestObjectRefTypes(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.tgtExec(`CREATE TABLE shifts_oids (x int); CREATE TYPE shifts_type AS (x int)`)
	e.both(`CREATE TYPE mood AS ENUM ('ok'); CREATE TABLE other (id int);
		CREATE TABLE refs (id int PRIMARY KEY, r regclass, rs regclass[], ty regtype, ro regrole)`)
	ins := func(id int) {
		e.srcExec(fmt.Sprintf(`INSERT INTO refs VALUES (%d, 'public.other', ARRAY['public.refs', 'public.other']::regclass[], 'public.mood', current_user::regrole)`, id))
	}
	ins(1)
	cfg := e.config("public.refs")
	e.catchUp(cfg)
	ins(2)
	e.srcExec(`UPDATE refs SET r = 'public.refs' WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("refs", "id")
}
