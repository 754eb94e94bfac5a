//go:build cgo

package sqlitevfs

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mattn/go-sqlite3"

	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/internal/sqltest"
)

// Shared with the other SQLite tests.
var (
	testDB  = sqltest.GenDB
	result  = sqltest.Result
	scanAll = sqltest.ScanAll
	queries = sqltest.Queries
	// openPlain opens the file at path read-only with SQLite's own VFS:
	// the reference the VFS's answers are compared with.
	openPlain = sqltest.Plain
)

// filePages opens path as FilePages, closed at the end of the test.
func filePages(t testing.TB, path string) *FilePages {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p, err := NewFilePages(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var nameSeq atomic.Int64

// register registers p under a fresh name and opens it.
func register(t testing.TB, p Pages, opts *Options) (string, *sql.DB) {
	t.Helper()
	name := fmt.Sprintf("test/%s/%d", t.Name(), nameSeq.Add(1))
	if err := Register(name, p, opts); err != nil {
		t.Fatal(err)
	}
	db, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		Unregister(name)
	})
	return name, db
}

func TestSameResultsAsFile(t *testing.T) {
	path := testDB(t, 1, 5200)
	plain := openPlain(t, path)

	fp := filePages(t, path)
	variants := []struct {
		name  string
		pages Pages
		opts  *Options
	}{
		{"pages", fp, nil},
		{"ranger", &rangeCounter{FilePages: fp}, nil},
		{"ranger-no-read-ahead", &rangeCounter{FilePages: fp}, &Options{ReadAhead: -1}},
		// A tiny cache makes the ORDER BY sorter spill to temporary
		// files.
		{"small-cache", fp, &Options{CacheKiB: 64}},
		{"read-ahead", &rangeCounter{FilePages: fp}, &Options{CacheKiB: 64, ReadAhead: 8}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			temps := tempOpens()
			defer func() {
				if v.opts != nil && v.opts.CacheKiB > 0 && tempOpens() == temps {
					t.Error("no temporary file was opened")
				}
			}()
			_, db := register(t, v.pages, v.opts)
			for _, q := range queries {
				want, wn := result(t, plain, q)
				got, gn := result(t, db, q)
				if got != want || gn != wn {
					t.Errorf("%s: %d rows %s through VFS, %d rows %s from file", q, gn, got[:8], wn, want[:8])
				}
				if wn == 0 {
					t.Errorf("%s: no rows", q)
				}
			}
		})
	}

	// The blob larger than a page comes back byte for byte.
	_, db := register(t, fp, nil)
	var viaVFS, viaFile []byte
	if err := db.QueryRow(`SELECT b FROM blobs WHERE id = 3`).Scan(&viaVFS); err != nil {
		t.Fatal(err)
	}
	if err := plain.QueryRow(`SELECT b FROM blobs WHERE id = 3`).Scan(&viaFile); err != nil {
		t.Fatal(err)
	}
	if len(viaVFS) != 70000 || !bytes.Equal(viaVFS, viaFile) {
		t.Errorf("blob: %d bytes via VFS, %d from file, equal=%v", len(viaVFS), len(viaFile), bytes.Equal(viaVFS, viaFile))
	}
}

// pagesOnly hides PageRanger.
type pagesOnly struct{ Pages }

// rangeCounter is a FilePages that is a PageRanger too, and counts the
// calls reaching it.
type rangeCounter struct {
	*FilePages
	pages, ranges, ranged atomic.Int64
}

func (c *rangeCounter) ReadPage(ctx context.Context, n int64, p []byte) error {
	c.pages.Add(1)
	return c.FilePages.ReadPage(ctx, n, p)
}

func (c *rangeCounter) ReadPages(ctx context.Context, first int64, ps [][]byte) error {
	c.ranges.Add(1)
	c.ranged.Add(int64(len(ps)))
	for i, p := range ps {
		if err := c.FilePages.ReadPage(ctx, first+int64(i), p); err != nil {
			return err
		}
	}
	return nil
}

