package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/healthcheck"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/tablesync"
)

// hostileRole creates a login role without privileges beyond CREATE on the
// database (what "an ordinary database user" of the issue has), on the
// cluster of conn, dropped at the end of the test. It returns the role's
// name and a connection as that role.
func (e *env) hostileRole(side string) (string, *pgx.Conn) {
	e.t.Helper()
	ctx := context.Background()
	admin, db := e.Src, e.srcDB
	dsn := e.src.DSN(e.srcDB)
	if side == "target" {
		admin, db, dsn = e.Tgt, e.tgtDB, e.tgt.DSN(e.tgtDB)
	}
	role := e.uniqueName("mallory_"+side[:1]+"_", 63)
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN NOSUPERUSER",
		"GRANT CREATE ON DATABASE " + db + " TO " + role,
		"GRANT CREATE, USAGE ON SCHEMA public TO " + role,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			e.t.Fatalf("%s: %s: %v", side, sql, err)
		}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.User = role
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		e.t.Fatalf("connect as %s: %v", role, err)
	}
	e.t.Cleanup(func() {
		conn.Close(ctx)
		c, err := pgx.ConnectConfig(ctx, admin.Config())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP OWNED BY "+role+" CASCADE")
		_, _ = c.Exec(ctx, "DROP ROLE "+role)
	})
	return role, conn
}

// superuser reports whether role is a superuser on conn's cluster.
func superuser(t *testing.T, conn *pgx.Conn, role string) bool {
	t.Helper()
	var super bool
	if err := conn.QueryRow(context.Background(), "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil {
		t.Fatal(err)
	}
	return super
}

// trap is what a hostile role puts into a schema repstream it made first:
// every function repstream calls there, each making the role a superuser
// when a superuser runs it.
func trap(role string) string {
	grab := "EXECUTE 'ALTER ROLE " + role + " SUPERUSER'"
	return `CREATE SCHEMA repstream;
CREATE FUNCTION repstream.expect_row(n bigint) RETURNS bigint LANGUAGE plpgsql AS $f$BEGIN ` + grab + `; RETURN n; END$f$;
CREATE FUNCTION repstream.ddl_def(rel oid) RETURNS jsonb LANGUAGE plpgsql AS $f$BEGIN ` + grab + `; RETURN '{}'; END$f$;
CREATE FUNCTION repstream.ddl_end() RETURNS event_trigger LANGUAGE plpgsql AS $f$BEGIN ` + grab + `; END$f$;
CREATE FUNCTION repstream.ddl_drop() RETURNS event_trigger LANGUAGE plpgsql AS $f$BEGIN ` + grab + `; END$f$;
CREATE FUNCTION repstream.grab() RETURNS bool LANGUAGE plpgsql AS $f$BEGIN ` + grab + `; RETURN true; END$f$;
CREATE VIEW repstream.progress AS SELECT ''::text AS slot, '0/0'::pg_lsn AS low_lsn, ''::text AS snapshot,
  false AS created_publication, now() AS updated_at WHERE repstream.grab();
CREATE VIEW repstream.errors AS SELECT ''::text AS slot WHERE repstream.grab();
CREATE VIEW repstream.ddl_state AS SELECT 0::oid AS relid, '{}'::jsonb AS def WHERE repstream.grab();
CREATE VIEW repstream.replications AS SELECT ''::text AS slot WHERE repstream.grab();
GRANT ALL ON SCHEMA repstream TO PUBLIC;`
}

// TestHostileSchemaRefused: a role with CREATE on the database that makes
// the schema repstream first, on either side, with every function
// repstream calls there replaced by its own, does not become a superuser:
// run, check and drop refuse the schema, naming its owner, and touch
// nothing.
func TestHostileSchemaRefused(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	for _, side := range []string{"source", "target"} {
		t.Run(side, func(t *testing.T) {
			e := newEnv(t)
			e.both(`CREATE TABLE h (id int PRIMARY KEY, v text)`)
			e.srcExec(`INSERT INTO h VALUES (1, 'a')`)
			role, conn := e.hostileRole(side)
			if _, err := conn.Exec(context.Background(), trap(role)); err != nil {
				t.Fatalf("%s: the hostile role's schema: %v", side, err)
			}
			admin := e.Src
			if side == "target" {
				admin = e.Tgt
			}
			cfg := e.config("public.h")
			_, err := e.tryCatchUp(cfg)
			if err == nil || !errors.Is(err, provision.ErrUntrusted) || !strings.Contains(err.Error(), "owned by role "+role) {
				t.Fatalf("run with a schema repstream owned by %s on the %s: %v, want a refusal naming the owner", role, side, err)
			}
			if superuser(t, admin, role) {
				t.Fatalf("%s became a superuser through the schema repstream on the %s", role, side)
			}
			if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
				t.Errorf("the refused run left its slot")
			}
			if n := e.count(e.Src, "SELECT count(*) FROM pg_publication WHERE pubname = '"+cfg.Slot+"'"); n != 0 {
				t.Errorf("the refused run left its publication")
			}
			rep, err := healthcheck.Run(t.Context(), healthcheck.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, Tables: cfg.Tables})
			if err != nil {
				t.Fatal(err)
			}
			if !reportFails(rep, side, "schema repstream") {
				t.Errorf("check does not fail the %s's schema repstream owned by %s", side, role)
			}
			if err := engine.Drop(t.Context(), cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t)); !errors.Is(err, provision.ErrUntrusted) {
				t.Errorf("drop with a hostile schema repstream on the %s: %v, want a refusal", side, err)
			}
			if superuser(t, admin, role) {
				t.Fatalf("%s became a superuser through the schema repstream on the %s", role, side)
			}
		})
	}
}

// reportFails reports whether rep has a FAIL on side whose check name
// contains what.
func reportFails(rep *healthcheck.Report, side, what string) bool {
	for _, it := range rep.Items {
		if it.Level == healthcheck.Fail && it.Side == side && strings.Contains(it.Check, what) {
			return true
		}
	}
	return false
}

