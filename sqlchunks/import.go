package sqlchunks

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// ImportOptions configure Import.
type ImportOptions struct {
	// DB is the database's name in the store (see manifest.ValidateName).
	DB string
	// Message is recorded in the new version.
	Message string
	// PageSize, if not 0, re-pages the database to this page size (a power
	// of two from 512 to 65536) through a VACUUM INTO copy. 0 (or the
	// file's own page size) keeps the file's pages as they are.
	PageSize int
	// Appendix also writes an appendix file holding every chunk of the new
	// version - root, page map, pages in page order - and names it as the
	// database's appendix in the manifest (replacing the previous one,
	// which stays as an ordinary table file). The cache service downloads
	// an appendix whole, so a cold service gets the whole version in one
	// sequential download. It is a full copy of the database.
	Appendix bool
	// Progress, if not nil, is called as the import goes, with phase
	// "snapshot" (bytes of the source file), "read" (pages read and
	// hashed), "upload" (bytes of the new table file put to the store) or
	// "appendix" (pages written to the appendix file, then its bytes as
	// phase "upload").
	Progress func(phase string, done, total int64)

	// beforeUpdate, if set (by tests), is called before each conditional
	// manifest write, with the attempt number from 1.
	beforeUpdate func(attempt int)
}

// ImportResult describes an import.
type ImportResult struct {
	// Root is the new version's root chunk; Parent the version it was
	// imported on top of (zero for the first).
	Root, Parent addr.Addr
	// PageSize and Pages describe the imported database file.
	PageSize int
	Pages    int64
	// Chunks counts the distinct chunks of the version (pages, page-map
	// chunks and the root); NewChunks how many of them the database did
	// not have before, which the import uploaded.
	Chunks, NewChunks int
	// TableFile names the table file holding the new chunks ("" if there
	// were none), TableBytes its size. When the import had to retry on top
	// of a concurrent import, the re-parented root chunk went into a small
	// extra table file whose bytes TableBytes includes.
	TableFile  string
	TableBytes int64
	// AppendixFile and AppendixBytes describe the appendix file ("" if
	// ImportOptions.Appendix was false).
	AppendixFile  string
	AppendixBytes int64
	// Elapsed is how long the import took.
	Elapsed time.Duration
}

// importAttempts is how many times Import tries the manifest update when
// other writers keep changing the manifest first.
const importAttempts = 5

// hashBatch is how many pages are read and hashed at a time.
const hashBatch = 256

