// Package sqlserve is the cache service's side of SQLite databases kept
// as chunks (package sqlchunks): it answers a version's open set (every
// chunk a fresh reader needs before its first row, in one answer) and
// keeps page images, files of a version's pages in order in the cache
// directory that clients on the service's host read with no request per
// page (api.PatternImages documents them). It runs the query API:
// read-only SQL on a version, next to its pages, its answers kept in a
// result cache keyed by the version's root, which is never stale
// (docs/api.md). It serves them on the HTTP API as routes of its own
// (Routes), each with its access rule, and reads every chunk through the
// cache's tiers, so every byte it serves was proven against its address.
//
// The files: sqlserve.go (the Server), openset.go (open sets), images.go
// (the page images on disk), fill.go (registering and filling them),
// routes.go (the HTTP routes, and the versions list), versions.go (the
// versions the query API has open, each with a pool of sqlquery
// connections reading its image), query.go (the query API's requests,
// runs and answers), encode.go (JSON, NDJSON and CSV), results.go (the
// result cache), metrics.go (the query API's metrics).
//
// The query API is here rather than in a package of its own because it
// is the same versions seen through another door: it opens them with the
// page images and the cache reader the other routes use. What is apart,
// in package sqlquery, is SQLite itself: the read-only, one-statement
// connection, which knows nothing of chunkd.
//
// Lock order: images.mu, image.mu. openSets.mu and versions.mu are taken
// alone.
package sqlserve

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/prom"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server.
type Config struct {
	Cache *cache.Cache
	// CacheDir is the cache's directory (cache.Config.CacheDir): the page
	// images are kept in its api.CacheImagesDir.
	CacheDir string
	// ImageBytes bounds the page images (their slots, filled or not),
	// evicting the least recently used image whole (default 5 GiB).
	ImageBytes int64
	Logger     *slog.Logger
	Registry   prometheus.Registerer // default: a new registry

	// QueryTimeout bounds a query of the query API: a statement still
	// running then is interrupted (default 10 s).
	QueryTimeout time.Duration
	// QueryMaxRows and QueryMaxBytes bound a query's answer: the rows
	// stop before the one past either, and the answer says it was
	// truncated (defaults 100,000 rows and 64 MiB).
	QueryMaxRows  int
	QueryMaxBytes int64
	// ResultBytes bounds the result cache (default 64 MiB); negative
	// turns it off.
	ResultBytes int64
	// ConnsPerVersion is the size of each open version's pool of
	// connections (default 4), and OpenVersions how many versions stay
	// open (default 8).
	ConnsPerVersion int
	OpenVersions    int
}

// Server serves SQLite versions' open sets and page images over a cache.
type Server struct {
	c         *cache.Cache
	log       *slog.Logger
	images    *images
	sets      openSets
	collected collected // versions chunkd gc collected, per database

	limits   queryLimits
	versions *versions
	results  *results // nil when off
	metrics  queryMetrics

	ctx    context.Context // canceled by Close: stops background fills
	cancel context.CancelFunc
	wg     sync.WaitGroup // background fills in flight
}

// New opens the page images kept in cfg.CacheDir (those a previous run
// left are found again) and returns the server. Close it before the
// cache.
func New(cfg Config) (*Server, error) {
	if cfg.Cache == nil || cfg.CacheDir == "" {
		return nil, errors.New("sqlserve: no cache or cache directory")
	}
	if cfg.ImageBytes <= 0 {
		cfg.ImageBytes = 5 << 30
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = 10 * time.Second
	}
	if cfg.QueryMaxRows <= 0 {
		cfg.QueryMaxRows = 100_000
	}
	if cfg.QueryMaxBytes <= 0 {
		cfg.QueryMaxBytes = 64 << 20
	}
	if cfg.ResultBytes == 0 {
		cfg.ResultBytes = 64 << 20
	}
	if cfg.ConnsPerVersion <= 0 {
		cfg.ConnsPerVersion = 4
	}
	if cfg.OpenVersions <= 0 {
		cfg.OpenVersions = 8
	}
	reg := prom.Registry{Registerer: cfg.Registry}
	gauge := reg.Gauge("chunkd_image_bytes", "Bytes of page images (slots) in the cache directory, filled or not.")
	is, err := openImages(cfg.CacheDir, cfg.ImageBytes, gauge)
	if err != nil {
		return nil, err
	}
	s := &Server{c: cfg.Cache, log: cfg.Logger, images: is,
		limits: queryLimits{timeout: cfg.QueryTimeout, maxRows: cfg.QueryMaxRows, maxBytes: cfg.QueryMaxBytes}}
	if s.results, err = newResults(cfg.ResultBytes); err != nil {
		is.close()
		return nil, err
	}
	s.versions = newVersions(s, cfg.ConnsPerVersion, cfg.OpenVersions)
	s.metrics = newQueryMetrics(reg, s.results)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the background fills, waits for them, and closes the
// images (their files stay for the next start).
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	s.versions.close()
	s.images.close()
	return nil
}
