package kafkalog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/repstream/repstream/internal/rawsock"
)

// EnvPassword is the environment variable the SASL password is read from
// (never a flag: a command line is visible to every user of the machine).
const EnvPassword = "REPSTREAM_KAFKA_PASSWORD"

// Security is how repstream connects to the brokers (the --kafka-* flags).
// The zero value is plaintext without authentication.
type Security struct {
	TLS      bool   // TLS to every broker (implied by CAFile or CertFile)
	CAFile   string // PEM file of the CAs that sign the brokers' certificates; "": the system's
	CertFile string // PEM client certificate (mutual TLS), with KeyFile
	KeyFile  string
	// SASL is the mechanism: "" (none), "plain", "scram-sha-256" or
	// "scram-sha-512"; User and Password its credentials.
	SASL     string
	User     string
	Password string
}

// SASLMechanisms are the values Security.SASL takes.
var SASLMechanisms = []string{"plain", "scram-sha-256", "scram-sha-512"}

// Cluster is the brokers repstream reaches and how: what every client of
// this package is made from.
type Cluster struct {
	Addrs []string // seed brokers, host:port
	tls   *tls.Config
	sasl  sasl.Mechanism
}

// Plain is a cluster reached without TLS or authentication.
func Plain(addrs []string) Cluster { return Cluster{Addrs: addrs} }

// NewCluster reads the --kafka value (host:port,...) and the security
// settings: the CA and client certificate files are read now, so that a
// wrong path is an error at the start, naming the file.
func NewCluster(brokers string, s Security) (Cluster, error) {
	c := Cluster{Addrs: Brokers(brokers)}
	if len(c.Addrs) == 0 {
		return Cluster{}, errors.New("--kafka names no broker: give host:port[,host:port...]")
	}
	if s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.CAFile != "" {
			b, err := os.ReadFile(s.CAFile)
			if err != nil {
				return Cluster{}, fmt.Errorf("--kafka-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b) {
				return Cluster{}, fmt.Errorf("--kafka-ca %s: no PEM certificate in it", s.CAFile)
			}
			cfg.RootCAs = pool
		}
		if (s.CertFile == "") != (s.KeyFile == "") {
			return Cluster{}, errors.New("--kafka-cert and --kafka-key go together (a client certificate and its key)")
		}
		if s.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
			if err != nil {
				return Cluster{}, fmt.Errorf("--kafka-cert %s, --kafka-key %s: %w", s.CertFile, s.KeyFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		c.tls = cfg
	}
	switch strings.ToLower(s.SASL) {
	case "":
		if s.User != "" {
			return Cluster{}, errors.New("--kafka-user without --kafka-sasl: name the mechanism (" + strings.Join(SASLMechanisms, ", ") + ")")
		}
		return c, nil
	case "plain":
		c.sasl = plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()
	case "scram-sha-256":
		c.sasl = scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
	case "scram-sha-512":
		c.sasl = scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
	default:
		return Cluster{}, fmt.Errorf("--kafka-sasl %q: one of %s", s.SASL, strings.Join(SASLMechanisms, ", "))
	}
	if s.User == "" {
		return Cluster{}, fmt.Errorf("--kafka-sasl %s needs --kafka-user (and the password in $%s)", s.SASL, EnvPassword)
	}
	if s.Password == "" {
		return Cluster{}, fmt.Errorf("--kafka-sasl %s: the password of %s goes in $%s, which is empty", s.SASL, s.User, EnvPassword)
	}
	if c.tls == nil && strings.EqualFold(s.SASL, "plain") {
		return Cluster{}, errors.New("--kafka-sasl plain without TLS would send the password in the clear: add --kafka-tls (and --kafka-ca), or use scram-sha-256")
	}
	return c, nil
}

// dialTimeout bounds a connection to a broker (TCP and the TLS
// handshake): franz-go's own default.
const dialTimeout = 10 * time.Second

// dial connects to a broker as franz-go's own dialer does (with TLS when
// c has it), but reads and writes the socket through raw system calls
// (rawsock), under TLS too: through package net each read and write of
// a half at 1,000 transactions a second enters a blocking system call,
// and the produce requests and their answers, the fetches and theirs,
// come when the process is idle, so each woke the runtime's monitor
// thread, as the database sockets did (rawsock's doc).
func (c Cluster) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	conn = rawsock.Wrap(conn)
	if c.tls == nil {
		return conn, nil
	}
	cfg := c.tls.Clone()
	if cfg.ServerName == "" {
		server, _, err := net.SplitHostPort(host)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("unable to split host:port for dialing: %w", err)
		}
		cfg.ServerName = server
	}
	hctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// String is the brokers' addresses, for messages.
func (c Cluster) String() string { return strings.Join(c.Addrs, ",") }

// opts are the options every client of c starts with: the seed brokers,
// its dialer (raw system calls, TLS) and SASL.
func (c Cluster) opts(more ...kgo.Opt) []kgo.Opt {
	o := []kgo.Opt{kgo.SeedBrokers(c.Addrs...), kgo.Dialer(c.dial)}
	if c.sasl != nil {
		o = append(o, kgo.SASL(c.sasl))
	}
	return append(o, more...)
}
