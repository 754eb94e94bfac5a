package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// serviceAuth is how the client proves itself to the service and checks
// the service: a bearer token and the TLS files of Options.
type serviceAuth struct {
	token             string
	caFile            string
	certFile, keyFile string
}

// tlsConfig returns the TLS configuration of Options' files.
func (a serviceAuth) tlsConfig() (*tls.Config, error) {
	return TLSConfig(a.caFile, a.certFile, a.keyFile)
}

// TLSConfig returns the TLS configuration a client of the service uses:
// the system's roots, or those of caFile (PEM) when given, and the
// client's own certificate and key (PEM) when given (both or neither).
// Options.CAFile, CertFile and KeyFile are read with it; other clients of
// the service's API (chunkd status) use it too.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("client: CertFile and KeyFile go together")
	}
	return cfg, nil
}

// tlsOnly reports whether TLS files were given, which a plain http:// or
// grpc:// address would silently ignore.
func (a serviceAuth) tlsOnly() bool { return a.caFile != "" || a.certFile != "" || a.keyFile != "" }