func TestTemporaryFiles(t *testing.T) {
	path := testDB(t, 2, 3000)
	_, db := register(t, filePages(t, path), &Options{CacheKiB: 16})
	db.SetMaxOpenConns(1)
	temps := tempOpens()
	// A temporary table larger than its 10-page cache spills to a file.
	for _, s := range []string{
		`PRAGMA temp.cache_size = 10`,
		`CREATE TEMP TABLE ids AS SELECT SentenceId, Text FROM sentences WHERE SentenceId % 3 = 0`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ids JOIN translations t ON t.SentenceId = ids.SentenceId`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("join with temp table found nothing")
	}
	if tempOpens() == temps {
		t.Error("no temporary file was opened")
	}
}

func TestWritesFailReadOnly(t *testing.T) {
	path := testDB(t, 3, 500)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, db := register(t, filePages(t, path), nil)
	for _, stmt := range []string{
		`INSERT INTO sentences VALUES (100000, 'eng', 'Hello.')`,
		`UPDATE sentences SET Text = 'x' WHERE SentenceId = 1`,
		`DELETE FROM translations`,
		`CREATE TABLE t(x)`,
		`DROP TABLE blobs`,
		`PRAGMA user_version = 7`,
		`VACUUM`,
	} {
		_, err := db.Exec(stmt)
		var se sqlite3.Error
		if !errors.As(err, &se) || se.Code != sqlite3.ErrReadonly || !strings.Contains(err.Error(), "readonly database") {
			t.Errorf("%s: got %v, want SQLITE_READONLY", stmt, err)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("database file changed")
	}

	// Below SQL, the VFS refuses writes too.
	f := &dbFile{reg: &registration{pageSize: 4096, pageCount: 1}}
	if err := f.writeAt(make([]byte, 4096), 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("writeAt: %v", err)
	}
	if err := f.truncate(0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("truncate: %v", err)
	}
}

func TestConcurrentDatabasesDoNotMix(t *testing.T) {
	paths := []string{testDB(t, 10, 5200), testDB(t, 11, 6100)}
	type want struct {
		digest string
		rows   int
	}
	// Queries that read much of each database, without big sorts.
	queries := []string{queries[0], queries[1], queries[2], queries[3], queries[6]}
	var dbs []*sql.DB
	var wants [][]want
	for _, p := range paths {
		plain, err := sql.Open(DriverName, "file:"+p+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var ws []want
		for _, q := range queries {
			d, n := result(t, plain, q)
			ws = append(ws, want{d, n})
		}
		plain.Close()
		wants = append(wants, ws)
		// The second through the read-ahead layer, which its
		// connections share.
		var pages Pages = filePages(t, p)
		if len(dbs) == 1 {
			pages = &rangeCounter{FilePages: pages.(*FilePages)}
		}
		_, db := register(t, pages, &Options{CacheKiB: 32, ReadAhead: 8})
		dbs = append(dbs, db)
	}
	if wants[0][0].rows == 0 || wants[0][1] == wants[1][1] {
		t.Fatal("test databases are alike")
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			i := g % 2
			for _, qi := range rand.Perm(len(queries)) {
				got, n := result(t, dbs[i], queries[qi])
				if got != wants[i][qi].digest || n != wants[i][qi].rows {
					t.Errorf("db %d: %s: wrong result", i, queries[qi])
				}
			}
		})
	}
	wg.Wait()
}

// failingPages fails (or panics) reading pages above limit once armed.
type failingPages struct {
	Pages
	armed atomic.Bool
	panic bool
	limit int64
}

var errInjected = errors.New("injected: chunk not found")

func (p *failingPages) ReadPage(ctx context.Context, n int64, b []byte) error {
	if p.armed.Load() && n > p.limit {
		if p.panic {
			panic("page source exploded")
		}
		return errInjected
	}
	return p.Pages.ReadPage(ctx, n, b)
}

func TestReadErrorsSurface(t *testing.T) {
	path := testDB(t, 4, 5500)
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			fp := &failingPages{Pages: filePages(t, path), limit: 1, panic: panics}
			var failed atomic.Pointer[error] // Options.ReadFailed's last
			name, db := register(t, fp, &Options{ReadFailed: func(err error) { failed.Store(&err) }})
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil || n == 0 {
				t.Fatalf("schema: %d %v", n, err)
			}
			const q = `SELECT Text FROM translations JOIN sentences ON translations.TranslationId = sentences.SentenceId WHERE translations.SentenceId % 50 = 0`
			fp.armed.Store(true)
			_, _, err := scanAll(db, q)
			var se sqlite3.Error
			if !errors.As(err, &se) || se.Code != sqlite3.ErrIoErr {
				t.Fatalf("query error = %v, want SQLITE_IOERR", err)
			}
			last := LastReadError(name)
			if last == nil {
				t.Fatal("LastReadError = nil")
			}
			if !panics && (!errors.Is(last, errInjected) || !strings.Contains(last.Error(), "read page")) {
				t.Errorf("LastReadError = %v, want it to wrap the injected error", last)
			}
			if panics && !strings.Contains(last.Error(), "page source exploded") {
				t.Errorf("LastReadError = %v, want the panic", last)
			}
			if p := failed.Load(); p == nil || *p != last {
				t.Errorf("Options.ReadFailed got %v, want LastReadError's %v", p, last)
			}
			// Once the source recovers, the same connection pool works.
			fp.armed.Store(false)
			if _, rows, err := scanAll(db, q); err != nil || rows < 100 {
				t.Errorf("after recovery: %d rows, %v", rows, err)
			}
		})
	}
}

// TestQueryErrorWrapsCause: DB.QueryError adds the page source's error to
// SQLite's "disk I/O error" so that errors.Is finds both: a caller can
// tell a store that is unreachable from a bad query.
func TestQueryErrorWrapsCause(t *testing.T) {
	fp := &failingPages{Pages: filePages(t, testDB(t, 4, 5500)), limit: 1}
	db, err := OpenImage("query-error", fp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	fp.armed.Store(true)
	_, _, err = scanAll(db.DB, `SELECT Text FROM sentences`)
	err = db.QueryError(err)
	var se sqlite3.Error
	if !errors.Is(err, errInjected) || !errors.As(err, &se) || se.Code != sqlite3.ErrIoErr {
		t.Fatalf("QueryError = %v: want it to wrap both SQLite's I/O error and the source's", err)
	}
}

// TestUnalignedReads drives the VFS read path directly with reads that
// start inside pages, span pages and run past the end.
func TestUnalignedReads(t *testing.T) {
	path := testDB(t, 5, 300)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fp := filePages(t, path)
	var calls atomic.Int64
	for _, p := range []Pages{&rangeCounter{FilePages: fp}, fp, countingPages{fp, &calls}} {
		r := &registration{name: "direct", pages: p, pageSize: p.PageSize(), pageCount: p.PageCount(), ctx: context.Background()}
		r.ranger, _ = p.(PageRanger)
		f := &dbFile{reg: r}
		ps := int64(p.PageSize())
		size := int64(len(raw))
		cases := [][2]int64{
			{0, 100}, {0, ps}, {ps, ps}, {24, 4}, {ps - 1, 2}, {ps - 10, 3*ps + 20},
			{0, size}, {size - 5, 5}, {size - 5, 50}, {size, 10}, {size + ps, ps},
		}
		rnd := rand.New(rand.NewPCG(1, 2))
		for range 300 {
			off := rnd.Int64N(size + 2*ps)
			cases = append(cases, [2]int64{off, 1 + rnd.Int64N(4*ps)})
		}
		for _, c := range cases {
			off, n := c[0], c[1]
			buf := bytes.Repeat([]byte{0xAA}, int(n))
			got, err := f.readAt(buf, off)
			want := max(0, min(n, size-off))
			if int64(got) != want {
				t.Fatalf("readAt(%d, %d) = %d, want %d", off, n, got, want)
			}
			if (want < n) != errors.Is(err, errShortRead) || (want == n && err != nil) {
				t.Fatalf("readAt(%d, %d): err %v", off, n, err)
			}
			if want > 0 && !bytes.Equal(buf[:want], raw[off:off+want]) {
				t.Fatalf("readAt(%d, %d): wrong bytes", off, n)
			}
		}
	}
	if calls.Load() == 0 {
		t.Error("counting pages saw no reads")
	}
}

// countingPages counts ReadPage calls and checks they are whole pages in
// range.
type countingPages struct {
	*FilePages
	calls *atomic.Int64
}

func (c countingPages) ReadPage(ctx context.Context, n int64, p []byte) error {
	c.calls.Add(1)
	if n < 1 || n > c.PageCount() || len(p) != c.PageSize() {
		panic(fmt.Sprintf("bad ReadPage(%d, len %d)", n, len(p)))
	}
	return c.FilePages.ReadPage(ctx, n, p)
}

func TestPageSizes(t *testing.T) {
	for _, ps := range []int{512, 65536} {
		t.Run(fmt.Sprint(ps), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.db")
			plain, err := sql.Open(DriverName, "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			plain.SetMaxOpenConns(1)
			for _, s := range []string{
				fmt.Sprintf("PRAGMA page_size=%d", ps),
				"CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)",
				"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 3000) INSERT INTO t SELECT i, printf('%0*d', i % 700, i) FROM c",
			} {
				if _, err := plain.Exec(s); err != nil {
					t.Fatal(err)
				}
			}
			fp := filePages(t, path)
			if fp.PageSize() != ps {
				t.Fatalf("page size %d", fp.PageSize())
			}
			_, db := register(t, fp, nil)
			q := `SELECT count(*), sum(length(v)), max(v) FROM t`
			want, _ := result(t, plain, q)
			got, _ := result(t, db, q)
			if got != want {
				t.Error("results differ")
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	path := testDB(t, 6, 200)
	fp := filePages(t, path)
	name := "odd name/with?query&chars #1 %41 ü"
	if err := Register(name, fp, nil); err != nil {
		t.Fatal(err)
	}
	if err := Register(name, fp, nil); !errors.Is(err, ErrExists) {
		t.Errorf("second Register: %v", err)
	}
	db, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sentences`).Scan(&n); err != nil || n != 200 {
		t.Fatalf("count = %d, %v", n, err)
	}
	db.Close()
	if err := Unregister(name); err != nil {
		t.Fatal(err)
	}
	if err := Unregister(name); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("second Unregister: %v", err)
	}
	if _, err := Open(name); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Open after Unregister: %v", err)
	}
	// A DSN for a name no longer registered fails to open, and leaves
	// other open databases alone.
	_, other := register(t, fp, nil)
	stale, err := sql.Open(DriverName, DSN(name))
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	if err := stale.Ping(); err == nil {
		t.Error("opening an unregistered name succeeded")
	}
	if err := other.QueryRow(`SELECT count(*) FROM translations`).Scan(&n); err != nil || n != 400 {
		t.Errorf("other database after failed open: %d, %v", n, err)
	}

	for _, bad := range []string{"", "a\x00b", strings.Repeat("x", 2000)} {
		if err := Register(bad, fp, nil); err == nil {
			t.Errorf("Register(%q) succeeded", bad)
		}
	}
	if err := Register("bad-geometry", badPages{}, nil); !errors.Is(err, ErrBadPages) {
		t.Errorf("bad geometry: %v", err)
	}
}

