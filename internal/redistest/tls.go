package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLS files, as they are named in a node's certificate directory.
const (
	tlsCAFile   = "ca.crt"
	tlsCertFile = "node.crt"
	tlsKeyFile  = "node.key"
)

// tlsMaterial is what a TLS cluster needs: the PEM files the servers
// read, and the client configuration that trusts them. Everything is made
// here with Go's crypto, no external tool: a CA, and one certificate for
// 127.0.0.1 that every node serves and also presents as a client (to each
// other on the cluster bus and for replication).
type tlsMaterial struct {
	dir    string            // holds ca.crt, node.crt, node.key
	files  map[string]string // file name -> host path
	client *tls.Config
}

func newTLSMaterial() (*tlsMaterial, error) {
	dir, err := os.MkdirTemp("", "slotlock-tls-")
	if err != nil {
		return nil, fmt.Errorf("redistest: TLS dir: %w", err)
	}
	m, err := writeTLSMaterial(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: TLS certificates: %w", err)
	}
	return m, nil
}

func writeTLSMaterial(dir string) (*tlsMaterial, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "slotlock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	m := &tlsMaterial{dir: dir, files: map[string]string{}}
	for name, block := range map[string]*pem.Block{
		tlsCAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		tlsCertFile: {Type: "CERTIFICATE", Bytes: der},
		tlsKeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		p := filepath.Join(dir, name)
		// 0644: the docker backend's server does not run as this user.
		if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o644); err != nil {
			return nil, err
		}
		m.files[name] = p
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	m.client = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	return m, nil
}

func (m *tlsMaterial) remove() {
	if m != nil {
		os.RemoveAll(m.dir)
	}
}

// tlsArgs are the server's TLS settings with its files in dir: TLS only
// on the node's port (the plain port is off, so nothing can pass in
// clear), on the cluster bus and for replication, which then announce the
// TLS port. Clients need not present a certificate.
func tlsArgs(port, dir string) []string {
	return []string{
		"--port", "0",
		"--tls-port", port,
		"--tls-cert-file", filepath.Join(dir, tlsCertFile),
		"--tls-key-file", filepath.Join(dir, tlsKeyFile),
		"--tls-ca-cert-file", filepath.Join(dir, tlsCAFile),
		"--tls-auth-clients", "optional",
		"--tls-replication", "yes",
		"--tls-cluster", "yes",
	}
}
