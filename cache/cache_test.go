package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/faultstore"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/folder"
	_ "github.com/chunkd/chunkd/store/folder"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fixture struct {
	t     testing.TB
	fs    *faultstore.Store
	db    *testdb.DB
	dir   string
	cache *Cache
}

func newFixture(t testing.TB, o testdb.Options, cfg Config) *fixture {
	t.Helper()
	s := testdb.NewStore(t)
	db := testdb.MustMake(t, s, "db1", o)
	f := &fixture{t: t, fs: &faultstore.Store{Store: s}, db: db, dir: t.TempDir()}
	f.open(cfg)
	return f
}

// newCache starts a cache with cfg for the test, logging nothing unless
// cfg has a logger; it is closed when the test ends.
func newCache(t testing.TB, cfg Config) *Cache {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) open(cfg Config) {
	f.t.Helper()
	cfg.Store = f.fs
	cfg.CacheDir = f.dir
	f.cache = newCache(f.t, cfg)
}

func (f *fixture) get(a addr.Addr) Result {
	f.t.Helper()
	r, err := f.cache.GetChunk(context.Background(), "db1", a)
	if err != nil {
		f.t.Fatalf("GetChunk(%s): %v", a, err)
	}
	if r.Found && !bytes.Equal(r.Data, f.db.Chunks[a]) {
		f.t.Fatalf("GetChunk(%s): wrong bytes", a)
	}
	return r
}

func (f *fixture) counter(name string) float64 {
	return testutil.ToFloat64(f.cache.metrics.downloads.WithLabelValues(name))
}

// waitDownloads waits until n downloads have finished or failed.
func (f *fixture) waitDownloads(n int) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for f.counter("finished")+f.counter("failed") < float64(n) {
		if time.Now().After(deadline) {
			f.t.Fatalf("downloads: started %v finished %v failed %v", f.counter("started"), f.counter("finished"), f.counter("failed"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReadThroughThenDisk(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 50}, Config{MemBytes: 1}) // memory too small to hold anything
	a := f.db.Files[0].Addrs[7]
	if r := f.get(a); !r.Found || r.Tier != api.TierStore {
		t.Fatalf("first read: %+v", r.Tier)
	}
	f.waitDownloads(1)
	if f.counter("finished") != 1 {
		t.Fatalf("download failed")
	}
	for _, a := range f.db.Files[0].Addrs {
		if r := f.get(a); r.Tier != api.TierDisk {
			t.Fatalf("after download: tier %v", r.Tier)
		}
	}
	if got := testutil.ToFloat64(f.cache.metrics.diskReads); got != 50 {
		t.Fatalf("disk reads = %v for 50 chunks", got)
	}
	// Missing chunk: not found, no error.
	if r := f.get(addr.Of([]byte("absent"))); r.Found {
		t.Fatal("absent chunk found")
	}
}

func TestMemoryTier(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{})
	a := f.db.Files[0].Addrs[0]
	f.get(a)
	if r := f.get(a); r.Tier != api.TierMemory {
		t.Fatalf("second read tier %v", r.Tier)
	}
}

// TestSingleFlight: 100 concurrent misses on a file start one download,
// which writes each of its bytes once.
func TestSingleFlight(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 200}, Config{MemBytes: 1})
	w := f.recordWrites()
	var wg sync.WaitGroup
	addrs := f.db.Files[0].Addrs
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			f.get(addrs[i])
		}(i)
	}
	wg.Wait()
	f.waitDownloads(1)
	if s := f.counter("started"); s != 1 {
		t.Fatalf("100 concurrent misses started %v downloads", s)
	}
	if n := w.most(); n != 1 {
		t.Fatalf("a byte of the download was written %d times", n)
	}
}

// writeLog records the writes of downloads.
type writeLog struct {
	mu     sync.Mutex
	writes [][2]int64 // [offset, end)
}

// recordWrites records the writes of the cache's downloads from now on.
func (f *fixture) recordWrites() *writeLog {
	w := &writeLog{}
	write := f.cache.disk.hooks.writeAt
	f.cache.disk.hooks.writeAt = func(file *os.File, b []byte, off int64) (int, error) {
		w.mu.Lock()
		w.writes = append(w.writes, [2]int64{off, off + int64(len(b))})
		w.mu.Unlock()
		return write(file, b, off)
	}
	return w
}

// at counts the writes that covered byte off.
func (w *writeLog) at(off int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.atLocked(off)
}

// most returns the most times any byte was written.
func (w *writeLog) most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	most := 0
	for _, x := range w.writes {
		most = max(most, w.atLocked(x[0]))
	}
	return most
}

func (w *writeLog) atLocked(off int64) int {
	n := 0
	for _, x := range w.writes {
		if x[0] <= off && off < x[1] {
			n++
		}
	}
	return n
}

// TestReadsDuringDownload: while a download's stream is held half way,
// chunks in the half that arrived are served from the download (partial),
// each proven once; chunks past it are fetched by the readers themselves
// (one ranged read per block, filling the download) without waiting for
// the held stream; and the file is committed once every block is proven,
// its chunks then served from disk.
func TestReadsDuringDownload(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 100}, Config{MemBytes: 1, hedge: fastHedge})
	file := f.db.Files[0]
	half := file.Size / 2
	f.fs.HoldAt.Store(half)
	first := f.get(file.Addrs[0]) // starts the download
	if first.Tier != api.TierStore {
		t.Fatalf("first read tier %v", first.Tier)
	}
	tab := f.cache.dbs["db1"].tables[0]
	dl := waitArrived(t, tab, half)
	arrived := dl.blockFloor(half)
	var partial, store int
	for _, a := range file.Addrs {
		e, _ := tab.idx.Lookup(a)
		r := f.get(a)
		switch {
		case r.Tier == api.TierPartial:
			partial++
		case int64(e.End()) <= arrived:
			t.Fatalf("chunk ending at %d, in the blocks that arrived (to %d), served from %v", e.End(), arrived, r.Tier)
		case r.Tier == api.TierStore:
			store++ // fetched into the download by this read
		default:
			t.Fatalf("chunk ending at %d served from %v", e.End(), r.Tier)
		}
	}
	if partial == 0 || store == 0 {
		t.Fatalf("partial %d store %d", partial, store)
	}
	f.fs.Gate.Open()
	f.waitDownloads(1)
	if f.counter("finished") != 1 {
		t.Fatalf("the download did not finish: failed %v", f.counter("failed"))
	}
	if r := f.get(file.Addrs[99]); r.Tier != api.TierDisk {
		t.Fatalf("after download: %v", r.Tier)
	}
	// Each chunk was hashed once for the file (the first read's read
	// through the store aside).
	if got, most := testutil.ToFloat64(f.cache.metrics.proofs), len(file.Addrs)+1+f.provedTwiceAtMost(); got > float64(most) {
		t.Fatalf("%v chunk proofs for a file of %d chunks read once through the store (at most %d: a reader and the prover may prove one block both)", got, len(file.Addrs), most)
	}
}

