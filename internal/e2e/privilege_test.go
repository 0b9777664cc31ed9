package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
)

// paramACL serialises the GRANTs and REVOKEs of SET ON PARAMETER
// session_replication_role (and the DROP OWNED BY that takes them back):
// they all update the parameter's one row of pg_parameter_acl, which the
// tests share, and two at once fail with "tuple concurrently updated".
var paramACL sync.Mutex

// tgtParamACL runs sql, a GRANT or REVOKE on the target's parameter,
// alone among the tests (paramACL).
func (e *env) tgtParamACL(sql string) {
	e.t.Helper()
	paramACL.Lock()
	defer paramACL.Unlock()
	e.tgtExec(sql)
}

// lpRoles are two non-superuser roles for an env: src (LOGIN REPLICATION)
// and tgt (LOGIN). Roles are cluster-wide: they are dropped, with what they
// own or were granted, when the test ends.
type lpRoles struct{ src, tgt string }

func newLPRoles(e *env) lpRoles {
	e.t.Helper()
	if v := e.tgt.Version(); v < 15 {
		e.t.Skipf("a non-superuser target role needs GRANT SET ON PARAMETER (PostgreSQL 15+); the target is %d", v)
	}
	name := e.uniqueName("rs_", 61)
	r := lpRoles{src: name + "_s", tgt: name + "_t"}
	e.srcExec(`CREATE ROLE ` + r.src + ` LOGIN REPLICATION`)
	e.tgtExec(`CREATE ROLE ` + r.tgt + ` LOGIN`)
	e.t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{"DROP OWNED BY " + r.src, "DROP ROLE " + r.src} {
			if _, err := e.Src.Exec(ctx, q); err != nil {
				e.t.Logf("cleanup: source: %s: %v", q, err)
			}
		}
		paramACL.Lock()
		defer paramACL.Unlock()
		for _, q := range []string{"DROP OWNED BY " + r.tgt, "DROP ROLE " + r.tgt} {
			if _, err := e.Tgt.Exec(ctx, q); err != nil {
				e.t.Logf("cleanup: target: %s: %v", q, err)
			}
		}
	})
	return r
}

// grantLeastPrivilege gives the roles exactly README's "Least privilege"
// grants for tables: SELECT on the source, ownership of the target tables,
// SET on session_replication_role and CREATE on the target database; the
// publication is made by the source tables' owner.
func (e *env) grantLeastPrivilege(r lpRoles, pub string, tables ...string) {
	e.t.Helper()
	for _, tb := range tables {
		e.srcExec(fmt.Sprintf(`GRANT SELECT ON %s TO %s`, tb, r.src))
		e.tgtExec(fmt.Sprintf(`ALTER TABLE %s OWNER TO %s`, tb, r.tgt))
	}
	e.srcExec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, pub, strings.Join(tables, ", ")))
	e.tgtParamACL(`GRANT SET ON PARAMETER session_replication_role TO ` + r.tgt)
	e.tgtExec(fmt.Sprintf(`GRANT CREATE ON DATABASE %s TO %s`, e.tgtDB, r.tgt))
}

// lpConfig is e.config connecting as the roles.
func (e *env) lpConfig(r lpRoles, tables ...string) config.Config {
	cfg := e.config(tables...)
	cfg.Source = fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", e.src.Port(), r.src, e.srcDB)
	cfg.Target = fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", e.tgt.Port(), r.tgt, e.tgtDB)
	return cfg
}

// TestLeastPrivilege: the whole pipeline — initial copy, then streaming
// inserts, updates, deletes and a truncate, with --until-caught-up — runs
// as non-superuser roles on both sides with exactly the grants README
// lists, and the target ends equal to the source. A target trigger does
// not fire: the apply sessions run as replica, which the SET grant allows.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE lp (id int PRIMARY KEY, v text);
		CREATE TABLE lp2 (id bigint PRIMARY KEY, n numeric, t timestamptz)`)
	e.tgtExec(`CREATE TABLE lp_fired (n int);
		CREATE FUNCTION lp_fire() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO lp_fired VALUES (1); RETURN NEW; END$$;
		CREATE TRIGGER lp_fire BEFORE INSERT ON lp FOR EACH ROW EXECUTE FUNCTION lp_fire()`)
	e.srcExec(`INSERT INTO lp SELECT g, 'row ' || g FROM generate_series(1, 5000) g`)
	e.srcExec(`INSERT INTO lp2 SELECT g, g / 7.0, now() FROM generate_series(1, 2000) g`)
	r := newLPRoles(e)
	cfg := e.lpConfig(r)
	e.grantLeastPrivilege(r, cfg.Slot, "lp", "lp2")
	e.tgtExec(`ALTER TABLE lp_fired OWNER TO ` + r.tgt)

	e.catchUp(cfg) // creates the slot, copies, streams
	e.srcExec(`INSERT INTO lp SELECT g, 'new ' || g FROM generate_series(5001, 6000) g`)
	e.srcExec(`UPDATE lp SET v = v || ' updated' WHERE id % 3 = 0`)
	e.srcExec(`DELETE FROM lp WHERE id % 5 = 0`)
	e.srcExec(`TRUNCATE lp2`)
	e.srcExec(`INSERT INTO lp2 SELECT g, g * 1.5, now() FROM generate_series(1, 300) g`)
	e.catchUp(cfg)

	e.assertSame("lp", "id")
	e.assertSame("lp2", "id")
	if n := e.count(e.Tgt, `SELECT count(*) FROM lp_fired`); n != 0 {
		t.Fatalf("the target trigger fired %d times: the apply sessions did not run as replica", n)
	}
	var super bool
	if err := e.Tgt.QueryRow(context.Background(), `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, r.tgt).Scan(&super); err != nil || super {
		t.Fatalf("the target role is a superuser (%v): the test proves nothing", err)
	}
}

