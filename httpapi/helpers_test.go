package httpapi

import (
	"io"
	"log"
	"net/http"
	"testing"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/cachetest"
	"github.com/chunkd/chunkd/internal/testdb"
)

// newFixture is a cache over database db1 (package cachetest).
func newFixture(t testing.TB, o testdb.Options, cfg cache.Config) *cachetest.Fixture {
	t.Helper()
	return cachetest.New(t, o, cfg)
}

// newAPI is the API over f's cache, its metrics in f's registry.
func newAPI(f *cachetest.Fixture, routes ...Route) *API {
	return New(Config{Cache: f.Cache, Registry: f.Registry, Gather: f.Registry, Routes: routes})
}

// always is a Fast that takes every request it is asked about, answering
// it with h.
func always(h http.Handler) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		h.ServeHTTP(w, r)
		return true
	}
}

// quietLog is an http.Server's ErrorLog that prints nothing.
func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }
