package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestTargetSchemaOwnerTrap: a schema's owner may drop any table in it
// (and PostgreSQL 15's public is the database owner's, through
// pg_database_owner). A superuser's table in a schema another role owns
// — made there by --create-tables, or by an administrator — passed the
// owner check; once a run streamed, the schema's owner dropped it and made
// one of its own under the name, with an ENABLE ALWAYS trigger, and
// repstream's superuser target role, which writes by name, ran it at the
// next row. Now such a table is refused, naming the schema and its owner
// (the database's, for public owned by pg_database_owner).
func TestTargetSchemaOwnerTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	ctx := t.Context()
	e.srcExec(`CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY, v text); INSERT INTO app.t SELECT g, 'v' FROM generate_series(1, 10) g`)
	role, conn := e.hostileRole("target")
	e.tgtExec("CREATE SCHEMA app AUTHORIZATION " + role) // the application's schema, its role's
	cfg := e.config("app.t")
	cfg.CreateTables = true
	cfg.ApplyParallelism = 1 // one writer: it has looked at app.t once, by its name
	done, cancel := e.runInBackground(cfg)
	defer cancel()
	copied := func() bool {
		var n int64
		_ = e.Tgt.QueryRow(ctx, "SELECT count(*) FROM app.t").Scan(&n)
		return n == 10 && e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"' AND active") == 1
	}
	deadline := time.Now().Add(time.Minute)
	var err error
	for stopped := false; !stopped; {
		select {
		case err = <-done:
			stopped = true
		case <-time.After(200 * time.Millisecond):
			if copied() {
				stopped = true
			} else if time.Now().After(deadline) {
				t.Fatal("the run neither copied app.t nor stopped within a minute")
			}
		}
	}
	if err == nil {
		// Accepted: once apply has written the table, the schema's owner
		// swaps it for its own.
		e.srcExec(`INSERT INTO app.t VALUES (11, 'w')`)
		waitFor(t, "row 11 on the target", 30*time.Second, func() bool { return e.count(e.Tgt, "SELECT count(*) FROM app.t") == 11 })
		if _, err := conn.Exec(ctx, `DROP TABLE app.t;
CREATE TABLE app.t (id int PRIMARY KEY, v text);
`+grabSQL(role, "grab", "", "trigger", "NEW")+`;
CREATE TRIGGER g BEFORE INSERT ON app.t FOR EACH ROW EXECUTE FUNCTION public.grab();
ALTER TABLE app.t ENABLE ALWAYS TRIGGER g`); err != nil {
			t.Fatal(err)
		}
		e.srcExec(`INSERT INTO app.t VALUES (12, 'w')`)
		waitFor(t, "the row or the run's stop", 30*time.Second, func() bool {
			select {
			case err = <-done:
				return true
			default:
			}
			return superuser(t, e.Tgt, role) || e.count(e.Tgt, "SELECT count(*) FROM app.t") > 0
		})
		if superuser(t, e.Tgt, role) {
			t.Fatalf("%s, the schema's owner, became a superuser through a table it made in place of the superuser's (%v)", role, err)
		}
		t.Fatalf("a superuser's table in a schema %s owns was written (%v)", role, err)
	}
	wantInError(t, err, "app.t is in schema app, owned by "+role, "ALTER SCHEMA app OWNER TO", "--trust-table-owners")
	cancel()

	// public, owned by pg_database_owner: the database's owner's.
	var db, me string
	if err := e.Tgt.QueryRow(ctx, "SELECT quote_ident(current_database()), current_user::text").Scan(&db, &me); err != nil {
		t.Fatal(err)
	}
	var pgdo bool
	if err := e.Tgt.QueryRow(ctx, "SELECT n.nspowner::regrole::text = 'pg_database_owner' FROM pg_namespace n WHERE n.nspname = 'public'").Scan(&pgdo); err != nil {
		t.Fatal(err)
	}
	if !pgdo {
		return // before PostgreSQL 15: a superuser's
	}
	e.srcExec(`CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1)`)
	e.tgtExec(`CREATE TABLE public.u (id int PRIMARY KEY)`)
	e.tgtExec("ALTER DATABASE " + db + " OWNER TO " + role)
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), e.Tgt.Config())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "ALTER DATABASE "+db+" OWNER TO "+me)
	})
	ucfg := e.config("public.u")
	ucfg.Slot += "_u"
	err = e.mustFail(ucfg, "public.u is in schema public, owned by "+role+" (the database's owner, through pg_database_owner)")
	if strings.Contains(err.Error(), "public.u is owned by") {
		t.Errorf("the superuser's table is said to be another's: %v", err)
	}
}

// TestOpclassCodeTrap: an index's operator class calls its support
// functions (a btree's comparison) and its operators' functions on every
// insert, and pg_depend names the operator class, not them. A
// superuser's operator class made of another role's function, on an
// index of a superuser's table, passed the owner check; the copy ran
// the role's function as the superuser target role, and the role became
// one. Now the operator class's functions are followed.
func TestOpclassCodeTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE TABLE k (id int PRIMARY KEY, v int); INSERT INTO k SELECT g, g FROM generate_series(1, 10) g`)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), grabSQL(role, "grab_cmp", "a int, b int", "int", "pg_catalog.btint4cmp(a, b)")); err != nil {
		t.Fatal(err)
	}
	e.tgtExec(`CREATE OPERATOR CLASS public.grab_ops FOR TYPE int USING btree AS
	OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 public.grab_cmp(int, int);