// fastHedge is the hedging of tests whose store answers in microseconds:
// a deadline of a few milliseconds from the start.
var fastHedge = store.HedgeOptions{Initial: 5 * time.Millisecond}

// waitArrived waits until the download of tab has written its first n
// bytes, and returns it.
func waitArrived(t *testing.T, tab *table, n int64) *download {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		tab.mu.Lock()
		dl := tab.dl
		tab.mu.Unlock()
		if dl != nil {
			<-dl.ready
			if dl.m != nil && dl.arrivedBytes() >= dl.blockFloor(n) {
				return dl
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("download never reached the hold point")
		}
		time.Sleep(time.Millisecond)
	}
}

// arrivedBytes is the bytes of the blocks written (or proven) so far.
func (dl *download) arrivedBytes() int64 {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	var n int64
	for b, st := range dl.state {
		if st >= blockArrived {
			lo, hi := dl.m.span(b)
			n += hi - lo
		}
	}
	return n
}

// blockOf returns the block holding byte off.
func (dl *download) blockOf(off int64) int {
	i, _ := dl.m.covering(off, off+1)
	return i
}

// blockFloor is the end of the last block that ends at or before off.
func (dl *download) blockFloor(off int64) int64 {
	i := dl.blockOf(off)
	lo, hi := dl.m.span(i)
	if hi <= off {
		return hi
	}
	return lo
}

// TestWaitCached: WaitCached returns once the files it waits for are on
// disk, and when it gives up it names the ones that are not.
func TestWaitCached(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20, Files: 2}, Config{})
	ctx := context.Background()
	first, second := f.db.Files[0], f.db.Files[1]
	f.fs.HoldAt.Store(100)
	f.get(first.Addrs[0]) // starts the first file's download, held after 100 bytes
	err := f.cache.WaitCached(ctx, "db1", 50*time.Millisecond, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), first.Name) || !strings.Contains(err.Error(), second.Name) {
		t.Fatalf("waiting for a held download: %v", err)
	}
	f.fs.Gate.Open()
	isFirst := func(ti api.TableInfo) bool { return ti.Name == first.Name }
	if err := f.cache.WaitCached(ctx, "db1", time.Minute, isFirst); err != nil {
		t.Fatalf("waiting for the first file: %v", err)
	}
	err = f.cache.WaitCached(ctx, "db1", 10*time.Millisecond, func(api.TableInfo) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "no table file") {
		t.Fatalf("waiting for no file: %v", err)
	}
	if err := f.cache.WaitCached(ctx, "nosuch", time.Second, nil); KindOf(err) != KindUnknownDB {
		t.Fatalf("waiting for an unknown database: %v", err)
	}
}

func TestFailedDownloadServesNothingPartial(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 100}, Config{MemBytes: 1})
	file := f.db.Files[0]
	f.fs.HoldAt.Store(file.Size / 2)
	f.fs.Gate.FailOnOpen()
	f.get(file.Addrs[0])
	f.fs.Gate.Open()
	f.waitDownloads(1)
	if f.counter("failed") != 1 {
		t.Fatal("download did not fail")
	}
	if r := f.get(file.Addrs[0]); r.Tier == api.TierDisk || r.Tier == api.TierPartial {
		t.Fatalf("served from a failed download: %v", r.Tier)
	}
	tmps, _ := os.ReadDir(filepath.Join(f.dir, tmpDir))
	tables, _ := os.ReadDir(filepath.Join(f.dir, tablesDir))
	if len(tables) != 0 {
		t.Fatalf("failed download left %d files in tables/", len(tables))
	}
	_ = tmps // a retry may be in flight; it would be a new temp file
}

// TestStalledDownloadIsAbandoned: a store that stops sending mid-file
// fails the download after StoreTimeout instead of holding its slot.
// StoreTimeout bounds every store request, the reads that must succeed
// too: 2 s, so a loaded machine does not time them out.
func TestStalledDownloadIsAbandoned(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 30}, Config{MemBytes: 1, StoreTimeout: 2 * time.Second})
	f.fs.HoldAt.Store(100) // never released
	f.get(f.db.Files[0].Addrs[0])
	f.waitDownloads(1)
	if f.counter("failed") != 1 || f.cache.disk.fileCount() != 0 {
		t.Fatalf("stalled download: failed %v, %d files on disk", f.counter("failed"), f.cache.disk.fileCount())
	}
	if got := f.cache.disk.usedBytes(); got != 0 {
		t.Fatalf("%d bytes still reserved", got)
	}
	// Reads keep working from the store.
	if r := f.get(f.db.Files[0].Addrs[1]); r.Tier != api.TierStore {
		t.Fatalf("after a stalled download: %v", r.Tier)
	}
}

func TestRestartKeepsCache(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 30, Files: 2}, Config{MemBytes: 1})
	for _, file := range f.db.Files {
		f.get(file.Addrs[0])
	}
	f.waitDownloads(2)
	f.cache.Close()
	f.open(Config{MemBytes: 1})
	if n := f.cache.disk.fileCount(); n != 2 {
		t.Fatalf("after restart %d files on disk", n)
	}
	if _, err := f.cache.DBInfo(context.Background(), "db1"); err != nil {
		t.Fatal(err)
	}
	f.fs.Down.Store(true) // the store is gone: everything must come from disk
	for _, file := range f.db.Files {
		for _, a := range file.Addrs {
			if r := f.get(a); r.Tier != api.TierDisk {
				t.Fatalf("after restart: %v", r.Tier)
			}
		}
	}
}

// A database loaded with its files on disk but no saved state (a cache
// dir from before states were saved, or one lost) looks each file up in
// the store by its size alone: it does not read the index's bytes from
// the store, since the copy on disk has them.
func TestLoadReadsNoIndexOnDisk(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 30, Files: 2}, Config{MemBytes: 1})
	for _, file := range f.db.Files {
		f.get(file.Addrs[0])
	}
	f.waitDownloads(2)
	f.cache.Close()
	if err := os.RemoveAll(filepath.Join(f.dir, api.CacheDBsDir)); err != nil {
		t.Fatal(err)
	}
	reads := &readCounting{Store: f.fs}
	f.cache = newCache(t, Config{Store: reads, CacheDir: f.dir, MemBytes: 1})
	info, err := f.cache.DBInfo(context.Background(), "db1")
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range info.Tables {
		if ti.State != api.StateCached {
			t.Fatalf("%s: %v after the load, want cached", ti.Name, ti.State)
		}
	}
	if n := reads.bytes.Load(); n != 0 {
		t.Fatalf("the load read %d bytes of table files from the store, want none: the files are on disk", n)
	}
}