// TestInstalledSchemaLocked: once repstream has installed its schema on
// both sides, an ordinary role with CREATE on the database can neither add
// nor replace anything in it, nor call its functions, nor write its state.
func TestInstalledSchemaLocked(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE l (id int PRIMARY KEY, v text); INSERT INTO l VALUES (1, 'a')`)
	cfg := e.config("public.l")
	cfg.CreateTables = true
	e.catchUp(cfg)
	for _, side := range []string{"source", "target"} {
		role, conn := e.hostileRole(side)
		attempts := []string{
			"CREATE FUNCTION repstream.x() RETURNS int LANGUAGE sql AS 'SELECT 1'",
			"CREATE TABLE repstream.x (a int)",
			"CREATE OR REPLACE FUNCTION repstream.expect_row(n bigint) RETURNS bigint LANGUAGE sql AS 'SELECT n'",
			"CREATE OR REPLACE FUNCTION repstream.ddl_def(rel oid) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'",
			"ALTER FUNCTION repstream.ddl_def(oid) OWNER TO " + role,
			"DROP SCHEMA repstream CASCADE",
			"INSERT INTO repstream.replications VALUES ('x')",
		}
		if side == "target" {
			attempts = append(attempts, "SELECT repstream.expect_row(1)", "UPDATE repstream.progress SET low_lsn = 'FF/0'")
		} else {
			attempts = append(attempts, "SELECT repstream.ddl_def('l'::regclass)", "DELETE FROM repstream.ddl_state")
		}
		for _, sql := range attempts {
			if _, err := conn.Exec(context.Background(), sql); err == nil {
				t.Errorf("%s: an ordinary role could run %q", side, sql)
			}
		}
	}
	// The source's functions pin their search_path and none is callable by
	// PUBLIC.
	var loose int
	if err := e.Src.QueryRow(t.Context(), `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'repstream'::regnamespace
		AND (p.prosecdef AND NOT COALESCE(p.proconfig @> '{"search_path=pg_catalog, pg_temp"}', false)
		     OR has_function_privilege('public', p.oid, 'EXECUTE'))`).Scan(&loose); err != nil {
		t.Fatal(err)
	}
	if loose != 0 {
		t.Errorf("%d functions in the source's schema repstream are callable by PUBLIC or run without a pinned search_path", loose)
	}
}

// TestSameDatabaseRefused: with the target the source's own database, run
// (with --truncate), check and tables add refuse before touching anything.
func TestSameDatabaseRefused(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE same (id int PRIMARY KEY, v text); INSERT INTO same SELECT g, 'v' FROM generate_series(1, 10) g`)
	cfg := e.config("public.same")
	cfg.Target = cfg.Source
	cfg.Truncate = true
	_, err := e.tryCatchUp(cfg)
	if err == nil || !strings.Contains(err.Error(), "the source and the target are the same database") {
		t.Fatalf("run with source = target: %v, want a refusal", err)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM same"); n != 10 {
		t.Fatalf("the refused run left %d of the source's 10 rows", n)
	}
	for what, q := range map[string]string{
		"slot":            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" + cfg.Slot + "'",
		"publication":     "SELECT count(*) FROM pg_publication WHERE pubname = '" + cfg.Slot + "'",
		"schema":          "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'",
		"event triggers ": "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%'",
	} {
		if n := e.count(e.Src, q); n != 0 {
			t.Errorf("the refused run left its %s", what)
		}
	}
	rep, err := healthcheck.Run(t.Context(), healthcheck.Options{Source: cfg.Source, Target: cfg.Target, Slot: cfg.Slot, Tables: cfg.Tables})
	if err != nil {
		t.Fatal(err)
	}
	if !reportFails(rep, "target", "not the source") {
		t.Errorf("check does not fail source = target")
	}
	if _, err := tablesync.AddTables(t.Context(), cfg, tablesync.AddOptions{Tables: []string{"public.same"}}, testLogger(t)); err == nil ||
		!strings.Contains(err.Error(), "same database") {
		t.Errorf("tables add with source = target: %v, want a refusal", err)
	}
	// Another database of the same cluster is a different database.
	other := pgtest.NewDB(t, e.src)
	cfg.Target = e.src.DSN(other)
	cfg.Truncate = false
	cfg.CreateTables = true
	e.catchUp(cfg)
}

// TestDropKeepsOtherReplication: two replications of one source database
// (two slots, two targets) share the event trigger; dropping one keeps the
// other following schema changes, and dropping the last leaves nothing of
// repstream on either side.
func TestDropKeepsOtherReplication(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE k (id int PRIMARY KEY, v text); INSERT INTO k VALUES (1, 'a')`)
	a := e.config("public.k")
	a.CreateTables = true
	b := a
	b.Slot = a.Slot + "_b"
	if len(b.Slot) > 63 {
		b.Slot = "rsb_" + b.Slot[len(b.Slot)-50:]
	}
	b.Publication = b.Slot
	a.Publication = a.Slot
	b.SpillDir = filepath.Join(t.TempDir(), "spill-b")
	otherDB := pgtest.NewDB(t, e.tgt)
	b.Target = e.tgt.DSN(otherDB)
	e.catchUp(a)
	e.catchUp(b)
	e.waitSlotReleased(a.Slot)
	e.waitSlotReleased(b.Slot)
	if _, err := os.Stat(a.SpillDir); err != nil {
		t.Fatalf("the run made no spill directory: %v", err)
	}
	stop := e.start(b)
	if err := engine.Drop(t.Context(), a.Source, a.Target, a.Slot, a.Publication, a.SpillDir, false, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'"); n != 0 {
		t.Errorf("drop of the target's only replication left the schema repstream there")
	}
	if _, err := os.Stat(a.SpillDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("drop left the slot's spill directory %s: %v", a.SpillDir, err)
	}
	if _, err := os.Stat(b.SpillDir); err != nil {
		t.Errorf("drop of one slot touched the other's spill directory: %v", err)
	}
	e.srcExec(`ALTER TABLE k ADD COLUMN w int; INSERT INTO k VALUES (2, 'b', 2)`)
	tb, err := pgx.Connect(t.Context(), b.Target)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close(context.Background())
	pgtest.WaitFor(t, "the kept replication to follow ADD COLUMN", time.Minute, func() (bool, error) {
		var n int
		err := tb.QueryRow(context.Background(), "SELECT count(*) FROM k WHERE w = 2").Scan(&n)
		if err != nil {
			return false, nil // the column is not there yet
		}
		return n == 1, nil
	})
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the kept replication: %v", err)
	}
	e.waitSlotReleased(b.Slot)
	if err := engine.Drop(t.Context(), b.Source, b.Target, b.Slot, b.Publication, b.SpillDir, false, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.SpillDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the last drop left the slot's spill directory %s: %v", b.SpillDir, err)
	}
	for what, q := range map[string]string{
		"schema":         "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'",
		"event triggers": "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%'",
		"functions":      "SELECT count(*) FROM pg_proc WHERE proname IN ('ddl_def', 'ddl_pubs', 'ddl_end', 'ddl_drop', 'expect_row')",
	} {
		if n := e.count(e.Src, q); n != 0 {
			t.Errorf("the last drop left repstream's %s on the source", what)
		}
		if n := e.count(tb, q); n != 0 {
			t.Errorf("the last drop left repstream's %s on the target", what)
		}
	}
}

// TestConcurrentFirstStarts: two first starts of different slots into the
// same target database at the same instant both run; neither's failure
// handling removes the other's state.
func TestConcurrentFirstStarts(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE c1 (id int PRIMARY KEY); CREATE TABLE c2 (id int PRIMARY KEY);
		INSERT INTO c1 SELECT generate_series(1, 1000); INSERT INTO c2 SELECT generate_series(1, 1000)`)
	a := e.config("public.c1")
	a.CreateTables = true
	b := e.config("public.c2")
	b.CreateTables = true
	b.Slot = a.Slot + "2"
	if len(b.Slot) > 63 {
		b.Slot = "rs2_" + b.Slot[len(b.Slot)-50:]
	}
	b.Publication, a.Publication = b.Slot, a.Slot
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, c := range []config.Config{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = e.tryCatchUp(c)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("first start %d: %v", i+1, err)
		}
	}
	e.assertSame("c1", "id")
	e.assertSame("c2", "id")
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.progress"); n != 2 {
		t.Errorf("%d progress rows on the target, want 2", n)
	}
}

