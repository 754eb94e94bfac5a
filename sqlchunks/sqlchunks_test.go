//go:build cgo

package sqlchunks

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/internal/testio"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// A client is the chunk reader this package is read through.
var _ ChunkReader = (*client.Client)(nil)

// Shared with the other SQLite tests.
var (
	testDB  = sqltest.GenDB
	result  = sqltest.Result
	scanAll = sqltest.ScanAll
	queries = sqltest.Queries
	plainDB = sqltest.Plain
	// newFolder returns an empty folder store.
	newFolder = testdb.NewStore
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func importFile(t testing.TB, s store.Store, path string, o ImportOptions) *ImportResult {
	t.Helper()
	res, err := Import(context.Background(), s, path, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// newClient opens a client of database db, through service svc if not "",
// reading the service as from another host (the services of these tests
// run here: TestPageImage reads one as a same-host client). It never
// hedges: tests count what came from the service, and on a busy machine
// a service request can take longer than the hedge delay.
func newClient(t testing.TB, s store.Store, db, svc string) *client.Client {
	t.Helper()
	c, err := client.Open(context.Background(), client.Options{Store: s, DB: db, Service: svc, LocalDir: client.NoLocalDir, ServiceTimeout: -1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openVersion opens version root read through c with options o, and
// returns the name it is registered under, the database and its pages.
func openVersion(t testing.TB, c *client.Client, root addr.Addr, o *sqlitevfs.Options) (string, *sql.DB, *Pages) {
	t.Helper()
	p, err := OpenPages(context.Background(), c, root)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sqlitevfs.OpenImage(t.Name(), p, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.Name(), d.DB, p
}

// openHead opens the head version of c's database.
func openHead(t testing.TB, c *client.Client) (string, *sql.DB, *Pages) {
	t.Helper()
	root, err := Head(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return openVersion(t, c, root, nil)
}

// wantKey names a query's result on a reference database.
type wantKey struct {
	db *sql.DB
	q  string
}

// wantResults holds results on reference databases, which do not change
// while open: each query runs on each once.
var wantResults sync.Map // wantKey -> [2]any{digest, rows}

// sameResults runs every query on want and got and compares the results.
func sameResults(t testing.TB, what string, want, got *sql.DB, qs []string) {
	t.Helper()
	for _, q := range qs {
		var w string
		var wn int
		if v, ok := wantResults.Load(wantKey{want, q}); ok {
			w, wn = v.([2]any)[0].(string), v.([2]any)[1].(int)
		} else {
			w, wn = result(t, want, q)
			wantResults.Store(wantKey{want, q}, [2]any{w, wn})
		}
		g, gn := result(t, got, q)
		if g != w || gn != wn {
			t.Errorf("%s: %s: %d rows %s, want %d rows %s", what, q, gn, g[:8], wn, w[:8])
		}
		if wn == 0 {
			t.Errorf("%s: %s: no rows", what, q)
		}
	}
}

// copyFile copies src to a new file and returns its path.
func copyFile(t testing.TB, src, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func execAll(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open(sqlitevfs.DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// genDB is a generated corpus of about 2 MB with a blobs table (see
// testDB).
func genDB(t testing.TB, seed int64) string { return testDB(t, seed, 16000) }

// handQueries run against handDB.
var handQueries = []string{
	`SELECT name, score FROM docs WHERE name BETWEEN 'k' AND 'n' ORDER BY name, id`,
	`SELECT id, length(body), body FROM docs WHERE length(body) > 4096 ORDER BY id`,
	`SELECT count(*), sum(score), avg(length(body)), max(name) FROM docs`,
	`SELECT substr(name, 1, 1) AS k, count(*), sum(length(body)) FROM docs GROUP BY k ORDER BY k`,
	`SELECT d.id, e.id FROM docs d JOIN docs e ON e.name = d.name AND e.id > d.id ORDER BY d.id, e.id`,
	`PRAGMA integrity_check`,
}

// handDB makes a database by hand: an indexed table whose rows carry
// blobs, some many pages long.
func handDB(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hand.db")
	db, err := sql.Open(sqlitevfs.DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	r := rand.New(rand.NewPCG(7, 7))
	for _, s := range []string{
		`CREATE TABLE docs(id INTEGER PRIMARY KEY, name TEXT NOT NULL, score REAL, body BLOB)`,
		`CREATE INDEX docs_name ON docs(name)`,
		`BEGIN`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3000; i++ {
		name := fmt.Sprintf("%c%c-%d", 'a'+r.IntN(26), 'a'+r.IntN(26), r.IntN(500))
		n := 20 + r.IntN(200)
		if i%97 == 0 {
			n = 5000 + r.IntN(100000) // many pages of overflow
		}
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(r.Uint32())
		}
		if _, err := db.Exec(`INSERT INTO docs VALUES (?, ?, ?, ?)`, i, name, r.Float64()*100, body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`COMMIT`); err != nil {
		t.Fatal(err)
	}
	return path
}

// holdStore holds the whole-object streams the cache service downloads
// table files with half-way, until its gate opens.
type holdStore struct {
	store.Store
	gate testio.Gate
}

func (h *holdStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	rc, info, err := h.Store.Open(ctx, key)
	if err != nil || strings.HasPrefix(path.Base(key), "manifest") {
		return rc, info, err
	}
	return h.gate.Hold(ctx, rc, info.Size/2), info, nil
}

// OpenRange holds a download's ranged stream halfway, as Open holds a
// whole file's.
func (h *holdStore) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := store.OpenRange(ctx, h.Store, key, off, n)
	if err != nil || strings.HasPrefix(path.Base(key), "manifest") {
		return rc, err
	}
	return h.gate.Hold(ctx, rc, n/2), nil
}

func TestImportAndQueryTiers(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	genPath, handPath := genDB(t, 1), handDB(t)
	sets := []struct {
		db, path string
		queries  []string
		plain    *sql.DB
	}{{"gen", genPath, queries, plainDB(t, genPath)}, {"hand/docs", handPath, handQueries, plainDB(t, handPath)}}
	for _, set := range sets {
		res := importFile(t, s, set.path, ImportOptions{DB: set.db, Message: "first"})
		fi, _ := os.Stat(set.path)
		if res.Pages*int64(res.PageSize) != fi.Size() || res.Parent != (addr.Addr{}) || res.NewChunks != res.Chunks || res.TableFile == "" || res.TableBytes == 0 {
			t.Fatalf("%s: %+v (file is %d bytes)", set.db, res, fi.Size())
		}
		t.Logf("%s: %d pages of %d bytes, %d chunks, table file %d bytes, %v", set.db, res.Pages, res.PageSize, res.Chunks, res.TableBytes, res.Elapsed)
	}

	hs := &holdStore{Store: s}
	t.Cleanup(hs.gate.Open)
	_, svcURL := startService(t, s, 0)
	heldCache, heldURL := startService(t, hs, 1)

	tiers := []struct {
		name string
		svc  string
	}{{"store", ""}, {"service", svcURL}, {"service-mid-download", heldURL}}
	for _, tier := range tiers {
		t.Run(tier.name, func(t *testing.T) {
			for _, set := range sets {
				plain := set.plain
				c := newClient(t, s, set.db, tier.svc)
				_, db, p := openHead(t, c)
				if v := p.Version(); v.Message != "first" || v.Pages == 0 {
					t.Fatalf("version %+v", v)
				}
				sameResults(t, set.db, plain, db, set.queries)
				st := c.Stats()
				if tier.svc != "" && st.Service.Chunks == 0 {
					t.Errorf("%s: nothing came from the service: %v", set.db, st)
				}
				t.Logf("%s: %v", set.db, st)
			}
		})
	}
	// The held service had the downloads half done throughout; it served
	// what had arrived and read the rest through from the store.
	if hs.gate.Held() == 0 {
		t.Error("no download reached the hold point")
	}
	hs.gate.Open()
	if err := heldCache.WaitCached(ctx, "gen", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s, "gen", heldURL)
	_, db, _ := openHead(t, c)
	sameResults(t, "after download", sets[0].plain, db, queries)
	if st := c.Stats(); st.ServiceTiers.Disk == 0 {
		t.Errorf("after the download nothing came from the service's disk: %v", st)
	}

	// The blob larger than many pages comes back byte for byte.
	var viaChunks, viaFile []byte
	c = newClient(t, s, "gen", "")
	_, db, _ = openHead(t, c)
	if err := db.QueryRowContext(ctx, `SELECT b FROM blobs WHERE id = 3`).Scan(&viaChunks); err != nil {
		t.Fatal(err)
	}
	if err := sets[0].plain.QueryRowContext(ctx, `SELECT b FROM blobs WHERE id = 3`).Scan(&viaFile); err != nil {
		t.Fatal(err)
	}
	if len(viaFile) != 70000 || !bytes.Equal(viaChunks, viaFile) {
		t.Errorf("blob: %d bytes via chunks, %d from the file", len(viaChunks), len(viaFile))
	}
}

// diffPages counts the pages of equal-sized geometry that differ between
// two database files.
func diffPages(t testing.TB, a, b string, pageSize int) int {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for off := 0; off < max(len(x), len(y)); off += pageSize {
		px := x[min(off, len(x)):min(off+pageSize, len(x))]
		py := y[min(off, len(y)):min(off+pageSize, len(y))]
		if !bytes.Equal(px, py) {
			n++
		}
	}
	return n
}

func TestSecondImport(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 2)
	old := copyFile(t, path, "old.db")
	r1 := importFile(t, s, path, ImportOptions{DB: "corpus", Message: "v1"})
	// The snapshot is page for page: every page but the first (whose
	// header SQLite's backup touches) is the file's.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _, p1 := openHead(t, newClient(t, s, "corpus", ""))
	for n := int64(2); n <= p1.PageCount(); n++ {
		if a, _ := p1.PageAddr(n); a != addr.Of(raw[(n-1)*int64(r1.PageSize):n*int64(r1.PageSize)]) {
			t.Fatalf("page %d of the version is not the file's", n)
		}
	}

	execAll(t, path,
		`UPDATE sentences SET Text = 'changed ' || Text WHERE SentenceId IN (17, 4000, 9000)`,
		`DELETE FROM translations WHERE SentenceId = 5000`,
		`UPDATE blobs SET b = zeroblob(10) WHERE id = 1`,
	)
	changed := diffPages(t, old, path, r1.PageSize)
	var phases []string
	r2 := importFile(t, s, path, ImportOptions{DB: "corpus", Message: "v2", Progress: func(phase string, done, total int64) {
		if len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
	}})
	t.Logf("v1: %d chunks, %d bytes; v2: %d pages changed, %d chunks, %d new, %d bytes", r1.Chunks, r1.TableBytes, changed, r2.Chunks, r2.NewChunks, r2.TableBytes)
	if r2.Parent != r1.Root || r2.Root == r1.Root {
		t.Fatalf("v2 parent %s root %s, v1 root %s", r2.Parent, r2.Root, r1.Root)
	}
	// New: the changed pages, the one leaf of the map above them, the root.
	if r2.NewChunks > changed+2 || r2.NewChunks < 3 || r2.NewChunks*10 > r2.Chunks {
		t.Errorf("v2 uploaded %d chunks for %d changed pages (of %d chunks)", r2.NewChunks, changed, r2.Chunks)
	}
	if r2.TableBytes*5 > r1.TableBytes {
		t.Errorf("v2 table file %d bytes, v1 %d", r2.TableBytes, r1.TableBytes)
	}
	if strings.Join(phases, ",") != "snapshot,read,upload" {
		t.Errorf("progress phases %v", phases)
	}

	c := newClient(t, s, "corpus", "")
	log, err := Log(ctx, c, addr.Addr{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].Root != r2.Root || log[1].Root != r1.Root || log[0].Message != "v2" || log[1].Message != "v1" ||
		log[1].Parent != (addr.Addr{}) || log[0].Pages != r2.Pages || time.Since(log[0].Time) > time.Minute {
		t.Fatalf("log %+v", log)
	}
	if l, err := Log(ctx, c, r2.Root, 1); err != nil || len(l) != 1 {
		t.Fatalf("log limit 1: %v %v", l, err)
	}
	// Both versions stay readable.
	_, oldDB, _ := openVersion(t, c, r1.Root, nil)
	_, newDB, _ := openVersion(t, c, r2.Root, nil)
	sameResults(t, "v1", plainDB(t, old), oldDB, queries)
	sameResults(t, "v2", plainDB(t, path), newDB, queries)
	var n int
	if err := newDB.QueryRow(`SELECT count(*) FROM sentences WHERE Text LIKE 'changed %'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("v2 changed rows: %d, %v", n, err)
	}
	if err := oldDB.QueryRow(`SELECT count(*) FROM sentences WHERE Text LIKE 'changed %'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("v1 changed rows: %d, %v", n, err)
	}

	// An unchanged file publishes nothing: no version, no byte written.
	before := storeBytes(t, s)
	r3 := importFile(t, s, path, ImportOptions{DB: "corpus", Message: "v3, same data", Appendix: true})
	if !r3.Unchanged || r3.Root != r2.Root || r3.NewChunks != 0 || r3.StoreBytes != 0 || r3.TableFile != "" || r3.AppendixFile != "" {
		t.Errorf("re-import of the same file: %+v", r3)
	}
	if after := storeBytes(t, s); after != before {
		t.Errorf("the store holds %d bytes after an unchanged import, %d before", after, before)
	}
	if log, err := Log(ctx, newClient(t, s, "corpus", ""), addr.Addr{}, 0); err != nil || len(log) != 2 {
		t.Errorf("log after an unchanged import: %d versions, %v", len(log), err)
	}
}

// storeBytes is the size of every object in s.
func storeBytes(t testing.TB, s store.Store) int64 {
	t.Helper()
	infos, err := s.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, info := range infos {
		n += info.Size
	}
	return n
}

// barrier lets n goroutines wait for each other once.
type barrier struct {
	mu   sync.Mutex
	n    int
	done chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, done: make(chan struct{})} }

func (b *barrier) wait(t testing.TB) {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.done)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Error("barrier: timed out")
	}
}

func TestConcurrentImports(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	base := genDB(t, 3)
	r0 := importFile(t, s, base, ImportOptions{DB: "db", Message: "base", Appendix: true})
	paths := []string{copyFile(t, base, "a.db"), copyFile(t, base, "b.db")}
	execAll(t, paths[0], `UPDATE sentences SET Text = 'from A' WHERE SentenceId = 10`)
	execAll(t, paths[1], `UPDATE sentences SET Text = 'from B' WHERE SentenceId = 11000`, `DELETE FROM blobs WHERE id = 2`)

	// Both imports load the same head and write their table files before
	// either writes the manifest.
	b := newBarrier(2)
	var attempts [2]atomic.Int32
	results := make([]*ImportResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			results[i], errs[i] = Import(ctx, s, paths[i], ImportOptions{DB: "db", Message: fmt.Sprint("import ", i),
				Appendix: true,
				beforeUpdate: func(attempt int) {
					attempts[i].Store(int32(attempt))
					if attempt == 1 {
						b.wait(t)
					}
				}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("import %d: %v", i, err)
		}
	}
	winner, loser := 0, 1
	if attempts[0].Load() > 1 {
		winner, loser = 1, 0
	}
	if attempts[winner].Load() != 1 || attempts[loser].Load() != 2 {
		t.Fatalf("attempts %d and %d", attempts[0].Load(), attempts[1].Load())
	}
	rw, rl := results[winner], results[loser]
	if rw.Parent != r0.Root || rl.Parent != rw.Root {
		t.Fatalf("winner %s (parent %s), loser %s (parent %s), base %s", rw.Root, rw.Parent, rl.Root, rl.Parent, r0.Root)
	}
	c := newClient(t, s, "db", "")
	log, err := Log(ctx, c, addr.Addr{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 || log[0].Root != rl.Root || log[1].Root != rw.Root || log[2].Root != r0.Root {
		t.Fatalf("log %+v", log)
	}
	// Each version reads as its own file: the loser's table file was kept,
	// only its root was written again.
	for i, r := range results {
		_, db, _ := openVersion(t, c, r.Root, nil)
		sameResults(t, fmt.Sprint("import ", i), plainDB(t, paths[i]), db, queries[:3])
	}
	mdb, _ := manifest.Open(ctx, s, "db")
	m, _, err := mdb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The base's appendix holds each page once (no plain file); the two
	// versions of a few changed pages each wrote a plain file, and the
	// appendix stays the base's, even if the loser's sidecar, written
	// before it lost, replaced the winner's (the loser names it again).
	if r0.TableFile != "" || r0.AppendixFile == "" || rw.AppendixFile != "" || rl.AppendixFile != "" || rw.TableFile == "" || rl.TableFile == "" {
		t.Fatalf("base %+v, winner %+v, loser %+v", r0, rw, rl)
	}
	for _, name := range []string{r0.AppendixFile, rw.TableFile, rl.TableFile} {
		if !m.HasSpec(name) {
			t.Errorf("manifest lacks %s: %v", name, m.Specs)
		}
	}
	if len(m.Specs) < 3 || len(m.Specs) > 4 {
		t.Errorf("manifest specs %v", m.Specs)
	}
	if len(m.Appendix) != 1 || m.Appendix[0] != r0.AppendixFile {
		t.Errorf("appendix %v, want the base's %s", m.Appendix, r0.AppendixFile)
	}
}

func TestImportGivesUp(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	base := genDB(t, 4)
	importFile(t, s, base, ImportOptions{DB: "db", Message: "base"})
	other := []string{handDB(t), genDB(t, 5)}
	unlucky := copyFile(t, base, "unlucky.db")
	execAll(t, unlucky, `UPDATE sentences SET Text = 'unlucky' WHERE SentenceId = 3`)
	// Another import gets in before every manifest write, each with other
	// data than the last (an unchanged file would change nothing).
	var others []addr.Addr
	_, err := Import(ctx, s, unlucky, ImportOptions{DB: "db", Message: "unlucky", beforeUpdate: func(attempt int) {
		r, err := Import(ctx, s, other[attempt%2], ImportOptions{DB: "db", Message: fmt.Sprint("interloper ", attempt)})
		if err != nil {
			t.Error(err)
			return
		}
		others = append(others, r.Root)
	}})
	if err == nil || !errors.Is(err, store.ErrPrecondition) || !strings.Contains(err.Error(), "gave up after 5 attempts") {
		t.Fatalf("err = %v", err)
	}
	c := newClient(t, s, "db", "")
	log, err := Log(ctx, c, addr.Addr{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) != importAttempts || len(log) != importAttempts+1 {
		t.Fatalf("%d interlopers, log of %d", len(others), len(log))
	}
	for i, r := range others {
		if log[len(others)-1-i].Root != r {
			t.Errorf("interloper %d missing from the log", i)
		}
	}
}

func TestRepage(t *testing.T) {
	s := newFolder(t)
	hand := handDB(t)
	handShort := []string{handQueries[0], handQueries[2], handQueries[5]}
	small := copyFile(t, hand, "small.db")
	execAll(t, small, `PRAGMA page_size = 1024`, `VACUUM`)
	for _, set := range []struct {
		path     string
		pageSize int
		queries  []string
		want     int
	}{
		{genDB(t, 1), 16384, queries, 16384},
		{hand, 1024, handQueries, 1024},
		// Fewer queries for the rest (formatting the big blobs is slow
		// under the race detector); integrity_check reads every page.
		{hand, 65536, handShort, 65536},
		{hand, 4096, handShort, 4096}, // the file's own: not re-paged
		{small, 0, handShort, 1024},   // a file of small pages, as it is
		{small, 512, handShort, 512},
	} {
		db := fmt.Sprint("repaged-", set.pageSize, "-", set.want)
		res := importFile(t, s, set.path, ImportOptions{DB: db, PageSize: set.pageSize})
		if res.PageSize != set.want {
			t.Fatalf("page size %d, want %d", res.PageSize, set.want)
		}
		c := newClient(t, s, db, "")
		_, got, p := openHead(t, c)
		if p.PageSize() != set.want {
			t.Fatalf("pages of %d bytes", p.PageSize())
		}
		sameResults(t, db, plainDB(t, set.path), got, set.queries)
	}
}

func TestWALSource(t *testing.T) {
	s := newFolder(t)
	path := handDB(t)
	// A writer in WAL mode keeps its last transactions in the WAL file,
	// not checkpointed, and stays open during the import.
	w, err := sql.Open(sqlitevfs.DriverName, "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	for _, stmt := range []string{
		`PRAGMA wal_autocheckpoint = 0`,
		`UPDATE docs SET name = 'wal-' || name WHERE id % 10 = 0`,
		`INSERT INTO docs VALUES (100000, 'only in the WAL', 1, zeroblob(9000))`,
	} {
		if _, err := w.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("no WAL: %v", err)
	}
	// Read as a plain file, the database alone would be out of date.
	if d, err := sqlitevfs.OpenFile(path, nil); err == nil || !strings.Contains(err.Error(), "-wal") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("OpenFile with a WAL beside it: %v", err)
	}
	importFile(t, s, path, ImportOptions{DB: "wal"})
	c := newClient(t, s, "wal", "")
	_, got, _ := openHead(t, c)
	sameResults(t, "wal", w, got, handQueries)
	var n int
	if err := got.QueryRow(`SELECT count(*) FROM docs WHERE name = 'only in the WAL'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("row from the WAL: %d, %v", n, err)
	}

	// Closed, the database is checkpointed and its WAL removed, but its
	// header still says WAL.
	if _, err := w.Exec(`DELETE FROM docs WHERE id = 100000`); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WAL still there: %v", err)
	}
	d, err := sqlitevfs.OpenFile(path, nil)
	if err != nil {
		t.Fatalf("OpenFile once checkpointed: %v", err)
	}
	d.Close()
	importFile(t, s, path, ImportOptions{DB: "wal"})
	c = newClient(t, s, "wal", "")
	_, got, _ = openHead(t, c)
	sameResults(t, "wal, closed", plainDB(t, path), got, handQueries)
}

func TestAppendix(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 6)
	// A table made last: its root page, an interior page once it holds a
	// few pages of rows, lies after the other tables' leaves.
	execAll(t, path, `CREATE TABLE late(id INTEGER PRIMARY KEY, t TEXT)`,
		`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 3000) INSERT INTO late SELECT x, printf('%0100d', x) FROM c`)
	r1 := importFile(t, s, path, ImportOptions{DB: "app", Appendix: true})
	v1 := copyFile(t, path, "v1.sqlite")
	execAll(t, path, `UPDATE sentences SET Text = 'x' WHERE SentenceId = 5`)
	// A change of a few pages: a plain file of them, the appendix stays.
	r2 := importFile(t, s, path, ImportOptions{DB: "app", Appendix: true})
	if r2.AppendixFile != "" || r2.TableFile == "" || r2.Lacking == 0 || r2.Lacking > 5 {
		t.Fatalf("second import: %+v", r2)
	}
	v2 := copyFile(t, path, "v2.sqlite")
	execAll(t, path, `UPDATE sentences SET Text = 'y' WHERE SentenceId = 6`)
	var phases []string
	r3 := importFile(t, s, path, ImportOptions{DB: "app", Appendix: true, Compact: true, Progress: func(phase string, done, total int64) {
		if len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
	}})
	if r3.AppendixFile == "" || r3.AppendixFile == r1.AppendixFile || r3.TableFile != "" || r3.Lacking != 0 {
		t.Fatalf("appendix: %+v", r3)
	}
	if got := strings.Join(phases, ","); got != "snapshot,read,appendix,upload" {
		t.Errorf("phases %s", got)
	}
	mdb, _ := manifest.Open(ctx, s, "app")
	m, _, err := mdb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The new appendix is the manifest's; the old one stays named as a
	// plain file: it holds the first version's pages that changed since,
	// which no other file does.
	if len(m.Appendix) != 1 || m.Appendix[0] != r3.AppendixFile || m.Specs[0].Name != r3.AppendixFile {
		t.Fatalf("manifest %v, appendix %v", m.Specs, m.Appendix)
	}
	if len(m.Specs) != 3 || !m.HasSpec(r1.AppendixFile) || !m.HasSpec(r2.TableFile) {
		t.Fatalf("manifest %v: want the new appendix, the old one and the second import's file", m.Specs)
	}
	_, second, _ := openVersion(t, newClient(t, s, "app", ""), r2.Root, nil)
	sameResults(t, "second version", plainDB(t, v2), second, queries[:2])
	r2 = r3
	// The first version still reads right without its appendix.
	_, old, _ := openVersion(t, newClient(t, s, "app", ""), r1.Root, nil)
	sameResults(t, "first version", plainDB(t, v1), old, queries[:2])
	// The appendix holds every chunk of the version, root first.
	key, size, err := mdb.ResolveTable(ctx, r2.AppendixFile)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := tablefile.Open(store.ReaderAt(ctx, s, key), size, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tf.Count() != r2.Chunks || tf.Entries()[0].Addr != r2.Root {
		t.Errorf("appendix holds %d chunks, version has %d; first %s", tf.Count(), r2.Chunks, tf.Entries()[0].Addr)
	}
	c := newClient(t, s, "app", "")
	_, db, p := openHead(t, c)
	for n := int64(1); n <= p.PageCount(); n++ {
		if a, _ := p.PageAddr(n); !tf.Has(a) {
			t.Fatalf("page %d not in the appendix", n)
		}
	}
	sameResults(t, "appendix", plainDB(t, path), db, queries[:2])
	// The version's open set (root, page map, page 1, interior pages)
	// comes first in the file, so a service just started reads it in one
	// range.
	set, err := OpenSet(ctx, c, r2.Root)
	if err != nil {
		t.Fatal(err)
	}
	inSet := map[addr.Addr]bool{}
	for _, data := range set.Chunks {
		inSet[addr.Of(data)] = true
	}
	entries := tf.Entries() // in file order
	// In page order the open set would not come first: some page outside
	// it comes before an interior page.
	interleaved := false
	for n := int64(2); n <= p.PageCount() && !interleaved; n++ {
		a, _ := p.PageAddr(n)
		if !inSet[a] {
			for m := n + 1; m <= p.PageCount(); m++ {
				if b, _ := p.PageAddr(m); inSet[b] {
					interleaved = true
					break
				}
			}
		}
	}
	if !interleaved {
		t.Fatalf("open set of %d chunks: want a version whose interior pages lie between others in page order", len(inSet))
	}
	for i, e := range entries[:len(inSet)] {
		if !inSet[e.Addr] {
			t.Fatalf("appendix chunk %d (offset %d) is not in the open set: the open set is not first", i, e.Offset)
		}
	}
}

// rewriteCorrupt rewrites the table file holding chunk bad so that it
// holds other bytes under bad's address (with a correct CRC), keeping the
// file's name.
func rewriteCorrupt(t testing.TB, s store.Store, db, file string, bad addr.Addr) {
	t.Helper()
	ctx := context.Background()
	mdb, _ := manifest.Open(ctx, s, db)
	key, _ := mdb.TableKey(file)
	data, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tf := testdb.OpenTable(t, data)
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	found := false
	for _, e := range tf.Entries() {
		chunk, err := tf.Read(e)
		if err != nil {
			t.Fatal(err)
		}
		if e.Addr == bad {
			chunk = bytes.Clone(chunk)
			chunk[len(chunk)/2] ^= 0x55
			found = true
		}
		if err := w.AddWithAddr(e.Addr, chunk); err != nil {
			t.Fatal(err)
		}
	}
	name, err := w.Finish()
	if err != nil || name != file || !found {
		t.Fatalf("rewrite: name %s (want %s), found %v, %v", name, file, found, err)
	}
	if err := s.Put(ctx, key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptPage(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 7)
	res := importFile(t, s, path, ImportOptions{DB: "bad"})
	c := newClient(t, s, "bad", "")
	_, _, p := openHead(t, c)
	page := p.PageCount() / 2
	bad, _ := p.PageAddr(page)
	rewriteCorrupt(t, s, "bad", res.TableFile, bad)

	_, svcURL := startService(t, s, 0)
	for _, svc := range []string{"", svcURL} {
		for _, ra := range []int{-1, 0} {
			c := newClient(t, s, "bad", svc)
			name, db, _ := openVersion(t, c, res.Root, &sqlitevfs.Options{ReadAhead: ra})
			for _, q := range []string{`PRAGMA integrity_check`, `SELECT sum(length(Text)), count(*) FROM sentences`} {
				_, _, err := scanAll(db, q)
				if err == nil {
					t.Fatalf("service %q, read-ahead %d: %s: no error with page %d corrupt", svc, ra, q, page)
				}
				last := sqlitevfs.LastReadError(name)
				if !errors.Is(last, client.ErrCorrupt) || !strings.Contains(last.Error(), bad.String()) ||
					!strings.Contains(last.Error(), fmt.Sprintf("read page %d", page)) {
					t.Fatalf("service %q: %s: read error %v, want a corrupt chunk %s of page %d", svc, q, last, bad, page)
				}
			}
			// Queries that do not need the page still work.
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM blobs`).Scan(&n); err != nil || n != 3 {
				t.Errorf("blobs: %d, %v", n, err)
			}
		}
	}
}

func TestImportErrors(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	dir := t.TempDir()
	tmpDir := t.TempDir()
	t.Setenv("TMPDIR", tmpDir) // where Import keeps its temporary files
	good := handDB(t)
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("these are not the pages you are looking for\n"), 0o644)
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o644)
	testdb.MustMake(t, s, "dolt", testdb.Options{})
	for _, c := range []struct {
		path string
		o    ImportOptions
		want string
	}{
		{filepath.Join(dir, "missing.db"), ImportOptions{DB: "x"}, "no such file"},
		{dir, ImportOptions{DB: "x"}, "not a regular file"},
		{text, ImportOptions{DB: "x"}, "not an SQLite database"},
		{empty, ImportOptions{DB: "x"}, "is empty"},
		{good, ImportOptions{DB: ""}, "database name is empty"},
		{good, ImportOptions{DB: "../up"}, `".."`},
		{good, ImportOptions{DB: "a b"}, "not allowed"},
		{good, ImportOptions{DB: "x", PageSize: 1000}, "page size 1000"},
		{good, ImportOptions{DB: "x", PageSize: 256}, "page size 256"},
		{good, ImportOptions{DB: "x", PageSize: 131072}, "page size 131072"},
		{good, ImportOptions{DB: "dolt"}, "not a chunkd SQLite database"},
	} {
		_, err := Import(ctx, s, c.path, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "sqlchunks: import ") {
			t.Errorf("Import(%s, %+v) = %v, want an error with %q", c.path, c.o, err, c.want)
		}
	}
	if names, _ := manifest.ListDBs(ctx, s); len(names) != 1 {
		t.Errorf("failed imports left databases: %v", names)
	}

	// Versions: a chunk that is no root, the Dolt database's root.
	res := importFile(t, s, good, ImportOptions{DB: "good", Appendix: true})
	// Imports, failed or not, leave no temporary files.
	if tmps, _ := os.ReadDir(tmpDir); len(tmps) > 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	c := newClient(t, s, "good", "")
	_, _, p := openHead(t, c)
	pageAddr, _ := p.PageAddr(1)
	for _, a := range []addr.Addr{pageAddr, {}} {
		if _, err := ReadVersion(ctx, c, a); !errors.Is(err, ErrNotRoot) {
			t.Errorf("ReadVersion(%s): %v", a, err)
		}
		if _, err := OpenPages(ctx, c, a); !errors.Is(err, ErrNotRoot) {
			t.Errorf("OpenPages(%s): %v", a, err)
		}
	}
	if _, err := ReadVersion(ctx, c, addr.Of([]byte("absent"))); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("absent root: %v", err)
	}
	if v, err := ReadVersion(ctx, c, res.Root); err != nil || v.Root != res.Root || v.PageSize != res.PageSize {
		t.Errorf("ReadVersion: %+v %v", v, err)
	}
	dc := newClient(t, s, "dolt", "")
	root, err := Head(ctx, dc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPages(ctx, dc, root); !errors.Is(err, ErrNotRoot) || !strings.Contains(err.Error(), "size of a database page") {
		t.Errorf("OpenPages of a Dolt database: %v", err)
	}
}

// TestPageMap round-trips page maps of every depth (with a small fanout)
// through a store and a client.
func TestPageMap(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	mdb, _ := manifest.Open(ctx, s, "maps")
	const fanout = 3
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	type tc struct {
		pages []addr.Addr
		r     *root
	}
	var cases []tc
	for _, n := range []int{0, 1, 3, 4, 9, 10, 27, 28, 100} {
		pages := make([]addr.Addr, n)
		for i := range pages {
			pages[i] = addr.Of([]byte(fmt.Sprint("page ", i%7)))
		}
		mapRoot, depth, chunks := buildMap(pages, fanout)
		if depth != mapDepth(int64(n), fanout) {
			t.Fatalf("%d pages: depth %d, mapDepth %d", n, depth, mapDepth(int64(n), fanout))
		}
		for _, mc := range chunks {
			if len(mc.data)%2 != 1 {
				t.Fatalf("map chunk of even length %d", len(mc.data))
			}
			if err := w.AddWithAddr(mc.addr, mc.data); err != nil {
				t.Fatal(err)
			}
		}
		cases = append(cases, tc{pages, &root{pageSize: 4096, pages: int64(n), mapRoot: mapRoot, depth: depth, fanout: fanout}})
	}
	name, _ := w.Finish()
	key, _ := mdb.TableKey(name)
	s.Put(ctx, key, buf.Bytes())
	m := &manifest.Manifest{Version: manifest.Version5, NBF: manifest.FormatChunkdSQLite, Specs: []manifest.Spec{{Name: name, Chunks: uint32(w.Count())}}}
	m.Relock()
	if _, err := mdb.Update(ctx, "", m); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s, "maps", "")
	for _, tc := range cases {
		m, err := loadMap(ctx, c, addr.Addr{}, tc.r)
		var got []addr.Addr
		if err == nil {
			got, err = m.all(ctx, c)
		}
		if err != nil {
			t.Fatalf("%d pages, depth %d: %v", len(tc.pages), tc.r.depth, err)
		}
		if len(got) != len(tc.pages) {
			t.Fatalf("%d pages: got %d", len(tc.pages), len(got))
		}
		for i := range got {
			if got[i] != tc.pages[i] {
				t.Fatalf("%d pages: page %d differs", len(tc.pages), i+1)
			}
		}
		// A root that claims another page count does not fit its map.
		if tc.r.depth == mapDepth(tc.r.pages+1, fanout) {
			bad := *tc.r
			bad.pages++
			if _, err := loadMap(ctx, c, addr.Addr{}, &bad); !errors.Is(err, ErrBadMap) {
				t.Errorf("%d pages read as %d: %v", len(tc.pages), bad.pages, err)
			}
		}
	}
	// Root chunks round-trip, and refuse what they should.
	r := &root{pageSize: 65536, pages: 5, mapRoot: addr.Of([]byte("m")), depth: 1, fanout: MapFanout, parent: addr.Of([]byte("p")), time: 1700000000, message: "hello\x00\"world\"", interior: []int64{1, 3, 5}}
	got, err := decodeRoot(r.encode())
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("root round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"!!", encodeInterior([]int64{2, 2}), encodeInterior([]int64{6})} {
		if _, err := decodeInterior(bad, 5); err == nil {
			t.Errorf("interior pages %q of 5 decoded", bad)
		}
	}
	future := r.encode()
	future[len(RootMagic)] = FormatVersion + 1
	if _, err := decodeRoot(future); err == nil || !strings.Contains(err.Error(), "newer chunkd") {
		t.Errorf("future version: %v", err)
	}
	r.depth = 2
	if _, err := decodeRoot(r.encode()); err == nil {
		t.Error("wrong depth accepted")
	}
}

func TestReadAheadBatches(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 8)
	importFile(t, s, path, ImportOptions{DB: "ra"})
	const q = `SELECT count(*), sum(length(Text)) FROM sentences`
	var gets [2]int64
	for i, ra := range []int{-1, 32} {
		c := newClient(t, s, "ra", "")
		root, _ := Head(context.Background(), c)
		_, db, p := openVersion(t, c, root, &sqlitevfs.Options{ReadAhead: ra})
		before := c.Stats()
		sameResults(t, fmt.Sprint("read-ahead ", ra), plainDB(t, path), db, []string{q})
		st := c.Stats().Sub(before)
		gets[i] = st.Gets
		t.Logf("read-ahead %d: %d pages; %d gets, %d batches; %v", ra, p.PageCount(), st.Gets, st.Batches, st)
	}
	if gets[1]*4 > gets[0] {
		t.Errorf("read-ahead left %d single gets of %d", gets[1], gets[0])
	}

	// With a small page cache, over every query, several connections.
	c := newClient(t, s, "ra", "")
	root, _ := Head(context.Background(), c)
	_, db, _ := openVersion(t, c, root, &sqlitevfs.Options{ReadAhead: 16, CacheKiB: 64})
	plain := plainDB(t, path)
	sameResults(t, "read-ahead, small cache", plain, db, queries[:1]) // the reference results, once
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { sameResults(t, "read-ahead, small cache", plain, db, queries) })
	}
	wg.Wait()
	if st := c.Stats(); st.Batches == 0 {
		t.Errorf("read-ahead, small cache: %d gets, no batches", st.Gets)
	}
}

// TestIndexScanPageLists: a version read through a client answers an
// index scan that looks up every row as the file does, with the table
// leaves fetched a whole index leaf at a time (ReadPageList, one GetMany),
// and ReadPageList returns exactly what ReadPage does.
func TestIndexScanPageLists(t *testing.T) {
	s := newFolder(t)
	path := copyFile(t, genDB(t, 9), "indexed.sqlite")
	execAll(t, path, `CREATE INDEX sentences_text ON sentences(Text)`) // random text: the index's order is not the table's
	importFile(t, s, path, ImportOptions{DB: "ix"})
	c := newClient(t, s, "ix", "")
	root, _ := Head(context.Background(), c)
	// A page cache of 256 KiB, small beside the table's 2 MB, as the page
	// cache of a large database's reader is beside its tables.
	const cache = 256
	_, db, p := openVersion(t, c, root, &sqlitevfs.Options{CacheKiB: cache})

	// Read through the client, the pages are not on this host: the VFS
	// fetches B-tree pages ahead of a scan; with a page image (a same-host
	// service's), whose reads are preads, they are, and it does not.
	withImage := *p
	withImage.img = emptyImage{}
	if p.OnHost() || !withImage.OnHost() {
		t.Fatalf("on this host: through a client %v, with an image %v; want false and true", p.OnHost(), withImage.OnHost())
	}

	// The pages of a list, in no order and with a repeat, as ReadPage
	// reads them.
	ctx := context.Background()
	ns := []int64{p.PageCount(), 1, 7, 3, 7, p.PageCount() / 2}
	bs := make([][]byte, len(ns))
	for i := range bs {
		bs[i] = make([]byte, p.PageSize())
	}
	if err := p.ReadPageList(ctx, ns, bs); err != nil {
		t.Fatal(err)
	}
	for i, n := range ns {
		want := make([]byte, p.PageSize())
		if err := p.ReadPage(ctx, n, want); err != nil || !bytes.Equal(bs[i], want) {
			t.Fatalf("page %d: ReadPageList differs from ReadPage (%v)", n, err)
		}
	}
	if err := p.ReadPageList(ctx, []int64{p.PageCount() + 1}, bs[:1]); err == nil {
		t.Error("a page past the end read without an error")
	}

	const scan = `SELECT SentenceId, Lang, length(Text) FROM sentences INDEXED BY sentences_text WHERE Text > 'M'`
	plain := plainDB(t, path)
	// Without read-ahead: a Get per table leaf SQLite's cache misses.
	c0 := newClient(t, s, "ix", "")
	_, db0, _ := openVersion(t, c0, root, &sqlitevfs.Options{ReadAhead: -1, CacheKiB: cache})
	sameResults(t, "index scan, no read-ahead", plain, db0, []string{scan})
	single := c0.Stats().Gets
	// With it, once the indexes are found (in the background, at the
	// first index leaf read), the table leaves come in batches.
	for deadline := time.Now().Add(10 * time.Second); ; {
		db.SetMaxIdleConns(0) // each scan on a fresh connection, whose cache is empty
		before := c.Stats()
		sameResults(t, "index scan", plain, db, []string{scan})
		st := c.Stats().Sub(before)
		t.Logf("index scan: %d gets, %d batches, against %d gets without read-ahead; %v", st.Gets, st.Batches, single, st)
		if st.Gets*4 < single {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("index scan: %d gets and %d batches against %d gets without read-ahead: the table leaves were not fetched a leaf at a time", st.Gets, st.Batches, single)
		}
	}
}

// emptyImage is a page image that holds no page.
type emptyImage struct{}

func (emptyImage) Read(int, []byte) bool { return false }
func (emptyImage) Close() error          { return nil }

// halfImage is a page image that holds the pages before page first
// (their bytes read through pages, which have no image), as a same-host
// service's image is while the service fills it in page order.
type halfImage struct {
	pages *Pages
	first int64
	reads atomic.Int64
}

func (h *halfImage) Holds(i int) bool { return int64(i)+1 < h.first }
func (h *halfImage) Read(i int, b []byte) bool {
	if !h.Holds(i) || h.pages.ReadPage(context.Background(), int64(i)+1, b) != nil {
		return false
	}
	h.reads.Add(1)
	return true
}
func (h *halfImage) Close() error { return nil }

// TestImageReadAhead: with a page image that holds half the pages, a scan
// reads the pages it holds from it, one at a time as SQLite asks, and
// fetches those it lacks ahead in batches, not a request a page; the
// results are the file's.
func TestImageReadAhead(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 12)
	importFile(t, s, path, ImportOptions{DB: "half"})
	c := newClient(t, s, "half", "")
	root, _ := Head(context.Background(), c)
	p, err := OpenPages(context.Background(), c, root)
	if err != nil {
		t.Fatal(err)
	}
	other, err := OpenPages(context.Background(), newClient(t, s, "half", ""), root)
	if err != nil {
		t.Fatal(err)
	}
	img := &halfImage{pages: other, first: p.PageCount() / 2}
	p.img = img
	// A page the image holds is read as a local file's is: it starts no
	// read-ahead run (a batch of them would cost more than their preads).
	if !p.Local(img.first-1) || p.Local(img.first+1) {
		t.Errorf("pages %d (held) and %d (not): local %v and %v, want true and false", img.first-1, img.first+1, p.Local(img.first-1), p.Local(img.first+1))
	}
	d, err := sqlitevfs.OpenImage(t.Name(), p, &sqlitevfs.Options{CacheKiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before := c.Stats()
	q := `SELECT count(*), sum(length(Text)), max(Lang) FROM sentences`
	sameResults(t, "scan", plainDB(t, path), d.DB, []string{q})
	st := c.Stats().Sub(before)
	lacked := p.PageCount() - img.first + 1
	t.Logf("%d pages, the image holds %d: %d image reads; the client %d gets, %d batches (%v)", p.PageCount(), img.first-1, img.reads.Load(), st.Gets, st.Batches, st)
	if img.reads.Load() < (img.first-1)/2 {
		t.Errorf("%d reads from the image of the %d pages it holds", img.reads.Load(), img.first-1)
	}
	if st.Batches == 0 || st.Gets > lacked/4 {
		t.Errorf("the %d pages the image lacks: %d gets and %d batches; want them fetched ahead in batches", lacked, st.Gets, st.Batches)
	}
}