type badPages struct{}

func (badPages) PageSize() int                                 { return 1000 }
func (badPages) PageCount() int64                              { return 1 }
func (badPages) ReadPage(context.Context, int64, []byte) error { return nil }

func TestUnregisterWhileOpen(t *testing.T) {
	path := testDB(t, 7, 3000)
	scanUnregistered(t, "unregister-while-open", filePages(t, path))
}

// scanUnregistered registers p as name (a 16 KiB page cache), opens it,
// runs the seed query, unregisters it, and checks that a scan of more
// than the cache then fails: pages still in SQLite's cache may answer, a
// full scan cannot.
func scanUnregistered(t *testing.T, name string, p Pages) {
	t.Helper()
	if err := Register(name, p, &Options{CacheKiB: 16}); err != nil {
		t.Fatal(err)
	}
	db, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := scanAll(db, gen.SeedQuery); err != nil {
		t.Fatal(err)
	}
	if err := Unregister(name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := scanAll(db, `SELECT Text FROM sentences`); err == nil {
		t.Error("reading an unregistered database succeeded")
	}
}

func TestReadAhead(t *testing.T) {
	path := testDB(t, 8, 5000)
	const q = `SELECT count(*), sum(length(Text)) FROM sentences`
	plain := openPlain(t, path)
	want, _ := result(t, plain, q)

	for _, window := range []int{-1, 16} {
		t.Run(fmt.Sprint(window), func(t *testing.T) {
			c := &rangeCounter{FilePages: filePages(t, path)}
			_, db := register(t, c, &Options{ReadAhead: window})
			if got, _ := result(t, db, q); got != want {
				t.Fatal("results differ")
			}
			total := c.PageCount()
			t.Logf("window %d: %d pages in file, %d ReadPage calls, %d ReadPages calls for %d pages",
				window, total, c.pages.Load(), c.ranges.Load(), c.ranged.Load())
			if window < 0 && c.ranges.Load() != 0 {
				t.Error("ReadPages called without read-ahead")
			}
			if window > 0 {
				// A scan of a table written in order is almost all
				// sequential: nearly every page arrives in a batch.
				if c.ranges.Load() == 0 || c.pages.Load() > total/4 {
					t.Errorf("read-ahead barely used")
				}
				if c.ranged.Load()+c.pages.Load() > total+int64(window)*4 {
					t.Errorf("read-ahead read far more pages than the file has")
				}
			}
		})
	}
}

// BenchmarkSeedQuery compares the seed query on the plain file with the
// same file through the VFS. Set CHUNKD_BENCH_SENTENCES to change the size
// (default 200000 sentences, about 32 MB).
func BenchmarkSeedQuery(b *testing.B) {
	path := sqltest.BenchCorpus(b, 200000)
	fp := filePages(b, path)
	plain := openPlain(b, path)
	_, viaVFS := register(b, fp, nil)
	_, readAhead := register(b, &rangeCounter{FilePages: fp}, &Options{ReadAhead: 32})
	for _, c := range []struct {
		name string
		db   *sql.DB
	}{{"file", plain}, {"vfs", viaVFS}, {"vfs-readahead", readAhead}} {
		b.Run(c.name, func(b *testing.B) {
			c.db.SetMaxOpenConns(1)
			for b.Loop() {
				if _, rows, err := scanAll(c.db, gen.SeedQuery); err != nil || rows == 0 {
					b.Fatalf("%d rows, %v", rows, err)
				}
			}
		})
	}
}

// waitIdle waits for the background fetch in flight, if any.
func (ra *readAhead) waitIdle() {
	ra.mu.Lock()
	pf := ra.next
	ra.mu.Unlock()
	if pf != nil {
		<-pf.done
	}
}

// sizeRecorder is a rangeCounter that records each batch's size.
type sizeRecorder struct {
	rangeCounter
	mu    sync.Mutex
	sizes []int
}

func (r *sizeRecorder) ReadPages(ctx context.Context, first int64, ps [][]byte) error {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(ps))
	r.mu.Unlock()
	return r.rangeCounter.ReadPages(ctx, first, ps)
}

