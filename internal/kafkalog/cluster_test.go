package kafkalog

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/rawsock"
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

// connHook records the connections a client opens to the brokers.
type connHook struct {
	mu    sync.Mutex
	conns []net.Conn
	errs  []error
}

func (h *connHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, conn net.Conn, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.errs = append(h.errs, err)
		return
	}
	h.conns = append(h.conns, conn)
}

// selfSigned is a TLS certificate for 127.0.0.1 and the pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestClientsDialRawSockets: the clients' connections to the brokers
// read and write through raw system calls (rawsock), under TLS too, and
// work: a client pings the brokers through them.
func TestClientsDialRawSockets(t *testing.T) {
	cert, pool := selfSigned(t)
	for _, tc := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
	}{
		{"plaintext", nil, nil},
		{"tls", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.NumBrokers(1)}
			if tc.server != nil {
				opts = append(opts, kfake.TLS(tc.server))
			}
			k, err := kfake.NewCluster(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			c := Plain(k.ListenAddrs())
			c.tls = tc.client
			h := &connHook{}
			cl, err := kgo.NewClient(c.opts(kgo.WithHooks(h))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.Ping(ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.errs) > 0 || len(h.conns) == 0 {
				t.Fatalf("connections %d, errors %v", len(h.conns), h.errs)
			}
			for _, conn := range h.conns {
				if tc.client != nil {
					tlsConn, ok := conn.(*tls.Conn)
					if !ok {
						t.Fatalf("a connection with TLS is a %T", conn)
					}
					conn = tlsConn.NetConn()
				}
				if _, ok := conn.(*rawsock.Conn); !ok {
					t.Errorf("a connection to the brokers is a %T, not a *rawsock.Conn", conn)
				}
			}
		})
	}
}