// readCounting counts the bytes of table files read with ReadAt.
type readCounting struct {
	store.Store
	bytes atomic.Int64
}

func (r *readCounting) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	n, err := r.Store.ReadAt(ctx, key, p, off)
	if !strings.HasPrefix(path.Base(key), "manifest") {
		r.bytes.Add(int64(n))
	}
	return n, err
}

// TestRestartWithStoreDown: a service restarted while the store is
// unreachable serves the files it has on disk, from the database state it
// saved; a chunk it cannot place is an unreachable-store error, not
// "absent"; when the store is back, the rest is read through again.
func TestRestartWithStoreDown(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 30, Files: 2}, Config{MemBytes: 1})
	onDisk, elsewhere := f.db.Files[0], f.db.Files[1]
	f.get(onDisk.Addrs[0])
	f.waitDownloads(1)
	f.cache.Close()
	f.fs.Down.Store(true)
	f.open(Config{MemBytes: 1})
	for _, a := range onDisk.Addrs {
		if r := f.get(a); r.Tier != api.TierDisk {
			t.Fatalf("store down after restart: %v", r.Tier)
		}
	}
	info, err := f.cache.DBInfo(context.Background(), "db1")
	if err != nil || info.Root != f.db.Root.String() || len(info.Tables) != 1 || info.Tables[0].State != "cached" {
		t.Fatalf("DBInfo offline: %+v, %v", info, err)
	}
	for _, a := range []addr.Addr{elsewhere.Addrs[0], addr.Of([]byte("absent"))} {
		if _, err := f.cache.GetChunk(context.Background(), "db1", a); !errors.Is(err, ErrStoreUnreachable) {
			t.Fatalf("chunk not on disk, store down: %v", err)
		}
	}
	if _, err := f.cache.HasChunks(context.Background(), "db1", []addr.Addr{elsewhere.Addrs[0]}); !errors.Is(err, ErrStoreUnreachable) {
		t.Fatalf("HasChunks of a chunk not on disk, store down: %v", err)
	}
	f.fs.Down.Store(false)
	if r := f.get(elsewhere.Addrs[1]); r.Tier != api.TierStore {
		t.Fatalf("store back: %v", r.Tier)
	}
	if r := f.get(addr.Of([]byte("absent"))); r.Found {
		t.Fatal("absent chunk found")
	}

	// Without a saved state (a database never loaded), the store is needed.
	f.cache.Close()
	f.fs.Down.Store(true)
	if err := os.RemoveAll(filepath.Join(f.dir, api.CacheDBsDir)); err != nil {
		t.Fatal(err)
	}
	f.open(Config{MemBytes: 1})
	if _, err := f.cache.GetChunk(context.Background(), "db1", onDisk.Addrs[0]); !errors.Is(err, ErrStoreUnreachable) {
		t.Fatalf("no saved state, store down: %v", err)
	}
}

// TestBrokenFileDoesNotHideOthers: a table file whose index cannot be
// read does not keep the database's other files from being served; a
// chunk in none of them is an error (it may be in the broken file), and
// once the file is readable again a refresh opens it.
func TestBrokenFileDoesNotHideOthers(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20, Files: 2}, Config{MemBytes: 1, ManifestTTL: 20 * time.Millisecond})
	ctx := context.Background()
	good, bad := f.db.Files[0], f.db.Files[1]
	orig, err := f.fs.Get(ctx, bad.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.fs.Put(ctx, bad.Key, bytes.Repeat([]byte{7}, len(orig))); err != nil {
		t.Fatal(err)
	}
	f.cache.Close()
	f.open(Config{MemBytes: 1, ManifestTTL: 20 * time.Millisecond})
	if r := f.get(good.Addrs[0]); !r.Found {
		t.Fatal("chunk of the good file not found")
	}
	for _, a := range []addr.Addr{bad.Addrs[0], addr.Of([]byte("absent"))} {
		_, err := f.cache.GetChunk(ctx, "db1", a)
		if err == nil || !strings.Contains(err.Error(), "could not be opened") || !strings.Contains(err.Error(), bad.Name) {
			t.Fatalf("chunk not in the readable file: %v", err)
		}
	}
	if err := f.fs.Put(ctx, bad.Key, orig); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // past ManifestTTL: the next miss refreshes
	if r := f.get(bad.Addrs[0]); !r.Found {
		t.Fatal("repaired file's chunk not found")
	}
	if r := f.get(addr.Of([]byte("absent"))); r.Found {
		t.Fatal("absent chunk found")
	}

	// A file missing from the store (and not cached): its chunks are
	// unknown, never a 404 (which reads as "absent").
	if err := f.fs.Delete(ctx, bad.Key); err != nil {
		t.Fatal(err)
	}
	f.cache.Close()
	for _, sub := range []string{api.CacheTablesDir, api.CacheSumsDir} {
		os.Remove(filepath.Join(f.dir, sub, filepath.FromSlash(bad.Key)))
	}
	f.open(Config{MemBytes: 1, ManifestTTL: 20 * time.Millisecond})
	f.get(good.Addrs[1])
	_, err = f.cache.GetChunk(ctx, "db1", bad.Addrs[2])
	if k := KindOf(err); err == nil || k != KindUnknownChunk { // never a kind that reads as "absent"
		t.Fatalf("chunk of a file missing from the store: %v (kind %v)", err, k)
	}
}

// TestOlderLayoutIsDropped: files in a cache dir without the layout
// marker may not have been hashed, so the service removes them.
func TestOlderLayoutIsDropped(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 30}, Config{MemBytes: 1})
	f.get(f.db.Files[0].Addrs[0])
	f.waitDownloads(1)
	f.cache.Close()
	marker := filepath.Join(f.dir, api.CacheLayoutFile)
	if b, err := os.ReadFile(marker); err != nil || string(b) != api.CacheLayout {
		t.Fatalf("marker: %q, %v", b, err)
	}
	f.open(Config{MemBytes: 1})
	if n := f.cache.disk.fileCount(); n != 1 {
		t.Fatalf("same layout: %d files after restart", n)
	}
	f.cache.Close()
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	f.open(Config{MemBytes: 1})
	if n := f.cache.disk.fileCount(); n != 0 {
		t.Fatalf("older layout: %d files kept", n)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != api.CacheLayout {
		t.Fatalf("marker not rewritten: %q, %v", b, err)
	}
	if r := f.get(f.db.Files[0].Addrs[1]); r.Tier != api.TierStore {
		t.Fatalf("dropped file served from %v", r.Tier)
	}
}

