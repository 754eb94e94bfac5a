// Package service assembles chunkd's cache service from its parts and
// runs it on its listeners: the cache core (package cache) over HTTP,
// with the fast path for reads of one chunk (httpapi), and over gRPC
// (grpcapi); SQLite's open sets, page images and query API (sqlserve);
// the web console (console); the read-only Dolt remote (doltremote).
// "chunkd serve" is its flags and signals around Start; the demo, the
// benchmarks and the tests start the same service.
package service

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/cluster"
	"github.com/chunkd/chunkd/cluster/ring"
	"github.com/chunkd/chunkd/console"
	"github.com/chunkd/chunkd/doltremote"
	"github.com/chunkd/chunkd/grpcapi"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/sqlserve"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Config configures a Service.
type Config struct {
	// Cache configures the core (its store, cache directory, budgets);
	// its Logger and Registry default to the service's.
	Cache cache.Config
	// ImageBytes bounds the page images of SQL versions that same-host
	// clients map (default half of Cache.DiskBytes, or 5 GiB).
	ImageBytes int64
	// QueryTimeout, QueryMaxRows and QueryMaxBytes bound a query of the
	// query API, and ResultBytes its result cache (negative: off); zero
	// takes sqlserve.Config's defaults (10 s, 100,000 rows, 64 MiB, 64
	// MiB).
	QueryTimeout  time.Duration
	QueryMaxRows  int
	QueryMaxBytes int64
	ResultBytes   int64

	// HTTP is the HTTP listener's address ("127.0.0.1:0" picks a port).
	HTTP string
	// GRPC is the gRPC listener's address; "" serves no gRPC.
	GRPC string
	// DoltRemote serves every Dolt database in the store as a read-only
	// Dolt remote, on DoltListen, or on the GRPC listener when that is "";
	// with neither, there is no remote.
	DoltRemote bool
	DoltListen string

	// TLS, if set, serves every listener over TLS.
	TLS *tls.Config
	// Guard checks tokens; nil serves everyone.
	Guard *auth.Guard

	// ClientTimeout is the longest the service waits on a client: for a
	// request's head (at most 10 s), its body, or to take the next part of
	// an answer (default 30 s).
	ClientTimeout time.Duration
	// IdleTimeout bounds an HTTP connection's wait for its next request
	// (default 5 minutes).
	IdleTimeout time.Duration
	// Spin is how long an HTTP connection just answered polls for its next
	// request (httpapi.HTTP1.Spin; 0 never polls).
	Spin time.Duration

	// Cluster, if set, makes this service a node of a cluster (package
	// cluster): it downloads only the table files it owns and reads the
	// others from their owners. Its URL defaults to the HTTP listener's,
	// its GRPC to the gRPC listener's, its Weight to Cache.DiskBytes (or
	// the cache's default), its Logger and Registry to the service's. nil:
	// a service alone.
	Cluster *cluster.Config

	// Registry gets every metric and is what /metrics serves (default: a
	// new registry).
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// Service is a running cache service.
type Service struct {
	Cache *cache.Cache
	SQL   *sqlserve.Server
	Dolt  *doltremote.Service // nil without the Dolt remote
	Node  *cluster.Node       // nil without a cluster

	// HTTPAddr, GRPCAddr and DoltAddr are the addresses served ("" for a
	// listener not served; DoltAddr is GRPCAddr when the remote shares it).
	HTTPAddr, GRPCAddr, DoltAddr string

	tls     bool
	log     *slog.Logger
	http    *httpapi.HTTP1
	grpc    *grpc.Server
	doltSrv *grpc.Server // the remote's own listener's, if DoltListen
	errc    chan error
}

// Start opens the cache and serves it on the listeners cfg names. It
// returns once every listener accepts connections.
func Start(cfg Config) (s *Service, err error) {
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Cache.Registry == nil {
		cfg.Cache.Registry = cfg.Registry
	}
	if cfg.Cache.Logger == nil {
		cfg.Cache.Logger = cfg.Logger
	}
	if cfg.ClientTimeout <= 0 {
		cfg.ClientTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.ImageBytes <= 0 && cfg.Cache.DiskBytes > 0 {
		cfg.ImageBytes = cfg.Cache.DiskBytes / 2
	}
	s = &Service{tls: cfg.TLS != nil, log: cfg.Logger, errc: make(chan error, 3)}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	hl, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { hl.Close() })
	s.HTTPAddr = hl.Addr().String()
	// The gRPC listener is made before the core too: a cluster node says
	// where it is.
	var gl net.Listener
	if cfg.GRPC != "" {
		if gl, err = net.Listen("tcp", cfg.GRPC); err != nil {
			return nil, err
		}
		closers = append(closers, func() { gl.Close() })
		s.GRPCAddr = gl.Addr().String()
	}
	if cfg.Cluster != nil {
		if s.Node, err = s.newNode(cfg); err != nil {
			return nil, err
		}
		cfg.Cache.Store = s.Node.Store(cfg.Cache.Store)
		cfg.Cache.Owns = s.Node.Owns
	}
	if s.Cache, err = cache.New(cfg.Cache); err != nil {
		return nil, err
	}
	closers = append(closers, func() { s.Cache.Close() })
	if s.SQL, err = sqlserve.New(sqlserve.Config{Cache: s.Cache, CacheDir: cfg.Cache.CacheDir, ImageBytes: cfg.ImageBytes, Logger: cfg.Logger, Registry: cfg.Registry,
		QueryTimeout: cfg.QueryTimeout, QueryMaxRows: cfg.QueryMaxRows, QueryMaxBytes: cfg.QueryMaxBytes, ResultBytes: cfg.ResultBytes}); err != nil {
		return nil, err
	}
	closers = append(closers, func() { s.SQL.Close() })

	routes := append(s.SQL.Routes(), console.Routes()...)
	if s.Node != nil {
		routes = append(routes, s.Node.Routes(s.Cache)...)
	}
	if cfg.DoltRemote && (cfg.GRPC != "" || cfg.DoltListen != "") {
		dc := doltremote.Config{Cache: s.Cache, HTTPAddr: s.HTTPAddr, HTTPS: cfg.TLS != nil, Logger: cfg.Logger, Registry: cfg.Registry}
		if cfg.Guard != nil {
			// Dolt sends no token with its downloads: the remote signs the
			// URLs it hands to callers whose token grants the database.
			dc.SignKey = make([]byte, 32)
			rand.Read(dc.SignKey)
		}
		if s.Node != nil && (cfg.Guard == nil || cfg.Cluster.Secret != "") {
			// Each file's URL names its owner, which must accept this
			// node's signature: the nodes derive one key from the secret.
			if cfg.Guard != nil {
				dc.SignKey = cluster.DerivedKey(cfg.Cluster.Secret, "dolt-download-urls")
			}
			dc.FileBase = s.Node.OwnerURL
		}
		if s.Dolt, err = doltremote.New(dc); err != nil {
			return nil, err
		}
		routes = append(routes, s.Dolt.Routes()...)
	}
	h := httpapi.New(httpapi.Config{Cache: s.Cache, Guard: cfg.Guard, Registry: cfg.Registry, Gather: cfg.Registry, ClientTimeout: cfg.ClientTimeout, Routes: routes})
	if cfg.TLS != nil {
		hl = tls.NewListener(hl, cfg.TLS)
	}
	var handler http.Handler = h
	fast := h.ServeFast
	if s.Node != nil {
		// Every answer says the node is in a cluster, so a client learns
		// to route its reads with no request of its own.
		mark := []string{ring.Version}
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()[api.HeaderCluster] = mark
			h.ServeHTTP(w, r)
		})
		fast = func(w http.ResponseWriter, r *http.Request) bool {
			w.Header()[api.HeaderCluster] = mark
			return h.ServeFast(w, r)
		}
	}
	s.http = &httpapi.HTTP1{
		Server: &http.Server{Handler: handler, ReadHeaderTimeout: min(10*time.Second, cfg.ClientTimeout), ReadTimeout: cfg.ClientTimeout,
			IdleTimeout: cfg.IdleTimeout, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)},
		Fast: fast, Spin: cfg.Spin,
	}
	cfg.Registry.MustRegister(s.http.Metrics()...)
	go func() { s.errc <- s.http.Serve(hl) }()
	closers = append(closers, func() { s.http.Close() })

	gcfg := grpcapi.Config{Guard: cfg.Guard, Registry: cfg.Registry}
	if cfg.TLS != nil {
		gcfg.Options = append(gcfg.Options, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if s.Dolt != nil {
		gcfg.Options = append(gcfg.Options, doltremote.ServerOptions()...)
	}
	if cfg.GRPC != "" {
		services := []grpcapi.Service{grpcapi.ChunkCache(s.Cache, cfg.ClientTimeout)}
		if s.Dolt != nil && cfg.DoltListen == "" {
			services = append(services, s.Dolt.GRPC())
		}
		if s.Node != nil {
			services = append(services, s.Node.GRPC())
		}
		s.grpc = serveGRPCOn(gl, gcfg, services, s.errc)
		closers = append(closers, s.grpc.Stop)
		if s.Dolt != nil && cfg.DoltListen == "" {
			s.DoltAddr = s.GRPCAddr
		}
	}
	if s.Dolt != nil && cfg.DoltListen != "" {
		if s.DoltAddr, s.doltSrv, err = serveGRPC(cfg.DoltListen, gcfg, []grpcapi.Service{s.Dolt.GRPC()}, s.errc); err != nil {
			return nil, err
		}
	}
	if s.Node != nil {
		if err := s.Node.Start(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// newNode makes this service's cluster node from cfg.Cluster, with the
// defaults the service knows.
func (s *Service) newNode(cfg Config) (*cluster.Node, error) {
	cc := *cfg.Cluster
	if cc.URL == "" {
		cc.URL = s.URL()
	}
	if cc.GRPC == "" {
		cc.GRPC = s.GRPCAddr
	}
	if cc.Weight <= 0 {
		cc.Weight = cfg.Cache.DiskBytes
		if cc.Weight <= 0 {
			cc.Weight = 10 << 30 // the cache's default --disk
		}
	}
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	if cc.Registry == nil {
		cc.Registry = cfg.Registry
	}
	if cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert {
		cc.ClientCerts = true
	}
	if cfg.Guard != nil && cc.Secret == "" && !cc.ClientCerts {
		return nil, errors.New("a cluster whose nodes check tokens needs its peers authenticated: a cluster secret, or TLS client certificates (--tls-client-ca)")
	}
	return cluster.New(cc)
}

// serveGRPC serves services on a new listener at address.
func serveGRPC(address string, cfg grpcapi.Config, services []grpcapi.Service, errc chan<- error) (string, *grpc.Server, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return "", nil, err
	}
	return ln.Addr().String(), serveGRPCOn(ln, cfg, services, errc), nil
}

// serveGRPCOn serves services on ln.
func serveGRPCOn(ln net.Listener, cfg grpcapi.Config, services []grpcapi.Service, errc chan<- error) *grpc.Server {
	srv := grpcapi.New(cfg, services...)
	go func() { errc <- srv.Serve(ln) }()
	return srv
}

// URL is the HTTP API's base URL: http://HOST:PORT (https with TLS).
func (s *Service) URL() string {
	if s.tls {
		return "https://" + s.HTTPAddr
	}
	return "http://" + s.HTTPAddr
}

// Done receives the error of a listener that stopped serving on its own.
func (s *Service) Done() <-chan error { return s.errc }

// Shutdown stops the listeners, letting requests in flight finish until
// ctx ends (then they are cut), and closes the cache.
func (s *Service) Shutdown(ctx context.Context) error {
	s.closeNode()
	s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() {
		for _, g := range []*grpc.Server{s.grpc, s.doltSrv} {
			if g != nil {
				g.GracefulStop()
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		for _, g := range []*grpc.Server{s.grpc, s.doltSrv} {
			if g != nil {
				g.Stop()
			}
		}
	}
	return s.closeCore()
}

// Close stops the listeners at once and closes the cache.
func (s *Service) Close() error {
	s.closeNode()
	s.http.Close()
	for _, g := range []*grpc.Server{s.grpc, s.doltSrv} {
		if g != nil {
			g.Stop()
		}
	}
	return s.closeCore()
}

// closeNode leaves the cluster first: the others stop sending reads here.
func (s *Service) closeNode() {
	if s.Node != nil {
		s.Node.Close()
	}
}

func (s *Service) closeCore() error {
	return errors.Join(s.SQL.Close(), s.Cache.Close())
}
