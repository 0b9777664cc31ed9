package kafkalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewClusterRefuses: settings that cannot work, or would send a
// password in the clear, are refused at the start, naming the flag.
func TestNewClusterRefuses(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		brokers string
		s       Security
		want    string
	}{
		{" , ", Security{}, "--kafka names no broker"},
		{"b:9092", Security{CAFile: filepath.Join(dir, "missing.pem")}, "--kafka-ca"},
		{"b:9092", Security{CAFile: notPEM}, "no PEM certificate"},
		{"b:9092", Security{TLS: true, CertFile: "c.pem"}, "--kafka-cert and --kafka-key go together"},
		{"b:9092", Security{User: "u"}, "--kafka-user without --kafka-sasl"},
		{"b:9092", Security{SASL: "gssapi", User: "u", Password: "p"}, `--kafka-sasl "gssapi"`},
		{"b:9092", Security{TLS: true, SASL: "scram-sha-256", Password: "p"}, "needs --kafka-user"},
		{"b:9092", Security{TLS: true, SASL: "scram-sha-512", User: "u"}, EnvPassword},
		{"b:9092", Security{SASL: "plain", User: "u", Password: "p"}, "in the clear"},
	} {
		_, err := NewCluster(tc.brokers, tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCluster(%q, %+v) = %v, want an error with %q", tc.brokers, tc.s, err, tc.want)
		}
	}
	for _, s := range []Security{
		{},
		{TLS: true},
		{TLS: true, SASL: "PLAIN", User: "u", Password: "p"},
		{SASL: "scram-sha-256", User: "u", Password: "p"},
	} {
		c, err := NewCluster("a:1, b:2", s)
		if err != nil {
			t.Errorf("NewCluster(%+v): %v", s, err)
			continue
		}
		if c.String() != "a:1,b:2" || (c.tls != nil) != s.TLS || (c.sasl != nil) != (s.SASL != "") {
			t.Errorf("NewCluster(%+v) = %s, tls %v, sasl %v", s, c, c.tls != nil, c.sasl != nil)
		}
	}
}
