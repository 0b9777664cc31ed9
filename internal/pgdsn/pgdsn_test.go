package pgdsn

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cfg, err := ParsePgx("host=h port=5433 dbname=d user=u password=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("connect timeout %s, want the default", cfg.ConnectTimeout)
	}
	if got, want := Describe(&cfg.Config), "host=h port=5433 dbname=d user=u"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	pc, err := Parse("host=h connect_timeout=3")
	if err != nil || pc.ConnectTimeout.Seconds() != 3 {
		t.Errorf("explicit connect_timeout: %v %v", pc, err)
	}
	for _, bad := range []string{"postgres://u:s3cret@h:bad/db", "host=h password=s3cret port=x"} {
		_, err := Parse(bad)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.HasPrefix(err.Error(), "invalid connection string: ") {
			t.Errorf("Parse(%q) error %v: want a redacted one", bad, err)
		}
		if _, err2 := ParsePgx(bad); err2 == nil || strings.Contains(err2.Error(), "s3cret") {
			t.Errorf("ParsePgx(%q) error %v: want a redacted one", bad, err2)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		dsn     string
		wantKey string // "" = valid
		closest string
	}{
		{name: "key=value typo of port", dsn: "host=h prot=5432 dbname=d", wantKey: "prot", closest: "port"},
		{name: "URL typo of sslmode", dsn: "postgres://u:s3cret@h/d?sslmod=require", wantKey: "sslmod", closest: "sslmode"},
		{name: "typo of application_name", dsn: "host=h aplication_name=x", wantKey: "aplication_name", closest: "application_name"},
		{name: "typo of connect_timeout", dsn: "host=h connect_timout=3", wantKey: "connect_timout", closest: "connect_timeout"},
		{name: "nothing close", dsn: "host=h zzzqqq=1", wantKey: "zzzqqq"},
		{name: "libpq keyword pgx leaves to the server", dsn: "host=h keepalives=1 application_name=x"},
		{name: "replication", dsn: "host=h replication=database"},
		{name: "common server parameters", dsn: "host=h search_path=app statement_timeout=5s TimeZone=UTC options='-c work_mem=64MB'"},
		{name: "URL with valid query", dsn: "postgres://u@h:5433/d?sslmode=disable&application_name=a&search_path=s"},
		{name: "pgx option", dsn: "host=h statement_cache_capacity=0 default_query_exec_mode=exec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, parse := range []func(string) error{
				func(s string) error { _, err := Parse(s); return err },
				func(s string) error { _, err := ParsePgx(s); return err },
			} {
				err := parse(tt.dsn)
				if tt.wantKey == "" {
					if err != nil {
						t.Fatalf("%s: %v", tt.dsn, err)
					}
					continue
				}
				var uk *UnknownKeyError
				if !errors.As(err, &uk) || uk.Key != tt.wantKey || uk.Closest != tt.closest {
					t.Fatalf("%s: error %v, want unknown key %q closest %q", tt.dsn, err, tt.wantKey, tt.closest)
				}
				msg := err.Error()
				if !strings.Contains(msg, `"`+tt.wantKey+`"`) || (tt.closest != "" && !strings.Contains(msg, `did you mean "`+tt.closest+`"`)) {
					t.Fatalf("message %q does not name the key and its closest", msg)
				}
				if strings.Contains(msg, "s3cret") {
					t.Fatalf("message %q repeats the password", msg)
				}
			}
		})
	}
}

func TestUnknownKeysAllReported(t *testing.T) {
	t.Parallel()
	_, err := Parse("host=h prot=1 sslmod=disable")
	if err == nil || !strings.Contains(err.Error(), `"prot"`) || !strings.Contains(err.Error(), `"sslmod"`) {
		t.Fatalf("error %v, want both keys named", err)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"port", "prot", 2}, {"sslmod", "sslmode", 1}, {"abc", "", 3}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestSearchPathPinned: every session's search_path is pg_catalog,
// pg_temp, whatever the connection string says; and JIT is off (it made
// every table's first change in a worker wait half a second).
func TestSearchPathPinned(t *testing.T) {
	for _, dsn := range []string{"host=h", "host=h search_path=public", "postgres://h/db?search_path=evil,public&jit=on"} {
		pc, err := Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		px, err := ParsePgx(dsn)
		if err != nil {
			t.Fatal(err)
		}
		for _, rp := range []map[string]string{pc.RuntimeParams, px.RuntimeParams} {
			if got := rp["search_path"]; got != SafeSearchPath {
				t.Errorf("%q: search_path %q, want %q", dsn, got, SafeSearchPath)
			}
			if got := rp["jit"]; got != "off" {
				t.Errorf("%q: jit %q, want off", dsn, got)
			}
		}
	}
}