// TestDownloadChecksAddresses: a file whose records pass their CRCs but
// hold a chunk under the wrong address is never put on disk.
func TestDownloadChecksAddresses(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20}, Config{MemBytes: 1})
	file := f.db.Files[0]
	// Rewrite the file with the same addresses (so the same name and key),
	// the first one holding other bytes under a valid CRC.
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	for i, a := range file.Addrs {
		data := f.db.Chunks[a]
		if i == 0 {
			data = bytes.Repeat([]byte("wrong"), 100)
		}
		if err := w.AddWithAddr(a, data); err != nil {
			t.Fatal(err)
		}
	}
	if name, err := w.Finish(); err != nil || name != file.Name {
		t.Fatalf("rewritten file is %s (%v), want %s", name, err, file.Name)
	}
	if err := f.fs.Put(context.Background(), file.Key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	f.cache.Close()
	f.open(Config{MemBytes: 1})
	f.get(file.Addrs[5])
	f.waitDownloads(1)
	if f.counter("failed") != 1 || f.cache.disk.fileCount() != 0 {
		t.Fatalf("download of a mislabelled chunk: failed %v, %d files on disk", f.counter("failed"), f.cache.disk.fileCount())
	}
}

// TestCorruptCachedFileIsDropped: a cached file whose record goes bad
// after its download is dropped at the first read that sees it; that read
// and later ones come from the store, single and batched, and the file is
// downloaded again.
func TestCorruptCachedFileIsDropped(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 40}, Config{MemBytes: 1})
	file := f.db.Files[0]
	path := filepath.Join(f.dir, api.CacheTablesDir, filepath.FromSlash(file.Key))
	// flip corrupts one byte of the record of chunk a in the cached copy.
	flip := func(a addr.Addr) {
		t.Helper()
		b, tab := testdb.ReadTable(t, path)
		e, ok := tab.Lookup(a)
		if !ok {
			t.Fatalf("%s not in the cached file", a)
		}
		b[e.Offset+uint64(e.Length)/2] ^= 0x40
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	corrupt := func() float64 { return testutil.ToFloat64(f.cache.metrics.corrupt) }

	f.get(file.Addrs[0])
	f.waitDownloads(1)
	if r := f.get(file.Addrs[1]); r.Tier != api.TierDisk {
		t.Fatalf("after download: %v", r.Tier)
	}
	flip(file.Addrs[3])
	if r := f.get(file.Addrs[3]); !r.Found || r.Tier != api.TierStore { // get checks the bytes
		t.Fatalf("corrupt record: found %v from %v", r.Found, r.Tier)
	}
	if corrupt() != 1 {
		t.Fatalf("corrupt files = %v", corrupt())
	}
	f.waitDownloads(2)
	if f.counter("finished") != 2 || f.cache.disk.fileCount() != 1 {
		t.Fatalf("download again: finished %v, %d files", f.counter("finished"), f.cache.disk.fileCount())
	}
	if r := f.get(file.Addrs[3]); r.Tier != api.TierDisk {
		t.Fatalf("after the new download: %v", r.Tier)
	}

	// Batched: every chunk comes back right, the bad one from the store.
	flip(file.Addrs[20])
	tiers := map[api.Tier]int{}
	err := f.cache.GetChunks(context.Background(), "db1", file.Addrs, func(i int, r Result) error {
		if !r.Found || !bytes.Equal(r.Data, f.db.Chunks[file.Addrs[i]]) {
			t.Errorf("chunk %d wrong", i)
		}
		tiers[r.Tier]++
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if corrupt() != 2 || tiers[api.TierStore] == 0 {
		t.Fatalf("batch over a corrupt file: corrupt files %v, tiers %v", corrupt(), tiers)
	}
	f.waitDownloads(3)
	if f.cache.disk.fileCount() != 1 {
		t.Fatalf("%d files after the second download", f.cache.disk.fileCount())
	}
}

// TestEviction: with the disk full, a miss on another file reads
// through without downloading it until the bytes read through for it
// reach its size (admission); then it downloads, evicting the least
// recently used file and no more.
func TestEviction(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 40, Files: 3}, Config{MemBytes: 1})
	limit := f.db.Files[0].Size + f.db.Files[0].Size/2 // room for one file
	f.cache.Close()
	f.open(Config{MemBytes: 1, DiskBytes: limit})
	f.get(f.db.Files[0].Addrs[0]) // fits in free space: downloads on the first miss
	f.waitDownloads(1)
	for i, file := range f.db.Files[1:] {
		// Read through until the file has cost its size.
		n := 0
		for f.counter("started") == float64(i+1) {
			if r := f.get(file.Addrs[n%len(file.Addrs)]); r.Tier != api.TierStore {
				t.Fatalf("file %d before its download: %v", i+1, r.Tier)
			}
			n++
			if n > 10*len(file.Addrs) {
				t.Fatalf("file %d: no download after %d reads through", i+1, n)
			}
		}
		if n < len(file.Addrs)/2 {
			t.Fatalf("file %d downloaded after %d reads through of %d chunks: admission too eager", i+1, n, len(file.Addrs))
		}
		f.waitDownloads(i + 2)
		if f.counter("finished") != float64(i+2) {
			t.Fatalf("download %d failed", i+1)
		}
	}
	if ev := testutil.ToFloat64(f.cache.metrics.evictions); ev != 2 {
		t.Fatalf("evictions = %v, want 2", ev)
	}
	if used := f.cache.disk.usedBytes(); used > limit {
		t.Fatalf("disk use %d over limit %d", used, limit)
	}
	// The evicted first file is read through again, and not downloaded at
	// once: it must pay for itself again.
	if r := f.get(f.db.Files[0].Addrs[1]); r.Tier != api.TierStore {
		t.Fatalf("evicted file served from %v", r.Tier)
	}
	if f.counter("started") != 3 {
		t.Fatalf("evicted file downloaded again on its first miss")
	}
}

// TestRestartKeepsUseOrder: after a restart, the file evicted is the one
// least recently read, not the one downloaded first.
func TestRestartKeepsUseOrder(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 40, Files: 2}, Config{MemBytes: 1})
	for i, file := range f.db.Files {
		f.get(file.Addrs[0])
		f.waitDownloads(i + 1)
	}
	if r := f.get(f.db.Files[0].Addrs[1]); r.Tier != api.TierDisk { // the first file is now the last used
		t.Fatalf("first file: %v", r.Tier)
	}
	f.cache.Close()
	size := max(f.db.Files[0].Size, f.db.Files[1].Size)
	f.open(Config{MemBytes: 1, DiskBytes: size + size/2}) // room for one: one is evicted at startup
	if n := f.cache.disk.fileCount(); n != 1 {
		t.Fatalf("%d files after restart", n)
	}
	if r := f.get(f.db.Files[0].Addrs[2]); r.Tier != api.TierDisk {
		t.Fatalf("last used file: %v after restart", r.Tier)
	}
	if r := f.get(f.db.Files[1].Addrs[2]); r.Tier != api.TierStore {
		t.Fatalf("least recently used file: %v after restart", r.Tier)
	}
}