// Import stores a new version of the SQLite database file at path in
// database o.DB of s, on top of the database's current version (or as its
// first version).
//
// It takes a consistent snapshot of the file with SQLite itself (the online
// backup API, page for page, into a temporary file; or VACUUM INTO when
// re-paging), so the source may be in use, in rollback or WAL mode, while
// it is imported. It then hashes every page, and writes the pages, page-map
// chunks and root chunk that no table file of the database holds yet into
// one new table file, puts it (and the appendix file, if asked), and
// replaces the manifest conditionally (manifest.DB.Update). If another
// import changed the manifest in the meantime, Import loads it again and
// retries on top of the new head (the uploaded table file is kept; only
// the root chunk, whose parent changes, is written again), up to a few
// times; so every import that succeeds is in the history, none is lost.
//
// A database that changed in a few pages since the previous import costs
// those pages, the page-map chunks above them and one root chunk of upload
// (plus a full copy with Appendix). Temporary files go to os.TempDir()
// and are removed; the new table file is held in memory while it is put.
func Import(ctx context.Context, s store.Store, path string, o ImportOptions) (*ImportResult, error) {
	start := time.Now()
	res, err := doImport(ctx, s, path, &o)
	if err != nil {
		return nil, fmt.Errorf("sqlchunks: import %s: %w", path, err)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func (o *ImportOptions) progress(phase string, done, total int64) {
	if o.Progress != nil {
		o.Progress(phase, done, total)
	}
}

func doImport(ctx context.Context, s store.Store, path string, o *ImportOptions) (*ImportResult, error) {
	if err := o.check(s); err != nil {
		return nil, err
	}
	filePageSize, fileSize, err := checkSource(path)
	if err != nil {
		return nil, err
	}
	mdb, err := manifest.Open(ctx, s, o.DB)
	if err != nil {
		return nil, err
	}
	h, err := loadHead(ctx, mdb, nil)
	if err != nil {
		return nil, err
	}
	repage := 0
	if o.PageSize != 0 && o.PageSize != filePageSize {
		repage = o.PageSize
	}
	src, cleanup, err := takeSnapshot(ctx, path, fileSize, repage, o)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	v, err := upload(ctx, mdb, h, src, o)
	if err != nil {
		return nil, err
	}
	if err := v.commit(ctx, mdb, h, o); err != nil {
		return nil, err
	}
	v.res.Root, v.res.Parent = v.rootAddr, v.rt.parent
	return v.res, nil
}

// check checks the options (and the store) before anything is read.
func (o *ImportOptions) check(s store.Store) error {
	if s == nil {
		return errors.New("no store")
	}
	if err := manifest.ValidateName(o.DB); err != nil {
		return err
	}
	if o.PageSize != 0 && !isPageSize(o.PageSize) {
		return fmt.Errorf("page size %d: want 0 (keep the file's) or a power of two from 512 to 65536", o.PageSize)
	}
	if len(o.Message) > maxMessage {
		return fmt.Errorf("message of %d bytes is longer than %d", len(o.Message), maxMessage)
	}
	return nil
}

// source is the snapshot an import reads: a consistent copy of the
// database file.
type source struct {
	f        *os.File
	pageSize int
	pages    int64
}

// takeSnapshot copies the database at path consistently (re-paged to
// repage bytes, if not 0) into a temporary file, opened; cleanup closes
// and removes it.
func takeSnapshot(ctx context.Context, path string, fileSize int64, repage int, o *ImportOptions) (*source, func(), error) {
	snap, err := os.CreateTemp("", "chunkd-import-*.sqlite")
	if err != nil {
		return nil, nil, err
	}
	snapPath := snap.Name()
	snap.Close()
	remove := func() {
		os.Remove(snapPath)
		os.Remove(snapPath + "-journal")
	}
	o.progress("snapshot", 0, fileSize)
	if err := snapshot(ctx, path, snapPath, repage); err != nil {
		remove()
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	o.progress("snapshot", fileSize, fileSize)
	f, pageSize, pages, err := openSnapshot(snapPath)
	if err != nil {
		remove()
		return nil, nil, err
	}
	return &source{f, pageSize, pages}, func() { f.Close(); remove() }, nil
}

// newVersion is the version an import makes, as it is uploaded and
// committed.
type newVersion struct {
	rt       *root
	rootData []byte
	rootAddr addr.Addr
	files    []manifest.Spec // table files of this import, for the manifest
	app      *manifest.Spec  // the appendix file, or nil
	written  map[addr.Addr]bool
	res      *ImportResult
}

// upload hashes every page of src, writes the pages, page-map chunks and
// root chunk that head h lacks to a new table file and puts it, and the
// appendix file if asked.
func upload(ctx context.Context, mdb *manifest.DB, h *head, src *source, o *ImportOptions) (*newVersion, error) {
	tmp, err := os.CreateTemp("", "chunkd-import-*.table")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w := tablefile.NewWriter(tmp)
	add := func(a addr.Addr, data []byte) error {
		if h.has(a) || w.Has(a) {
			return nil
		}
		return w.AddWithAddr(a, data)
	}
	addrs, distinct, interior, err := hashPages(ctx, src, o, add)
	if err != nil {
		return nil, err
	}
	mapRoot, depth, maps := buildMap(addrs, MapFanout)
	for _, mc := range maps {
		if err := add(mc.addr, mc.data); err != nil {
			return nil, err
		}
	}
	v := &newVersion{rt: &root{pageSize: src.pageSize, pages: src.pages, mapRoot: mapRoot, depth: depth, fanout: MapFanout,
		parent: h.root(), time: time.Now().Unix(), message: o.Message, interior: interior}}
	v.rootData = v.rt.encode()
	v.rootAddr = addr.Of(v.rootData)
	v.written = map[addr.Addr]bool{v.rootAddr: true}
	if err := add(v.rootAddr, v.rootData); err != nil {
		return nil, err
	}
	v.res = &ImportResult{PageSize: src.pageSize, Pages: src.pages, Chunks: distinct + len(maps) + 1, NewChunks: w.Count()}
	if w.Count() > 0 {
		spec, size, err := finishTable(ctx, mdb, w, tmp, o)
		if err != nil {
			return nil, err
		}
		v.files = append(v.files, spec)
		v.res.TableFile, v.res.TableBytes = spec.Name, size
	}
	tmp.Close()
	os.Remove(tmp.Name())
	if o.Appendix {
		spec, size, err := writeAppendix(ctx, mdb, src, v.rootAddr, v.rootData, maps, interior, o)
		if err != nil {
			return nil, err
		}
		v.app = &spec
		v.res.AppendixFile, v.res.AppendixBytes = spec.Name, size
	}
	return v, nil
}

// commit replaces the manifest of head h with one naming the new version,
// if nobody else did first; else it goes on top of whoever did, up to
// importAttempts times.
func (v *newVersion) commit(ctx context.Context, mdb *manifest.DB, h *head, o *ImportOptions) error {
	for attempt := 1; ; attempt++ {
		var retire []string
		if v.app != nil {
			retire = h.replaceableAppendix()
		}
		m, err := newManifest(h.m, v.files, v.app, retire, v.rootAddr)
		if err != nil {
			return err
		}
		if o.beforeUpdate != nil {
			o.beforeUpdate(attempt)
		}
		_, err = mdb.Update(ctx, h.version, m)
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrPrecondition) {
			return err
		}
		if attempt == importAttempts {
			return fmt.Errorf("gave up after %d attempts: database %s changed under every one (other imports running at the same time?); its table files were uploaded but are not in the manifest: %w", attempt, mdb, err)
		}
		// Another writer won. Start over on top of its version: the
		// chunks are uploaded already, only the root names a new parent.
		sleep(ctx, time.Duration(attempt)*time.Duration(10+rand.IntN(40))*time.Millisecond)
		prev := h
		if h, err = loadHead(ctx, mdb, prev); err != nil {
			return err
		}
		// Chunks found in the old head's files were not uploaded. Imports
		// only add files, and drop a replaced appendix only when the other
		// files hold all its chunks; make sure nothing else took them away.
		for _, f := range prev.files() {
			if h.file(f.Name) == nil && !h.holdsAll(f.Index) {
				return fmt.Errorf("database %s was rewritten during the import: table file %s, which holds chunks of the new version, is no longer in its manifest; import again", mdb, f.Name)
			}
		}
		if err := v.reparent(ctx, mdb, h); err != nil {
			return err
		}
	}
}

// reparent makes the new version's root name head h as its parent, and
// puts the new root chunk in a table file of its own unless the database
// or this import has it already.
func (v *newVersion) reparent(ctx context.Context, mdb *manifest.DB, h *head) error {
	v.rt.parent = h.root()
	v.rootData = v.rt.encode()
	v.rootAddr = addr.Of(v.rootData)
	if v.written[v.rootAddr] || h.has(v.rootAddr) {
		return nil
	}
	var buf bytes.Buffer
	rw := tablefile.NewWriter(&buf)
	if err := rw.AddWithAddr(v.rootAddr, v.rootData); err != nil {
		return err
	}
	name, err := rw.Finish()
	if err != nil {
		return err
	}
	if err := putTable(ctx, mdb, name, buf.Bytes()); err != nil {
		return err
	}
	v.files = append(v.files, manifest.Spec{Name: name, Chunks: 1})
	v.res.TableBytes += int64(buf.Len())
	v.written[v.rootAddr] = true
	return nil
}

// checkSource checks that path is an SQLite database file and returns its
// page size and size.
func checkSource(path string) (int, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("%s is not a regular file", path)
	}
	var hdr [100]byte
	n, err := io.ReadFull(f, hdr[:])
	if n == 0 && err == io.EOF {
		return 0, 0, fmt.Errorf("%s is empty, not an SQLite database", path)
	}
	if err != nil && err != io.ErrUnexpectedEOF {
		return 0, 0, err
	}
	if n < len(hdr) || string(hdr[:16]) != "SQLite format 3\x00" {
		return 0, 0, fmt.Errorf("%s is not an SQLite database (it does not start with the header \"SQLite format 3\")", path)
	}
	ps := pageSizeOf(hdr[:])
	if !isPageSize(ps) {
		return 0, 0, fmt.Errorf("%s: bad page size %d in the SQLite header", path, ps)
	}
	return ps, fi.Size(), nil
}

// pageSizeOf reads the page size from an SQLite header.
func pageSizeOf(hdr []byte) int {
	ps := int(binary.BigEndian.Uint16(hdr[16:18]))
	if ps == 1 {
		ps = 65536
	}
	return ps
}

// openSnapshot opens the snapshot, marks it a rollback-journal database
// (a copy of a WAL database still says WAL in its header, which a reader
// without shared memory cannot open), and returns its geometry.
func openSnapshot(path string) (*os.File, int, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, 0, err
	}
	fail := func(err error) (*os.File, int, int64, error) {
		f.Close()
		return nil, 0, 0, err
	}
	var hdr [100]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return fail(fmt.Errorf("snapshot: %w", err))
	}
	ps := pageSizeOf(hdr[:])
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !isPageSize(ps) || fi.Size()%int64(ps) != 0 {
		return fail(fmt.Errorf("snapshot: page size %d, file size %d", ps, fi.Size()))
	}
	// Header bytes 18 and 19 are the file format write and read versions:
	// 1 for rollback journal, 2 for WAL.
	if hdr[18] == 2 || hdr[19] == 2 {
		if _, err := f.WriteAt([]byte{1, 1}, 18); err != nil {
			return fail(err)
		}
	}
	return f, ps, fi.Size() / int64(ps), nil
}

