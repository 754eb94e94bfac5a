//go:build cgo

package sqlchunks

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
)

// BenchmarkSeedQueryTiers runs the seed query (gen.SeedQuery) the way a
// fresh `chunkd sql` process would: every iteration opens a new client
// (client.Open, OpenVersion), so no memory tier or
// SQLite page cache is warm, and runs the query once. Tiers:
//
//   - file: the plain database file (a new sql.DB each time; the OS page
//     cache is warm, as it is for the folder store below);
//   - store: a folder store, no service;
//   - service-disk: an in-process cache service (HTTP on loopback) that
//     has downloaded every table file and keeps no chunks in memory;
//   - service-mem: the same with the service's memory tier warm;
//
// each with read-ahead off and at 64 pages (sqlitevfs.Options.ReadAhead). It
// reports ms/query (open included), open-ms/query (client, manifest, page
// map and registration) and reqs/query (service requests plus store
// reads). The data set is about 25 MB (CHUNKD_BENCH_SENTENCES, default
// 160000 sentences).
func BenchmarkSeedQueryTiers(b *testing.B) {
	ctx := context.Background()
	path := sqltest.BenchCorpus(b, 160000)
	s := newFolder(b)
	res, err := Import(ctx, s, path, ImportOptions{DB: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("data set: %d pages of %d bytes (%.1f MB), imported in %v as %d chunks, table file %.1f MB",
		res.Pages, res.PageSize, float64(res.Pages*int64(res.PageSize))/1e6, res.Elapsed.Round(time.Millisecond), res.Chunks, float64(res.TableBytes)/1e6)

	diskCache, diskURL := startService(b, s, 1)
	memCache, memURL := startService(b, s, 0)
	for _, svc := range []string{diskURL, memURL} {
		if _, err := seedQueryFresh(ctx, s, svc, sqlitevfs.DefaultReadAhead); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []*cache.Cache{diskCache, memCache} {
		if err := c.WaitCached(ctx, "bench", 20*time.Second, nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, svc := range []string{diskURL, memURL} { // now from disk, and into memory
		if _, err := seedQueryFresh(ctx, s, svc, sqlitevfs.DefaultReadAhead); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("file", func(b *testing.B) {
		for b.Loop() {
			db, err := sql.Open(sqlitevfs.DriverName, "file:"+path+"?mode=ro")
			if err != nil {
				b.Fatal(err)
			}
			if _, rows, err := scanAll(db, gen.SeedQuery); err != nil || rows == 0 {
				b.Fatalf("%d rows, %v", rows, err)
			}
			db.Close()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/query")
	})
	for _, tier := range []struct {
		name, svc string
	}{{"store", ""}, {"service-disk", diskURL}, {"service-mem", memURL}} {
		for _, ra := range []int{-1, 64} {
			name := fmt.Sprintf("%s/readahead=%d", tier.name, max(ra, 0))
			b.Run(name, func(b *testing.B) {
				var open time.Duration
				var reqs int64
				for b.Loop() {
					st, err := seedQueryFresh(ctx, s, tier.svc, ra)
					if err != nil {
						b.Fatal(err)
					}
					open += st.open
					reqs += st.reqs
				}
				n := float64(b.N)
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/n, "ms/query")
				b.ReportMetric(float64(open.Microseconds())/1e3/n, "open-ms/query")
				b.ReportMetric(float64(reqs)/n, "reqs/query")
			})
		}
	}
}

type freshStats struct {
	open time.Duration
	reqs int64
}

// seedQueryFresh runs the seed query through a new client, as a new
// process would.
func seedQueryFresh(ctx context.Context, s store.Store, svc string, readAhead int) (freshStats, error) {
	start := time.Now()
	c, err := client.Open(ctx, client.Options{Store: s, DB: "bench", Service: svc, LocalDir: client.NoLocalDir, Logger: quietLog()})
	if err != nil {
		return freshStats{}, err
	}
	defer c.Close()
	db, err := OpenVersion(ctx, c, addr.Addr{}, &sqlitevfs.Options{ReadAhead: readAhead})
	if err != nil {
		return freshStats{}, err
	}
	defer db.Close()
	st := freshStats{open: time.Since(start)}
	if _, rows, err := scanAll(db.DB, gen.SeedQuery); err != nil || rows == 0 {
		return st, fmt.Errorf("%d rows, %v", rows, err)
	}
	cs := c.Stats()
	st.reqs = cs.Service.Requests + cs.Store.Requests
	return st, nil
}
