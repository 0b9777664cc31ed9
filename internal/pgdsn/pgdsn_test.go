package pgdsn

import (
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
