package sqlserve

import (
	"context"
	"net/http"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/internal/cachetest"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/sqlchunks"
)

// fixture is a Server over a cache over database db1 (package
// cachetest), and the HTTP API with its routes.
type fixture struct {
	*cachetest.Fixture
	s          *Server
	h          http.Handler
	imageBytes int64
}

// newFixture makes db1 with o (chunks of no SQLite database: what page
// images hold is any chunks) and serves it.
func newFixture(t *testing.T, o testdb.Options, cfg cache.Config, imageBytes int64) *fixture {
	t.Helper()
	f := &fixture{Fixture: cachetest.New(t, o, cfg), imageBytes: imageBytes}
	f.serve()
	return f
}

// newSQLFixture imports n small SQLite databases, one after another, as
// the versions of db1 and serves them; it returns the versions' roots,
// oldest first (the last is the current one).
func newSQLFixture(t *testing.T, n int, cfg cache.Config) (*fixture, []addr.Addr) {
	t.Helper()
	f := &fixture{Fixture: cachetest.Empty(t)}
	var roots []addr.Addr
	for i := range n {
		res, err := sqlchunks.Import(context.Background(), f.Store, sqltest.GenDB(t, int64(i+1), 100), sqlchunks.ImportOptions{DB: "db1"})
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, res.Root)
	}
	f.Open(cfg)
	f.serve()
	return f, roots
}

// serve starts the Server over the fixture's cache, closed when the test
// ends or at restart.
func (f *fixture) serve() {
	f.T.Helper()
	s, err := New(Config{Cache: f.Cache, CacheDir: f.Dir, ImageBytes: f.imageBytes, Registry: f.Registry})
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { s.Close() })
	f.s = s
	f.h = httpapi.New(httpapi.Config{Cache: f.Cache, Registry: f.Registry, Routes: s.Routes()})
}

// restart closes the server and the cache and opens both again with cfg.
func (f *fixture) restart(cfg cache.Config) {
	f.T.Helper()
	f.s.Close()
	f.Open(cfg)
	f.serve()
}