// TestOperatorHijack: a role that may create in a schema on the apply
// session's search_path makes an "=" for varchar, an exact match where
// pg_catalog compares varchar through text; apply's key matches use
// pg_catalog's, so replicated UPDATEs and DELETEs never run it.
func TestOperatorHijack(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE v (id varchar(20) PRIMARY KEY, n int)`)
	e.srcExec(`INSERT INTO v SELECT 'k' || g, g FROM generate_series(1, 10) g`)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(context.Background(), `
CREATE FUNCTION public.grab_eq(a varchar, b varchar) RETURNS bool LANGUAGE plpgsql AS $f$
BEGIN EXECUTE 'ALTER ROLE `+role+` SUPERUSER'; RETURN a::text = b::text; END$f$;
CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.grab_eq)`); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("public.v")
	e.catchUp(cfg)
	e.srcExec(`UPDATE v SET n = n + 1 WHERE n <= 5; DELETE FROM v WHERE n > 8`)
	e.catchUp(cfg)
	e.assertSame("v", "id")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through an operator the apply session ran", role)
	}
}

// TestTableOwnerTrap: a role that is not a superuser owns a target table
// and gives it a column the source lacks, whose default calls its
// function: whoever inserts runs it, and as a superuser it would make
// the role one (PostgreSQL 16's subscriptions apply as the table's owner
// for this). repstream, applying as a superuser, refuses such a table
// before it writes a row of it — at the start, and when the table enters
// the publication while it runs — naming the table, its owner and the
// ways out; once a superuser owns it, the run goes on.
func TestTableOwnerTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE o (id int PRIMARY KEY, v text); INSERT INTO o SELECT g, 'v' FROM generate_series(1, 10) g;
		CREATE TABLE p (id int PRIMARY KEY, v text); INSERT INTO p SELECT g, 'p' FROM generate_series(1, 5) g`)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(context.Background(), `
CREATE FUNCTION public.grab() RETURNS int LANGUAGE plpgsql AS $f$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE `+role+` SUPERUSER'; END IF;
	RETURN 0;
END$f$;
CREATE TABLE public.o (id int PRIMARY KEY, v text, trap int DEFAULT public.grab());
CREATE TABLE public.p (id int PRIMARY KEY, v text, trap int DEFAULT public.grab())`); err != nil {
		t.Fatal(err)
	}
	var me string
	if err := e.Tgt.QueryRow(t.Context(), "SELECT current_user::text").Scan(&me); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Publication = "pub_owner"
	e.srcExec(`CREATE PUBLICATION pub_owner FOR TABLE o`)
	e.mustFail(cfg, "public.o is owned by "+role, "ALTER TABLE public.o OWNER TO "+me, "the default of column trap of public.o calls public.grab(), owned by "+role,
		"is a superuser", "--trust-table-owners")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a column default the initial copy ran", role)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
		t.Errorf("the refused start left its slot behind")
	}
	// A superuser's table whose default still calls the role's function
	// (its body the role may replace at any time) is refused too.
	e.tgtExec(`ALTER TABLE public.o OWNER TO ` + me)
	err := e.mustFail(cfg, "the default of column trap of public.o calls public.grab(), owned by "+role)
	if strings.Contains(err.Error(), "public.o is owned by") {
		t.Errorf("the table owned by %s is still said to be another's: %v", me, err)
	}
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a column default the initial copy ran", role)
	}

	e.tgtExec(`ALTER TABLE public.o ALTER COLUMN trap DROP DEFAULT`)
	e.catchUp(cfg)
	if n := e.count(e.Tgt, "SELECT count(*) FROM o"); n != 10 {
		t.Fatalf("target o has %d rows, want 10", n)
	}

	// p, the owner's still, enters the publication while the engine runs.
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER PUBLICATION pub_owner ADD TABLE p`)
	e.srcExec(`INSERT INTO p VALUES (6, 'p'); INSERT INTO o VALUES (11, 'v')`)
	stopsWith(t, done, "a table owned by another role entered the publication", "public.p is owned by "+role, "--trust-table-owners")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a column default apply ran", role)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM p"); n != 0 {
		t.Errorf("target p has %d rows, want none written", n)
	}
}

// TestSuperuserMemberTrap: a target role that is not a superuser but a
// member of a role that is one (a DBA group role) has a superuser's
// rights: it, and any code it runs, may SET ROLE to that role. Taken for
// "not a superuser", it skipped the table-owner checks, and a table
// owner's ENABLE ALWAYS trigger, run by its initial copy, did so and made
// its owner a superuser. Such a role is refused another role's table as a
// superuser is, naming the membership; so is a member of
// pg_execute_server_program, and a role with CREATEROLE before PostgreSQL
// 16. Its own tables are written.
func TestSuperuserMemberTrap(t *testing.T) {
	t.Parallel() // own databases, roles and slot; no server restarts
	e := newEnv(t)
	if v := e.tgt.Version(); v < 15 {
		t.Skipf("a non-superuser target role needs GRANT SET ON PARAMETER (PostgreSQL 15+); the target is %d", v)
	}
	e.srcExec(`CREATE TABLE m (id int PRIMARY KEY, v text); INSERT INTO m SELECT g, 'm' FROM generate_series(1, 5) g;
		CREATE TABLE own (id int PRIMARY KEY, v text); INSERT INTO own SELECT g, 'o' FROM generate_series(1, 5) g`)
	dba, app := e.uniqueName("dba_", 63), e.uniqueName("app_", 63)
	e.tgtExec(`CREATE ROLE ` + dba + ` SUPERUSER NOLOGIN; CREATE ROLE ` + app + ` LOGIN NOSUPERUSER; GRANT ` + dba + ` TO ` + app)
	t.Cleanup(func() {
		ctx := context.Background()
		paramACL.Lock()
		defer paramACL.Unlock()
		for _, q := range []string{"DROP OWNED BY " + app, "DROP ROLE " + app, "DROP ROLE " + dba} {
			if _, err := e.Tgt.Exec(ctx, q); err != nil {
				t.Logf("cleanup: target: %s: %v", q, err)
			}
		}
	})
	e.tgtParamACL(`GRANT SET ON PARAMETER session_replication_role TO ` + app)
	e.tgtExec(fmt.Sprintf(`GRANT CREATE ON DATABASE %s TO %s; GRANT USAGE, CREATE ON SCHEMA public TO %s`, e.tgtDB, app, app))
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(context.Background(), `
CREATE FUNCTION public.grab() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF pg_has_role(current_user, '`+dba+`', 'MEMBER') THEN
		EXECUTE 'SET LOCAL ROLE `+dba+`';
		EXECUTE 'ALTER ROLE `+role+` SUPERUSER';
	END IF;
	RETURN NEW;
