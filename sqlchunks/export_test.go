package sqlchunks

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/store"
)

// ServeSQL gives a test cache the service's SQLite routes (open sets and
// page images, package sqlserve): set by this package's external tests
// (sqlserve_test.go), since sqlserve imports this package and its
// internal tests cannot import it. imageBytes bounds the page images
// kept in dir; close stops their background fills.
var ServeSQL func(c *cache.Cache, dir string, imageBytes int64) (routes []httpapi.Route, close func(), err error)

// newService starts a cache service's core and HTTP API with its SQLite
// routes, as chunkd serve runs them, over cfg (its store and directory);
// stop closes it.
func newService(t testing.TB, cfg cache.Config, imageBytes int64) (h http.Handler, c *cache.Cache, stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
	}
	c, err := cache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	routes, closeSQL, err := ServeSQL(c, cfg.CacheDir, imageBytes)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	return httpapi.New(httpapi.Config{Cache: c, Routes: routes}), c, func() {
		closeSQL()
		c.Close()
	}
}

// startService runs an in-process cache service over s, closed when the
// test ends, and returns its cache and URL.
func startService(t testing.TB, s store.Store, memBytes int64) (*cache.Cache, string) {
	t.Helper()
	h, c, stop := newService(t, cache.Config{Store: s, CacheDir: t.TempDir(), NoFsync: true, MemBytes: memBytes}, 0)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		stop()
	})
	return c, srv.URL
}
