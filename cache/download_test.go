package cache

import (
	"context"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
)

// await waits for bytes the download is about to bring, and not for a
// download that will not bring them: one that ended, one still waiting
// for a download slot, or when the store's round trip is not known.
func TestDownloadAwait(t *testing.T) {
	ctx := context.Background()
	const rtt = time.Minute // long: only a wrong decision could wait it out
	idle := &download{}
	if idle.await(ctx, 1, rtt) {
		t.Fatal("a download waiting for a slot brought bytes")
	}
	flowing := &download{}
	flowing.begun.Store(time.Now().UnixNano())
	flowing.flowing.Store(time.Now().UnixNano())
	flowing.arrived.Store(100)
	if !flowing.await(ctx, 100, 0) {
		t.Fatal("bytes already arrived were not found")
	}
	if flowing.await(ctx, 200, 0) {
		t.Fatal("waited with no store round trip known")
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		flowing.arrived.Store(300)
	}()
	if !flowing.await(ctx, 200, rtt) {
		t.Fatal("the bytes the download brought next were not waited for")
	}
	flowing.over.Store(true)
	if flowing.await(ctx, 400, rtt) {
		t.Fatal("a download that stopped brought bytes")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	starting := &download{}
	starting.begun.Store(time.Now().UnixNano())
	if starting.await(canceled, 1, rtt) {
		t.Fatal("a canceled read waited")
	}
}

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