END$f$;
CREATE TABLE public.m (id int PRIMARY KEY, v text);
CREATE TRIGGER grab BEFORE INSERT ON public.m FOR EACH ROW EXECUTE FUNCTION public.grab();
ALTER TABLE public.m ENABLE ALWAYS TRIGGER grab;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.m TO `+app); err != nil {
		t.Fatal(err)
	}
	e.tgtExec(`CREATE TABLE public.own (id int PRIMARY KEY, v text); ALTER TABLE public.own OWNER TO ` + app)
	// A superuser owns the target database (public's owner, PostgreSQL 15+).
	e.srcExec(`CREATE PUBLICATION pub_member FOR TABLE m; CREATE PUBLICATION pub_own FOR TABLE own`)
	cfg := e.config()
	cfg.Publication = "pub_member"
	cfg.Target = fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", e.tgt.Port(), app, e.tgtDB)
	e.mustFail(cfg, "the target role "+app+" is a member of the superuser role "+dba, "public.m is owned by "+role,
		"trigger grab of public.m calls public.grab(), owned by "+role, "ALTER TABLE public.m OWNER TO "+dba, "--trust-table-owners")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a trigger the member of a superuser role ran", role)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM public.m"); n != 0 {
		t.Errorf("target m has %d rows, want none written", n)
	}
	// Other roles that give a superuser's rights: pg_execute_server_program
	// (a program it runs connects as a superuser), and CREATEROLE before
	// PostgreSQL 16 (it may grant itself that role).
	e.tgtExec(`REVOKE ` + dba + ` FROM ` + app + `; GRANT pg_execute_server_program TO ` + app)
	e.mustFail(cfg, "the target role "+app+" is a member of pg_execute_server_program", "public.m is owned by "+role)
	e.tgtExec(`REVOKE pg_execute_server_program FROM ` + app)
	if e.tgt.Version() < 16 {
		e.tgtExec(`ALTER ROLE ` + app + ` CREATEROLE`)
		e.mustFail(cfg, "the target role "+app+" has CREATEROLE", "public.m is owned by "+role)
		e.tgtExec(`ALTER ROLE ` + app + ` NOCREATEROLE`)
	}
	// Without them, app writes m with no more than its grants.
	e.catchUp(cfg)
	if n := e.count(e.Tgt, "SELECT count(*) FROM public.m"); n != 5 {
		t.Errorf("target m has %d rows, want 5", n)
	}
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser", role)
	}
	// The role's own table is its own code: written.
	cfg2 := e.config()
	cfg2.Publication = "pub_own"
	cfg2.Target = cfg.Target
	e.catchUp(cfg2)
	if n := e.count(e.Tgt, "SELECT count(*) FROM public.own"); n != 5 {
		t.Errorf("target own has %d rows, want 5", n)
	}
}

// TestForgedDDLMessageIgnored: pg_logical_emit_message is open to every
// role, so a role that may only connect to the source can put a message
// with repstream's schema-change prefix into the WAL. None of its forged
// messages changes a target: one unsigned, one with a made-up signature,
// and one signed with the real key (as a role that reads the WAL could
// copy one) but for another transaction. Each is ignored with a warning
// and counted; the run goes on, and a real schema change after them is
// applied.
func TestForgedDDLMessageIgnored(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE acc (id int PRIMARY KEY, v text); INSERT INTO acc SELECT g, 'x' FROM generate_series(1, 10) g;
		CREATE TABLE victim (id int PRIMARY KEY); INSERT INTO victim SELECT generate_series(1, 10)`)
	cfg := e.config("public.acc", "public.victim")
	cfg.CreateTables = true
	e.catchUp(cfg)
	pub := cfg.Slot // the publication repstream made is named after the slot
	ctx := t.Context()
	var accOID, victimOID, oldXid uint32
	var key []byte
	if err := e.Src.QueryRow(ctx, `SELECT 'acc'::regclass::oid, 'victim'::regclass::oid, (txid_current() % 4294967296)::bigint,
		(SELECT key FROM repstream.ddl_key)`).Scan(&accOID, &victimOID, &oldXid, &key); err != nil {
		t.Fatal(err)
	}
	cols := `[{"num":1,"name":"id","type":"integer","typeoid":23,"typmod":-1,"notnull":true},{"num":2,"name":"v","type":"text","typeoid":25,"typmod":-1}]`
	addColumn := fmt.Sprintf(`{"tag":"ALTER TABLE","oid":%d,"schema":"public","name":"acc","kind":"r","ident":"d","pubs":[%q],"pkey":["id"],`+
		`"columns":[{"num":1,"name":"id","type":"integer","typeoid":23,"typmod":-1,"notnull":true},{"num":2,"name":"v","type":"text","typeoid":25,"typmod":-1},`+
		`{"num":3,"name":"forged","type":"integer","typeoid":23,"typmod":-1,"default":"7","hasmissing":true,"missing":"7"}],`+
		`"old":{"oid":%d,"schema":"public","name":"acc","kind":"r","ident":"d","pubs":[%q],"pkey":["id"],"columns":%s}}`, accOID, pub, accOID, pub, cols)
	drop := fmt.Sprintf(`{"tag":"DROP TABLE","dropped":true,"oid":%d,"schema":"public","name":"victim","pubs":[%q]}`, victimOID, pub)

	_, mallory := e.hostileRole("source")
	for _, content := range []string{
		addColumn,
		strings.Repeat("0", 64) + drop,
		string(ddlmsg.Sign(key, oldXid, []byte(drop))), // the real key, another transaction
	} {
		if _, err := mallory.Exec(ctx, "SELECT pg_logical_emit_message(true, 'repstream.ddl', $1::text)", content); err != nil {
			t.Fatalf("emit a message as an ordinary role: %v", err)
		}
	}
	// Many at once, each looking signed (with a made-up signature), cost
	// the source one look at its key, not a connection each.
	const flood = 3000
	if _, err := mallory.Exec(ctx, "SELECT pg_logical_emit_message(true, 'repstream.ddl', $1::text) FROM generate_series(1, $2)",
		strings.Repeat("1", 64)+drop, flood); err != nil {
		t.Fatalf("emit messages as an ordinary role: %v", err)
	}
	sessions := func() int64 {
		return e.count(e.Src, "SELECT sessions FROM pg_stat_database WHERE datname = current_database() AND pg_stat_clear_snapshot() IS NOT NULL")
	}
	before := sessions()
	e.srcExec(`INSERT INTO acc VALUES (11, 'y'); INSERT INTO victim VALUES (11)`)
	e.srcExec(`ALTER TABLE acc ADD COLUMN real int DEFAULT 5`) // signed: applied
	e.srcExec(`INSERT INTO acc VALUES (12, 'z', 6)`)
	reg := e.catchUp(cfg)
	if n := reg.Component("capture").Counter("unsigned_ddl_messages").Load(); n != 3+flood {
		t.Errorf("%d messages counted as not signed by the trigger, want %d", n, 3+flood)
	}
	time.Sleep(600 * time.Millisecond) // a session's count is reported at its end, within 500 ms
	if n := sessions() - before; n > flood/10 {
		t.Errorf("%d forged messages that look signed: the run opened %d sessions on the source", flood, n)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'acc' AND column_name = 'forged'"); n != 0 {
		t.Errorf("a forged message added a column on the target")
	}
	e.assertSame("acc", "id")
	e.assertSame("victim", "id")

	// The key is never refreshed; one changed anyway (its guard off)
	// while a run goes on stops it at the first message signed with the
	// new key, instead of ignoring the trigger's messages from there on.
	if _, err := e.Src.Exec(ctx, "REFRESH MATERIALIZED VIEW repstream.ddl_key"); err == nil || !strings.Contains(err.Error(), "signs repstream's schema-change messages") {
		t.Fatalf("REFRESH of the key: %v, want it refused", err)
	}
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	e.srcExec(`ALTER EVENT TRIGGER repstream_ddl_key DISABLE; REFRESH MATERIALIZED VIEW repstream.ddl_key; ALTER EVENT TRIGGER repstream_ddl_key ENABLE ALWAYS`)
	e.srcExec(`ALTER TABLE acc ADD COLUMN after_new_key int DEFAULT 8`)
	stopsWith(t, done, "the key changed", "signed with another key than the one this run started with", "restart repstream")
	e.catchUp(cfg) // reads the new key: the change is applied
	e.assertSame("acc", "id")
}

