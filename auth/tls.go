package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles are the PEM files of a service's TLS.
type TLSFiles struct {
	Cert, Key string // the service's certificate (chain) and key
	ClientCA  string // if set, clients must present a certificate it signed
}

// Config returns the TLS configuration of the files, and a function that
// reads the certificate and key again (for SIGHUP, when they are renewed):
// handshakes after it use the new pair; a pair that does not load is an
// error and leaves the old one in use. The client CA is read once.
func (f TLSFiles) Config() (*tls.Config, func() error, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil, errors.New("TLS needs both a certificate and a key")
	}
	var cur atomic.Pointer[tls.Certificate]
	reload := func() error {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("TLS certificate: %w", err)
		}
		cur.Store(&cert)
		return nil
	}
	if err := reload(); err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cur.Load(), nil },
	}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("TLS client CA %s holds no PEM certificate", f.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, reload, nil
}
