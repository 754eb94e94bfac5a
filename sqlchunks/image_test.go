package sqlchunks

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/store"
)

// sameHost is a cache service in this process with its cache directory,
// as a same-host client sees it.
type sameHost struct {
	s     store.Store
	dir   string
	cache *cache.Cache
	stop  func()
	srv   *httptest.Server
	cfg   cache.Config
	// imageBytes bounds the service's page images (0: the default).
	imageBytes int64
	// registrations counts the image registrations (POSTs with the
	// addresses) the service was sent, versionImages the opens of a
	// version's image by its root.
	registrations, versionImages atomic.Int64
	// handler is the running service's: a restart swaps it while the
	// test server may be answering a request.
	handler atomic.Pointer[http.Handler]
}

// sameHostImport imports a generated database (seed) as "img" and starts
// a same-host service over it: the plain file's connection and the host.
func sameHostImport(t *testing.T, seed, imageBytes int64) (*sql.DB, *sameHost) {
	s := newFolder(t)
	path := genDB(t, seed)
	importFile(t, s, path, ImportOptions{DB: "img", Message: "first"})
	return plainDB(t, path), startSameHost(t, s, imageBytes)
}

func startSameHost(t *testing.T, s store.Store, imageBytes int64) *sameHost {
	h := &sameHost{s: s, dir: t.TempDir(), cfg: cache.Config{Store: s, NoFsync: true}, imageBytes: imageBytes}
	h.start(t)
	t.Cleanup(h.close)
	return h
}

func (h *sameHost) start(t *testing.T) {
	cfg := h.cfg
	cfg.CacheDir = h.dir
	handler, c, stop := newService(t, cfg, h.imageBytes)
	h.cache, h.stop = c, stop
	h.handler.Store(&handler)
	if h.srv == nil {
		h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/images") {
				h.registrations.Add(1)
			}
			if strings.HasSuffix(r.URL.Path, "/sqlite/image") {
				h.versionImages.Add(1)
			}
			(*h.handler.Load()).ServeHTTP(w, r)
		}))
	}
}

// close stops the service (its test server stays, for a restart).
func (h *sameHost) close() {
	if h.stop != nil {
		h.stop()
		h.stop, h.cache = nil, nil
	}
}

