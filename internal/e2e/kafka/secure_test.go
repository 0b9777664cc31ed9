package kafka

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/testbin"
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
	out := bad.out.Tail(20)
	if err == nil || !strings.Contains(out, addrs) || !strings.Contains(strings.ToLower(out), "authentication") {
		t.Fatalf("apply with a wrong password: %v, want an error naming the brokers %s and the failed authentication:\n%s", err, addrs, out)
	}
	none := startProc(t, "capture (no TLS)", e.captureArgs()...)
	err = exitOf(t, none, 60*time.Second)
	if out := none.out.Tail(20); err == nil || !strings.Contains(out, addrs) || !strings.Contains(out, "tls") {
		t.Fatalf("capture without TLS to a TLS listener: %v, want an error naming the brokers %s and TLS:\n%s", err, addrs, out)
	}
	t.Setenv(kafkalog.EnvPassword, password)
	noCert := startProc(t, "capture (no client certificate)", e.captureArgs("--kafka-ca", k.CAFile(),
		"--kafka-sasl", "scram-sha-512", "--kafka-user", user)...)
	err = exitOf(t, noCert, 60*time.Second)
	if out := noCert.out.Tail(20); err == nil || !strings.Contains(out, addrs) {
		t.Fatalf("capture without the client certificate the brokers require: %v, want an error naming the brokers %s:\n%s", err, addrs, out)
	}
	plain := startProc(t, "capture (plain without TLS)", e.captureArgs("--kafka-sasl", "plain", "--kafka-user", user)...)
	err = exitOf(t, plain, 30*time.Second)
	if out := plain.out.Tail(20); err == nil || !strings.Contains(out, "--kafka-tls") {
		t.Fatalf("capture with SASL PLAIN without TLS: %v, want a refusal naming --kafka-tls:\n%s", err, out)
	}

	t.Setenv(kafkalog.EnvPassword, password)
	capt := e.startCapture("capture", secure("scram-sha-512")...)
	ap := e.startApply("apply", tgtDB, secure("scram-sha-256")...)
	e.loadAndCompare(tgt, 200, capt, ap)
	st := startProc(t, "status", append([]string{"status", "--source", e.src.DSN(e.srcDB), "--target", e.tgtC.DSN(tgtDB),
		"--slot", e.slot, "--kafka", addrs, "--format", "json"}, secure("scram-sha-256")...)...)
	if err := exitOf(t, st, 60*time.Second); err != nil || !strings.Contains(st.out.Tail(200), `"lag_records"`) ||
		strings.Contains(st.out.Tail(200), `"error"`) {
		t.Fatalf("status --kafka through TLS and SASL: %v\n%s", err, st.out.Tail(60))
	}
	capt.stop()
	ap.stop()
}

// TestKafkaACLs: brokers with an authorizer, and the capture's user lacking
// one ACL at a time. Without WRITE on the transactional id, and then
// without WRITE on the topic, the capture stops naming the missing ACL
// before it makes anything: no slot, no publication on the source. With
// every ACL it replicates, and check --kafka reports the apply's access.
func TestKafkaACLs(t *testing.T) {
	const user, password = "app", "a secret of the test"
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1, Secure: &kafkatest.Secure{User: user, Password: password},
		Settings: map[string]string{
			"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
			// The plaintext listeners (between brokers, to the
			// controller, and the test's own admin) are ANONYMOUS.
			"super.users": "User:ANONYMOUS",
		}})
	ctx := t.Context()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	e := newKafkaEnv(t, strings.Join(k.SecureAddrs(), ","))
	topic := kafkalog.Topic(e.slot)
	principal := "User:" + user
	acl := func(grant bool, ops ...kadm.ACLOperation) *kadm.ACLBuilder {
		b := kadm.NewACLs().ResourcePatternType(kadm.ACLPatternLiteral).Operations(ops...)
		if grant {
			return b.Allow(principal).AllowHosts()
		}
		return b.Deny(principal).DenyHosts()
	}
	apply := func(what string, b *kadm.ACLBuilder) {
		t.Helper()
		rs, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range rs {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	apply("topic", acl(true, kadm.OpCreate, kadm.OpDescribe, kadm.OpDescribeConfigs, kadm.OpRead, kadm.OpWrite).Topics(topic))
	apply("cluster", acl(true, kadm.OpDescribe, kadm.OpDescribeConfigs).Clusters())
	apply("transactional id (describe)", acl(true, kadm.OpDescribe).TransactionalIDs(topic))
	t.Setenv(kafkalog.EnvPassword, password)
	secure := []string{"--kafka-ca", k.CAFile(), "--kafka-cert", k.ClientCert(), "--kafka-key", k.ClientKey(),
		"--kafka-sasl", "scram-sha-512", "--kafka-user", user}
	refused := func(what, want string) {
		t.Helper()
		p := startProc(t, "capture ("+what+")", e.captureArgs(secure...)...)
		err := exitOf(t, p, 90*time.Second)
		out := p.out.Tail(20)
		t.Logf("capture %s: %v: %s", what, err, lastLine(out))
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("capture %s: %v, want an error containing %q:\n%s", what, err, want, out)
		}
		e.nothingLeft("capture " + what)
	}
	refused("without WRITE on the transactional id", "WRITE and DESCRIBE on the transactional id "+topic)

	apply("transactional id (write)", acl(true, kadm.OpWrite).TransactionalIDs(topic))
	apply("topic (deny write)", acl(false, kadm.OpWrite).Topics(topic))
	refused("without WRITE on the topic", "may not WRITE topic "+topic)

	dr, err := adm.DeleteACLs(ctx, acl(false, kadm.OpWrite).Topics(topic))
	if err == nil {
		for _, r := range dr {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("delete the deny: %v", err)
	}
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture", secure...)
	ap := e.startApply("apply", tgtDB, secure...)
	e.loadAndCompare(tgt, 100, capt, ap)
	capt.stop()
	ap.stop()
	// The topic exists now: check reports what this principal may do.
	ck := exec.Command(testbin.Repstream(t), append([]string{"check", "--kafka", e.brokers, "--source", e.src.DSN(e.srcDB),
		"--target", e.tgtC.DSN(tgtDB), "--slot", e.slot}, secure...)...)
	ckOut, _ := ck.CombinedOutput()
	if l := lineWith(string(ckOut), "access", "READ"); !strings.Contains(l, "OK") {
		t.Fatalf("check --kafka: want an OK access line naming READ:\n%s", ckOut)
	} else {
		t.Logf("check: %s", l)
	}
}
