package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/chunkd/chunkd/internal/spin"
	"github.com/chunkd/chunkd/server"
	"github.com/chunkd/chunkd/store"
	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// serveCommand runs the cache service.
type serveCommand struct{ cmdBase }

// sizeFlag is a byte size given as 256MiB, 10GiB, 1.5GB or plain bytes.
type sizeFlag int64

func (s *sizeFlag) String() string { return humanize.IBytes(uint64(*s)) }
func (s *sizeFlag) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return errors.New("want a number with a unit such as 256MiB or 10GiB")
	}
	*s = sizeFlag(n)
	return nil
}

func (c *serveCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("serve", "serve --store URL --cache-dir DIR [flags]\n\nEvery flag can also come from the environment (CHUNKD_ and its name in\ncapitals, - as _: CHUNKD_CACHE_DIR) or from --config FILE; a flag wins over\nthe environment, which wins over the file.\n", c.stderr)
	storeURL := fs.String("store", "", "object store URL: a folder path, file:///path or s3://bucket/prefix?endpoint=... (required)")
	cacheDir := fs.String("cache-dir", "", "directory for cached table files (required)")
	listen := fs.String("listen", "127.0.0.1:9460", "HTTP address (API, /metrics, /healthz, /readyz)")
	grpcListen := fs.String("grpc-listen", "127.0.0.1:9461", "gRPC address; empty disables gRPC")
	mem := sizeFlag(256 << 20)
	disk := sizeFlag(10 << 30)
	fs.Var(&mem, "mem", "memory for decoded chunks")
	fs.Var(&disk, "disk", "disk for cached table files")
	var images sizeFlag
	fs.Var(&images, "images", "disk for page images of SQL versions, which same-host clients map (default: half of --disk)")
	fsync := fs.Bool("fsync", true, "fsync downloaded files before serving them")
	miss := fs.String("miss", "read-through", "on a miss: read-through (read from the store, download in background) or notfound (answer not found, download in background)")
	storeTimeout := fs.Duration("store-timeout", 10*time.Second, "deadline for one read from the object store, and the longest a download waits for its next bytes")
	manifestTTL := fs.Duration("manifest-ttl", 5*time.Second, "how stale a manifest may be before a miss re-reads it")
	downloads := fs.Int("downloads", 2, "whole-file downloads at once")
	clientTimeout := fs.Duration("client-timeout", 30*time.Second, "the longest the service waits on a client: to send a request, or to take the next part of an answer")
	spinWait := fs.Duration("spin", spin.DefaultMax, "how long an HTTP connection just answered polls for its next request before it parks, saving a wake-up on a VM (0: never)")
	var sec secureFlags
	sec.add(fs)
	dolt := addDoltFlags(fs)
	configFile := fs.String("config", "", "read settings from this YAML file (keys are flag names; default $CHUNKD_CONFIG); flags and CHUNKD_* variables win over it")
	printConfig := fs.Bool("print-config", false, "print every setting and where it came from (flag, env, file, default), then exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	layers, err := applyLayers(fs, *configFile)
	if err != nil {
		return err
	}
	if err := setupLogging(fs); err != nil { // --log-* may have come from the environment or the file
		return err
	}
	if *printConfig {
		return layers.print(c.stdout, fs, "serve")
	}
	if *storeURL == "" || *cacheDir == "" {
		return usagef("--store and --cache-dir are required")
	}
	policy, err := missPolicy(*miss)
	if err != nil {
		return err
	}
	if mem <= 0 || disk <= 0 || *storeTimeout <= 0 || *manifestTTL <= 0 || *clientTimeout <= 0 || *downloads < 1 {
		return usagef("--mem, --disk, --store-timeout, --manifest-ttl and --client-timeout must be positive, and --downloads at least 1")
	}
	if err := dolt.validate(); err != nil {
		return err
	}
	log := slog.Default()

	tlsCfg, authz, err := sec.setup(log)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if !store.Exists(st) {
		log.Warn("the store does not exist (a folder that is not there): every database is unknown until it is made; check --store", "store", st.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoMetric())
	cache, err := server.New(server.Config{OpenSet: openSet,
		Store: st, CacheDir: *cacheDir,
		MemBytes: int64(mem), DiskBytes: int64(disk), ImageBytes: int64(images), NoFsync: !*fsync, Miss: policy,
		StoreTimeout: *storeTimeout, ManifestTTL: *manifestTTL, Downloads: *downloads,
		ClientTimeout: *clientTimeout, Logger: log, Registry: reg,
	})
	if err != nil {
		return err
	}

	hl, err := net.Listen("tcp", *listen)
	if err != nil {
		cache.Close()
		return err
	}
	routes, err := dolt.start(cache, *grpcListen, hl.Addr().String(), tlsCfg != nil, authz != nil, log, reg)
	if err != nil {
		hl.Close()
		cache.Close()
		return err
	}
	router := server.NewHandler(cache, reg, routes...)
	var handler http.Handler = router
	var grpcOpts []grpc.ServerOption
	if authz != nil {
		handler = authz.HTTP(router)
		grpcOpts = authz.GRPCOptions()
	}
	if tlsCfg != nil {
		hl = tls.NewListener(hl, tlsCfg)
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	stopHUP := make(chan struct{})
	defer close(stopHUP)
	reloadOnHUP(&sec, authz, log, stopHUP)
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: *clientTimeout, IdleTimeout: 5 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	// Reads of one chunk are answered on their connection's goroutine;
	// every other request goes on to httpSrv (server.HTTP1).
	http1 := &server.HTTP1{Server: httpSrv, Fast: server.ChunkReads(router), Spin: *spinWait}
	reg.MustRegister(http1.SpinMetrics()...)
	errc := make(chan error, 3)
	go func() { errc <- http1.Serve(hl) }()

	var grpcSrv *grpc.Server
	grpcAddr := "-"
	if *grpcListen != "" {
		gl, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			http1.Close()
			cache.Close()
			return err
		}
		grpcSrv = server.NewGRPC(cache, append(grpcOpts, dolt.sharedOptions()...)...)
		grpcAddr = gl.Addr().String()
		dolt.register(grpcSrv)
		go func() { errc <- grpcSrv.Serve(gl) }()
	}
	doltAddr, err := dolt.serve(grpcAddr, grpcOpts, errc)
	if err != nil {
		http1.Close()
		if grpcSrv != nil {
			grpcSrv.Stop()
		}
		cache.Close()
		return err
	}
	log.Info("listening", "http", hl.Addr().String(), "grpc", grpcAddr, "dolt", doltAddr, "store", st.String(), "cache_dir", *cacheDir,
		"mem", humanize.IBytes(uint64(mem)), "disk", humanize.IBytes(uint64(disk)), "fsync", *fsync, "miss", *miss,
		"tls", tlsCfg != nil, "tokens", authz != nil)
	warnExposed(log, "HTTP", *listen, tlsCfg != nil, authz != nil)
	warnExposed(log, "gRPC", *grpcListen, tlsCfg != nil, authz != nil)
	warnExposed(log, "the Dolt remote's gRPC", *dolt.listen, tlsCfg != nil, authz != nil)

	return serveUntilDone(ctx, log, errc, http1, grpcSrv, dolt, cache)
}

// missPolicy reads --miss.
func missPolicy(miss string) (server.MissPolicy, error) {
	switch miss {
	case "read-through":
		return server.ReadThrough, nil
	case "notfound":
		return server.NotFound, nil
	}
	return 0, usagef("--miss must be read-through or notfound, not %q", miss)
}

// serveUntilDone waits until ctx ends or a server fails (its error on
// errc), then stops the servers, letting requests in flight finish for
// up to 30 seconds, and closes the cache. A server that stopped on its
// own is an error.
func serveUntilDone(ctx context.Context, log *slog.Logger, errc <-chan error, httpSrv *server.HTTP1, grpcSrv *grpc.Server, dolt *serveDolt, cache *server.Cache) error {
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight requests")
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server failed", "err", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	httpSrv.Shutdown(sctx)
	done := make(chan struct{})
	go func() {
		if grpcSrv != nil {
			grpcSrv.GracefulStop()
		}
		dolt.stop(true)
		close(done)
	}()
	select {
	case <-done:
	case <-sctx.Done():
		if grpcSrv != nil {
			grpcSrv.Stop()
		}
		dolt.stop(false)
	}
	err := cache.Close()
	log.Info("stopped")
	if ctx.Err() == nil {
		return fmt.Errorf("server stopped unexpectedly")
	}
	return err
}

// buildInfoMetric is chunkd_build_info: 1, labelled with what the binary
// was built from (see chunkd version).
func buildInfoMetric() prometheus.Collector {
	b := readBuild()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chunkd_build_info",
		Help: "Always 1; the labels say what the running binary was built from.",
	}, []string{"version", "commit", "goversion", "sqlite"})
	g.WithLabelValues(b.version, b.commit, b.goVersion, b.sqlite).Set(1)
	return g
}
