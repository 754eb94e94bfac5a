package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
)

func getJSON(t *testing.T, method, url string, into any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// TestCacheView reads a database through every tier and checks what
// GET /v1/cache and GET /v1/dbs say, then drops its files.
func TestCacheView(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20, Files: 2}, cache.Config{MemBytes: 64 << 20, DiskBytes: 1 << 30})
	srv := httptest.NewServer(newAPI(f))
	defer srv.Close()

	var dbs []api.DBSummary
	if code := getJSON(t, "GET", srv.URL+api.DBsPath, &dbs); code != 200 || len(dbs) != 0 {
		t.Fatalf("before any read: %d %+v", code, dbs)
	}
	a0, a1 := f.DB.Files[0].Addrs[0], f.DB.Files[1].Addrs[0]
	f.Get(a0) // store (read through), starts the downloads
	f.Get(a1)
	f.WaitCached()
	f.Get(a0)                     // memory
	f.Get(f.DB.Files[0].Addrs[1]) // disk

	// The memory tier's weight is its cache's (otter) estimate, brought up
	// to date by the cache's maintenance, which runs in the background:
	// wait for it to count the chunks kept above.
	var sum api.CacheSummary
	deadline := time.Now().Add(time.Minute)
	for {
		if code := getJSON(t, "GET", srv.URL+api.CachePath, &sum); code != 200 {
			t.Fatalf("GET /v1/cache: %d", code)
		}
		if sum.Memory.Used > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := api.TierCounts{Memory: 1, Disk: 1, Store: 2}
	if sum.Served != want || sum.HitRatio != 0.5 {
		t.Errorf("served %+v ratio %v, want %+v and 0.5", sum.Served, sum.HitRatio, want)
	}
	if sum.Memory.Budget != 64<<20 || sum.Memory.Used <= 0 || sum.Disk.Budget != 1<<30 || sum.Disk.Files != 2 || sum.Disk.Used <= 0 || sum.StoreBytes <= 0 || sum.StoreReads < 2 || sum.Databases != 1 || sum.Downloads != 0 {
		t.Errorf("summary %+v", sum)
	}

	if code := getJSON(t, "GET", srv.URL+api.DBsPath, &dbs); code != 200 || len(dbs) != 1 {
		t.Fatalf("GET /v1/dbs: %d %+v", code, dbs)
	}
	d := dbs[0]
	if d.Name != "db1" || d.State != api.DBLoaded || d.Files != 2 || d.FilesCached != 2 || d.BytesCached != d.Bytes || d.Served != want || d.Root == "" {
		t.Errorf("db1: %+v", d)
	}

	// Gauges of memory and disk in use.
	mf, err := f.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauges := map[string]float64{}
	for _, m := range mf {
		if len(m.Metric) == 1 && m.Metric[0].Gauge != nil {
			gauges[m.GetName()] = m.Metric[0].Gauge.GetValue()
		}
	}
	if gauges["chunkd_memory_bytes"] <= 0 || gauges["chunkd_memory_budget_bytes"] != 64<<20 || gauges["chunkd_disk_files"] != 2 || gauges["chunkd_disk_budget_bytes"] != 1<<30 {
		t.Errorf("gauges %v", gauges)
	}

	// Drop the database's files: gone from disk, and the next read of an
	// uncached chunk goes to the store again.
	var drop api.DropResult
	if code := getJSON(t, "DELETE", srv.URL+api.DropCachePath("db1"), &drop); code != 200 || drop.Files != 2 || drop.Bytes != d.Bytes {
		t.Fatalf("DELETE cache: %d %+v", code, drop)
	}
	getJSON(t, "GET", srv.URL+api.DBsPath, &dbs)
	if dbs[0].FilesCached != 0 || dbs[0].BytesCached != 0 {
		t.Errorf("after the drop: %+v", dbs[0])
	}
	if r := f.Get(f.DB.Files[1].Addrs[5]); r.Tier != api.TierStore {
		t.Errorf("read after the drop from %v, want the store", r.Tier)
	}
	if code := getJSON(t, "DELETE", srv.URL+api.DropCachePath(".."), nil); code != 400 {
		t.Errorf("DELETE a bad name: %d", code)
	}
	if code := getJSON(t, "DELETE", srv.URL+api.DropCachePath("nosuch"), nil); code != 404 {
		t.Errorf("DELETE a database the store does not have: %d, want 404", code)
	}

	// After a restart the database is known from the cache directory.
	f.WaitCached(f.DB.Files[1])
	f.Open(cache.Config{})
	srv2 := httptest.NewServer(newAPI(f))
	defer srv2.Close()
	getJSON(t, "GET", srv2.URL+api.DBsPath, &dbs)
	if len(dbs) != 1 || dbs[0].State != api.DBOnDisk || dbs[0].FilesCached != 1 {
		t.Errorf("after a restart: %+v", dbs)
	}
}
