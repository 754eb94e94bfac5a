// Package cachetest starts caches for the tests of the packages that
// serve them (httpapi, grpcapi, sqlserve): one database, "db1", made by
// package testdb in a store that can be broken on demand.
package cachetest

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/faultstore"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/prometheus/client_golang/prometheus"
)

// Fixture is a cache over a store holding database db1.
type Fixture struct {
	T     testing.TB
	Store *faultstore.Store
	DB    *testdb.DB // db1; nil for an Empty fixture
	Dir   string     // the cache directory
	Cache *cache.Cache
	// Registry holds the cache's metrics; the servers a test starts over
	// the cache register theirs there too.
	Registry *prometheus.Registry
}

// New makes db1 with o and opens a cache over it with cfg (its Store,
// CacheDir and Registry are the fixture's; it logs nothing unless cfg has
// a logger). The cache is closed when the test ends.
func New(t testing.TB, o testdb.Options, cfg cache.Config) *Fixture {
	t.Helper()
	s := testdb.NewStore(t)
	db := testdb.MustMake(t, s, "db1", o)
	f := &Fixture{T: t, Store: &faultstore.Store{Store: s}, DB: db, Dir: t.TempDir()}
	f.Open(cfg)
	return f
}

// Empty is a fixture of an empty store and no cache yet: the test puts
// its databases in the store, then calls Open.
func Empty(t testing.TB) *Fixture {
	return &Fixture{T: t, Store: &faultstore.Store{Store: testdb.NewStore(t)}, Dir: t.TempDir()}
}

// Open closes the fixture's cache, if it has one, and opens a new one
// with cfg over the same store and directory: a restart.
func (f *Fixture) Open(cfg cache.Config) {
	f.T.Helper()
	if f.Cache != nil {
		f.Cache.Close()
	}
	f.Registry = prometheus.NewRegistry()
	cfg.Store, cfg.CacheDir, cfg.Registry = f.Store, f.Dir, f.Registry
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := cache.New(cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	if f.Cache == nil {
		f.T.Cleanup(func() { f.Cache.Close() })
	}
	f.Cache = c
}

// Get reads chunk a of db1, failing the test on an error or wrong bytes.
func (f *Fixture) Get(a addr.Addr) cache.Result {
	f.T.Helper()
	r, err := f.Cache.GetChunk(context.Background(), "db1", a)
	if err != nil {
		f.T.Fatalf("GetChunk(%s): %v", a, err)
	}
	if r.Found && !bytes.Equal(r.Data, f.DB.Chunks[a]) {
		f.T.Fatalf("GetChunk(%s): wrong bytes", a)
	}
	return r
}

// WaitCached waits until files of db1 are on disk (every file, if none
// is named). It only watches: a read starts a file's download.
func (f *Fixture) WaitCached(files ...testdb.File) {
	f.T.Helper()
	var match func(api.TableInfo) bool
	if len(files) > 0 {
		match = func(ti api.TableInfo) bool {
			return slices.ContainsFunc(files, func(tf testdb.File) bool { return tf.Name == ti.Name })
		}
	}
	if err := f.Cache.WaitCached(context.Background(), "db1", time.Minute, match); err != nil {
		f.T.Fatal(err)
	}
}

// Requests returns chunkd_requests_total of an API route and code.
func (f *Fixture) Requests(api, code string) float64 {
	return f.counter("chunkd_requests_total", api, code)
}

// Rejected returns chunkd_rejected_requests_total of an API route and reason.
func (f *Fixture) Rejected(api, reason string) float64 {
	return f.counter("chunkd_rejected_requests_total", api, reason)
}

func (f *Fixture) counter(name, api, second string) float64 {
	mfs, err := f.Registry.Gather()
	if err != nil {
		f.T.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var match int
			for _, l := range m.GetLabel() {
				if (l.GetName() == "api" && l.GetValue() == api) || (l.GetName() != "api" && l.GetValue() == second) {
					match++
				}
			}
			if match == 2 {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