// TestDiskTooSmall: a file larger than --disk is never downloaded (and
// evicts nothing); its chunks are read through, however often.
func TestDiskTooSmall(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 40}, Config{MemBytes: 1, DiskBytes: 1000})
	for i := 0; i < 3; i++ {
		for _, a := range f.db.Files[0].Addrs {
			if r := f.get(a); !r.Found || r.Tier != api.TierStore {
				t.Fatalf("tier %v", r.Tier)
			}
		}
	}
	if f.counter("started") != 0 {
		t.Fatalf("%v downloads of a file larger than --disk", f.counter("started"))
	}
}

func TestStoreUnreachable(t *testing.T) {
	// The default StoreTimeout: a store that is down fails at once, and a
	// short timeout would only fail the reads before it on a busy machine.
	f := newFixture(t, testdb.Options{Chunks: 20, Files: 2}, Config{MemBytes: 1})
	f.get(f.db.Files[0].Addrs[0])
	f.waitDownloads(1)
	f.fs.Down.Store(true)
	if r := f.get(f.db.Files[0].Addrs[5]); r.Tier != api.TierDisk {
		t.Fatalf("cached file: %v", r.Tier)
	}
	_, err := f.cache.GetChunk(context.Background(), "db1", f.db.Files[1].Addrs[0])
	if !errors.Is(err, ErrStoreUnreachable) {
		t.Fatalf("miss with the store down: %v", err)
	}
}

func TestNotFoundPolicy(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20}, Config{MemBytes: 1, Miss: NotFound})
	a := f.db.Files[0].Addrs[3]
	if r := f.get(a); r.Found {
		t.Fatal("miss under NotFound policy was found")
	}
	f.waitDownloads(1)
	if r := f.get(a); !r.Found || r.Tier != api.TierDisk {
		t.Fatalf("after download: %+v", r)
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 5}, Config{})
	for _, db := range []string{"../etc", "a/../../b", "", "nope"} {
		_, err := f.cache.GetChunk(context.Background(), db, f.db.Files[0].Addrs[0])
		if err == nil {
			t.Fatalf("database %q accepted", db)
		}
		want := KindBadRequest
		if db == "nope" {
			want = KindUnknownDB
		}
		if got := KindOf(err); got != want {
			t.Fatalf("database %q: kind %v (%v), want %v", db, got, err, want)
		}
	}
}

func TestGetChunksBatch(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 50, Files: 2, Appendix: true}, Config{MemBytes: 1})
	all := f.db.All()
	addrs := append(all[:0:0], all...)
	addrs = append(addrs, addr.Of([]byte("absent")))
	seen := make([]int, len(addrs))
	err := f.cache.GetChunks(context.Background(), "db1", addrs, func(i int, r Result) error {
		seen[i]++
		if i == len(addrs)-1 {
			if r.Found {
				t.Error("absent chunk found")
			}
			return nil
		}
		if !r.Found || !bytes.Equal(r.Data, f.db.Chunks[addrs[i]]) {
			t.Errorf("chunk %d wrong", i)
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("address %d answered %d times", i, n)
		}
	}
	// The appendix holds everything, so it is the one file downloaded.
	f.waitDownloads(1)
	info, err := f.cache.DBInfo(context.Background(), "db1")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Tables[0].Appendix || info.Tables[0].State != "cached" {
		t.Fatalf("appendix not preferred: %+v", info.Tables)
	}
	for _, ti := range info.Tables[1:] {
		if ti.State != "remote" {
			t.Fatalf("non-appendix file downloaded: %+v", ti)
		}
	}
}

// A chunk in memory for one database is not an answer for another that
// does not hold it, in single and batched reads.
func TestMemoryTierRespectsDatabase(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 5}, Config{})
	testdb.MustMake(t, f.fs.Store, "other", testdb.Options{Chunks: 5, Seed: 9})
	a := f.db.Files[0].Addrs[0]
	f.get(a) // now in memory
	r, err := f.cache.GetChunk(context.Background(), "other", a)
	if err != nil || r.Found {
		t.Fatalf("single read from the other database: %+v %v", r.Found, err)
	}
	err = f.cache.GetChunks(context.Background(), "other", []addr.Addr{a}, func(i int, r Result) error {
		if r.Found {
			t.Fatal("batch answered from another database's memory")
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
}

// TestFileSystemFull: a download that finds the file system full (before
// the --disk budget is reached) evicts cached files no reader holds and
// goes on; when evicting the download's size did not help, it fails
// without emptying the cache, and nothing partial is served.
func TestFileSystemFull(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 30, Files: 3}, Config{MemBytes: 1})
	f.get(f.db.Files[0].Addrs[0])
	f.waitDownloads(1)
	var full atomic.Int32 // writes still to fail with ENOSPC
	write := f.cache.disk.hooks.writeAt
	f.cache.disk.hooks.writeAt = func(file *os.File, b []byte, off int64) (int, error) {
		if full.Add(-1) >= 0 {
			return 0, &os.PathError{Op: "write", Path: file.Name(), Err: syscall.ENOSPC}
		}
		return write(file, b, off)
	}
	full.Store(1)
	f.get(f.db.Files[1].Addrs[0])
	f.waitDownloads(2)
	if f.counter("finished") != 2 || testutil.ToFloat64(f.cache.metrics.evictions) != 1 {
		t.Fatalf("full once: finished %v, evictions %v", f.counter("finished"), testutil.ToFloat64(f.cache.metrics.evictions))
	}
	if r := f.get(f.db.Files[1].Addrs[1]); r.Tier != api.TierDisk {
		t.Fatalf("file downloaded after the eviction: %v", r.Tier)
	}
	if r := f.get(f.db.Files[0].Addrs[1]); r.Tier != api.TierStore {
		t.Fatalf("evicted file: %v", r.Tier)
	}

	// Full for good: files worth the download's size are evicted, then it
	// fails; the rest of the cache stays.
	f.waitDownloads(3) // the evicted file's new download
	evicted := testutil.ToFloat64(f.cache.metrics.evictions)
	full.Store(1 << 30)
	f.get(f.db.Files[2].Addrs[0])
	f.waitDownloads(4)
	n := testutil.ToFloat64(f.cache.metrics.evictions) - evicted
	if f.counter("failed") != 1 || n < 1 || f.cache.disk.fileCount() != 2-int(n) {
		t.Fatalf("full for good: failed %v, %v evicted, %d files left", f.counter("failed"), n, f.cache.disk.fileCount())
	}
	if r := f.get(f.db.Files[2].Addrs[1]); r.Tier != api.TierStore {
		t.Fatalf("after a failed download: %v", r.Tier)
	}
	var kept int64
	for _, file := range f.db.Files[:2] {
		if cf := f.cache.disk.get(file.Key); cf != nil {
			kept += cf.size
		}
	}
	if got := f.cache.disk.usedBytes(); got != kept {
		t.Fatalf("%d bytes in use, the files kept hold %d", got, kept)
	}
}