// TestLeastPrivilegeErrors: a run whose role lacks one of the grants stops
// before it changes anything, with an error naming the statement that
// grants it.
func TestLeastPrivilegeErrors(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE lpe (id int PRIMARY KEY, v text)`)
	e.srcExec(`INSERT INTO lpe SELECT g, 'x' FROM generate_series(1, 10) g`)
	r := newLPRoles(e)
	cfg := e.lpConfig(r)
	e.grantLeastPrivilege(r, cfg.Slot, "lpe")

	steps := []struct {
		name        string
		before      func()
		after       func()
		want        string
		tables      []string // --tables
		publication string
	}{
		{
			name:   "target role lacks SET on session_replication_role",
			before: func() { e.tgtParamACL(`REVOKE SET ON PARAMETER session_replication_role FROM ` + r.tgt) },
			after:  func() { e.tgtParamACL(`GRANT SET ON PARAMETER session_replication_role TO ` + r.tgt) },
			want:   "run: GRANT SET ON PARAMETER session_replication_role TO " + r.tgt,
		},
		{
			name:   "source role lacks REPLICATION",
			before: func() { e.srcExec(`ALTER ROLE ` + r.src + ` NOREPLICATION`) },
			after:  func() { e.srcExec(`ALTER ROLE ` + r.src + ` REPLICATION`) },
			want:   "run: ALTER ROLE " + r.src + " REPLICATION",
		},
		{
			name:   "target role lacks CREATE on the database",
			before: func() { e.tgtExec(fmt.Sprintf(`REVOKE CREATE ON DATABASE %s FROM %s`, e.tgtDB, r.tgt)) },
			after:  func() { e.tgtExec(fmt.Sprintf(`GRANT CREATE ON DATABASE %s TO %s`, e.tgtDB, r.tgt)) },
			want:   fmt.Sprintf("run: GRANT CREATE ON DATABASE %s TO %s", e.tgtDB, r.tgt),
		},
		{
			name:        "source role cannot create the publication",
			tables:      []string{"public.lpe"},
			publication: cfg.Slot + "_new",
			want:        fmt.Sprintf(`run: CREATE PUBLICATION %s_new FOR TABLE public.lpe`, cfg.Slot),
		},
		{
			name:   "source role lacks SELECT for the initial copy",
			before: func() { e.srcExec(`REVOKE SELECT ON lpe FROM ` + r.src) },
			after:  func() { e.srcExec(`GRANT SELECT ON lpe TO ` + r.src) },
			want:   "run: GRANT SELECT ON public.lpe TO " + r.src,
		},
		{
			name:   "target role cannot write the table",
			before: func() { e.tgtExec(`ALTER TABLE lpe OWNER TO postgres`) },
			after:  func() { e.tgtExec(`ALTER TABLE lpe OWNER TO ` + r.tgt) },
			want:   "run: GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.lpe TO " + r.tgt,
		},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		c := cfg
		c.Tables = s.tables
		if s.publication != "" {
			c.Publication = s.publication
		}
		_, err := e.tryCatchUp(c)
		if err == nil || !strings.Contains(err.Error(), s.want) {
			t.Fatalf("%s: run error %v\nwant it to contain %q", s.name, err, s.want)
		}
		if n := e.count(e.Src, fmt.Sprintf(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s'`, cfg.Slot)); n != 0 {
			t.Fatalf("%s: the failed run created the slot", s.name)
		}
		if s.after != nil {
			s.after()
		}
	}
	// With every grant back, the run succeeds.
	e.catchUp(cfg)
	e.assertSame("lpe", "id")
}

// TestLeastPrivilegeRevokedWhileRunning: a privilege revoked while
// repstream streams (which the checks at start cannot see) stops the run
// with an error naming the table, the LSN and the GRANT.
func TestLeastPrivilegeRevokedWhileRunning(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE lpr (id int PRIMARY KEY, v text)`)
	r := newLPRoles(e)
	cfg := e.lpConfig(r)
	e.grantLeastPrivilege(r, cfg.Slot, "lpr")
	cfg.Eager = false
	e.catchUp(cfg)
	// The first run's walsender can still hold the slot for a moment: the
	// wait below must see the second run's.
	e.waitSlotReleased(cfg.Slot)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(t), nil).Run(ctx) }()
	e.waitStreaming(cfg.Slot)
	// The owner revokes its own INSERT privilege.
	e.tgtExec(`SET ROLE ` + r.tgt + `; REVOKE INSERT ON lpr FROM ` + r.tgt + `; RESET ROLE`)
	e.srcExec(`INSERT INTO lpr VALUES (1, 'a')`)
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the engine did not stop within a minute after its INSERT privilege was revoked")
	}
	want := "run: GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.lpr TO " + r.tgt
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "apply insert to public.lpr at ") {
		t.Fatalf("run error %v\nwant it to name the table, the LSN and %q", err, want)
	}
	if n := e.count(e.Tgt, `SELECT count(*) FROM lpr`); n != 0 {
		t.Fatalf("the target has %d rows", n)
	}
}
