package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Secure adds a client listener that takes TLS and SASL (SASL_SSL) to
// every broker, beside the plaintext one: a certificate of a throwaway CA
// for 127.0.0.1, clients' certificates of that CA required (ClientCert,
// ClientKey), and a SCRAM user (SCRAM-SHA-256 and SCRAM-SHA-512) and a
// PLAIN user of the same name and password.
type Secure struct {
	User, Password string
}

// SecureAddrs returns every broker's host:port of the SASL_SSL listener
// (Options.Secure).
func (c *Cluster) SecureAddrs() []string {
	out := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.securePort))
	}
	return out
}

// CAFile is the PEM file of the CA that signed the brokers' certificate
// (Options.Secure).
func (c *Cluster) CAFile() string { return filepath.Join(c.dir, "ca.pem") }

// ClientCert and ClientKey are the PEM files of a client certificate of
// the CA, which the SASL_SSL listener requires (Options.Secure).
func (c *Cluster) ClientCert() string { return filepath.Join(c.dir, "client.pem") }

// ClientKey: see ClientCert.
func (c *Cluster) ClientKey() string { return filepath.Join(c.dir, "client-key.pem") }

// serverPEM is the brokers' key and certificate chain (PEM keystore).
func (c *Cluster) serverPEM() string { return filepath.Join(c.dir, "server.pem") }

// writeCertificates makes the throwaway CA and the brokers' certificate
// for 127.0.0.1 and localhost: CAFile and serverPEM.
func (c *Cluster) writeCertificates() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "repstream kafkatest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	keyPEM, certPEM, err := signed(tmpl, ca, caKey)
	if err != nil {
		return err
	}
	clientKey, clientCert, err := signed(&x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "repstream kafkatest client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	if err != nil {
		return err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{c.CAFile(), caPEM, 0o644},
		{c.serverPEM(), append(append(keyPEM, certPEM...), caPEM...), 0o600},
		{c.ClientCert(), clientCert, 0o644},
		{c.ClientKey(), clientKey, 0o600},
	} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return fmt.Errorf("kafkatest: %w", err)
		}
	}
	return nil
}

// signed makes a key and the certificate of tmpl for it, signed by ca: both
// PEM (the key PKCS#8).
func signed(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (keyPEM, certPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// secureProperties are the server.properties entries of every broker's
// SASL_SSL listener SECURE.
func (c *Cluster) secureProperties() map[string]string {
	u, p := c.secure.User, c.secure.Password
	scram := "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	return map[string]string{
		"listener.name.secure.sasl.enabled.mechanisms":        "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
		"listener.name.secure.scram-sha-256.sasl.jaas.config": scram,
		"listener.name.secure.scram-sha-512.sasl.jaas.config": scram,
		"listener.name.secure.plain.sasl.jaas.config": fmt.Sprintf(
			`org.apache.kafka.common.security.plain.PlainLoginModule required user_%s="%s";`, u, p),
		"listener.name.secure.ssl.keystore.type":       "PEM",
		"listener.name.secure.ssl.keystore.location":   c.serverPEM(),
		"listener.name.secure.ssl.truststore.type":     "PEM",
		"listener.name.secure.ssl.truststore.location": c.CAFile(),
		"listener.name.secure.ssl.client.auth":         "required",
	}
}

// scramArgs are StorageTool format's arguments that add the SCRAM users.
func (c *Cluster) scramArgs() []string {
	u, p := c.secure.User, c.secure.Password
	return []string{
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", u, p),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", u, p),
	}
}