// TestDDLUnsignedBeforeUpgrade: an earlier version's trigger emitted its
// schema-change messages unsigned. Those its slot still holds when this
// version first starts (made while no engine ran) are applied: they come
// before the position its install recorded. The messages after it are
// signed and checked.
func TestDDLUnsignedBeforeUpgrade(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE acc (id int PRIMARY KEY, v text); INSERT INTO acc SELECT g, 'x' FROM generate_series(1, 10) g`)
	cfg := e.config("public.acc")
	cfg.CreateTables = true
	e.catchUp(cfg)
	// The source as an earlier version left it: no key, messages unsigned.
	e.srcExec(`DROP MATERIALIZED VIEW repstream.ddl_key;
		UPDATE repstream.replications SET signed_from = NULL;
		CREATE OR REPLACE FUNCTION repstream.ddl_emit(content text) RETURNS void LANGUAGE plpgsql
		SET search_path = pg_catalog, pg_temp AS $f$BEGIN PERFORM pg_logical_emit_message(true, 'repstream.ddl', content); END$f$`)
	e.srcExec(`ALTER TABLE acc ADD COLUMN before_upgrade int DEFAULT 3`)
	e.srcExec(`INSERT INTO acc VALUES (11, 'y', 4)`)
	e.catchUp(cfg)
	e.assertSame("acc", "id")
	var from string
	if err := e.Src.QueryRow(t.Context(), "SELECT signed_from::text FROM repstream.replications WHERE slot = $1", cfg.Slot).Scan(&from); err != nil {
		t.Fatal(err)
	}
	if from == "0/0" {
		t.Errorf("a replication whose trigger emitted unsigned messages is recorded as signed from 0/0")
	}
	e.srcExec(`ALTER TABLE acc ADD COLUMN after_upgrade int DEFAULT 5`)
	e.srcExec(`INSERT INTO acc VALUES (12, 'z', 4, 6)`)
	reg := e.catchUp(cfg)
	e.assertSame("acc", "id")
	if n := reg.Component("capture").Counter("unsigned_ddl_messages").Load(); n != 0 {
		t.Errorf("%d of the trigger's own messages taken for forged", n)
	}
}

// TestSchemaChangeCodeTrap: a schema change brings code from the source
// that the superuser apply role would run on the target: a column of a
// domain (made by repstream from the source's definition) whose CHECK
// calls a function that a target role that is not a superuser owns under
// the same name, or a default calling it. The change was applied as it
// came, the domain's CHECK checked against the column's default as the
// ALTER ran, and only the next start looked at the table's code. Now the
// change is refused before it runs (a domain's constraints), or in its
// transaction (the table's code looked at again), naming the function and
// its owner; nothing of it stays.
func TestSchemaChangeCodeTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE FUNCTION public.grab(int) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
		CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10)`)
	cfg := e.config("public.a")
	cfg.CreateTables = true
	e.catchUp(cfg)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), `
CREATE FUNCTION public.grab(int) RETURNS bool LANGUAGE plpgsql AS $f$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE `+role+` SUPERUSER'; END IF;
	RETURN true;
END$f$`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE DOMAIN checked AS int CHECK (public.grab(VALUE))`)
	e.srcExec(`ALTER TABLE a ADD COLUMN c checked DEFAULT 1`)
	e.mustFail(cfg, "constraint checked_check of domain public.checked calls public.grab(integer), owned by "+role, "--trust-table-owners")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a domain's CHECK a schema change ran", role)
	}
	if cols := columnsOf(t, e.Tgt, "public.a"); len(cols) != 1 {
		t.Errorf("the refused change left columns on the target: %v", cols)
	}
}

// TestDomainOwnerTrap: a domain a target role that is not a superuser
// owns is code that role controls (it may add a constraint calling its
// own function at any time), as a table it owns is: a superuser apply
// role refuses a table with a column of it at the start, and a schema
// change that would add one (a same-named domain made there first).
func TestDomainOwnerTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), `CREATE DOMAIN public.mdom AS int; CREATE DOMAIN public.later AS int`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10);
		CREATE TABLE b (id int PRIMARY KEY, v int)`)
	e.tgtExec(`CREATE TABLE b (id int PRIMARY KEY, v public.mdom)`)
	cfg := e.config("public.b")
	e.mustFail(cfg, "column v of public.b is of domain public.mdom, owned by "+role)
	e.waitSlotReleased(cfg.Slot)

	cfg = e.config("public.a")
	cfg.Slot += "_a"
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`CREATE DOMAIN later AS int; ALTER TABLE a ADD COLUMN x later`)
	e.mustFail(cfg, "domain public.later is owned by "+role)
	if cols := columnsOf(t, e.Tgt, "public.a"); len(cols) != 1 {
		t.Errorf("the refused change left columns on the target: %v", cols)
	}
}

