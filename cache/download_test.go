package cache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// copyAll reads file key of db1 whole with FileReader.Copy.
func (f *fixture) copyAll(ctx context.Context, name string) ([]byte, FileStats, error) {
	r, err := f.cache.OpenFile(ctx, "db1", name)
	if err != nil {
		return nil, FileStats{}, err
	}
	var b bytes.Buffer
	st, err := r.Copy(ctx, &b, 0, r.Size())
	return b.Bytes(), st, err
}

// A whole-file read of a file whose download is held half way is answered
// from the download as its blocks arrive and, past the hold, from blocks
// it fetches itself, without waiting for the held stream; every byte is
// the store's, every chunk was hashed once, and the file is committed
// once the hold is released.
func TestCopyDuringDownload(t *testing.T) {
	// The hedge deadline is long (a reader gives up on a slow stream only
	// after it): on a loaded host a stream that is merely slow must not
	// send the reader to the store. The held stream is passed by, as
	// stalled, well before it.
	f := newFixture(t, testdb.Options{Chunks: 200}, Config{MemBytes: 1, hedge: store.HedgeOptions{Initial: 5 * time.Millisecond, Min: 5 * time.Second}})
	ctx := context.Background()
	file := f.db.Files[0]
	want, err := f.fs.Get(ctx, file.Key)
	if err != nil {
		t.Fatal(err)
	}
	f.fs.HoldAt.Store(file.Size / 2)
	got, st, err := f.copyAll(ctx, file.Name)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy: %d bytes (%+v), %v; want the store's %d", len(got), st, err, len(want))
	}
	if st.Partial != file.Size {
		t.Fatalf("copy %+v: want every byte from the download", st)
	}
	f.fs.Gate.Open()
	f.waitDownloads(1)
	if f.counter("finished") != 1 {
		t.Fatalf("download: failed %v", f.counter("failed"))
	}
	if got, most := testutil.ToFloat64(f.cache.metrics.proofs), len(file.Addrs)+f.provedTwiceAtMost(); got > float64(most) {
		t.Fatalf("%v chunk proofs for a file of %d chunks (at most %d: a reader and the prover may prove one block both)", got, len(file.Addrs), most)
	}
	got, st, err = f.copyAll(ctx, file.Name)
	if err != nil || !bytes.Equal(got, want) || st.Disk != file.Size {
		t.Fatalf("copy once downloaded: %d bytes, %+v, %v", len(got), st, err)
	}
}

// provedTwiceAtMost is how many chunks the cache's proofs may count twice
// for db1's first file: those of one block, which a reader may take over
// from the prover while it proves it.
func (f *fixture) provedTwiceAtMost() int {
	tab := f.cache.dbs["db1"].tables[0]
	m := newBlockMap(tab.idx.Units(0, uint64(tab.size)))
	most := 0
	for b := range m.count() {
		most = max(most, len(m.blockUnits(b, b+1)))
	}
	return most
}

// A read of a chunk near the end of a file whose download streams from
// the start, held, is served at once, by a read of its own block (which
// fills the download); the held stream does not fetch it again.
func TestDemandReadsFirst(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 400}, Config{MemBytes: 1, hedge: fastHedge})
	file := f.db.Files[0]
	w := f.recordWrites()
	f.fs.HoldAt.Store(1) // every stream holds after its first byte
	f.get(file.Addrs[0]) // read through; starts the download
	tab := f.cache.dbs["db1"].tables[0]
	if dl := tab.acquireDownload(true); dl == nil {
		t.Fatal("no download")
	} else {
		tab.releaseDownload(dl)
	}
	last := file.Addrs[len(file.Addrs)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := f.cache.GetChunk(ctx, "db1", last)
	if err != nil || r.Tier != api.TierStore {
		t.Fatalf("the last chunk: tier %v, %v; want it read into the download", r.Tier, err)
	}
	dl := tab.acquireDownload(false)
	e, _ := tab.idx.Lookup(last)
	b := dl.blockOf(int64(e.Offset))
	dl.mu.Lock()
	st := dl.state[b]
	dl.mu.Unlock()
	tab.releaseDownload(dl)
	if st != blockProven {
		t.Fatalf("the last chunk's block is %v, not proven", st)
	}
	if r := f.get(file.Addrs[len(file.Addrs)-2]); r.Tier != api.TierPartial {
		t.Fatalf("the chunk before it, in the same block: %v", r.Tier)
	}
	f.fs.Gate.Open()
	f.waitDownloads(1)
	if f.counter("finished") != 1 {
		t.Fatalf("download: failed %v", f.counter("failed"))
	}
	lo, _ := dl.m.span(b)
	if n := w.at(lo); n != 1 {
		t.Fatalf("the block a reader fetched was written %d times", n)
	}
}