// hashPages reads and hashes every page of src, a batch at a time (the
// hashing spread over the CPUs), and calls add for each page in page
// order. It returns the addresses of all pages and how many are distinct.
func hashPages(ctx context.Context, src *source, o *ImportOptions, add func(addr.Addr, []byte) error) (addrs []addr.Addr, distinct int, interior []int64, err error) {
	pageSize, pages := src.pageSize, src.pages
	addrs = make([]addr.Addr, pages)
	seen := make(map[addr.Addr]struct{})
	buf := make([]byte, hashBatch*pageSize)
	workers := runtime.GOMAXPROCS(0)
	o.progress("read", 0, pages)
	for first := int64(0); first < pages; first += hashBatch {
		if err := ctx.Err(); err != nil {
			return nil, 0, nil, err
		}
		k := int(min(hashBatch, pages-first))
		b := buf[:k*pageSize]
		if _, err := src.f.ReadAt(b, first*int64(pageSize)); err != nil {
			return nil, 0, nil, fmt.Errorf("read snapshot: %w", err)
		}
		var wg sync.WaitGroup
		for wid := range min(workers, k) {
			wg.Go(func() {
				for i := wid; i < k; i += workers {
					addrs[first+int64(i)] = addr.Of(b[i*pageSize : (i+1)*pageSize])
				}
			})
		}
		wg.Wait()
		for i := range k {
			a, page, n := addrs[first+int64(i)], b[i*pageSize:(i+1)*pageSize], first+int64(i)+1
			seen[a] = struct{}{}
			if len(interior) < maxInterior && isInterior(n, page) {
				interior = append(interior, n)
			}
			if err := add(a, page); err != nil {
				return nil, 0, nil, err
			}
		}
		o.progress("read", first+int64(k), pages)
	}
	return addrs, len(seen), interior, nil
}