// TestNestedTypeCodeTrap: the code a column's type runs is found however
// deep it sits. A role that is not a superuser owns a domain whose CHECK
// calls its function, and a range's subtype_diff; a superuser made a
// domain over that domain, a composite with an attribute of it, and the
// range (whose GiST index calls subtype_diff on every insert). Writing
// any of these columns as a superuser runs that role's code: each table
// is refused at the start, naming the domain or the function, and so is a
// schema change adding a column of the composite.
func TestNestedTypeCodeTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), `CREATE FUNCTION public.ok(int) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
		CREATE DOMAIN public.inner_d AS int CHECK (public.ok(VALUE));
		CREATE FUNCTION public.fdiff(float8, float8) RETURNS float8 LANGUAGE sql IMMUTABLE AS 'SELECT $1 - $2'`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE DOMAIN inner_d AS int; CREATE DOMAIN outer_d AS inner_d; CREATE TYPE pair AS (x inner_d, y int);
		CREATE TYPE frange AS RANGE (subtype = float8);
		CREATE TABLE c1 (id int PRIMARY KEY, v outer_d); CREATE TABLE c2 (id int PRIMARY KEY, p pair);
		CREATE TABLE c3 (id int PRIMARY KEY, r frange)`)
	e.tgtExec(`CREATE DOMAIN outer_d AS public.inner_d; CREATE TYPE pair AS (x public.inner_d, y int);
		CREATE TYPE frange AS RANGE (subtype = float8, subtype_diff = public.fdiff);
		CREATE TABLE c1 (id int PRIMARY KEY, v outer_d); CREATE TABLE c2 (id int PRIMARY KEY, p pair);
		CREATE TABLE c3 (id int PRIMARY KEY, r frange); CREATE INDEX ON c3 USING gist (r)`)
	for _, tc := range []struct{ table, want string }{
		{"c1", "column v of public.c1 is of domain public.inner_d, owned by " + role},
		{"c2", "column p of public.c2 is of domain public.inner_d, owned by " + role},
		{"c3", "column r of public.c3 calls public.fdiff(double precision,double precision), owned by " + role},
	} {
		cfg := e.config("public." + tc.table)
		cfg.Slot += "_" + tc.table
		e.mustFail(cfg, tc.want)
		e.waitSlotReleased(cfg.Slot)
	}

	// A schema change adding a column of such a type is refused before
	// its ALTER runs (the ADD COLUMN would check its default as it runs).
	e.srcExec(`CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 10)`)
	cfg := e.config("public.a")
	cfg.Slot += "_a"
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`ALTER TABLE a ADD COLUMN p pair DEFAULT ROW(1, 2)`)
	e.mustFail(cfg, "domain public.inner_d is owned by "+role)
	if cols := columnsOf(t, e.Tgt, "public.a"); len(cols) != 1 {
		t.Errorf("the refused change left columns on the target: %v", cols)
	}
}

// TestPartitionOwnerTrap: a row written to a superuser's partitioned
// table lands in a leaf partition, whose own triggers (ENABLE ALWAYS),
// defaults, checks and index expressions run as the apply session. A leaf
// another role owns, or whose trigger calls that role's function, is
// refused as its root would be; the role never becomes a superuser.
func TestPartitionOwnerTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE m (id int, region int, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1); CREATE TABLE m2 PARTITION OF m FOR VALUES IN (2);
		INSERT INTO m SELECT g, 1 + g % 2, 'v' FROM generate_series(1, 10) g;
		CREATE PUBLICATION pub_m FOR TABLE m WITH (publish_via_partition_root = true)`)
	role, conn := e.hostileRole("target")
	e.tgtExec(`CREATE TABLE m (id int, region int, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1)`)
	if _, err := conn.Exec(t.Context(), `
CREATE FUNCTION public.grab() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE `+role+` SUPERUSER'; END IF;
	RETURN NEW;
END$f$;
CREATE TABLE public.m2 (id int, region int, v text, PRIMARY KEY (id, region));
CREATE TRIGGER grab BEFORE INSERT ON public.m2 FOR EACH ROW EXECUTE FUNCTION public.grab();
ALTER TABLE public.m2 ENABLE ALWAYS TRIGGER grab`); err != nil {
		t.Fatal(err)
	}
	e.tgtExec(`ALTER TABLE m ATTACH PARTITION m2 FOR VALUES IN (2)`)
	cfg := e.config()
	cfg.Publication = "pub_m"
	e.mustFail(cfg, "public.m2 is owned by "+role, "trigger grab of public.m2 calls public.grab(), owned by "+role)
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a partition's trigger the initial copy ran", role)
	}
	e.waitSlotReleased(cfg.Slot)
	// Owned by the superuser, its trigger still calls the role's function.
	e.tgtExec(`ALTER TABLE m2 OWNER TO CURRENT_USER`)
	e.mustFail(cfg, "trigger grab of public.m2 calls public.grab(), owned by "+role)
	e.waitSlotReleased(cfg.Slot)
	e.tgtExec(`DROP TRIGGER grab ON m2`)
	e.catchUp(cfg)
	e.assertSame("m", "id, region")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser", role)
	}
}