// Whole-file readers of several files get them at the store's pace
// however few download slots there are: with one slot, held by a stream
// that never moves (every stream stops after its first byte), three files
// are read whole at once, from blocks the readers fetch themselves.
func TestSlotsDoNotLimitReaders(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 100, Files: 3}, Config{MemBytes: 1, Downloads: 1, StoreTimeout: 5 * time.Minute, hedge: fastHedge})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.fs.HoldAt.Store(1) // every stream stops after its first byte
	var wg sync.WaitGroup
	for _, file := range f.db.Files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want, _ := f.fs.Get(ctx, file.Key)
			got, _, err := f.copyAll(ctx, file.Name)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("copy %s: %d bytes, %v", file.Name, len(got), err)
			}
		}()
	}
	wg.Wait()
}

// A store that never answers one read in ten costs a reader the hedge
// deadline, not the store's timeout: cold reads of every chunk of a
// database, each allowed far less than StoreTimeout, all answer, and
// some were answered by a hedge.
func TestStallingStore(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 100, Files: 6}, Config{MemBytes: 1, StoreTimeout: 5 * time.Minute, hedge: fastHedge})
	f.fs.StallEvery.Store(10)
	for _, a := range f.db.All() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := f.cache.GetChunk(ctx, "db1", a)
		cancel()
		if err != nil || !bytes.Equal(r.Data, f.db.Chunks[a]) {
			t.Fatalf("GetChunk(%s): %v", a, err)
		}
	}
	st := f.cache.hedge.Stats()
	if f.fs.Stalled.Load() == 0 || st.Wins == 0 {
		t.Fatalf("%d reads stalled, hedges %+v", f.fs.Stalled.Load(), st)
	}
}

// A download whose readers went away is proven and committed at the
// service's own priority once they have been quiet for a while, even when
// the low-priority prover never gets a core (a busy host).
func TestQuietDownloadsCommit(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 200}, Config{MemBytes: 1})
	starved := make(chan struct{})
	f.cache.disk.hooks.background = func(func()) { <-starved }
	defer close(starved)
	f.get(f.db.Files[0].Addrs[0]) // starts the download, then nothing reads
	f.waitDownloads(1)
	if f.counter("finished") != 1 {
		t.Fatalf("download: failed %v", f.counter("failed"))
	}
	if r := f.get(f.db.Files[0].Addrs[1]); r.Tier != api.TierDisk {
		t.Fatalf("after the download: %v", r.Tier)
	}
}

// Closing the service in the middle of a download stops it, and leaves
// nothing partial: the next service on the directory downloads the file
// again and serves it from disk.
func TestCloseMidDownload(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 100}, Config{MemBytes: 1})
	file := f.db.Files[0]
	f.fs.HoldAt.Store(file.Size / 2)
	f.get(file.Addrs[0])
	waitArrived(t, f.cache.dbs["db1"].tables[0], file.Size/2)
	done := make(chan error)
	go func() { done <- f.cache.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close waits for a held download")
	}
	f.fs.HoldAt.Store(0)
	f.open(Config{MemBytes: 1})
	if tmps, _ := os.ReadDir(filepath.Join(f.dir, tmpDir)); len(tmps) != 0 {
		t.Fatalf("tmp/ holds %d files after a restart", len(tmps))
	}
	f.get(file.Addrs[1])
	f.waitDownloads(1)
	if r := f.get(file.Addrs[2]); r.Tier != api.TierDisk {
		t.Fatalf("after the restart's download: %v", r.Tier)
	}
}

