package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/internal/faultstore"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The campaign of issue 10, as tests: whatever is flipped in a cached
// file, whatever a database's files claim, no byte the service returns
// fails to hash to its address.

// doltService is a service over a folder store holding the real Dolt
// remotes of testdata/dolt: "arc" (a v3 archive and a classic file) and
// "cls" (classic files), the same data.
type doltService struct {
	t      *testing.T
	fs     *faultstore.Store
	dir    string
	cache  *Cache
	chunks map[string]map[addr.Addr]int // db -> address -> length
}

func newDoltService(t *testing.T, cfg Config) *doltService {
	t.Helper()
	ctx := context.Background()
	s := testdb.NewStore(t)
	ds := &doltService{t: t, fs: &faultstore.Store{Store: s}, dir: t.TempDir(), chunks: map[string]map[addr.Addr]int{}}
	for db, src := range map[string]string{"arc": "remote-archive", "cls": "remote-classic"} {
		dir := doltfixtures.Path(src)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tsv") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Put(ctx, db+"/"+e.Name(), b); err != nil {
				t.Fatal(err)
			}
		}
		ds.chunks[db] = doltfixtures.DirChunks(t, dir)
	}
	ds.open(cfg)
	return ds
}

func (ds *doltService) open(cfg Config) {
	ds.t.Helper()
	cfg.Store, cfg.CacheDir = ds.fs, ds.dir
	if cfg.MemBytes == 0 {
		cfg.MemBytes = 1 // nothing in memory unless a test wants it
	}
	ds.cache = newCache(ds.t, cfg)
}

func (ds *doltService) restart(cfg Config) {
	ds.t.Helper()
	ds.cache.Close()
	ds.open(cfg)
}

// readAll reads every chunk of db, one at a time and in one batch, and
// fails the test on any byte that does not hash to its address. It
// returns how many reads were errors (allowed: a corrupt store copy).
func (ds *doltService) readAll(db string) (errs int) {
	ds.t.Helper()
	ctx := context.Background()
	var as []addr.Addr
	for a := range ds.chunks[db] {
		as = append(as, a)
	}
	for _, a := range as {
		r, err := ds.cache.GetChunk(ctx, db, a)
		switch {
		case err != nil:
			errs++
		case !r.Found:
			ds.t.Fatalf("%s: chunk %s the database holds not found", db, a)
		case addr.Of(r.Data) != a:
			ds.t.Fatalf("%s: WRONG BYTES for %s from tier %v", db, a, r.Tier)
		}
	}
	err := ds.cache.GetChunks(ctx, db, as, func(i int, r Result) error {
		if r.Found && addr.Of(r.Data) != as[i] {
			ds.t.Fatalf("%s: WRONG BYTES for %s from tier %v (batch)", db, as[i], r.Tier)
		}
		return nil
	}, nil)
	if err != nil {
		errs++
	}
	return errs
}

// waitCached waits until every file of db is on disk.
func (ds *doltService) waitCached(db string) {
	ds.t.Helper()
	if err := ds.cache.WaitCached(context.Background(), db, time.Minute, nil); err != nil {
		ds.t.Fatal(err)
	}
}

func (ds *doltService) corrupt() float64 { return testutil.ToFloat64(ds.cache.metrics.corrupt) }

// cachedPath is the cached copy of db's file whose name starts with
// prefix.
func (ds *doltService) cachedPath(db, prefix string) string {
	ds.t.Helper()
	m, _ := filepath.Glob(filepath.Join(ds.dir, api.CacheTablesDir, db, prefix+"*"))
	if len(m) != 1 {
		ds.t.Fatalf("cached copies %s/%s*: %v", db, prefix, m)
	}
	return m[0]
}