// client is a fresh same-host process's client of db. (Each process reads
// its own pages: SQLite's page cache is per connection, and the client has
// no memory tier.)
func (h *sameHost) client(t *testing.T, db string) *client.Client {
	t.Helper()
	c, err := client.Open(context.Background(), client.Options{Store: h.s, DB: db, Service: h.srv.URL, LocalDir: h.dir, MemBytes: -1, ServiceTimeout: -1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// open opens the head of db as a fresh same-host process would
// (sqlchunks.Open, naming only the service: the client finds the
// service's directory and the version's page image by itself).
func (h *sameHost) open(t *testing.T, db string) (*client.Client, *sql.DB) {
	t.Helper()
	return h.openDir(t, db, "")
}

// openDir is open with the service's directory given as dir (Source.ServiceDir).
func (h *sameHost) openDir(t *testing.T, db, dir string) (*client.Client, *sql.DB) {
	t.Helper()
	v, err := Open(context.Background(), Source{Store: h.s, DB: db, Service: h.srv.URL, ServiceDir: dir, MemBytes: -1, ServiceTimeout: -1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := v.DB(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); v.Close() })
	return v.Client, d.DB
}

// waitImage waits until the service's background fill has filled every
// slot of the image files in dir.
func waitImage(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		full := false
		ms, _ := filepath.Glob(filepath.Join(dir, api.CacheImagesDir, "*.slots"))
		for _, m := range ms {
			b, _ := os.ReadFile(m)
			n := 0
			for i := 0; i+8 <= len(b); i += 8 {
				if binary.LittleEndian.Uint64(b[i:])&api.ImageSlotFilled != 0 {
					n++
				}
			}
			full = full || (len(b) > 0 && n == len(b)/8)
		}
		if full {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the image was never filled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPageImage: a same-host client reads its pages from the service's
// page image: the first process fills it (with requests), a later one
// reads every page with no request; results are the local file's; a
// corrupted image page is caught and filled again; an image cut short
// under a running client and a restarted service leave the client reading
// correctly (an evicted one: TestPageImageEvicted).
func TestPageImage(t *testing.T) {
	plain, h := sameHostImport(t, 3, 0)
	start := time.Now()
	lap := func(what string) { t.Logf("%s: %v", what, time.Since(start)); start = time.Now() }

	_, d1 := h.open(t, "img")
	sameResults(t, "first process", plain, d1, queries)
	lap("first process")
	waitImage(t, h.dir) // the service's background fill

	// A fresh process on the warm service: every page from the image,
	// which it opens by the version's root: two requests (where the
	// service's directory is, and the image), no page map (nor any other
	// chunk) read, no registration sent.
	opens := h.versionImages.Load()
	c2, d2 := h.open(t, "img")
	if st := c2.Stats(); h.versionImages.Load() != opens+1 || h.registrations.Load() != 0 || st.Service.Requests != 2 || st.Service.Chunks != 0 || st.Store.Requests != 0 {
		t.Fatalf("second process's open: %d version image opens, %d registrations (want 1 and none): %v", h.versionImages.Load()-opens, h.registrations.Load(), st)
	}
	// Its first point lookup walks down page 1 and interior pages read
	// from the image, which start no read-ahead run: it reads the pages
	// on its way down and the leaf (4 here), no batch (7 when the
	// interior pages started one).
	before := c2.Stats()
	var text string
	if err := d2.QueryRow(`SELECT Text FROM sentences WHERE SentenceId = 4242`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats().Sub(before); st.ImageReads == 0 || st.ImageReads > 4 {
		t.Fatalf("second process: a point lookup read %d pages of the image, want the few on its way down: %v", st.ImageReads, st)
	}
	before = c2.Stats()
	sameResults(t, "second process", plain, d2, queries)
	lap("second process")
	st := c2.Stats().Sub(before)
	if st.ImageReads == 0 || st.Service.Requests != 0 || st.Store.Requests != 0 || st.LocalReads != 0 {
		t.Fatalf("second process: want every page from the image, no request: %v", st)
	}

	// Corrupt a page of the image: the reader catches it (CRC) and has
	// the service fill it again.
	imgs, _ := filepath.Glob(filepath.Join(h.dir, api.CacheImagesDir, "*.img"))
	if len(imgs) != 1 {
		t.Fatalf("images: %v", imgs)
	}
	f, err := os.OpenFile(imgs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	for off := int64(0); off < fi.Size(); off += 4096 { // every page: whichever the queries read
		f.WriteAt([]byte{0x55, 0xaa}, off+100)
	}
	f.Close()
	c3, d3 := h.open(t, "img")
	sameResults(t, "corrupted image", plain, d3, queries)
	lap("corrupted image")
	if st := c3.Stats(); st.ImageBad == 0 || st.ImageFills == 0 {
		t.Fatalf("corrupted image: %v", st)
	}

	// Something cuts the image file short under a running client that has
	// mapped it: its mapped reads fault, which is caught; it reads on
	// correctly through the service.
	c5, d5 := h.open(t, "img")
	if err := os.Truncate(imgs[0], 0); err != nil {
		t.Fatal(err)
	}
	sameResults(t, "image cut short", plain, d5, queries)
	if st := c5.Stats(); st.ImageBad == 0 {
		t.Fatalf("image cut short: no fault caught: %v", st)
	}
	lap("image cut short")

	// The service restarts under running clients: their mappings still
	// read (the image is found again; one was cut short above), misses are
	// read through the tiers.
	h.close()
	h.start(t)
	sameResults(t, "after a service restart", plain, d2, queries)
	sameResults(t, "after a service restart, corrupted client", plain, d3, queries)
	lap("after a service restart, corrupted client")
	c4, d4 := h.open(t, "img") // and a new process gets a new image
	sameResults(t, "new process after the restart", plain, d4, queries)
	lap("new process after the restart")
	_ = c4
}

// TestPageImageEvicted: the service evicts a database's image (its budget
// taken by another database's) under a running client that reads from
// it: the client reads on correctly (what it mapped stays readable; a
// page that fails its CRC, which the service can no longer fill, comes
// through the other tiers), and a new process of that database gets an
// image again.
func TestPageImageEvicted(t *testing.T) {
	s := newFolder(t)
	pathA, pathB := genDB(t, 3), genDB(t, 4)
	importFile(t, s, pathA, ImportOptions{DB: "img", Message: "a"})
	importFile(t, s, pathB, ImportOptions{DB: "img2", Message: "b"})
	fa, err := os.Stat(pathA)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(pathB)
	if err != nil {
		t.Fatal(err)
	}
	// Room for either image, not for both.
	h := startSameHost(t, s, max(fa.Size(), fb.Size())+min(fa.Size(), fb.Size())/2)
	plainA, plainB := plainDB(t, pathA), plainDB(t, pathB)
	images := func() []string {
		m, _ := filepath.Glob(filepath.Join(h.dir, api.CacheImagesDir, "*.img"))
		return m
	}

	c1, d1 := h.open(t, "img")
	sameResults(t, "first database", plainA, d1, queries)
	first := images()
	if len(first) != 1 || c1.Stats().ImageReads+c1.Stats().ImageFills == 0 {
		t.Fatalf("first database: images %v, %v", first, c1.Stats())
	}
	waitImage(t, h.dir)
	// Rot in every page of the first image: a read of it that fails its
	// CRC asks the service to fill the slot again, which after the
	// eviction below it cannot do.
	f, err := os.OpenFile(first[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < fa.Size(); off += 4096 {
		f.WriteAt([]byte{0x55, 0xaa}, off+100)
	}
	f.Close()
	_, d2 := h.open(t, "img2") // evicts the first database's image
	sameResults(t, "second database", plainB, d2, queries)
	if now := images(); len(now) != 1 || now[0] == first[0] {
		t.Fatalf("images after the second database's: %v, want one, not %s", now, first[0])
	}
	before := c1.Stats()
	sameResults(t, "first database, its image evicted", plainA, d1, queries)
	if st := c1.Stats().Sub(before); st.ImageBad == 0 || st.Service.Chunks+st.LocalReads == 0 {
		t.Fatalf("first database after the eviction: want its rotten pages read through the other tiers: %v", st)
	}
	versionImages := h.versionImages.Load()
	c3, d3 := h.open(t, "img") // a new process: a new image of the first
	sameResults(t, "first database, a new process", plainA, d3, queries)
	if now := images(); len(now) != 1 || now[0] != first[0] || h.versionImages.Load() != versionImages+1 || c3.Stats().ImageReads+c3.Stats().ImageFills == 0 {
		t.Fatalf("a new process of the first database: images %v (want %s), %v", now, first[0], c3.Stats())
	}
	sameResults(t, "second database, its image evicted", plainB, d2, queries)
}

// TestPageImageMissing: with a budget too small for the image, or not
// reading the service's directory, the same-host client reads through
// the tiers; a directory given that is not the service's is an error.
func TestPageImageMissing(t *testing.T) {
	plain, h := sameHostImport(t, 4, 4096)  // an image of more than one page does not fit
	few := []string{queries[0], queries[5]} // reads through the service, page by page
	c, d := h.open(t, "img")
	// Without an image, page 1 and the interior pages come from the open
	// set, as they do for any client of a service: a point lookup costs
	// one request, its leaf.
	before := c.Stats()
	var text string
	if err := d.QueryRow(`SELECT Text FROM sentences WHERE SentenceId = 4242`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats().Sub(before); st.Service.Requests != 1 {
		t.Fatalf("image over budget: a point lookup made %d requests, want 1 (the leaf): %v", st.Service.Requests, st)
	}
	sameResults(t, "image over budget", plain, d, few)
	if st := c.Stats(); st.ImageReads+st.ImageFills != 0 || st.Service.Chunks == 0 {
		t.Fatalf("image over budget: %v", st)
	}
	// The service's directory not read (as from another host): through
	// the service, page by page.
	c, d = h.openDir(t, "img", client.NoLocalDir)
	sameResults(t, "the directory not read", plain, d, few)
	if st := c.Stats(); st.ImageReads+st.ImageFills != 0 || st.Service.Chunks == 0 {
		t.Fatalf("the directory not read: %v", st)
	}
	// A directory given that is not the service's: an error saying so,
	// not a silent read through the service.
	wrong := t.TempDir()
	if v, err := Open(context.Background(), Source{Store: h.s, DB: "img", Service: h.srv.URL, ServiceDir: wrong, Logger: quietLog()}); err == nil || !strings.Contains(err.Error(), wrong) {
		if v != nil {
			v.Close()
		}
		t.Fatalf("a directory not the service's: %v, want an error naming it", err)
	}
}

// TestVersionImageLying: a page image by version whose root chunk does
// not hash to the root it names, whose shape is not the version's, or
// that names another version than asked is not used: the version opens
// from its open set and reads right.
func TestVersionImageLying(t *testing.T) {
	plain, h := sameHostImport(t, 4, 0)
	ctx := context.Background()
	c := h.client(t, "img")
	defer c.Close()
	head, err := Head(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		root addr.Addr // asked for
		lie  func(head addr.Addr, data []byte, img *client.Image) (addr.Addr, []byte, ShapedImage)
	}{
		{"a root chunk that does not hash to its root", addr.Addr{}, func(head addr.Addr, data []byte, img *client.Image) (addr.Addr, []byte, ShapedImage) {
			forged := bytes.Replace(data, []byte(`"first"`), []byte(`"forged"`), 1) // decodes as well
			if bytes.Equal(forged, data) {
				t.Fatalf("no message in the root chunk %q", data)
			}
			return head, forged, img
		}},
		{"an image of another shape", addr.Addr{}, func(head addr.Addr, data []byte, img *client.Image) (addr.Addr, []byte, ShapedImage) {
			return head, data, shortImage{img}
		}},
		{"another version than asked", head, func(_ addr.Addr, data []byte, img *client.Image) (addr.Addr, []byte, ShapedImage) {
			other := addr.Of([]byte("another version"))
			return other, data, img
		}},
	} {
		used := false
		images := ImagesOf(c.OpenImage, c.OpenVersionImage)
		images.OpenVersion = func(ctx context.Context, root addr.Addr) (addr.Addr, []byte, ShapedImage, error) {
			head, data, img, err := c.OpenVersionImage(ctx, root)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			used = true
			h2, d2, i2 := tc.lie(head, data, img)
			return h2, d2, i2, nil
		}
		before := c.Stats()
		d, err := OpenVersion(ctx, WithImages(c, images), tc.root, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// Opened from the open set instead: its root chunk and page map.
		if st := c.Stats().Sub(before); !used || st.Service.Chunks < 2 {
			t.Fatalf("%s: the image by version asked for: %v; chunks of the open set read: %v", tc.name, used, st)
		}
		sameResults(t, tc.name, plain, d.DB, queries[:2])
		d.Close()
	}
}

// shortImage is an image that says it has one slot less.
type shortImage struct{ *client.Image }

func (s shortImage) Slots() int { return s.Image.Slots() - 1 }

// TestPublishThenOpen: 100 times in a row, a version published a moment
// ago opens at once by its root through the service alone (no store: the
// service reads the manifest again for a root it does not know yet); the
// all-zero root and a root no version has are "no such version", saying
// so, not the current version nor a missing chunk.
func TestPublishThenOpen(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 11)
	importFile(t, s, path, ImportOptions{DB: "live"})
	_, url := startService(t, s, 0)
	ctx := context.Background()
	open := func(at At) (*Opened, error) {
		return Open(ctx, Source{DB: "live", Service: url, At: at, ServiceDir: client.NoLocalDir, MemBytes: -1, Logger: quietLog()})
	}
	for i := range 100 {
		execAll(t, path, fmt.Sprintf(`INSERT INTO blobs VALUES (%d, randomblob(100))`, 1000+i))
		res := importFile(t, s, path, ImportOptions{DB: "live"})
		v, err := open(At{Root: res.Root, IsRoot: true})
		if err != nil {
			t.Fatalf("version %d (%s), published a moment ago: %v", i, res.Root, err)
		}
		var n int
		d, err := v.DB(nil)
		if err == nil {
			err = d.QueryRow(`SELECT count(*) FROM blobs WHERE id >= 1000`).Scan(&n)
			d.Close()
		}
		v.Close()
		if err != nil || n != i+1 {
			t.Fatalf("version %d: %d rows of the new ones, %v; want %d", i, n, err, i+1)
		}
	}
	for _, root := range []addr.Addr{{}, addr.Of([]byte("no version"))} {
		v, err := open(At{Root: root, IsRoot: true})
		if err == nil {
			v.Close()
			t.Fatalf("root %s opened", root)
		}
		if !errors.Is(err, ErrNoVersion) || !strings.Contains(err.Error(), root.String()) {
			t.Errorf("root %s: %v, want no such version naming it", root, err)
		}
	}
}
