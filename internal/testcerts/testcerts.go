// Package testcerts makes a throwaway certificate authority and the
// certificates signed by it that TLS tests need: a server certificate for
// loopback (127.0.0.1, ::1 and localhost) and a client certificate, all
// written as PEM files.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of one authority and what it signed.
type Files struct {
	CA                    string // the authority's certificate
	ServerCert, ServerKey string // for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // a client certificate (CN "chunkd-test-client")

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// Make writes a new authority and its certificates into a temporary
// directory of t.
func Make(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "chunkd test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{CA: filepath.Join(dir, "ca.pem"), ca: ca, caKey: caKey}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	f.ServerCert, f.ServerKey, _ = leaf(t, dir, "server", ca, caKey, serverTemplate())
	f.ClientCert, f.ClientKey, _ = leaf(t, dir, "client", ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "chunkd-test-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return f
}

func serverTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

// Renew writes a new server certificate and key, signed by the same
// authority, over f's server files, as a renewal does, and returns the
// new certificate's serial number.
func Renew(t testing.TB, f Files) string {
	t.Helper()
	dir := t.TempDir()
	cert, key, serial := leaf(t, dir, "server", f.ca, f.caKey, serverTemplate())
	for src, dst := range map[string]string{cert: f.ServerCert, key: f.ServerKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return serial
}

func leaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (certFile, keyFile, serial string) {
	t.Helper()
	sn, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = sn
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile, sn.String()
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