// flip flips one bit of byte off of the file at path.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x08
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// spots returns offsets in a cached file worth flipping: the middle of a
// chunk's data, of the index, the footer, and (archives) a dictionary.
func spots(t *testing.T, path string) map[string]int64 {
	_, tab := testdb.ReadTable(t, path)
	size := tab.Size()
	es := tab.Entries()
	e := es[len(es)/2]
	out := map[string]int64{
		"data":   int64(e.Offset) + int64(e.Length)/2,
		"index":  tab.DataEnd() + (size-tab.DataEnd())/3,
		"footer": size - 12,
	}
	for _, e := range es {
		if e.Dict != 0 {
			out["dictionary"] = dictOffset(es, e.Dict)
			break
		}
	}
	return out
}

// dictOffset returns an offset inside dictionary span id: between the end
// of the spans before it and the start of those after it.
func dictOffset(es []tablefile.Entry, id uint32) int64 {
	var lo, hi uint64 = 0, 1 << 62
	for _, e := range es {
		if e.Span < id {
			lo = max(lo, e.End())
		} else if e.Span > id {
			hi = min(hi, e.Offset)
		}
	}
	return int64(lo + (hi-lo)/2)
}

// TestBitFlipsNeverServed flips a bit in the data, index, footer and (for
// the archive) dictionary of cached classic and archive files, while the
// service runs and across restarts: no read returns a byte that does not
// hash to its address, the copy is dropped and counted, and it heals.
func TestBitFlipsNeverServed(t *testing.T) {
	for _, tc := range []struct{ db, file string }{{"arc", "afhahvjm"}, {"cls", "ksk59qv6"}} {
		probe := newDoltService(t, Config{})
		probe.readAll(tc.db)
		probe.waitCached(tc.db)
		path := probe.cachedPath(tc.db, tc.file)
		clean, _ := os.ReadFile(path)
		probe.cache.Close()
		for what, off := range spots(t, path) {
			for _, restart := range []bool{false, true} {
				name := tc.db + "/" + what
				if restart {
					name += "/restart"
				}
				t.Run(name, func(t *testing.T) {
					ds := newDoltService(t, Config{})
					if ds.readAll(tc.db) != 0 {
						t.Fatal("errors on a clean store")
					}
					ds.waitCached(tc.db)
					path := ds.cachedPath(tc.db, tc.file)
					flip(t, path, off)
					if restart {
						ds.restart(Config{})
					}
					if errs := ds.readAll(tc.db); errs != 0 {
						t.Fatalf("%d reads failed: the store's copy is clean", errs)
					}
					// Running, the index and dictionary are already in
					// memory, so only a data flip is met; the others are
					// caught when the file is next opened.
					if ds.corrupt() == 0 {
						ds.restart(Config{})
						if errs := ds.readAll(tc.db); errs != 0 {
							t.Fatalf("%d reads failed after a restart", errs)
						}
					}
					if ds.corrupt() == 0 {
						t.Fatalf("flip at %d (%s) never caught", off, what)
					}
					ds.waitCached(tc.db) // healed: downloaded again
					if now, _ := os.ReadFile(ds.cachedPath(tc.db, tc.file)); !bytes.Equal(now, clean) {
						t.Fatal("the copy downloaded again differs from the store's")
					}
					if ds.readAll(tc.db) != 0 {
						t.Fatal("errors after healing")
					}
				})
			}
		}
	}
}

