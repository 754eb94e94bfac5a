package main

import (
	"crypto/rand"
	"flag"
	"log/slog"
	"net"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/doltremote"
	"github.com/chunkd/chunkd/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// serveDolt is serve's Dolt remote: its flags, and its place on the
// service's listeners.
type serveDolt struct {
	on     *bool
	listen *string

	svc *doltremote.Service
	srv *grpc.Server // the dedicated listener's server, if --dolt-listen
}

// The flag is --dolt-remote, not --dolt: every flag is also read from
// CHUNKD_<NAME>, and CHUNKD_DOLT names the dolt binary of the tests.
func addDoltFlags(fs *flag.FlagSet) *serveDolt {
	return &serveDolt{
		on:     fs.Bool("dolt-remote", true, "serve every Dolt database in the store as a read-only Dolt remote (dolt clone http://HOST:PORT/ORG/REPO, PORT the gRPC listener's)"),
		listen: fs.String("dolt-listen", "", "gRPC address for the Dolt remote; empty serves it on --grpc-listen (no gRPC listener at all: no Dolt remote)"),
	}
}

// validate checks the flags.
func (d *serveDolt) validate() error {
	if !*d.on && *d.listen != "" {
		return usagef("--dolt-listen needs --dolt-remote")
	}
	return nil
}

// enabled reports whether the remote runs: it needs a gRPC listener, its
// own or the shared one (grpcListen).
func (d *serveDolt) enabled(grpcListen string) bool {
	return *d.on && (grpcListen != "" || *d.listen != "")
}

// start makes the Dolt remote, whose download URLs name the HTTP listener
// at httpAddr (https with TLS, and signed with tokens: Dolt sends no token
// with its downloads). It returns the route to add to the HTTP API.
func (d *serveDolt) start(cache *server.Cache, grpcListen, httpAddr string, tlsOn, tokensOn bool, log *slog.Logger, reg prometheus.Registerer) ([]server.Route, error) {
	if !d.enabled(grpcListen) {
		return nil, nil
	}
	cfg := doltremote.Config{Cache: cache, HTTPAddr: httpAddr, HTTPS: tlsOn, Logger: log, Registry: reg}
	if tokensOn {
		cfg.SignKey = make([]byte, 32)
		rand.Read(cfg.SignKey)
	}
	svc, err := doltremote.New(cfg)
	if err != nil {
		return nil, err
	}
	d.svc = svc
	return []server.Route{{Pattern: api.PatternDoltFiles, Handler: svc.Handler()}}, nil
}

// sharedOptions returns what the shared gRPC server needs to carry the
// remote, if it does.
func (d *serveDolt) sharedOptions() []grpc.ServerOption {
	if d.svc == nil || *d.listen != "" {
		return nil
	}
	return doltremote.ServerOptions()
}

// register puts the remote on the shared gRPC server, unless it has its
// own listener; it must run before that server serves.
func (d *serveDolt) register(shared *grpc.Server) {
	if d.svc != nil && *d.listen == "" {
		d.svc.Register(shared)
	}
}

// serve serves the remote's own listener, if it has one, with opts (TLS,
// tokens) as the shared server has them, and returns the address the
// remote answers on: that listener's, sharedAddr (the shared gRPC
// server's), or "-" when it is off.
func (d *serveDolt) serve(sharedAddr string, opts []grpc.ServerOption, errc chan<- error) (string, error) {
	switch {
	case d.svc == nil:
		return "-", nil
	case *d.listen == "":
		return sharedAddr, nil
	}
	ln, err := net.Listen("tcp", *d.listen)
	if err != nil {
		return "", err
	}
	d.srv = grpc.NewServer(append(opts, doltremote.ServerOptions()...)...)
	d.svc.Register(d.srv)
	go func() { errc <- d.srv.Serve(ln) }()
	return ln.Addr().String(), nil
}

// stop stops the dedicated listener's server, at once if graceful is false.
func (d *serveDolt) stop(graceful bool) {
	if d.srv == nil {
		return
	}
	if graceful {
		d.srv.GracefulStop()
	} else {
		d.srv.Stop()
	}
}
