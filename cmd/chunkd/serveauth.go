package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/chunkd/chunkd/auth"
)

// secureFlags are serve's TLS and token flags.
type secureFlags struct {
	tlsCert, tlsKey, tlsClientCA string
	authTokens                   string
	metricsOpen                  bool

	reloadTLS func() error // set by setup with TLS
}

func (f *secureFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS and gRPC over TLS with this certificate (PEM, chain first); re-read with the key on SIGHUP")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "require client certificates signed by these CAs (PEM; mutual TLS)")
	fs.StringVar(&f.authTokens, "auth-tokens", "", "require bearer tokens from this file: one token per line, then the databases (names or globs) it may read; re-read on SIGHUP")
	fs.BoolVar(&f.metricsOpen, "metrics-open", false, "serve /metrics without a token (with --auth-tokens)")
}

// setup loads the files: a nil TLS config means plain text, a nil Auth
// means no tokens.
func (f *secureFlags) setup(log *slog.Logger) (*tls.Config, *auth.Guard, error) {
	var tlsCfg *tls.Config
	f.reloadTLS = nil
	switch {
	case f.tlsCert != "" || f.tlsKey != "":
		if f.tlsCert == "" || f.tlsKey == "" {
			return nil, nil, usagef("--tls-cert and --tls-key go together")
		}
		var err error
		if tlsCfg, f.reloadTLS, err = (auth.TLSFiles{Cert: f.tlsCert, Key: f.tlsKey, ClientCA: f.tlsClientCA}).Config(); err != nil {
			return nil, nil, err
		}
	case f.tlsClientCA != "":
		return nil, nil, usagef("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if f.authTokens == "" {
		if f.metricsOpen {
			return nil, nil, usagef("--metrics-open needs --auth-tokens (without tokens everything is open)")
		}
		return tlsCfg, nil, nil
	}
	tokens, err := auth.Load(f.authTokens)
	if err != nil {
		return nil, nil, err
	}
	warnReadable(log, f.authTokens)
	return tlsCfg, &auth.Guard{Tokens: tokens, MetricsOpen: f.metricsOpen, Logger: log}, nil
}

// warnReadable warns when the token file can be read by users other than
// its owner.
func warnReadable(log *slog.Logger, path string) {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o044 != 0 {
		log.Warn("the token file can be read by other users; chmod 600 it", "file", path, "mode", st.Mode().Perm().String())
	}
}

// reloadOnHUP re-reads the token file and the TLS certificate and key on
// every SIGHUP until stop is closed; a file that does not load leaves the
// old one in force.
func reloadOnHUP(f *secureFlags, a *auth.Guard, log *slog.Logger, stop <-chan struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-stop:
				return
			case <-hup:
			}
			if a == nil && f.reloadTLS == nil {
				log.Info("SIGHUP: no --auth-tokens or --tls-cert to re-read")
				continue
			}
			if a != nil {
				if err := a.Tokens.Reload(); err != nil {
					log.Error("SIGHUP: the token file did not load; the old tokens stay in force", "err", err)
				} else {
					log.Info("SIGHUP: token file re-read", "file", a.Tokens.Path(), "tokens", a.Tokens.Set().Len())
					warnReadable(log, a.Tokens.Path())
				}
			}
			if f.reloadTLS != nil {
				if err := f.reloadTLS(); err != nil {
					log.Error("SIGHUP: the TLS certificate did not load; the old one stays in use", "err", err)
				} else {
					log.Info("SIGHUP: TLS certificate re-read", "cert", f.tlsCert)
				}
			}
		}
	}()
}

// loopback reports whether a listen address binds loopback only. An
// empty host (":9460") binds every interface.
func loopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// warnExposed warns about an address beyond loopback served without TLS
// or without tokens.
func warnExposed(log *slog.Logger, name, address string, tlsOn, tokensOn bool) {
	if address == "" || loopback(address) || (tlsOn && tokensOn) {
		return
	}
	var missing string
	switch {
	case !tlsOn && !tokensOn:
		missing = "neither TLS nor tokens: anyone who can reach it reads every database"
	case !tlsOn:
		missing = "no TLS: tokens and chunks cross the network in clear text"
	default:
		missing = "no tokens: anyone who can reach it reads every database"
	}
	log.Warn(fmt.Sprintf("%s listens beyond loopback with %s (see --tls-cert, --auth-tokens)", name, missing), "addr", address)
}