CREATE TABLE public.k (id int PRIMARY KEY, v int);
CREATE INDEX k_v ON public.k (v public.grab_ops)`)
	cfg := e.config("public.k")
	_, err := e.tryCatchUp(cfg)
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through an index's operator class (%v)", role, err)
	}
	if err == nil {
		t.Fatal("the run wrote the table whose index calls another role's function")
	}
	wantInError(t, err, "index public.k_v of public.k calls operator class public.grab_ops: public.grab_cmp(integer,integer), owned by "+role)
	e.tgtExec(`DROP INDEX public.k_v`)
	e.catchUp(cfg)
	if n := e.count(e.Tgt, "SELECT count(*) FROM public.k"); n != 10 {
		t.Errorf("target k has %d rows, want 10", n)
	}
}

// TestDeferredIndexCodeTrap: --create-tables makes a table bare and
// builds its indexes after its copy, from the source's definitions. An
// index expression calling a function of a name another role made first
// on the target (immutable, as an index needs, and calling a volatile one
// of its own) ran that role's code as the superuser target role, for
// every copied row, when the index was built: the owner check had looked
// at the bare table. Now each index is first made on the table emptied in
// a savepoint, where nothing runs, and the table's code looked at: such
// an index is left unbuilt, recorded and logged, as one the target cannot
// build; the run goes on.
func TestDeferredIndexCodeTrap(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`CREATE FUNCTION public.norm(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1';
		CREATE TABLE x (id int PRIMARY KEY, v int); CREATE INDEX x_norm ON x (public.norm(v)); CREATE INDEX x_v ON x (v);
		INSERT INTO x SELECT g, g FROM generate_series(1, 10) g`)
	role, conn := e.hostileRole("target")
	if _, err := conn.Exec(t.Context(), grabSQL(role, "grab_v", "", "int", "0")+`;
		CREATE FUNCTION public.norm(a int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$BEGIN PERFORM public.grab_v(); RETURN a; END$f$`); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("public.x")
	cfg.CreateTables = true
	_, err := e.tryCatchUp(cfg)
	if superuser(t, e.Tgt, role) {
		t.Fatalf("%s became a superuser through an index built after the copy (%v)", role, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_indexes WHERE tablename = 'x' AND indexname = 'x_norm'"); n != 0 {
		t.Errorf("the index calling %s's function was built", role)
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM pg_indexes WHERE tablename = 'x' AND indexname = 'x_v'"); n != 1 {
		t.Errorf("the plain index was not built")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM repstream.unbuilt_indexes WHERE index_name = 'x_norm' AND error LIKE '%public.norm(integer), owned by "+role+"%'"); n != 1 {
		t.Errorf("the index left unbuilt is not recorded with its reason")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM x"); n != 10 {
		t.Errorf("target x has %d rows, want 10", n)
	}
}

// TestGeneratedColumnCodeTrap: a schema change that adds a generated
// column computes it for every row the target has, as the change runs.
// Its expression named a function of a name another role had made first
// on the target (immutable, calling a volatile one of its own): the
// superuser target role ran it for each row before the table's code was
// looked at (after the change; not at all without the event trigger).
// Now the change's generated expressions are looked at first, on an
// empty table of the same columns, with the event trigger and without.
func TestGeneratedColumnCodeTrap(t *testing.T) {
	t.Parallel() // own databases and slots; no server restarts
	for _, ddl := range []string{"true", "relation"} {
		t.Run("ddl="+ddl, func(t *testing.T) {
			e := newEnv(t)
			e.srcExec(`CREATE FUNCTION public.twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 2 * $1';
				CREATE TABLE gc (id int PRIMARY KEY, v int); INSERT INTO gc SELECT g, g FROM generate_series(1, 10) g`)
			cfg := e.config("public.gc")
			cfg.CreateTables = true
			cfg.DDL = ddl
			if ddl == "relation" {
				// Without the trigger a generated column reaches the
				// target only published, from PostgreSQL 18 on.
				if e.src.Version() < 18 || e.tgt.Version() < 18 {
					t.Skip("needs PostgreSQL 18 on both sides (publish_generated_columns)")
				}
				cfg.Tables = nil
				cfg.Publication = "pub_gc"
				e.srcExec(`CREATE PUBLICATION pub_gc FOR TABLE gc WITH (publish_generated_columns = stored)`)
			}
			e.catchUp(cfg)
			role, conn := e.hostileRole("target")
			if _, err := conn.Exec(t.Context(), grabSQL(role, "grab_v", "", "int", "0")+`;
				CREATE FUNCTION public.twice(a int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$BEGIN PERFORM public.grab_v(); RETURN 2 * a; END$f$`); err != nil {
				t.Fatal(err)
			}
			e.srcExec(`ALTER TABLE gc ADD COLUMN w int GENERATED ALWAYS AS (public.twice(v)) STORED`)
			e.srcExec(`INSERT INTO gc (id, v) VALUES (11, 11)`) // the new description, without the trigger
			_, err := e.tryCatchUp(cfg)
			if superuser(t, e.Tgt, role) {
				t.Fatalf("%s became a superuser through a generated column a schema change added (%v)", role, err)
			}
			if err == nil {
				t.Fatal("the change adding a generated column calling another role's function was applied")
			}
			wantInError(t, err, "public.twice(integer), owned by "+role)
			if cols := columnsOf(t, e.Tgt, "public.gc"); len(cols) != 2 {
				t.Errorf("the refused change left columns on the target: %v", cols)
			}
		})
	}
}