// TestReadAheadGrows: a sequential run starts with a small batch (opening
// a database reads pages 1 and 2 and should not cost a large one) and
// doubles each batch up to Options.ReadAhead.
func TestReadAheadGrows(t *testing.T) {
	fp := filePages(t, testDB(t, 5, 5200))
	if fp.PageCount() < 200 {
		t.Fatalf("only %d pages", fp.PageCount())
	}
	rec := &sizeRecorder{rangeCounter: rangeCounter{FilePages: fp}}
	ra := newReadAhead(context.Background(), fp, rec, 64, 0)
	p := make([]byte, fp.PageSize())
	for n := int64(1); n <= 2; n++ { // an open: pages 1 and 2
		if err := ra.ReadPage(context.Background(), n, p); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	if len(rec.sizes) != 1 || rec.sizes[0] != firstBatch {
		t.Fatalf("pages 1 and 2 read in batches of %v, want one of %d", rec.sizes, firstBatch)
	}
	rec.mu.Unlock()
	for n := int64(3); n <= 200; n++ { // a scan
		if err := ra.ReadPage(context.Background(), n, p); err != nil {
			t.Fatal(err)
		}
	}
	ra.waitIdle()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := 1; i < len(rec.sizes); i++ {
		if want := min(2*rec.sizes[i-1], 64); rec.sizes[i] != want && i < len(rec.sizes)-1 {
			t.Fatalf("batch sizes %v: want each twice the last, up to 64", rec.sizes)
		}
	}
	if rec.sizes[len(rec.sizes)-1] < 32 || rec.pages.Load() != 0 {
		t.Fatalf("scan: batches %v, %d single pages", rec.sizes, rec.pages.Load())
	}
}

// preloadedPages is a rangeCounter whose pages in pre are held in memory
// (LocalPages): reading one is not counted.
type preloadedPages struct {
	*rangeCounter
	pre map[int64]bool
}

func (p *preloadedPages) Local(n int64) bool { return p.pre[n] }
func (p *preloadedPages) OnHost() bool       { return false }

func (p *preloadedPages) ReadPage(ctx context.Context, n int64, b []byte) error {
	if p.pre[n] {
		return p.FilePages.ReadPage(ctx, n, b)
	}
	return p.rangeCounter.ReadPage(ctx, n, b)
}

// TestReadAheadPreloaded: a point lookup that walks down preloaded
// interior pages to the leaf after them fetches the leaf alone, not a
// batch from it; a scan over leaves around a preloaded page stays one
// run of batches.
func TestReadAheadPreloaded(t *testing.T) {
	fp := filePages(t, testDB(t, 5, 5200))
	ctx := context.Background()
	p := make([]byte, fp.PageSize())
	open := func(pre ...int64) *preloadedPages {
		pp := &preloadedPages{rangeCounter: &rangeCounter{FilePages: fp}, pre: map[int64]bool{}}
		for _, n := range pre {
			pp.pre[n] = true
		}
		return pp
	}
	pp := open(1, 4, 5)
	ra := newReadAhead(ctx, pp, pp, 64, 0)
	for _, n := range []int64{1, 4, 5, 6} { // page 1, interior 4 and 5, leaf 6
		if err := ra.ReadPage(ctx, n, p); err != nil {
			t.Fatal(err)
		}
	}
	if pp.pages.Load() != 1 || pp.ranges.Load() != 0 {
		t.Fatalf("point lookup: %d single pages and %d batches, want the leaf alone", pp.pages.Load(), pp.ranges.Load())
	}

	pp = open(1, 12, 30)
	ra = newReadAhead(ctx, pp, pp, 64, 0)
	for n := int64(7); n <= 100; n++ {
		if err := ra.ReadPage(ctx, n, p); err != nil {
			t.Fatal(err)
		}
	}
	ra.waitIdle()
	if pp.pages.Load() != 1 || pp.ranges.Load() == 0 {
		t.Fatalf("scan: %d single pages and %d batches, want the first page alone and batches after", pp.pages.Load(), pp.ranges.Load())
	}
}
