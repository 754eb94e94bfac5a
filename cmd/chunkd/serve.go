package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/spin"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/store"
	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	downloads := fs.Int("downloads", 8, "store streams downloading files ahead of readers at once (what readers wait for is fetched beside them)")
	clientTimeout := fs.Duration("client-timeout", 30*time.Second, "the longest the service waits on a client: to send a request, or to take the next part of an answer")
	spinWait := fs.Duration("spin", spin.DefaultMax, "how long an HTTP connection just answered polls for its next request before it parks, saving a wake-up on a VM (0: never)")
	queryTimeout := fs.Duration("query-timeout", 10*time.Second, "the query API: the longest a statement runs before it is interrupted (a 400 to its client)")
	queryMaxRows := fs.Int("query-max-rows", 100_000, "the query API: the most rows an answer holds (more: it says truncated)")
	queryMaxBytes := sizeFlag(64 << 20)
	fs.Var(&queryMaxBytes, "query-max-bytes", "the query API: the largest answer (its rows stop before the one past it, and it says truncated)")
	results := sizeFlag(64 << 20)
	fs.Var(&results, "results", "the query API's result cache: memory for whole answers, keyed by version, SQL and parameters (0: off)")
	var sec secureFlags
	sec.add(fs)
	dolt := addDoltFlags(fs)
	clu := addClusterFlags(fs)
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
	layers.warn(slog.Default())
	if images == 0 { // the default: half of --disk, as service.Config takes 0
		images = disk / 2
		layers.source["images"] += " (half of --disk)"
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
	if *queryTimeout <= 0 || *queryMaxRows < 1 || queryMaxBytes <= 0 {
		return usagef("--query-timeout, --query-max-rows and --query-max-bytes must be positive")
	}
	resultBytes := int64(results)
	if resultBytes == 0 {
		resultBytes = -1 // off
	}
	if err := dolt.validate(); err != nil {
		return err
	}
	log := slog.Default()

	tlsCfg, guard, err := sec.setup(log)
	if err != nil {
		return err
	}
	clusterCfg, err := clu.config(*cacheDir, &sec)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if !store.Exists(st) {
		log.Warn("the store does not exist (a folder that is not there): every read of a database fails as unreachable until it is made; check --store", "store", st.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoMetric())
	svc, err := service.Start(service.Config{
		Cache: cache.Config{Store: st, CacheDir: *cacheDir,
			MemBytes: int64(mem), DiskBytes: int64(disk), NoFsync: !*fsync, Miss: policy,
			StoreTimeout: *storeTimeout, ManifestTTL: *manifestTTL, Downloads: *downloads},
		ImageBytes:   int64(images),
		QueryTimeout: *queryTimeout, QueryMaxRows: *queryMaxRows, QueryMaxBytes: int64(queryMaxBytes), ResultBytes: resultBytes,
		HTTP: *listen, GRPC: *grpcListen, DoltRemote: *dolt.on, DoltListen: *dolt.listen,
		TLS: tlsCfg, Guard: guard, ClientTimeout: *clientTimeout, Spin: *spinWait,
		Cluster:  clusterCfg,
		Registry: reg, Logger: log,
	})
	if err != nil {
		return err
	}
	stopHUP := make(chan struct{})
	defer close(stopHUP)
	reloadOnHUP(&sec, guard, log, stopHUP)
	log.Info("listening", "http", svc.HTTPAddr, "grpc", orDash(svc.GRPCAddr), "dolt", orDash(svc.DoltAddr), "store", st.String(), "cache_dir", *cacheDir,
		"mem", humanize.IBytes(uint64(mem)), "disk", humanize.IBytes(uint64(disk)), "fsync", *fsync, "miss", *miss,
		"tls", tlsCfg != nil, "tokens", guard != nil)
	warnExposed(log, "HTTP", *listen, tlsCfg != nil, guard != nil)
	warnExposed(log, "gRPC", *grpcListen, tlsCfg != nil, guard != nil)
	warnExposed(log, "the Dolt remote's gRPC", *dolt.listen, tlsCfg != nil, guard != nil)

	return serveUntilDone(ctx, log, svc)
}

// orDash is s, or "-" for a listener not served.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// missPolicy reads --miss.
func missPolicy(miss string) (cache.MissPolicy, error) {
	switch miss {
	case "read-through":
		return cache.ReadThrough, nil
	case "notfound":
		return cache.NotFound, nil
	}
	return 0, usagef("--miss must be read-through or notfound, not %q", miss)
}

// serveUntilDone waits until ctx ends or a listener fails, then stops
// the service, letting requests in flight finish for up to 30 seconds. A
// listener that stopped on its own is an error.
func serveUntilDone(ctx context.Context, log *slog.Logger, svc *service.Service) error {
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight requests")
	case err := <-svc.Done():
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server failed", "err", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := svc.Shutdown(sctx)
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