// A point read of a chunk in a block a background stream wrote, not
// proven yet, proves that chunk alone (a lookup's wait is its own pages',
// not its block's); the rest of the block is proven later, each chunk
// once, and the file is committed.
func TestPointReadProvesItsChunk(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 200}, Config{MemBytes: 1, hedge: fastHedge})
	starved := make(chan struct{})
	f.cache.disk.hooks.background = func(func()) { <-starved } // the low-priority prover never runs
	defer close(starved)
	busy := make(chan struct{}) // readers stay active: the quiet prover waits
	go func() {
		for {
			f.cache.lastRead.Store(time.Now().UnixNano())
			select {
			case <-busy:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	file := f.db.Files[0]
	half := file.Size / 2
	f.fs.HoldAt.Store(half)
	f.get(file.Addrs[0]) // read through; starts the download
	tab := f.cache.dbs["db1"].tables[0]
	dl := waitArrived(t, tab, half)
	var u tablefile.Unit
	b := -1
	dl.mu.Lock()
	for x := range dl.state {
		us := dl.m.blockUnits(x, x+1)
		if dl.state[x] == blockArrived && len(us) > 1 && us[0].Kind == tablefile.UnitChunk {
			b, u = x, us[0]
			break
		}
	}
	dl.mu.Unlock()
	if b < 0 {
		close(busy)
		t.Fatal("no arrived block of several chunks")
	}
	before := testutil.ToFloat64(f.cache.metrics.proofs)
	if r := f.get(u.Entry.Addr); r.Tier != api.TierPartial {
		t.Fatalf("a chunk of an arrived block: %v", r.Tier)
	}
	if n := testutil.ToFloat64(f.cache.metrics.proofs) - before; n != 1 {
		t.Fatalf("%v chunk proofs for one chunk of a block of %d", n, len(dl.m.blockUnits(b, b+1)))
	}
	if r := f.get(u.Entry.Addr); r.Tier != api.TierPartial || testutil.ToFloat64(f.cache.metrics.proofs)-before != 1 {
		t.Fatalf("the same chunk again: %v, %v proofs", r.Tier, testutil.ToFloat64(f.cache.metrics.proofs)-before)
	}
	close(busy)
	f.fs.Gate.Open()
	f.waitDownloads(1)
	if f.counter("finished") != 1 {
		t.Fatalf("download: failed %v", f.counter("failed"))
	}
	if got, most := testutil.ToFloat64(f.cache.metrics.proofs), len(file.Addrs)+1+f.provedTwiceAtMost(); got > float64(most) {
		t.Fatalf("%v chunk proofs for a file of %d chunks (at most %d)", got, len(file.Addrs), most)
	}
	if r := f.get(u.Entry.Addr); r.Tier != api.TierDisk {
		t.Fatalf("after the download: %v", r.Tier)
	}
}

// A read of a good chunk whose block, read for it by the download, holds
// a corrupt one answers the good chunk (read through the store and proven
// alone); the download fails, and the corrupt chunk is an error.
func TestCorruptNeighbourInBlock(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20}, Config{MemBytes: 1, hedge: fastHedge})
	file := f.db.Files[0]
	last := len(file.Addrs) - 1
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	for i, a := range file.Addrs {
		data := f.db.Chunks[a]
		if i == last {
			data = bytes.Repeat([]byte("wrong"), 100) // a valid CRC, the wrong address
		}
		if err := w.AddWithAddr(a, data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := f.fs.Put(context.Background(), file.Key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	f.cache.Close()
	f.open(Config{MemBytes: 1, hedge: fastHedge})
	f.fs.HoldAt.Store(1) // streams hold after their first byte: reads fetch their own blocks
	defer f.fs.Gate.Open()
	f.get(file.Addrs[0])
	tab := f.cache.dbs["db1"].tables[0]
	dl := tab.acquireDownload(true)
	if dl == nil {
		t.Fatal("no download")
	}
	e, _ := tab.idx.Lookup(file.Addrs[last-1])
	bad, _ := tab.idx.Lookup(file.Addrs[last])
	if dl.blockOf(int64(e.Offset)) != dl.blockOf(int64(bad.Offset)) {
		t.Fatal("the two chunks are in different blocks")
	}
	tab.releaseDownload(dl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := f.cache.GetChunk(ctx, "db1", file.Addrs[last-1])
	if err != nil || !r.Found || !bytes.Equal(r.Data, f.db.Chunks[file.Addrs[last-1]]) {
		t.Fatalf("the good chunk beside a corrupt one: %v, %v", r.Tier, err)
	}
	if _, err := f.cache.GetChunk(ctx, "db1", file.Addrs[last]); KindOf(err) != KindCorrupt {
		t.Fatalf("the corrupt chunk: %v", err)
	}
}