// TestSearchPathHijack: a role that may create in a schema on the
// session's default search path (public here) shadows built-ins with
// closer matches — unnest(text[]) over pg_catalog's unnest(anyarray),
// an array_agg(text) aggregate — on the source and the
// target, each making the role a superuser when a superuser calls it.
// Every repstream session pins its search path to pg_catalog, pg_temp:
// a copy, a stream of changes with a schema change, none runs them.
func TestSearchPathHijack(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE v (id int PRIMARY KEY, n int, s text[]); INSERT INTO v SELECT g, g, ARRAY['a'] FROM generate_series(1, 10) g`)
	var roles []string
	for _, side := range []string{"source", "target"} {
		role, conn := e.hostileRole(side)
		roles = append(roles, role)
		grab := `BEGIN IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE ` + role + ` SUPERUSER'; END IF;`
		if _, err := conn.Exec(t.Context(), `
CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $f$ `+grab+` RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x; END$f$;
CREATE FUNCTION public.grab_acc(a text[], b text) RETURNS text[] LANGUAGE plpgsql AS $f$ `+grab+` RETURN a || b; END$f$;
CREATE AGGREGATE public.array_agg(text) (SFUNC = public.grab_acc, STYPE = text[])`); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config("public.v")
	cfg.CreateTables = true
	e.catchUp(cfg)
	e.srcExec(`UPDATE v SET n = n + 1 WHERE n <= 5; DELETE FROM v WHERE n > 8; ALTER TABLE v ADD COLUMN w text DEFAULT 'w'; INSERT INTO v VALUES (100, 1, ARRAY['b'], 'x')`)
	e.catchUp(cfg)
	e.assertSame("v", "id")
	for i, side := range []*pgx.Conn{e.Src, e.Tgt} {
		if superuser(t, side, roles[i]) {
			t.Errorf("%s became a superuser through a function a repstream session ran", roles[i])
		}
	}
}

// grabSQL makes function public.name(args) returning retExpr, which makes
// role a superuser when a superuser runs it.
func grabSQL(role, name, args, ret, retExpr string) string {
	return `CREATE FUNCTION public.` + name + `(` + args + `) RETURNS ` + ret + ` LANGUAGE plpgsql AS $f$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE ` + role + ` SUPERUSER'; END IF;
	RETURN ` + retExpr + `;
END$f$`
}

// TestTypeOwnerCast: a column of a type another role owns on the target
// (an enum made there first, which --create-tables took as it was). Its
// owner may add a cast of it to text at any time: an IMPLICIT one makes
// a key's match "m = $1" resolve to text = text through the role's
// function (search_path or not), and a FULL identity's match casts every
// column to text; a superuser target role ran it, and the role became a
// superuser. Only domains' owners were refused before. Now a column of a
// type such a role owns is refused, and so is one whose type has a cast,
// to or from it, calling a function such a role owns; once both are a
// superuser's, the run goes on.
func TestTypeOwnerCast(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TYPE mood AS ENUM ('a', 'b');
		CREATE TABLE kk (id int, m mood, v text, PRIMARY KEY (id, m)); INSERT INTO kk VALUES (1, 'a', 'x'), (2, 'b', 'y');
		CREATE TABLE ft (id int, m mood); ALTER TABLE ft REPLICA IDENTITY FULL; INSERT INTO ft VALUES (1, 'a'), (2, 'b')`)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), `CREATE TYPE public.mood AS ENUM ('a', 'b'); `+grabSQL(role, "m2t", "public.mood", "text", "format('%s', $1)")+`;
		CREATE CAST (public.mood AS text) WITH FUNCTION public.m2t(public.mood) AS IMPLICIT`); err != nil {
		t.Fatal(err)
	}
	var me string
	if err := e.Tgt.QueryRow(t.Context(), "SELECT current_user::text").Scan(&me); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("public.kk", "public.ft")
	cfg.CreateTables = true
	e.mustFail(cfg, "column m of public.kk is of enum public.mood, owned by "+role, "--trust-table-owners")
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through its cast", role)
	}
	// A superuser's type with the role's cast still.
	e.tgtExec(`ALTER TYPE public.mood OWNER TO ` + me)
	e.mustFail(cfg, "column m of public.kk has a cast (public.mood AS text): public.m2t(public.mood), owned by "+role)
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through its cast", role)
	}
	e.tgtExec(`DROP CAST (public.mood AS text)`)
	e.catchUp(cfg)
	e.srcExec(`UPDATE kk SET v = 'z' WHERE id = 1; UPDATE ft SET id = 10 WHERE id = 1; DELETE FROM ft WHERE id = 2`)
	e.catchUp(cfg)
	e.assertSame("kk", "id")
	e.assertSame("ft", "id")

	// A schema change adding a column of a type the role owns: refused
	// before the ALTER runs.
	if _, err := conn.Exec(t.Context(), `CREATE TYPE public.feel AS ENUM ('x')`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE TYPE feel AS ENUM ('x'); ALTER TABLE kk ADD COLUMN f feel; UPDATE kk SET f = 'x'`)
	if _, err := e.tryCatchUp(cfg); err == nil || !strings.Contains(err.Error(), "enum public.feel is owned by "+role) {
		t.Errorf("a column of the role's type added by a schema change: %v", err)
	}
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through its cast", role)
	}
}