// TestCorruptInStoreToo: a record that fails its check from the store as
// well is not the cached copy's fault, so the file is kept (it would be
// downloaded and dropped again on every read).
func TestCorruptInStoreToo(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20}, Config{MemBytes: 1})
	ctx := context.Background()
	file := f.db.Files[0]
	f.get(file.Addrs[0])
	f.waitDownloads(1)
	local := filepath.Join(f.dir, api.CacheTablesDir, filepath.FromSlash(file.Key))
	b, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := f.cache.dbs["db1"].tables[0].idx.Lookup(file.Addrs[4])
	if !ok {
		t.Fatal("chunk not in the index")
	}
	b[e.Offset+uint64(e.Length)/2] ^= 0x40
	if err := os.WriteFile(local, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.fs.Put(ctx, file.Key, b); err != nil { // the same bad bytes in the store
		t.Fatal(err)
	}
	_, err = f.cache.GetChunk(ctx, "db1", file.Addrs[4])
	if !errors.Is(err, tablefile.ErrCorrupt) || KindOf(err) != KindCorrupt {
		t.Fatalf("corrupt everywhere: %v", err)
	}
	// The copy changed since it was verified: dropped, whatever the store
	// holds. The file is then never downloaded (its download would fail).
	if n := f.cache.disk.fileCount(); n != 0 || testutil.ToFloat64(f.cache.metrics.corrupt) != 1 {
		t.Fatalf("changed copy kept: %d files, corrupt %v", n, testutil.ToFloat64(f.cache.metrics.corrupt))
	}
	for _, a := range file.Addrs[5:] { // the other chunks prove themselves
		if r := f.get(a); r.Tier != api.TierStore {
			t.Fatalf("other chunks: %v", r.Tier)
		}
	}
	if started := f.counter("started"); started != 1 {
		t.Fatalf("%v downloads of a file whose store copy fails its proof", started)
	}
}

// downloading reports whether the table's download is in flight.
func (t *table) downloading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dl != nil
}

// countingStore counts the store calls by kind.
type countingStore struct {
	store.Store
	heads, opens, gets atomic.Int64
}

func (c *countingStore) Head(ctx context.Context, key string) (store.Info, error) {
	c.heads.Add(1)
	return c.Store.Head(ctx, key)
}

func (c *countingStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	c.opens.Add(1)
	return c.Store.Open(ctx, key)
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

// newVersion publishes a new version of db1 (another database's files
// and manifest, made from seed and copied over db1's) and returns it.
func (f *fixture) newVersion(t *testing.T, seed int64) *testdb.DB {
	t.Helper()
	ctx := context.Background()
	src := fmt.Sprintf("src%d", seed)
	next := testdb.MustMake(t, f.fs, src, testdb.Options{Chunks: 5, Seed: seed})
	objs, err := f.fs.List(ctx, src+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		b, err := f.fs.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.fs.Put(ctx, "db1/"+strings.TrimPrefix(o.Key, src+"/"), b); err != nil {
			t.Fatal(err)
		}
	}
	return next
}

// TestRoot: the root is answered from what the service holds while its
// manifest is younger than ManifestTTL; a fresh root costs one HEAD when
// the manifest has not changed, and sees a new version when it has; a
// store that cannot be asked gives the last root, marked stale.
func TestRoot(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: time.Hour})
	cs := &countingStore{Store: f.fs}
	f.cache.Close()
	c := newCache(t, Config{ManifestTTL: time.Hour, Store: cs, CacheDir: f.dir})
	info, err := c.Root(ctx, "db1", false)
	if err != nil || info.Root != f.db.Root.String() || info.AgeMS < 0 || info.Stale || info.TTLMS != time.Hour.Milliseconds() {
		t.Fatalf("Root: %+v, %v", info, err)
	}
	opens, heads := cs.opens.Load(), cs.heads.Load()
	if _, err := c.Root(ctx, "db1", false); err != nil || cs.opens.Load() != opens || cs.heads.Load() != heads {
		t.Fatalf("a second Root within the TTL asked the store: %v", err)
	}
	if info, err := c.Root(ctx, "db1", true); err != nil || info.Root != f.db.Root.String() || cs.heads.Load() != heads+1 || cs.opens.Load() != opens {
		t.Fatalf("fresh Root of an unchanged manifest: %+v, %v; heads %d→%d, opens %d→%d", info, err, heads, cs.heads.Load(), opens, cs.opens.Load())
	}
	// A new version in the store: a fresh root sees it.
	next := f.newVersion(t, 9)
	if info, err := c.Root(ctx, "db1", false); err != nil || info.Root != f.db.Root.String() {
		t.Fatalf("Root within the TTL: %+v, %v (the old root, by contract)", info, err)
	}
	if info, err := c.Root(ctx, "db1", true); err != nil || info.Root != next.Root.String() {
		t.Fatalf("fresh Root after a new version: %+v, %v; want %s", info, err, next.Root)
	}
	// The store goes away: the last root, stale.
	f.fs.Down.Store(true)
	if info, err := c.Root(ctx, "db1", true); err != nil || !info.Stale || info.Root != next.Root.String() {
		t.Fatalf("fresh Root with the store down: %+v, %v", info, err)
	}
}

// loadedCache is a cache over s, with an hour's ManifestTTL and an empty
// cache dir (db1 loads from the store: no saved state to serve while a
// background read checks the manifest), that has loaded db1.
func loadedCache(t *testing.T, s store.Store) *Cache {
	t.Helper()
	c := newCache(t, Config{ManifestTTL: time.Hour, Store: s, CacheDir: t.TempDir()})
	if _, err := c.Root(context.Background(), "db1", false); err != nil {
		t.Fatal(err)
	}
	return c
}

// freshRoot starts a fresh root request of db1 and returns its answer's
// channel.
func freshRoot(t *testing.T, c *Cache) <-chan api.RootInfo {
	ch := make(chan api.RootInfo, 1)
	go func() {
		info, err := c.Root(context.Background(), "db1", true)
		if err != nil {
			t.Error(err)
		}
		ch <- info
	}()
	return ch
}

// gatedStore holds a Head's answer, once armed, until released: a
// manifest check that has read the store and not yet returned.
type gatedStore struct {
	store.Store
	armed    atomic.Bool
	headed   chan struct{}
	released chan struct{}
}

func (g *gatedStore) Head(ctx context.Context, key string) (store.Info, error) {
	info, err := g.Store.Head(ctx, key)
	if g.armed.CompareAndSwap(true, false) {
		close(g.headed)
		<-g.released
	}
	return info, err
}

