package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSourceDomainCodeTrap: repstream makes on the target the domains a
// schema change's column (or a table --create-tables makes) needs, from
// the source's definition, owned by the target role. A source role that
// is not a superuser but owns a published table made a domain, added a
// column of it and gave the domain a default calling lo_import (a
// superuser's function) in one transaction: the source never evaluated
// it, but the target made the domain with that default and evaluated it,
// as the superuser target role, for each of its rows when the column was
// added: a server file was read into large objects there. Now such a
// domain (one whose default or constraints call a function that is not
// IMMUTABLE, of a role that is not a superuser on the source) is refused
// in the transaction that made it, naming it, its owner and what it
// calls; one that calls only immutable code is made; one the target has
// (a superuser made it there) is used.
func TestSourceDomainCodeTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	ctx := t.Context()
	app := e.uniqueName("app_", 63)
	e.srcExec("CREATE ROLE " + app + " LOGIN NOSUPERUSER; GRANT CREATE ON SCHEMA public TO " + app)
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), e.Src.Config())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP OWNED BY "+app+" CASCADE")
			_, _ = c.Exec(context.Background(), "DROP ROLE "+app)
			c.Close(context.Background())
		}
	})
	ccfg := e.Src.Config().Copy()
	ccfg.User = app
	conn, err := pgx.ConnectConfig(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The application's table and domain, its own; published by a superuser.
	if _, err := conn.Exec(ctx, `CREATE DOMAIN public.pos AS int CHECK (VALUE > 0);
		CREATE TABLE public.t (id int PRIMARY KEY, p public.pos); INSERT INTO public.t VALUES (1, 1), (2, 2)`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE PUBLICATION pub_t FOR TABLE public.t`)
	cfg := e.config()
	cfg.Publication = "pub_t"
	cfg.CreateTables = true
	e.catchUp(cfg) // pos, calling only immutable code, is made
	los := func() int64 { return e.count(e.Tgt, "SELECT count(*) FROM pg_largeobject_metadata") }
	before := los()

	done, cancel := e.runInBackground(cfg)
	defer cancel()
	e.waitStreaming(cfg.Slot)
	if _, err := conn.Exec(ctx, `BEGIN;
		CREATE DOMAIN public.leak AS int;
		ALTER TABLE public.t ADD COLUMN c public.leak;
		ALTER DOMAIN public.leak SET DEFAULT (CASE WHEN pg_catalog.current_setting('is_superuser') = 'on'
			THEN pg_catalog.lo_import('PG_VERSION')::int ELSE 0 END);
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`INSERT INTO t VALUES (3, 3)`)
	var runErr error
	stopped := false
	waitFor(t, "the run's stop, or the column on the target", time.Minute, func() bool {
		select {
		case runErr = <-done:
			stopped = true
			return true
		default:
		}
		return len(columnsOf(t, e.Tgt, "public.t")) == 3
	})
	cancel()
	if n := los(); n != before {
		t.Fatalf("the target's superuser ran the source role's lo_import: %d large objects on the target, %d before", n, before)
	}
	if !stopped || runErr == nil {
		t.Fatalf("the run went on with the source role's domain (%v)", runErr)
	}
	wantInError(t, runErr, "domain public.leak, made on the target from the source's definition, is owned on the source by "+app,
		"its default calls lo_import(text) (volatile)", "--trust-table-owners")
	if cols := columnsOf(t, e.Tgt, "public.t"); len(cols) != 2 {
		t.Errorf("the refused change left columns on the target: %v", cols)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_type WHERE typname = 'leak'"); n != 0 {
		t.Errorf("the refused domain was left on the target")
	}

	// --create-tables refuses it too.
	if _, err := conn.Exec(ctx, `CREATE TABLE public.u (id int PRIMARY KEY, c public.leak)`); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`CREATE PUBLICATION pub_u FOR TABLE public.u`)
	ucfg := e.config()
	ucfg.Slot += "_u"
	ucfg.Publication = "pub_u"
	ucfg.CreateTables = true
	e.mustFail(ucfg, "domain public.leak, made on the target from the source's definition, is owned on the source by "+app, "its default calls lo_import(text) (volatile)")
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_class WHERE relname = 'u'"); n != 0 {
		t.Errorf("the refused start left public.u on the target")
	}

	// Made on the target by a superuser, it is the target's, and used.
	e.waitSlotReleased(cfg.Slot)
	e.tgtExec(`CREATE DOMAIN public.leak AS int`)
	e.catchUp(cfg)
	if cols := columnsOf(t, e.Tgt, "public.t"); len(cols) != 3 {
		t.Errorf("target t has columns %v, want id, p and c", cols)
	}
	if n := los(); n != before {
		t.Fatalf("%d large objects on the target, %d before", n, before)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM t"); n != 3 {
		t.Errorf("target t has %d rows, want 3", n)
	}
}
