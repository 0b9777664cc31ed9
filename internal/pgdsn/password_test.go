package pgdsn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The PostgreSQL ways to keep a password off the command line reach both
// parsers (Parse: the replication and raw connections; ParsePgx: the
// others): a passfile key, PGPASSFILE, ~/.pgpass and PGPASSWORD; a password
// in the DSN wins over all of them.
func TestPasswordSources(t *testing.T) {
	dir := t.TempDir()
	pgpass := func(name, line string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyFile := pgpass("key", "h:5433:d:u:from-key")
	envFile := pgpass("env", "*:*:d:u:from-env-file")
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	pgpass("home/.pgpass", "h:*:*:u:from-home")

	const base = "host=h port=5433 dbname=d user=u"
	tests := []struct {
		name string
		dsn  string
		env  map[string]string
		want string
	}{
		{name: "passfile key", dsn: base + " passfile=" + keyFile, want: "from-key"},
		{name: "passfile key in a URL", dsn: "postgres://u@h:5433/d?passfile=" + keyFile, want: "from-key"},
		{name: "PGPASSFILE", dsn: base, env: map[string]string{"PGPASSFILE": envFile}, want: "from-env-file"},
		{name: "~/.pgpass", dsn: base, want: "from-home"},
		{name: "passfile key over PGPASSFILE", dsn: base + " passfile=" + keyFile, env: map[string]string{"PGPASSFILE": envFile}, want: "from-key"},
		{name: "PGPASSWORD", dsn: base, env: map[string]string{"PGPASSWORD": "from-pgpassword"}, want: "from-pgpassword"},
		{name: "PGPASSWORD over a passfile", dsn: base + " passfile=" + keyFile, env: map[string]string{"PGPASSWORD": "from-pgpassword"}, want: "from-pgpassword"},
		{name: "DSN password over all", dsn: base + " password=from-dsn passfile=" + keyFile, env: map[string]string{"PGPASSWORD": "from-pgpassword"}, want: "from-dsn"},
		{name: "no line for this user", dsn: "host=h port=5433 dbname=d user=other passfile=" + keyFile, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv("PGPASSWORD", "")
			os.Unsetenv("PGPASSWORD")
			t.Setenv("PGPASSFILE", "")
			os.Unsetenv("PGPASSFILE")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			pc, err := Parse(tt.dsn)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if pc.Password != tt.want {
				t.Errorf("Parse: password %q, want %q", pc.Password, tt.want)
			}
			if _, ok := pc.RuntimeParams["passfile"]; ok {
				t.Error("Parse: passfile sent to the server as a parameter")
			}
			xc, err := ParsePgx(tt.dsn)
			if err != nil {
				t.Fatalf("ParsePgx: %v", err)
			}
			if xc.Password != tt.want {
				t.Errorf("ParsePgx: password %q, want %q", xc.Password, tt.want)
			}
			if d := Describe(pc); tt.want != "" && strings.Contains(d, tt.want) {
				t.Errorf("Describe names the password: %q", d)
			}
		})
	}
}
