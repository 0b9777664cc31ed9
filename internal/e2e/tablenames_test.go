package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/testbin"
)

// TestTablesOddIdentifiers: --tables names tables whose schema and table
// names hold commas, dots, double quotes and spaces, double-quoted as in
// SQL, in each of its forms — the flag, REPSTREAM_TABLES and the YAML
// file's list — and the run (a separate process, --create-tables)
// publishes, creates, copies and streams exactly those tables. A comma
// inside quotes used to split the name in two ("matches no table").
func TestTablesOddIdentifiers(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.srcExec(`
		CREATE SCHEMA "a,b";
		CREATE TABLE "a,b"."t,1" (id int PRIMARY KEY, v text);
		CREATE SCHEMA "My ""S"".x";
		CREATE TABLE "My ""S"".x"."sp ace, ""q""" (id int PRIMARY KEY, v text);
		CREATE TABLE "a,b"."Env,T" (id int PRIMARY KEY, v text);
		CREATE TABLE "a,b"."yaml.t, 2" (id int PRIMARY KEY, v text);
		CREATE TABLE public.plain (id int PRIMARY KEY, v text);`)
	tables := []string{`"a,b"."t,1"`, `"My ""S"".x"."sp ace, ""q"""`, `"a,b"."Env,T"`, `"a,b"."yaml.t, 2"`, `public.plain`}
	for _, tb := range tables {
		e.srcExec(`INSERT INTO ` + tb + ` SELECT g, 'v' || g FROM generate_series(1, 10) g`)
	}
	bin := testbin.Repstream(t)
	run := func(name string, env []string, cfgTables []string, extra ...string) {
		t.Helper()
		cfg := e.config(cfgTables...)
		cfg.Slot += "_" + name
		cfg.CreateTables = true
		cmd := exec.Command(bin, args(cfg, append([]string{"--until-caught-up"}, extra...)...)...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: run: %v\n%s", name, err, tail(string(out), 30))
		}
	}
	// The flag: two odd names and a plain one in one list.
	run("flag", nil, []string{tables[0], tables[1], tables[4]})
	// REPSTREAM_TABLES (args adds no --tables for an empty list).
	run("env", []string{"REPSTREAM_TABLES=" + tables[2]}, nil)
	// The YAML file: a list whose entry holds a comma.
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("tables:\n  - '"+tables[3]+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run("yaml", nil, nil, "--config", file)

	for _, tb := range tables {
		e.srcExec(`UPDATE ` + tb + ` SET v = 'changed' WHERE id % 2 = 0; DELETE FROM ` + tb + ` WHERE id = 3; INSERT INTO ` + tb + ` VALUES (11, 'new')`)
	}
	run("flag", nil, []string{tables[0], tables[1], tables[4]})
	run("env", []string{"REPSTREAM_TABLES=" + tables[2]}, nil)
	run("yaml", nil, nil, "--config", file)
	for _, tb := range tables {
		e.assertSame(tb, "id")
	}
	// Each slot's publication has exactly the tables its form named.
	for slot, want := range map[string][]string{
		"flag": {tables[1], tables[0], `public.plain`},
		"env":  {tables[2]},
		"yaml": {tables[3]},
	} {
		rows, err := e.Src.Query(t.Context(), `SELECT format('%I.%I', schemaname, tablename) FROM pg_publication_tables WHERE pubname = $1`, e.config().Slot+"_"+slot)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		// format's %I quotes what needs it, as the test's names do.
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("publication of the %s form publishes %q, want %q", slot, got, want)
		}
	}
}
