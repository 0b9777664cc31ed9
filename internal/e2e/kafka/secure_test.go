package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
)

// TestKafkaSecureBrokers: capture and apply reach brokers that take only
// TLS with a client certificate and SASL (SCRAM-SHA-512 for the capture,
// SCRAM-SHA-256 for the apply), with the CA's certificate and the password
// from the environment: the target equals the source, and `status --kafka` reads
// the topic the same way. A wrong password stops the apply with an error
// that says so and names the brokers; a capture without TLS stops at once,
// naming them and TLS, and so does one without the client certificate;
// SASL PLAIN without TLS is refused before anything is sent.
func TestKafkaSecureBrokers(t *testing.T) {
	const user, password = "repstream", "a secret of the test"
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1, Secure: &kafkatest.Secure{User: user, Password: password}})
	addrs := strings.Join(k.SecureAddrs(), ",")
	e := newKafkaEnv(t, addrs)
	tgtDB, tgt := e.newTarget()
	secure := func(mech string) []string {
		return []string{"--kafka-ca", k.CAFile(), "--kafka-cert", k.ClientCert(), "--kafka-key", k.ClientKey(),
			"--kafka-sasl", mech, "--kafka-user", user}
	}

	t.Setenv(kafkalog.EnvPassword, "not the password")
	bad := startProc(t, "apply (wrong password)", e.applyArgs(tgtDB, secure("scram-sha-256")...)...)
	err := exitOf(t, bad, 60*time.Second)
	out := bad.out.tail(20)
	if err == nil || !strings.Contains(out, addrs) || !strings.Contains(strings.ToLower(out), "authentication") {
		t.Fatalf("apply with a wrong password: %v, want an error naming the brokers %s and the failed authentication:\n%s", err, addrs, out)
	}
	none := startProc(t, "capture (no TLS)", e.captureArgs()...)
	err = exitOf(t, none, 60*time.Second)
	if out := none.out.tail(20); err == nil || !strings.Contains(out, addrs) || !strings.Contains(out, "tls") {
		t.Fatalf("capture without TLS to a TLS listener: %v, want an error naming the brokers %s and TLS:\n%s", err, addrs, out)
	}
	t.Setenv(kafkalog.EnvPassword, password)
	noCert := startProc(t, "capture (no client certificate)", e.captureArgs("--kafka-ca", k.CAFile(),
		"--kafka-sasl", "scram-sha-512", "--kafka-user", user)...)
	err = exitOf(t, noCert, 60*time.Second)
	if out := noCert.out.tail(20); err == nil || !strings.Contains(out, addrs) {
		t.Fatalf("capture without the client certificate the brokers require: %v, want an error naming the brokers %s:\n%s", err, addrs, out)
	}
	plain := startProc(t, "capture (plain without TLS)", e.captureArgs("--kafka-sasl", "plain", "--kafka-user", user)...)
	err = exitOf(t, plain, 30*time.Second)
	if out := plain.out.tail(20); err == nil || !strings.Contains(out, "--kafka-tls") {
		t.Fatalf("capture with SASL PLAIN without TLS: %v, want a refusal naming --kafka-tls:\n%s", err, out)
	}

	t.Setenv(kafkalog.EnvPassword, password)
	capt := e.startCapture("capture", secure("scram-sha-512")...)
	ap := e.startApply("apply", tgtDB, secure("scram-sha-256")...)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 5*time.Millisecond, 10)
	l.waitLoad(200, 30*time.Second)
	l.halt()
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	st := startProc(t, "status", append([]string{"status", "--source", e.src.DSN(e.srcDB), "--target", e.tgtC.DSN(tgtDB),
		"--slot", e.slot, "--kafka", addrs, "--format", "json"}, secure("scram-sha-256")...)...)
	if err := exitOf(t, st, 60*time.Second); err != nil || !strings.Contains(st.out.tail(200), `"lag_records"`) ||
		strings.Contains(st.out.tail(200), `"error"`) {
		t.Fatalf("status --kafka through TLS and SASL: %v\n%s", err, st.out.tail(60))
	}
	capt.stop()
	ap.stop()
}
