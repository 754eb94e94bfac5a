package service_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/service"
	"github.com/prometheus/client_golang/prometheus"
)

// TestChunkReadsTakeFastPath: with every feature's routes in place (SQL
// serving, the query API, the console, the Dolt remote), a plain chunk
// GET is answered on the HTTP/1.1 fast path, not handed to net/http (a
// route under /v1/dbs/ once turned the fast path off for every chunk read
// of chunkd serve, unseen by the tests of package httpapi alone).
func TestChunkReadsTakeFastPath(t *testing.T) {
	st := testdb.NewStore(t)
	db := testdb.MustMake(t, st, "db1", testdb.Options{Files: 1, Chunks: 10})
	reg := prometheus.NewRegistry()
	svc := start(t, service.Config{Cache: cache.Config{Store: st, CacheDir: t.TempDir(), NoFsync: true},
		HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0", DoltRemote: true, Registry: reg})
	const reads = 5
	for _, a := range db.All()[:reads] {
		resp, err := http.Get(svc.URL() + "/v1/dbs/db1/chunks/" + a.String())
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET chunk %s: %s", a, resp.Status)
		}
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() != nil {
				got[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	if got["chunkd_http_fast_requests_total"] != reads || got["chunkd_http_handed_connections_total"] != 0 {
		t.Errorf("%d chunk reads: %v answered on the fast path, %v connections handed to net/http; want %d and 0",
			reads, got["chunkd_http_fast_requests_total"], got["chunkd_http_handed_connections_total"], reads)
	}
}
