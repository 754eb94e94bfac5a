package cache

import (
	"context"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
)

// A cold read of an appendix file starts its download with the read
// through the store, and the next read, of bytes near the file's start,
// waits for the download rather than paying another round trip to the
// store (a SQLite version's open set lies there).
func TestAppendixReadWaitsForDownload(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20, Files: 1, Appendix: true}, Config{})
	const rtt = 100 * time.Millisecond
	c := newCache(t, Config{Store: store.WithLatency(f.fs, rtt, 0), CacheDir: t.TempDir(), MemBytes: 1})
	ctx := context.Background()
	appendix := f.db.Files[0].Addrs
	first, err := c.GetChunk(ctx, "db1", appendix[0])
	if err != nil || first.Tier != api.TierStore {
		t.Fatalf("first read: tier %v, %v; want the store", first.Tier, err)
	}
	next, err := c.GetChunk(ctx, "db1", appendix[1])
	if err != nil || !next.Found || next.Tier == api.TierStore {
		t.Fatalf("second read: tier %v, %v; want the download's (partial or disk)", next.Tier, err)
	}
}
