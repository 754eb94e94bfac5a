package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/internal/testnet"
)

// TestServiceOnly: without a store the service is the only tier: the
// root comes from it (over HTTP and over gRPC), every chunk too, and
// what it lacks is an error.
func TestServiceOnly(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 30})
	srv := startHTTP(t, s, cache.ReadThrough)
	t.Run("http", func(t *testing.T) { testServiceOnly(t, db, srv.URL, "http://") })
	gsURL := serveGRPC(t, grpcServer(newCache(t, s, cache.ReadThrough)))
	t.Run("grpc", func(t *testing.T) { testServiceOnly(t, db, gsURL, "grpc://") })
	// A same-host client without a store finds the service's directory,
	// but its table files are found through the manifest, so only the
	// service's page images are used; reads still work, through the
	// service.
	c4, err := Open(context.Background(), Options{DB: "db1", Service: srv.URL, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	getAll(t, c4, db, db.All()[:3])
}

func testServiceOnly(t *testing.T, db *testdb.DB, url, scheme string) {
	c := open(t, Options{DB: "db1", Service: url})
	ctx := context.Background()
	root, err := c.Root(ctx)
	if err != nil || root != db.Root {
		t.Fatalf("Root = %s, %v; want %s", root, err, db.Root)
	}
	all := db.All()
	getAll(t, c, db, all[:5])
	getMany(t, c, db, all)
	if st := c.Stats(); st.Store.Requests != 0 || st.Service.Chunks != int64(len(all)) || st.Hedged != 0 {
		t.Fatalf("want every chunk from the service, no store: %v", st)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	missing := addr.Of([]byte("in no table file"))
	if _, err := c.Get(ctx, missing); err == nil || !strings.Contains(err.Error(), missing.String()) || !strings.Contains(err.Error(), "does not hold it") {
		t.Fatalf("Get of a chunk the service does not have: %v; want an error naming the chunk and that the service lacks it", err)
	}

	// A database the service does not know.
	c2 := open(t, Options{DB: "nosuch", Service: url})
	if _, err := c2.Root(ctx); !errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), url) {
		t.Fatalf("Root of an unknown database: %v", err)
	}
	// A service that is not there: a read's error says why, also while
	// the client backs off from it (the second read).
	refused := testnet.Refused(t)
	c3 := open(t, Options{DB: "db1", Service: scheme + refused})
	if _, err := c3.Root(ctx); err == nil {
		t.Fatal("Root from no service succeeded")
	}
	for i := range 2 {
		if _, err := c3.Get(ctx, all[i]); err == nil || !strings.Contains(err.Error(), refused) {
			t.Fatalf("Get %d from no service and no store: %v; want an error naming the service's failure", i, err)
		}
	}
	// Neither store nor service.
	if _, err := Open(ctx, Options{DB: "db1"}); err == nil {
		t.Fatal("Open with no store and no service succeeded")
	}
	// Strictly fresh: the service checks the store's manifest first.
	cf := open(t, Options{DB: "db1", Service: url, FreshRoot: true})
	if root, err := cf.Root(ctx); err != nil || root != db.Root {
		t.Fatalf("fresh Root = %s, %v", root, err)
	}
}

// TestOpenThroughService: a client given the service and a store opens
// the database's current version through the service alone: the root
// and every chunk come from it, and the store is not touched (no
// manifest read) unless the service fails.
func TestOpenThroughService(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 30})
	srv := startHTTP(t, s, cache.ReadThrough)
	ctx := context.Background()
	c := open(t, Options{Store: s, DB: "db1", Service: srv.URL, ServiceTimeout: -1})
	root, err := c.Root(ctx)
	if err != nil || root != db.Root {
		t.Fatalf("Root = %s, %v", root, err)
	}
	getMany(t, c, db, db.All())
	if st := c.Stats(); st.ManifestLoads != 0 || st.Store.Requests != 0 || st.TablesOpened != 0 || st.Service.Chunks != int64(len(db.All())) {
		t.Fatalf("want nothing from the store: %v (manifest loads %d, tables opened %d)", st, st.ManifestLoads, st.TablesOpened)
	}
	// Strictly fresh: the service checks the store's manifest first.
	cf := open(t, Options{Store: s, DB: "db1", Service: srv.URL, FreshRoot: true})
	if root, err := cf.Root(ctx); err != nil || root != db.Root {
		t.Fatalf("fresh Root = %s, %v", root, err)
	}
	// The service gone: the root comes from the store's manifest.
	c2 := open(t, Options{Store: s, DB: "db1", Service: "http://" + testnet.Refused(t)})
	if root, err := c2.Root(ctx); err != nil || root != db.Root {
		t.Fatalf("Root with the service down = %s, %v", root, err)
	}
	if st := c2.Stats(); st.ManifestLoads == 0 {
		t.Fatalf("service down: the manifest was not read: %v", st)
	}
}