// waitGoroutines waits until n goroutines have fn on their stacks.
func waitGoroutines(t *testing.T, fn string, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if strings.Count(string(buf[:runtime.Stack(buf, true)]), fn) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines in %s never showed", n, fn)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFreshRootNotShared: a fresh root request that arrives while a fresh
// check of the manifest is under way, one that read the store before a
// new version was published, waits for it and checks again: it is
// answered the new version, never the check's older answer.
func TestFreshRootNotShared(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: time.Hour})
	g := &gatedStore{Store: f.fs, headed: make(chan struct{}), released: make(chan struct{})}
	c := loadedCache(t, g)
	g.armed.Store(true)
	first := freshRoot(t, c)
	<-g.headed // the first check has read the old manifest's version
	next := f.newVersion(t, 9)
	second := freshRoot(t, c)
	waitGoroutines(t, "cache.(*database).refreshNow(", 2) // the second request waits on the first check
	close(g.released)
	// The first is answered the root its check read, or a newer one if
	// the second's check published it first.
	if info := <-first; info.Root != f.db.Root.String() && info.Root != next.Root.String() {
		t.Fatalf("the first request: %+v, want %s or %s", info, f.db.Root, next.Root)
	}
	if info := <-second; info.Root != next.Root.String() {
		t.Fatalf("the second fresh request: %+v, want the new root %s (it asked after the first check read the store)", info, next.Root)
	}
}

// manifestGate holds, once armed, a full read of a manifest after it has
// read the bytes, until released.
type manifestGate struct {
	store.Store
	armed    atomic.Bool
	reached  chan struct{}
	released chan struct{}
}

func (g *manifestGate) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	rc, info, err := g.Store.Open(ctx, key)
	if err != nil || !strings.HasSuffix(key, "/manifest") || !g.armed.CompareAndSwap(true, false) {
		return rc, info, err
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	close(g.reached)
	<-g.released
	return io.NopCloser(bytes.NewReader(data)), info, err
}

// TestRootNeverGoesBack: a shared refresh (a miss's) that read version 1
// and a fresh one that reads version 2, published since, run one after
// the other: the root answered after both is version 2, never version 1
// published last.
func TestRootNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: time.Hour})
	g := &manifestGate{Store: f.fs, reached: make(chan struct{}), released: make(chan struct{})}
	c := loadedCache(t, g)
	d, err := c.database(ctx, "db1")
	if err != nil {
		t.Fatal(err)
	}
	f.newVersion(t, 21)
	g.armed.Store(true)
	shared := d.refreshOlder(0)
	<-g.reached // the shared refresh has read version 1
	v2 := f.newVersion(t, 22)
	fresh := freshRoot(t, c)
	waitGoroutines(t, "cache.(*database).refreshNow(", 1) // the fresh request waits on its read
	close(g.released)
	<-shared
	if info := <-fresh; info.Root != v2.Root.String() {
		t.Fatalf("fresh root %+v, want version 2 %s", info, v2.Root)
	}
	if info, err := c.Root(ctx, "db1", false); err != nil || info.Root != v2.Root.String() {
		t.Fatalf("root after both refreshes: %+v, %v; want version 2 %s", info, err, v2.Root)
	}
}

// TestRootKeptFresh: once a client asks for a database's root, the
// service re-checks its manifest ahead of time (every half TTL), so a
// later root request finds it younger than the TTL without asking the
// store itself; a database read only by address is not re-checked.
func TestRootKeptFresh(t *testing.T) {
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: ttl})
	testdb.MustMake(t, f.fs, "db2", testdb.Options{Chunks: 5, Seed: 9})
	cs := &countingStore{Store: f.fs}
	f.cache.Close()
	c := newCache(t, Config{ManifestTTL: ttl, Store: cs, CacheDir: f.dir})
	if _, err := c.Root(ctx, "db1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetChunk(ctx, "db2", f.db.All()[0]); err != nil { // db2 by address only
		t.Fatal(err)
	}
	checks := func() int64 { return cs.heads.Load() + cs.opens.Load() }
	before := checks()
	// Wait for several re-checks; the loop runs every ttl/2.
	deadline := time.Now().Add(time.Minute)
	for checks() < before+3 {
		if time.Now().After(deadline) {
			t.Fatalf("no manifest re-checks ahead of time: %d store reads", checks()-before)
		}
		time.Sleep(ttl / 4)
	}
	c.mu.Lock()
	db1, db2 := c.dbs["db1"], c.dbs["db2"]
	c.mu.Unlock()
	if !db1.fresh() {
		t.Fatal("db1's manifest is older than the TTL although it is kept fresh")
	}
	time.Sleep(2 * ttl)
	if db2.fresh() {
		t.Fatal("db2, read by address only, was re-checked ahead of time")
	}
	// (A fresh manifest is what lets a root request answer without the
	// store: the request's own refresh is a no-op then.)
	info, err := c.Root(ctx, "db1", false)
	if err != nil || info.AgeMS >= ttl.Milliseconds() {
		t.Fatalf("Root: %+v, %v: want an answer younger than the TTL", info, err)
	}
}

// TestRootWhileFreshStartsNothing: asking for the root of a database
// whose manifest is fresh starts no read (no goroutine or channel of a
// shared refresh): it is the root in memory. It allocated 7 times a call
// when it went through the shared refresh (a goroutine and a channel
// each time).
func TestRootWhileFreshStartsNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: time.Hour})
	if _, err := f.cache.Root(ctx, "db1", false); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { f.cache.Root(ctx, "db1", false) }); n > 2 {
		t.Errorf("Root of a fresh manifest: %v allocations a call, want at most 2", n)
	}
}

// TestStoreVanishes: a folder store whose directory is moved away while
// the service runs is unreachable, never "no such database": the files
// on disk are still served, the others fail with the store's kind, the
// root is the last one known (stale), and the service says it is
// degraded; the same after a restart with the store still gone.
func TestStoreVanishes(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 2}, Config{MemBytes: 1, ManifestTTL: 10 * time.Millisecond})
	ctx := context.Background()
	cached, other := f.db.Files[0], f.db.Files[1]
	f.get(cached.Addrs[0])
	if err := f.cache.WaitCached(ctx, "db1", time.Minute, func(ti api.TableInfo) bool { return ti.Name == cached.Name }); err != nil {
		t.Fatal(err)
	}
	root := f.fs.Store.(*folder.Store).Root()
	if err := os.Rename(root, root+".moved"); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		time.Sleep(20 * time.Millisecond) // past the TTL: the manifest is read again
		if r, err := f.cache.GetChunk(ctx, "db1", cached.Addrs[1]); err != nil || !r.Found {
			t.Errorf("%s: a chunk of the cached file: %+v, %v", when, r, err)
		}
		if _, err := f.cache.GetChunk(ctx, "db1", other.Addrs[1]); KindOf(err) != KindStoreUnreachable {
			t.Errorf("%s: a chunk of a file not cached: %v (kind %v), want store unreachable", when, err, KindOf(err))
		}
		if info, err := f.cache.Root(ctx, "db1", true); err != nil || !info.Stale || info.Root != f.db.Root.String() {
			t.Errorf("%s: root %+v, %v; want the last one, stale", when, info, err)
		}
		if _, err := f.cache.GetChunk(ctx, "never-loaded", other.Addrs[1]); KindOf(err) != KindStoreUnreachable {
			t.Errorf("%s: a database never loaded: %v (kind %v), want store unreachable", when, err, KindOf(err))
		}
		if ok, note := f.cache.Ready(); !ok || !strings.Contains(note, "does not exist") {
			t.Errorf("%s: ready %v, %q; want ready, degraded, saying the store does not exist", when, ok, note)
		}
	}
	check("moved away")
	f.cache.Close()
	f.open(Config{MemBytes: 1, ManifestTTL: 10 * time.Millisecond})
	check("after a restart")
}

