//go:build cgo

package sqlchunks

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// loadManifest loads database db's manifest.
func loadManifest(t testing.TB, s store.Store, db string) (*manifest.DB, *manifest.Manifest) {
	t.Helper()
	mdb, err := manifest.Open(context.Background(), s, db)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := mdb.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return mdb, m
}

// openTable opens table file name of mdb from the store.
func openTable(t testing.TB, mdb *manifest.DB, name string) *tablefile.Table {
	t.Helper()
	ctx := context.Background()
	key, size, err := mdb.ResolveTable(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := tablefile.Open(store.ReaderAt(ctx, mdb.Store(), key), size, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tf
}

// changePages updates rows of sentences spread over the table: about n
// pages' worth of changes.
func changePages(t testing.TB, path string, n, salt int) {
	t.Helper()
	k := max(1, 16000/max(1, n*2))
	execAll(t, path, fmt.Sprintf(`UPDATE sentences SET Text = 'v%d ' || Text WHERE SentenceId %% %d = %d`, salt, k, salt*37%k))
}

// TestFirstImportWritesOnce: a first import with an appendix writes each
// page once (the appendix and no plain file: at most 1.1 times the file),
// and the version reads as the file.
func TestFirstImportWritesOnce(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 11)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r := importFile(t, s, path, ImportOptions{DB: "once", Appendix: true})
	if r.TableFile != "" || r.AppendixFile == "" || r.Lacking != 0 {
		t.Fatalf("first import: %+v", r)
	}
	if got := storeBytes(t, s); float64(got) > 1.1*float64(fi.Size()) || r.StoreBytes != got {
		t.Errorf("first import of a %d-byte file: %d bytes in the store, %d reported; want at most 1.1x the file", fi.Size(), got, r.StoreBytes)
	}
	_, m := loadManifest(t, s, "once")
	if len(m.Specs) != 1 || len(m.Appendix) != 1 || m.Appendix[0] != r.AppendixFile {
		t.Fatalf("manifest %v, appendix %v", m.Specs, m.Appendix)
	}
	_, db, _ := openHead(t, newClient(t, s, "once", ""))
	sameResults(t, "first import", plainDB(t, path), db, queries)
}

// TestAppendixThreshold: imports of a few changed pages write plain files
// and leave the appendix; the import after which the appendix would lack
// more than the threshold writes a new one, of the whole version.
func TestAppendixThreshold(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 12)
	o := ImportOptions{DB: "thr", Appendix: true, AppendixThreshold: 0.08}
	r0 := importFile(t, s, path, o)
	var lacking []int64
	rewrote := -1
	for i := 1; i <= 12 && rewrote < 0; i++ {
		changePages(t, path, 10, i)
		r := importFile(t, s, path, o)
		if r.AppendixFile != "" {
			rewrote = i
			if float64(lacking[len(lacking)-1]) > 0.08*float64(r.Pages) || r.TableFile != "" || r.Lacking != 0 {
				t.Fatalf("import %d rewrote the appendix: lacking before %v, result %+v", i, lacking, r)
			}
			break
		}
		if r.TableFile == "" || r.Lacking == 0 || float64(r.Lacking) > 0.08*float64(r.Pages) {
			t.Fatalf("import %d: %+v", i, r)
		}
		if len(lacking) > 0 && r.Lacking < lacking[len(lacking)-1] {
			t.Errorf("import %d: the appendix lacks %d pages, fewer than the %d before", i, r.Lacking, lacking[len(lacking)-1])
		}
		lacking = append(lacking, r.Lacking)
	}
	if rewrote < 2 {
		t.Fatalf("the appendix was rewritten at import %d; lacking %v (of %d pages)", rewrote, lacking, r0.Pages)
	}
	_, m := loadManifest(t, s, "thr")
	mdb, _ := manifest.Open(context.Background(), s, "thr")
	app := openTable(t, mdb, m.Appendix[0])
	_, db, p := openHead(t, newClient(t, s, "thr", ""))
	for n := int64(1); n <= p.PageCount(); n++ {
		if a, _ := p.PageAddr(n); !app.Has(a) {
			t.Fatalf("page %d is not in the new appendix", n)
		}
	}
	sameResults(t, "after the rewrite", plainDB(t, path), db, queries[:3])
}