// TestForgedChunkStaysInItsDatabase: a database whose table file holds
// forged bytes under an address (a valid record and CRC, written with the
// table-file writer) never serves them, and they never reach another
// database through the shared memory tier, whichever reads first.
func TestForgedChunkStaysInItsDatabase(t *testing.T) {
	ctx := context.Background()
	s := testdb.NewStore(t)
	honest := testdb.MustMake(t, s, "honest", testdb.Options{Chunks: 20})
	// "evil" holds the same addresses, chunk 3 forged.
	victim := honest.Files[0].Addrs[3]
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	for _, a := range honest.Files[0].Addrs {
		data := honest.Chunks[a]
		if a == victim {
			data = []byte("forged bytes under someone else's address")
		}
		if err := w.AddWithAddr(a, data); err != nil {
			t.Fatal(err)
		}
	}
	name, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "evil/"+name, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	man, err := s.Get(ctx, "honest/manifest")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "evil/manifest", bytes.ReplaceAll(man, []byte(honest.Files[0].Name), []byte(name))); err != nil {
		t.Fatal(err)
	}
	for _, order := range [][]string{{"evil", "honest"}, {"honest", "evil"}} {
		t.Run(strings.Join(order, "-first-"), func(t *testing.T) {
			c := newCache(t, Config{Store: s, CacheDir: t.TempDir()})
			for round := 0; round < 3; round++ {
				for _, db := range order {
					r, err := c.GetChunk(ctx, db, victim)
					switch {
					case err == nil && r.Found && !bytes.Equal(r.Data, honest.Chunks[victim]):
						t.Fatalf("round %d: %s served the forged bytes (tier %v)", round, db, r.Tier)
					case db == "honest" && (err != nil || !r.Found):
						t.Fatalf("round %d: honest database: %v", round, err)
					case db == "evil" && err != nil && KindOf(err) != KindCorrupt:
						t.Fatalf("round %d: evil database: %v, want a corrupt-store error", round, err)
					}
				}
				time.Sleep(20 * time.Millisecond) // let downloads run
			}
			// Read first, the forged file is found out; read second, the
			// evil database is answered from memory with the honest
			// bytes, which the address names whoever holds it.
			if want := map[string]float64{"evil": 1, "honest": 0}[order[0]]; testutil.ToFloat64(c.metrics.storeCorrupt) != want {
				t.Fatalf("store corrupt files = %v, want %v", testutil.ToFloat64(c.metrics.storeCorrupt), want)
			}
		})
	}
}