// finishTable finishes the table file w wrote to f and puts it.
func finishTable(ctx context.Context, mdb *manifest.DB, w *tablefile.Writer, f *os.File, o *ImportOptions) (manifest.Spec, int64, error) {
	name, err := w.Finish()
	if err != nil {
		return manifest.Spec{}, 0, fmt.Errorf("write table file: %w", err)
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return manifest.Spec{}, 0, err
	}
	o.progress("upload", 0, int64(len(data)))
	spec := manifest.Spec{Name: name, Chunks: uint32(w.Count())}
	if err := putTable(ctx, mdb, name, data); err != nil {
		return spec, 0, err
	}
	o.progress("upload", int64(len(data)), int64(len(data)))
	return spec, int64(len(data)), nil
}

// putTable puts a table file.
func putTable(ctx context.Context, mdb *manifest.DB, name string, data []byte) error {
	key, err := mdb.TableKey(name)
	if err != nil {
		return err
	}
	if err := mdb.Store().Put(ctx, key, data); err != nil {
		return fmt.Errorf("put table file: %w", err)
	}
	return nil
}

// writeAppendix writes the appendix file: the root, the page map from the
// top, the open set's pages (page 1 and the interior pages the root
// lists), then every other page in page order. A service that has just
// started reads a version's whole open set (OpenSet) from the file's first
// bytes, in one ranged read of the store or from the first megabytes of
// its download, rather than an interior page at a time from all over it.
func writeAppendix(ctx context.Context, mdb *manifest.DB, src *source, rootAddr addr.Addr, rootData []byte, maps []mapChunk, interior []int64, o *ImportOptions) (manifest.Spec, int64, error) {
	f, err := os.CreateTemp("", "chunkd-import-*.appendix")
	if err != nil {
		return manifest.Spec{}, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	w := tablefile.NewWriter(f)
	if err := w.AddWithAddr(rootAddr, rootData); err != nil {
		return manifest.Spec{}, 0, err
	}
	for _, mc := range maps {
		if err := w.AddWithAddr(mc.addr, mc.data); err != nil {
			return manifest.Spec{}, 0, err
		}
	}
	if src.pages > 0 {
		page := make([]byte, src.pageSize)
		for _, n := range setPages(interior) {
			if _, err := src.f.ReadAt(page, (n-1)*int64(src.pageSize)); err != nil {
				return manifest.Spec{}, 0, fmt.Errorf("read snapshot page %d: %w", n, err)
			}
			if err := w.AddWithAddr(addr.Of(page), page); err != nil {
				return manifest.Spec{}, 0, err
			}
		}
	}
	// The pages are read and hashed again, rather than kept from the first
	// pass: the snapshot is a local file, likely still in the page cache.
	o.progress("appendix", 0, src.pages)
	_, _, _, err = hashPages(ctx, src, &ImportOptions{}, func(a addr.Addr, page []byte) error {
		return w.AddWithAddr(a, page)
	})
	if err != nil {
		return manifest.Spec{}, 0, err
	}
	o.progress("appendix", src.pages, src.pages)
	return finishTable(ctx, mdb, w, f, o)
}

// newManifest returns the manifest of base (nil: a new database) with the
// given table files added, the files named in retire left out, app (if
// not nil) as the appendix, and root.
func newManifest(base *manifest.Manifest, files []manifest.Spec, app *manifest.Spec, retire []string, root addr.Addr) (*manifest.Manifest, error) {
	m := &manifest.Manifest{Version: manifest.Version5, NBF: manifest.FormatChunkdSQLite}
	if base != nil {
		m.GCGen = base.GCGen
		for _, s := range base.Specs {
			if !slices.Contains(retire, s.Name) {
				m.Specs = append(m.Specs, s)
			}
		}
		m.Appendix = slices.DeleteFunc(slices.Clone(base.Appendix), func(n string) bool { return slices.Contains(retire, n) })
	}
	for _, f := range files {
		if !m.HasSpec(f.Name) {
			m.Specs = append(m.Specs, f)
		}
	}
	if app != nil {
		m.SetAppendix([]manifest.Spec{*app})
	}
	m.Root = root
	if err := m.Relock(); err != nil {
		return nil, err
	}
	return m, nil
}

// head is a database's current manifest and its open table files.
type head struct {
	m       *manifest.Manifest // nil: no database yet
	version string             // the manifest object's version ("": none)
	set     *tableset.Set[struct{}]
}

func (h *head) root() addr.Addr {
	if h.m == nil {
		return addr.Addr{}
	}
	return h.m.Root
}

// has reports whether a table file of the database holds a.
func (h *head) has(a addr.Addr) bool {
	if h.set == nil {
		return false
	}
	_, _, ok := h.set.Find(a)
	return ok
}

// files returns the head's open table files.
func (h *head) files() []*tableset.File[struct{}] {
	if h.set == nil {
		return nil
	}
	return h.set.Files
}

// file returns the open table file called name, or nil.
func (h *head) file(name string) *tablefile.Table {
	if f, ok := h.set.Get(name); ok {
		return f.Index
	}
	return nil
}

// holdsAll reports whether the head's files hold every chunk of t.
func (h *head) holdsAll(t *tablefile.Table) bool {
	for _, e := range t.Entries() {
		if !h.has(e.Addr) {
			return false
		}
	}
	return true
}

// replaceableAppendix returns the head's appendix files that a new
// appendix may replace in the manifest: those whose every chunk is also in
// one of the database's other files (always so for appendixes chunkd
// wrote, as each import also writes its new chunks to a plain file). A
// new version's manifest need not name them; the objects stay in the
// store, so readers of older manifests are not disturbed. Without this,
// every import would leave another full copy of the database named in
// the manifest, for every reader to open.
func (h *head) replaceableAppendix() []string {
	if h.m == nil {
		return nil
	}
	var others []*tablefile.Table
	for _, f := range h.files() {
		if !f.Appendix {
			others = append(others, f.Index)
		}
	}
	held := func(a addr.Addr) bool {
		for _, t := range others {
			if t.Has(a) {
				return true
			}
		}
		return false
	}
	var out []string
	for _, name := range h.m.Appendix {
		app := h.file(name)
		if app == nil {
			continue
		}
		all := true
		for _, e := range app.Entries() {
			if !held(e.Addr) {
				all = false
				break
			}
		}
		if all {
			out = append(out, name)
		}
	}
	return out
}

// loadHead loads the manifest of mdb and opens the indexes of its table
// files (those prev has open already are kept). Any file that cannot be
// opened fails the import: its chunks would be uploaded again, or worse,
// taken for absent.
func loadHead(ctx context.Context, mdb *manifest.DB, prev *head) (*head, error) {
	l := &tableset.Loader[struct{}]{DB: mdb}
	m, version, err := l.Manifest(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return &head{}, nil
	}
	if err != nil {
		return nil, err
	}
	if m.NBF != manifest.FormatChunkdSQLite {
		return nil, fmt.Errorf("database %s has storage format %q, not %q: it is not a chunkd SQLite database (import into another name)", mdb, m.NBF, manifest.FormatChunkdSQLite)
	}
	var have func(string) (*tableset.File[struct{}], bool)
	if prev != nil {
		have = prev.set.Get
	}
	set := l.Open(ctx, m, have)
	if err := set.Err(); err != nil {
		return nil, err
	}
	return &head{m: m, version: version, set: set}, nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