// TestCheckVersion: a version published a moment ago is known at once
// (the manifest read again, not after its TTL); a root no version has,
// and the all-zero root, are "no such version"; a flood of unknown roots
// reads the manifest a bounded number of times.
func TestCheckVersion(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: time.Hour})
	cs := &countingStore{Store: f.fs}
	f.cache.Close()
	c := newCache(t, Config{ManifestTTL: time.Hour, Store: cs, CacheDir: f.dir})
	if err := c.CheckVersion(ctx, "db1", f.db.Root); err != nil {
		t.Fatalf("the current version: %v", err)
	}
	next := f.newVersion(t, 7)
	if err := c.CheckVersion(ctx, "db1", next.Root); err != nil {
		t.Fatalf("a version published a moment ago: %v", err)
	}
	for _, root := range []addr.Addr{{}, addr.Of([]byte("no version"))} {
		err := c.CheckVersion(ctx, "db1", root)
		if KindOf(err) != KindNoSuchVersion || !strings.Contains(err.Error(), root.String()) {
			t.Errorf("root %s: %v, want no such version naming it", root, err)
		}
	}
	// 40 unknown roots asked at once, then one after the other: each
	// waits for a read that began after it asked, and reads are spaced by
	// minFreshInterval, so the store sees few.
	before := cs.heads.Load() + cs.opens.Load() + cs.gets.Load()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.CheckVersion(ctx, "db1", addr.Of([]byte{byte(i)}))
		}()
	}
	wg.Wait()
	for i := range 5 {
		c.CheckVersion(ctx, "db1", addr.Of([]byte{byte(100 + i)}))
	}
	reads := cs.heads.Load() + cs.opens.Load() + cs.gets.Load() - before
	if limit := int64(time.Since(start)/minFreshInterval) + 2; reads > limit {
		t.Errorf("45 unknown roots in %v read the store %d times, want at most %d (one per %v)", time.Since(start), reads, limit, minFreshInterval)
	}
}

// TestNewVersionChunks: the chunks of a version published a moment ago
// are found by GetChunk, GetChunks and Locate at once, with the manifest
// younger than its TTL (they were "absent" until the TTL passed: a reader
// of the service alone failed on a version just published).
func TestNewVersionChunks(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{ManifestTTL: time.Hour})
	f.get(f.db.All()[0]) // the manifest is read, and fresh for an hour
	f.waitDownloads(1)   // (a download's end reads it again)
	// newVersion makes the manifest name only the new version's file:
	// each is checked before the next.
	next := f.newVersion(t, 20)
	a := next.Files[0].Addrs[0]
	if r, err := f.cache.GetChunk(ctx, "db1", a); err != nil || !r.Found || !bytes.Equal(r.Data, next.Chunks[a]) {
		t.Errorf("GetChunk of a new version's chunk: found %v, %v", r.Found, err)
	}
	next = f.newVersion(t, 21)
	b := next.Files[0].Addrs
	found := 0
	err := f.cache.GetChunks(ctx, "db1", append([]addr.Addr{addr.Of([]byte("in no version"))}, b...), func(i int, r Result) error {
		if i > 0 && r.Found && bytes.Equal(r.Data, next.Chunks[b[i-1]]) {
			found++
		}
		if i == 0 && r.Found {
			t.Error("GetChunks found an address no version has")
		}
		return nil
	}, nil)
	if err != nil || found != len(b) {
		t.Errorf("GetChunks of a new version's chunks: %d of %d found, %v", found, len(b), err)
	}
	next = f.newVersion(t, 22)
	locs, err := f.cache.Locate(ctx, "db1", next.Files[0].Addrs[:1])
	if err != nil || locs[0].File == "" {
		t.Errorf("Locate of a new version's chunk: %+v, %v", locs, err)
	}
}

// TestDropsFilesNoLongerNamed: a cached file the manifest stops naming
// (gc collected it, or merged it into another) leaves the disk once the
// manifest is read again; files still named stay.
func TestDropsFilesNoLongerNamed(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.Options{Chunks: 10}, Config{MemBytes: 1, ManifestTTL: time.Hour})
	old := f.db.Files[0]
	f.get(old.Addrs[0])
	f.waitDownloads(1)
	if f.cache.disk.get(old.Key) == nil {
		t.Fatal("the file was not cached")
	}
	next := f.newVersion(t, 9) // db1's manifest now names only the new version's file
	if _, err := f.cache.FreshRoot(ctx, "db1"); err != nil {
		t.Fatal(err)
	}
	if f.cache.disk.get(old.Key) != nil {
		t.Error("a cached file the manifest no longer names is still on disk")
	}
	a := next.Files[0].Addrs[0]
	if r, err := f.cache.GetChunk(ctx, "db1", a); err != nil || !r.Found || !bytes.Equal(r.Data, next.Chunks[a]) {
		t.Errorf("the new version's chunk: %+v, %v", r.Found, err)
	}
}

// A ranged stream of a store that has vanished (a folder moved away) is
// the store unreachable, as every other read is, not "no such object":
// else a download's stream would tell the service's health that the
// store answers.
func TestVanishedStoreStream(t *testing.T) {
	dir := t.TempDir()
	fs, err := folder.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := fs.Put(ctx, "obj", []byte("bytes")); err != nil {
		t.Fatal(err)
	}
	h := &storeHealth{}
	w := watchedStore{Store: fs, h: h, log: slog.New(slog.DiscardHandler)}
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	rc, err := w.OpenRange(ctx, "obj", 0, 5)
	if err == nil {
		rc.Close()
	}
	if KindOf(err) != KindStoreUnreachable || h.note() == "" {
		t.Fatalf("stream of a vanished store: %v (kind %v), health %q; want the store unreachable", err, KindOf(err), h.note())
	}
}