// TestDeniedStoreServesDisk: a service restarted while the store denies
// access serves its files on disk from the database's saved state, and
// says so in Ready.
func TestDeniedStoreServesDisk(t *testing.T) {
	ds := newDoltService(t, Config{})
	ds.readAll("cls")
	ds.waitCached("cls")
	ds.fs.Deny.Store(true)
	ds.restart(Config{})
	if errs := ds.readAll("cls"); errs != 0 {
		t.Fatalf("%d reads failed with the store denying access and every file on disk", errs)
	}
	// Only now has anything asked the store (the manifest refresh, in the
	// background): wait for its answer to be noted.
	deadline := time.Now().Add(time.Minute)
	for {
		ok, note := ds.cache.Ready()
		if ok && strings.Contains(note, "denied") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready = %v, %q", ok, note)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := ds.cache.GetChunk(context.Background(), "arc", addr.Of([]byte("x")))
	if KindOf(err) != KindStoreDenied {
		t.Fatalf("uncached database, store denying: %v", err)
	}
	ds.fs.Deny.Store(false)
	if errs := ds.readAll("arc"); errs != 0 {
		t.Fatal("errors once the store allows access again")
	}
	if ok, note := ds.cache.Ready(); !ok || note != "" {
		t.Fatalf("Ready after recovery = %v, %q", ok, note)
	}
}

// TestBlackHoledStoreRestart: after a restart with a store that never
// answers, a chunk on disk is served at once, not after the store's
// timeout. That timeout is ten minutes, and the read is given one: a read
// that waited on the store cannot pass, nor a slow machine fail it.
func TestBlackHoledStoreRestart(t *testing.T) {
	ds := newDoltService(t, Config{})
	ds.readAll("cls")
	ds.waitCached("cls")
	ds.fs.Hang.Store(true)
	const storeTimeout = 10 * time.Minute
	ds.restart(Config{StoreTimeout: storeTimeout})
	var a addr.Addr
	for a = range ds.chunks["cls"] {
		break
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		r   Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := ds.cache.GetChunk(ctx, "cls", a)
		got <- answer{r, err}
	}()
	select {
	case ans := <-got:
		if ans.err != nil || addr.Of(ans.r.Data) != a {
			t.Fatalf("chunk on disk, store black-holed: %v", ans.err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("first read after restart still waiting after a minute (store timeout %v): it waited on the store", storeTimeout)
	}
	ds.fs.Hang.Store(false)
}

// TestCacheDirLocked: a second service on the same cache directory fails
// at start, naming the holder's pid, and leaves the first one's
// downloads alone.
func TestCacheDirLocked(t *testing.T) {
	ds := newDoltService(t, Config{})
	_, err := New(Config{Store: ds.fs, CacheDir: ds.dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "in use by another chunkd") || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second service on the same directory: %v", err)
	}
	if errs := ds.readAll("arc"); errs != 0 {
		t.Fatal("the first service failed")
	}
	ds.waitCached("arc")
	ds.cache.Close()
	c, err := New(Config{Store: ds.fs, CacheDir: ds.dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	c.Close()
}

// TestFailpoints: a download whose fsync or rename fails leaves nothing
// half committed: no file without its sums, nothing served from disk, and
// the next download succeeds.
func TestFailpoints(t *testing.T) {
	for _, point := range []string{"sync", "rename-sums", "rename-tables"} {
		t.Run(point, func(t *testing.T) {
			ds := newDoltService(t, Config{})
			h := ds.cache.disk.hooks
			var fail atomic.Bool
			fail.Store(true)
			injected := errors.New("injected failure")
			switch point {
			case "sync":
				h.sync = func(f *os.File) error {
					if fail.Load() {
						return injected
					}
					return f.Sync()
				}
			default:
				h.rename = func(from, to string) error {
					if fail.Load() && strings.Contains(to, "/"+strings.TrimPrefix(point, "rename-")+"/") {
						return injected
					}
					return os.Rename(from, to)
				}
			}
			ds.readAll("cls")
			deadline := time.Now().Add(time.Minute)
			for testutil.ToFloat64(ds.cache.metrics.downloads.WithLabelValues("failed")) < 1 {
				if time.Now().After(deadline) {
					t.Fatal("no download failed")
				}
				time.Sleep(5 * time.Millisecond)
			}
			// Nothing committed: no table without sums, tmp/ empty once
			// the failed downloads are gone.
			files, _ := filepath.Glob(filepath.Join(ds.dir, api.CacheTablesDir, "cls", "*"))
			for _, f := range files {
				key := strings.TrimPrefix(f, filepath.Join(ds.dir, api.CacheTablesDir)+"/")
				if _, err := os.Stat(filepath.Join(ds.dir, api.CacheSumsDir, key)); err != nil {
					t.Fatalf("%s committed without its sums", key)
				}
			}
			fail.Store(false)
			ds.restart(Config{})
			ds.readAll("cls")
			ds.waitCached("cls")
			tmps, _ := os.ReadDir(filepath.Join(ds.dir, api.CacheTmpDir))
			if len(tmps) != 0 {
				t.Fatalf("tmp/ holds %d files", len(tmps))
			}
		})
	}
}

// TestPartialReaderOutlivesCommit: a reader of a download's part holds
// its own reference: the download committing, and the cached file being
// evicted at once, does not close the handle under it.
func TestPartialReaderOutlivesCommit(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 100}, Config{MemBytes: 1})
	file := f.db.Files[0]
	f.fs.HoldAt.Store(file.Size / 2)
	f.get(file.Addrs[0])
	tab := f.cache.dbs["db1"].tables[0]
	waitArrived(t, tab, file.Size/2)
	dl := tab.acquireDownload(false)
	if dl == nil {
		t.Fatal("no download to hold")
	}
	f.fs.Gate.Open()
	f.waitDownloads(1)
	if _, ok := f.cache.disk.evictOne(); !ok {
		t.Fatal("the committed file could not be evicted")
	}
	buf := make([]byte, 64)
	if _, err := dl.f.ReadAt(buf, 0); err != nil {
		t.Fatalf("the partial reader's handle: %v", err)
	}
	tab.releaseDownload(dl)
	if _, err := dl.f.ReadAt(buf, 0); err == nil {
		t.Fatal("the download's handle is still open after its last reader")
	}
}