// TestStandardConformingStringsOff: the target database's owner set
// standard_conforming_strings off for every session there (ALTER
// DATABASE ... SET, which a database's owner may). repstream wrote the
// value an ADD COLUMN gave the source's rows as a literal that doubled
// quotes but not backslashes, and sent it with the simple protocol: a
// default the source table's owner chose ended the literal early and ran
// the rest as SQL, as the superuser target role. repstream's sessions
// now pin the setting on, and literals are written E'...' when they hold
// a backslash.
func TestStandardConformingStringsOff(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	ctx := t.Context()
	_, sconn := e.hostileRole("source")
	trole, tconn := e.hostileRole("target")
	if _, err := sconn.Exec(ctx, `CREATE TABLE public.ot (id int PRIMARY KEY, v text); INSERT INTO public.ot VALUES (1, 'a')`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE PUBLICATION pub_scs FOR TABLE public.ot`)
	cfg := e.config()
	cfg.Publication = "pub_scs"
	cfg.CreateTables = true
	e.catchUp(cfg)
	// public stays a superuser's: owned by pg_database_owner, the
	// database's owner could swap the table (TestTargetSchemaOwnerTrap).
	e.tgtExec(`ALTER SCHEMA public OWNER TO CURRENT_USER`)
	e.tgtExec(`ALTER DATABASE ` + e.tgtDB + ` OWNER TO ` + trole)
	if _, err := tconn.Exec(ctx, `ALTER DATABASE `+e.tgtDB+` SET standard_conforming_strings = off`); err != nil {
		t.Fatal(err)
	}
	payload := `\'; ALTER ROLE ` + trole + ` SUPERUSER; COMMIT; BEGIN; --`
	if _, err := sconn.Exec(ctx, `ALTER TABLE public.ot ADD COLUMN x text DEFAULT `+schemaLiteral(payload)); err != nil {
		t.Fatal(err)
	}
	if _, err := sconn.Exec(ctx, `INSERT INTO public.ot (id, v) VALUES (2, 'b\c')`); err != nil {
		t.Fatal(err)
	}
	e.catchUp(cfg)
	if superuser(t, e.Tgt, trole) {
		t.Fatalf("%s became a superuser through a literal read with standard_conforming_strings off", trole)
	}
	e.assertSame("ot", "id")
}

// schemaLiteral is s as a standard SQL literal (quotes doubled).
func schemaLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestSequenceViewTrap: `sequences sync` read the target's sequence by
// its name, whatever the name was there: a role that may create in the
// sequence's schema made a view of that name where the target lacked the
// sequence, and the read ran the view's function as the superuser target
// role, which made the role a superuser (an IMMUTABLE one would run while
// the read is planned). Now only a sequence is read (its catalog rows looked at, and
// locked, in the read's transaction): a view of its name is an error
// naming it.
func TestSequenceViewTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE sv (id serial PRIMARY KEY, v text); INSERT INTO sv (v) SELECT 'v' FROM generate_series(1, 5)`)
	e.tgtExec(`CREATE TABLE sv (id int PRIMARY KEY, v text)`)
	cfg := e.config("public.sv")
	e.catchUp(cfg)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), grabSQL(role, "grab", "", "bigint", "5")+`;
		CREATE VIEW public.sv_id_seq AS SELECT public.grab() AS last_value, true AS is_called`); err != nil {
		t.Fatal(err)
	}
	_, err := engine.SyncSequences(t.Context(), cfg, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "public.sv_id_seq is not a sequence") {
		t.Errorf("sequences sync with a view in the place of a sequence: %v", err)
	}
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through a view named as a sequence", role)
	}
}

// TestForeignPartitionTrap: the source's partition trigger function (a
// superuser's, SECURITY DEFINER) looked whether each partition attached
// anywhere held rows by reading it. A role that may use postgres_fdw
// attached a foreign table as a partition of a table of its own (not even
// replicated), through a user mapping of its own naming the superuser: the
// read connected as the superuser, who needs no password, to a view
// calling the role's function, and the role made itself a superuser
// (without repstream, the mapping is refused: "password is required"). The
// function now reads plain tables only; a foreign leaf may hold rows. And
// a copy refuses a foreign table (a schema's publication lists it).
func TestForeignPartitionTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	if err := e.src.Exec(t.Context(), e.srcDB, `CREATE EXTENSION postgres_fdw`); err != nil {
		t.Skipf("postgres_fdw is not installed with these server binaries: %v", err)
	}
	e.both(`CREATE TABLE t (id int PRIMARY KEY)`)
	e.catchUp(e.config("public.t")) // the event triggers installed
	role, conn := e.hostileRole("source")
	var super string
	if err := e.Src.QueryRow(t.Context(), "SELECT current_user").Scan(&super); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`GRANT USAGE ON FOREIGN DATA WRAPPER postgres_fdw TO ` + role)
	if _, err := conn.Exec(t.Context(), fmt.Sprintf(`
CREATE SERVER loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', port '%d', dbname '%s');
CREATE USER MAPPING FOR PUBLIC SERVER loop OPTIONS (user '%s');
CREATE FUNCTION public.pwn() RETURNS int LANGUAGE sql AS 'ALTER ROLE %s SUPERUSER; SELECT 1';
CREATE VIEW public.v AS SELECT public.pwn() AS x;
CREATE TABLE public.pf (x int) PARTITION BY LIST (x);
ALTER TABLE public.pf REPLICA IDENTITY FULL;
CREATE FOREIGN TABLE public.ft (x int) SERVER loop OPTIONS (schema_name 'public', table_name 'v')`,
		e.src.Port(), e.srcDB, super, role)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `ALTER TABLE public.pf ATTACH PARTITION public.ft FOR VALUES IN (1)`); err != nil {
		t.Fatalf("the role's ATTACH PARTITION failed: %v", err)
	}
	if superuser(t, e.Src, role) {
		t.Fatalf("%s became a superuser through the partition trigger's read of its foreign table", role)
	}
	// A publication of the schema lists the foreign table and its root:
	// the initial copy read them the same way. Refused now, unread.
	if e.srcMajor() >= 15 {
		cfg := e.config("public.*")
		cfg.Slot += "_schema"
		cfg.CreateTables = true
		e.mustFail(cfg, "is or holds a foreign table (public.ft)")
		if superuser(t, e.Src, role) {
			t.Fatalf("%s became a superuser through the initial copy's read of its foreign table", role)
		}
	}
}

// TestSourceDumpRestored: a plain pg_dump of a source database, restored
// into another database with ON_ERROR_STOP. The dump's last statement,
// the REFRESH of the signing key, was refused by the key's guard (the
// restore failed), and the restored database, whose triggers came with
// the dump, refused every CREATE TABLE, DROP TABLE and TRUNCATE of a
// partition after ("ddl_key has not been populated"): repstream broke the
// application there. Now the guard lets the REFRESH through in a database
// without a replication slot of its own, and the trigger never fails a
// statement for want of a key.
func TestSourceDumpRestored(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	dump, psql := filepath.Join(e.src.BinDir(), "pg_dump"), filepath.Join(e.src.BinDir(), "psql")
	if _, err := os.Stat(dump); err != nil {
		t.Skipf("no pg_dump beside the server binaries: %v", err)
	}
	if _, err := os.Stat(psql); err != nil {
		t.Skipf("no psql beside the server binaries: %v", err)
	}
	e.both(`CREATE TABLE t (id int PRIMARY KEY);
		CREATE TABLE p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k); CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1)`)
	e.catchUp(e.config("public.t", "public.p"))
	copyDB := pgtest.NewDB(t, e.src)
	out, err := exec.Command("bash", "-c", fmt.Sprintf("set -o pipefail; %s -d %q | %s -X -q -v ON_ERROR_STOP=1 -d %q",
		dump, e.src.DSN(e.srcDB), psql, e.src.DSN(copyDB))).CombinedOutput()
	if err != nil {
		t.Fatalf("restore of the source's dump: %v\n%s", err, out)
	}
	c, err := pgx.Connect(t.Context(), e.src.DSN(copyDB))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, sql := range []string{`CREATE TABLE newt (id int PRIMARY KEY)`, `DROP TABLE t`, `TRUNCATE p1`, `ALTER TABLE p ADD COLUMN v text`} {
		if _, err := c.Exec(t.Context(), sql); err != nil {
			t.Errorf("in the restored database: %s: %v", sql, err)
		}
	}
	// The source itself, whose slot exists, still refuses a new key.
	if _, err := e.Src.Exec(t.Context(), "REFRESH MATERIALIZED VIEW repstream.ddl_key"); err == nil || !strings.Contains(err.Error(), "signs repstream's schema-change messages") {
		t.Errorf("REFRESH of the source's key: %v, want it refused", err)
	}
}