// TestAppendixPlusNewerFiles: a version made of an older appendix and the
// plain files of later imports reads as its file from the store, through
// a cache service (its open set; the appendix and the small files
// downloaded) and through a same-host service's page image; so do the
// versions before it.
func TestAppendixPlusNewerFiles(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 13)
	var files []string
	var roots []addr.Addr
	for i := range 4 {
		if i > 0 {
			changePages(t, path, 5, i)
		}
		r := importFile(t, s, path, ImportOptions{DB: "mix", Appendix: true})
		if (i == 0) != (r.AppendixFile != "") {
			t.Fatalf("import %d: %+v", i, r)
		}
		files = append(files, copyFile(t, path, fmt.Sprint("v", i, ".sqlite")))
		roots = append(roots, r.Root)
	}
	_, m := loadManifest(t, s, "mix")
	if len(m.Specs) != 4 || len(m.Appendix) != 1 {
		t.Fatalf("manifest %v, appendix %v", m.Specs, m.Appendix)
	}
	head := roots[len(roots)-1]
	want := plainDB(t, files[len(files)-1])

	_, direct, _ := openHead(t, newClient(t, s, "mix", ""))
	sameResults(t, "store", want, direct, queries)

	_, url := startService(t, s, 0)
	svc, err := client.Open(ctx, client.Options{DB: "mix", Service: url, MemBytes: -1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for i, root := range roots {
		_, db, _ := openVersion(t, svc, root, nil)
		sameResults(t, fmt.Sprint("service, version ", i), plainDB(t, files[i]), db, queries[:3])
	}
	set, err := OpenSet(ctx, svc, head)
	if err != nil || len(set.Pages) == 0 {
		t.Fatalf("open set of the head: %v", err)
	}

	h := startSameHost(t, s, 0)
	c, image := h.open(t, "mix")
	sameResults(t, "same-host image", want, image, queries)
	waitImage(t, h.dir)
	before := c.Stats()
	sameResults(t, "same-host image, filled", want, image, queries)
	if st := c.Stats().Sub(before); st.ImageReads == 0 {
		t.Errorf("same-host reads did not come from the image: %v", st)
	}
}

// TestMergeSmallFiles: once mergeFiles small plain files of one size tier
// are there, an import takes their chunks into its own file and the
// manifest names it instead; merged files merge again a tier up; every
// version still reads.
func TestMergeSmallFiles(t *testing.T) {
	s := newFolder(t)
	path := handDB(t)
	o := ImportOptions{DB: "merge", Appendix: true, AppendixThreshold: 1}
	importFile(t, s, path, o)
	var roots []addr.Addr
	var copies []string
	merges := 0
	for i := 1; i <= 20; i++ {
		execAll(t, path, fmt.Sprintf(`UPDATE docs SET score = %d WHERE id = %d`, i, 1+i*83))
		r := importFile(t, s, path, o)
		roots, copies = append(roots, r.Root), append(copies, copyFile(t, path, fmt.Sprint(i, ".db")))
		if len(r.Merged) > 0 {
			merges++
			if len(r.Merged) != mergeFiles {
				t.Fatalf("import %d merged %d files", i, len(r.Merged))
			}
		}
		_, m := loadManifest(t, s, "merge")
		if len(m.Specs) > 1+2*(mergeFiles-1)+1 {
			t.Fatalf("after import %d the manifest names %d files", i, len(m.Specs))
		}
	}
	if merges < 4 {
		t.Fatalf("%d merges in 20 imports", merges)
	}
	c := newClient(t, s, "merge", "")
	for _, i := range []int{0, 7, len(roots) - 1} {
		_, db, _ := openVersion(t, c, roots[i], nil)
		sameResults(t, fmt.Sprint("version ", i+1), plainDB(t, copies[i]), db, handQueries[:3])
	}
}

// TestImportRestoresDroppedChunks: a file the import counted on (it held
// chunks of the new version, so they were not uploaded) leaves the
// manifest before the import commits, as gc may drop it: the import
// retries and puts those chunks again, and its version reads.
func TestImportRestoresDroppedChunks(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 14)
	importFile(t, s, path, ImportOptions{DB: "drop", Appendix: true})
	changePages(t, path, 3, 1)
	r1 := importFile(t, s, path, ImportOptions{DB: "drop", Appendix: true})
	changePages(t, path, 3, 2)
	r2, err := Import(ctx, s, path, ImportOptions{DB: "drop", Appendix: true, beforeUpdate: func(attempt int) {
		if attempt != 1 {
			return
		}
		// A writer drops r1's file (and deletes it) and re-points the
		// manifest: the new version's unchanged pages of r1 are gone.
		mdb, m := loadManifest(t, s, "drop")
		var specs []manifest.Spec
		for _, sp := range m.Specs {
			if sp.Name != r1.TableFile {
				specs = append(specs, sp)
			}
		}
		m.Specs = specs
		if err := m.Relock(); err != nil {
			t.Fatal(err)
		}
		_, version, _ := mdb.Load(ctx)
		if _, err := mdb.Update(ctx, version, m); err != nil {
			t.Fatal(err)
		}
		key, _ := mdb.TableKey(r1.TableFile)
		s.Delete(ctx, key)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r2.TableBytes == 0 {
		t.Fatalf("import: %+v", r2)
	}
	_, db, _ := openHead(t, newClient(t, s, "drop", ""))
	sameResults(t, "after the retry", plainDB(t, path), db, queries)
}

// TestCompact: Compact writes an appendix of the head from the store, in
// the appendix's order, and makes it the manifest's; the head reads the
// same; a second Compact finds nothing to do.
func TestCompact(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 15)
	o := ImportOptions{DB: "cmp", Appendix: true}
	importFile(t, s, path, o)
	var head *ImportResult
	for i := 1; i <= 3; i++ {
		changePages(t, path, 5, i)
		head = importFile(t, s, path, o)
	}
	res, err := Compact(ctx, s, "cmp", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Root != head.Root || res.AppendixFile == "" || res.Lacking != head.Lacking || res.Lacking == 0 {
		t.Fatalf("compact: %+v after %+v", res, head)
	}
	mdb, m := loadManifest(t, s, "cmp")
	if len(m.Appendix) != 1 || m.Appendix[0] != res.AppendixFile || m.Root != head.Root {
		t.Fatalf("manifest %v, appendix %v", m.Specs, m.Appendix)
	}
	app := openTable(t, mdb, res.AppendixFile)
	c := newClient(t, s, "cmp", "")
	set, err := OpenSet(ctx, c, head.Root)
	if err != nil {
		t.Fatal(err)
	}
	entries := app.Entries()
	if app.Count() != head.Chunks || entries[0].Addr != head.Root {
		t.Fatalf("appendix: %d chunks (version: %d), first %s", app.Count(), head.Chunks, entries[0].Addr)
	}
	for i, data := range set.Chunks { // the open set first, in its order
		if entries[i].Addr != addr.Of(data) {
			t.Fatalf("appendix chunk %d is not the open set's", i)
		}
	}
	_, db, _ := openHead(t, c)
	sameResults(t, "compacted", plainDB(t, path), db, queries[:3])
	again, err := Compact(ctx, s, "cmp", nil)
	if err != nil || again.AppendixFile != "" || again.Lacking != 0 {
		t.Fatalf("second compact: %+v, %v", again, err)
	}
}

// TestNewBytes: a version's root says how many bytes of pages and
// page-map chunks it added: those of its table file but the root.
func TestNewBytes(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 16)
	r1 := importFile(t, s, path, ImportOptions{DB: "nb", Appendix: true})
	changePages(t, path, 4, 1)
	r2 := importFile(t, s, path, ImportOptions{DB: "nb", Appendix: true})
	mdb, _ := loadManifest(t, s, "nb")
	tf := openTable(t, mdb, r2.TableFile)
	var want int64
	for _, e := range tf.Entries() {
		if e.Addr == r2.Root {
			continue
		}
		data, err := tf.Get(e.Addr)
		if err != nil {
			t.Fatal(err)
		}
		want += int64(len(data))
	}
	log, err := Log(ctx, newClient(t, s, "nb", ""), addr.Addr{}, 0)
	if err != nil || len(log) != 2 {
		t.Fatalf("log: %v %v", log, err)
	}
	if log[0].NewBytes != want || log[1].NewBytes < r1.Pages*int64(r1.PageSize)*9/10 || log[0].Size() != r2.Pages*int64(r2.PageSize) {
		t.Errorf("new bytes %d and %d, want %d and about the file's %d", log[0].NewBytes, log[1].NewBytes, want, r1.Pages*int64(r1.PageSize))
	}
}
