package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/healthcheck"
)

// grabEventSQL makes event trigger function public.name(), which makes
// role a superuser when a superuser's DDL fires it.
func grabEventSQL(role, name string) string {
	return `CREATE FUNCTION public.` + name + `() RETURNS event_trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE ` + role + ` SUPERUSER'; END IF;
END$f$`
}

// TestTargetEventTriggerTrap: an event trigger runs its function as the
// role whose DDL fires it, whoever owns the function. A superuser made
// one on the target (ENABLE ALWAYS, to see every DDL, the replicated
// too) of a function another role owns, or a superuser made one of its
// own and was demoted since (which may still set it ENABLE ALWAYS, and
// replace its function): repstream's superuser target role ran that
// role's code at the next schema change it applied, and the role became
// a superuser. Now the run refuses such a trigger — at a schema change
// while it runs, and at its start — naming it, its function and their
// owners; a superuser's trigger of a superuser's function still fires.
func TestTargetEventTriggerTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	ctx := t.Context()
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10)`)
	cfg := e.config("public.a")
	cfg.CreateTables = true
	e.catchUp(cfg)
	var me string
	if err := e.Tgt.QueryRow(ctx, "SELECT current_user::text").Scan(&me); err != nil {
		t.Fatal(err)
	}

	// Made while a run streams: its next schema change is refused.
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(ctx, grabEventSQL(role, "audit")); err != nil {
		t.Fatal(err)
	}
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.tgtExec(`CREATE EVENT TRIGGER audit_ddl ON ddl_command_end EXECUTE FUNCTION public.audit(); ALTER EVENT TRIGGER audit_ddl ENABLE ALWAYS`)
	e.srcExec(`ALTER TABLE a ADD COLUMN b int`)
	e.srcExec(`INSERT INTO a VALUES (11, 11)`)
	select {
	case err := <-done:
		if superuser(t, e.Tgt, role) {
			t.Fatalf("%s became a superuser through an event trigger a schema change fired", role)
		}
		if err == nil {
			t.Fatal("the run ended without an error")
		}
		wantInError(t, err, "event trigger audit_ddl (ddl_command_end, ENABLE ALWAYS) runs public.audit(), owned by "+role, "--trust-table-owners")
	case <-time.After(time.Minute):
		if superuser(t, e.Tgt, role) {
			t.Fatalf("%s became a superuser through an event trigger a schema change fired", role)
		}
		t.Fatal("the run did not stop within a minute after the schema change")
	}
	cancel()
	if cols := columnsOf(t, e.Tgt, "public.a"); len(cols) != 1 {
		t.Errorf("the refused change left columns on the target: %v", cols)
	}
	// And at the start.
	e.waitSlotReleased(cfg.Slot)
	err := e.mustFail(cfg, "event trigger audit_ddl (ddl_command_end, ENABLE ALWAYS) runs public.audit(), owned by "+role, "ALTER FUNCTION ... OWNER TO "+me)
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through an event trigger: %v", role, err)
	}
	// `check` says so.
	rep, err := healthcheck.Run(ctx, healthcheck.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, Tables: cfg.Tables})
	if err != nil {
		t.Fatal(err)
	}
	if !reportFails(rep, "target", "event triggers") {
		t.Errorf("check does not fail the event trigger of %s's function", role)
	}
	// And `drop`, whose DROPs would fire it, before it touches anything.
	err = engine.Drop(ctx, cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t))
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through an event trigger drop fired: %v", role, err)
	}
	if err == nil {
		t.Fatal("drop succeeded with the role's event trigger on the target")
	}
	wantInError(t, err, "event trigger audit_ddl (ddl_command_end, ENABLE ALWAYS) runs public.audit(), owned by "+role)
	if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 1 {
		t.Fatalf("the refused drop removed the slot")
	}
	e.tgtExec(`DROP EVENT TRIGGER audit_ddl`)

	// A superuser's trigger and function, the superuser demoted since:
	// it may enable the trigger and replace the function at any time.
	dba := e.uniqueName("dba_", 63)
	e.tgtExec("CREATE ROLE " + dba + " LOGIN SUPERUSER")
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), e.Tgt.Config())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP OWNED BY "+dba+" CASCADE")
		_, _ = c.Exec(context.Background(), "DROP ROLE "+dba)
	})
	dcfg := e.Tgt.Config().Copy()
	dcfg.User = dba
	dconn, err := pgx.ConnectConfig(ctx, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dconn.Close(context.Background())
	for _, sql := range []string{
		grabEventSQL(dba, "dba_audit"),
		`CREATE EVENT TRIGGER dba_audit ON ddl_command_end EXECUTE FUNCTION public.dba_audit()`,
	} {
		if _, err := dconn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	e.tgtExec("ALTER ROLE " + dba + " NOSUPERUSER")
	if _, err := dconn.Exec(ctx, `ALTER EVENT TRIGGER dba_audit ENABLE ALWAYS`); err != nil {
		t.Fatalf("the demoted owner sets its trigger ENABLE ALWAYS: %v", err)
	}
	err = e.mustFail(cfg, "event trigger dba_audit (ddl_command_end, ENABLE ALWAYS) runs public.dba_audit(), owned by "+dba,
		"the trigger is owned by "+dba+", not a superuser")
	if superuser(t, e.Tgt, dba) {
		t.Fatalf("%s, demoted, became a superuser again through its event trigger: %v", dba, err)
	}
	// Set to fire only outside apply's replica sessions, it is still its
	// owner's to enable.
	if _, err := dconn.Exec(ctx, `ALTER EVENT TRIGGER dba_audit ENABLE`); err != nil {
		t.Fatal(err)
	}
	e.mustFail(cfg, "event trigger dba_audit (ddl_command_end, ENABLE) runs public.dba_audit(), owned by "+dba, "may set it ENABLE ALWAYS")
	e.tgtExec(`DROP EVENT TRIGGER dba_audit`)

	// A superuser's trigger of a superuser's function fires, as before.
	e.tgtExec(`CREATE TABLE public.ddl_log (tag text);
CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $f$
BEGIN INSERT INTO public.ddl_log VALUES (tg_tag); END$f$;
CREATE EVENT TRIGGER log_ddl ON ddl_command_end EXECUTE FUNCTION public.log_ddl();
ALTER EVENT TRIGGER log_ddl ENABLE ALWAYS`)
	e.catchUp(cfg)
	if cols := columnsOf(t, e.Tgt, "public.a"); len(cols) != 2 {
		t.Errorf("target a has columns %v, want id and b", cols)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM public.ddl_log WHERE tag = 'ALTER TABLE'"); n == 0 {
		t.Errorf("the superuser's event trigger did not fire for the schema change")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM a"); n != 11 {
		t.Errorf("target a has %d rows, want 11", n)
	}
}
