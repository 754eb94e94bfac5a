package sqlchunks

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// DefaultAppendixThreshold is ImportOptions.AppendixThreshold's default:
// the appendix is rewritten once it lacks more than 15% of a version's
// pages.
const DefaultAppendixThreshold = 0.15

// Merging small table files, size-tiered: the plain files of at most
// mergeFileMax bytes fall in tiers by size (a tier is a factor of 4); an
// import that finds mergeFiles of them in one tier copies their chunks
// into its own new file, which the manifest names instead. Each byte is
// copied about once a tier (a few times in all), a merge reads at most
// mergeFiles files of about one size, and the manifest names at most
// mergeFiles-1 small files a tier.
const (
	mergeFiles   = 4
	mergeFileMax = 16 << 20
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
	// Appendix keeps an appendix: a table file holding every chunk of one
	// version (root, page map, the open set's pages, the other pages in
	// page order), named as the database's appendix in the manifest. The
	// cache service downloads an appendix whole, so a cold service gets a
	// version in one sequential download.
	//
	// The appendix is a full copy, so it is not rewritten on every
	// import: an import writes its new chunks to a plain table file, and
	// a version is then the appendix of an older one plus the newer
	// files. An import writes a new appendix of its version instead
	// (holding its new chunks too: each is written once) when the
	// database has none, when Compact is set, or when the pages of the
	// version that the appendix lacks would exceed AppendixThreshold of
	// its pages. So the first import writes each page once, into the
	// appendix.
	Appendix bool
	// AppendixThreshold is the fraction of a version's pages the appendix
	// may lack before an import rewrites it; 0 means
	// DefaultAppendixThreshold.
	AppendixThreshold float64
	// Compact, with Appendix, rewrites the appendix with this version
	// whatever it lacks.
	Compact bool
	// Progress, if not nil, is called as the import goes, with phase
	// "snapshot" (bytes of the source file), "read" (pages read and
	// hashed), "upload" (bytes of the new table file put to the store) or
	// "appendix" (pages written to the appendix file, then its bytes as
	// phase "upload").
	Progress func(phase string, done, total int64)

	// beforeUpdate, if set (by tests), is called before each conditional
	// manifest write, with the attempt number from 1.
	beforeUpdate func(attempt int)
	// inMemory (Publisher) builds table files in memory, not in
	// temporary files.
	inMemory bool
	// oneThread (Publisher, whose rounds run in the background) hashes
	// on the caller's thread alone.
	oneThread bool
	// now, if set (by tests), is the clock versions are dated by.
	now func() time.Time
	// memo, if set (by Publisher), remembers pages between imports of one
	// source, so that pages whose fast hash did not change are not hashed
	// again with SHA-512.
	memo *pageMemo
}

// ImportResult describes an import.
type ImportResult struct {
	// Root is the new version's root chunk; Parent the version it was
	// imported on top of (zero for the first). For an unchanged file,
	// Root is the database's current version, which stays the head.
	Root, Parent addr.Addr
	// Unchanged says the file holds exactly the database's current
	// version (same pages): nothing was written, no version made.
	Unchanged bool
	// PageSize and Pages describe the imported database file.
	PageSize int
	Pages    int64
	// Chunks counts the distinct chunks of the version (pages, page-map
	// chunks and the root); NewChunks how many of them the database did
	// not have before, which the import uploaded.
	Chunks, NewChunks int
	// TableFile names the plain table file the import wrote ("" if none:
	// nothing was new, or it all went into a new appendix), TableBytes
	// its size. When the import had to retry on top of a concurrent
	// import, the re-parented root chunk (and any chunk the database lost
	// meanwhile) went into a small extra table file whose bytes
	// TableBytes includes.
	TableFile  string
	TableBytes int64
	// Merged names the small table files whose chunks the new table file
	// took in; the manifest no longer names them.
	Merged []string
	// AppendixFile and AppendixBytes describe the new appendix file (""
	// if the import wrote none).
	AppendixFile  string
	AppendixBytes int64
	// Lacking is how many of the version's pages the database's appendix
	// lacks after the import (0 when it wrote one; all of them when the
	// database keeps none).
	Lacking int64
	// StoreBytes is every byte the import put to the store: table files,
	// appendix, manifest and sidecar.
	StoreBytes int64
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
// it is imported. It then hashes every page. A file whose pages are the
// current version's publishes nothing (ImportResult.Unchanged). Otherwise
// the pages, page-map chunks and root chunk that no table file of the
// database holds yet go into one new table file (or into a new appendix,
// see ImportOptions.Appendix), which is put, and the manifest is replaced
// conditionally (manifest.DB.Update). If another writer changed the
// manifest in the meantime, Import loads it again and retries on top of
// the new head (the uploaded files are kept; the root chunk, whose parent
// changes, is written again, with any chunk the import counted on that the
// database no longer holds), up to a few times; so every import that
// succeeds is in the history, none is lost.
//
// A database that changed in a few pages since the previous import costs
// those pages, the page-map chunks above them and one root chunk of upload.
// Temporary files go to os.TempDir() and are removed; the new table file
// is held in memory while it is put.
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
	res, _, err := importSource(ctx, mdb, h, src, o)
	return res, err
}

// importSource makes src a new version on top of head h (or finds it
// unchanged) and commits it; it returns the head the commit went on top
// of.
func importSource(ctx context.Context, mdb *manifest.DB, h *head, src *source, o *ImportOptions) (*ImportResult, *head, error) {
	v, err := upload(ctx, mdb, h, src, o)
	if err != nil {
		return nil, h, err
	}
	if v.res.Unchanged {
		return v.res, h, nil
	}
	if h, err = v.commit(ctx, mdb, h, o); err != nil {
		return nil, h, err
	}
	v.res.Root, v.res.Parent = v.rootAddr, v.rt.parent
	return v.res, h, nil
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
	if o.AppendixThreshold < 0 || o.AppendixThreshold > 1 {
		return fmt.Errorf("appendix threshold %g: want a fraction from 0 to 1", o.AppendixThreshold)
	}
	return nil
}

func (o *ImportOptions) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

func (o *ImportOptions) threshold() float64 {
	if o.AppendixThreshold == 0 {
		return DefaultAppendixThreshold
	}
	return o.AppendixThreshold
}

// source is the snapshot an import reads: a consistent copy of the
// database, a file or bytes in memory.
type source struct {
	r        io.ReaderAt
	pageSize int
	pages    int64
}

// page reads page n (1-based) into b.
func (s *source) page(n int64, b []byte) error {
	if _, err := s.r.ReadAt(b[:s.pageSize], (n-1)*int64(s.pageSize)); err != nil {
		return fmt.Errorf("read snapshot page %d: %w", n, err)
	}
	return nil
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
	src      *source
	rt       *root
	rootData []byte
	rootAddr addr.Addr
	addrs    []addr.Addr     // the pages' addresses, page n at n-1
	maps     []mapChunk      // the page map's chunks
	files    []manifest.Spec // table files of this import, for the manifest
	app      *manifest.Spec  // the appendix file, or nil
	retire   []string        // files whose chunks the import's own file took in
	written  map[addr.Addr]bool
	res      *ImportResult
}

// setRoot encodes the root and notes its address.
func (v *newVersion) setRoot() {
	v.rootData = v.rt.encode()
	v.rootAddr = addr.Of(v.rootData)
}

// upload hashes every page of src and, unless src is head h's version,
// writes what h lacks of it: a new appendix, or a plain table file of the
// new chunks (taking in small files, see mergeFiles).
func upload(ctx context.Context, mdb *manifest.DB, h *head, src *source, o *ImportOptions) (*newVersion, error) {
	addrs, distinct, interior, err := hashPages(ctx, src, o)
	if err != nil {
		return nil, err
	}
	mapRoot, depth, maps := buildMap(addrs, MapFanout)
	res := &ImportResult{PageSize: src.pageSize, Pages: src.pages, Chunks: distinct + len(maps) + 1}
	hv, err := h.current(ctx, mdb)
	if err != nil {
		return nil, err
	}
	if hv != nil && hv.pageSize == src.pageSize && hv.pages == src.pages && hv.mapRoot == mapRoot {
		res.Root, res.Parent, res.Unchanged = h.root(), hv.parent, true
		res.Lacking = h.lacking(addrs)
		return &newVersion{res: res}, nil
	}
	v := &newVersion{src: src, addrs: addrs, maps: maps, res: res, written: map[addr.Addr]bool{},
		rt: &root{pageSize: src.pageSize, pages: src.pages, mapRoot: mapRoot, depth: depth, fanout: MapFanout,
			parent: h.root(), time: o.clock().Unix(), message: o.Message, interior: interior}}
	seen := make(map[addr.Addr]bool)
	for _, a := range addrs {
		if !h.has(a) && !seen[a] {
			seen[a] = true
			v.res.NewChunks++
			v.rt.newBytes += int64(src.pageSize)
		}
	}
	for _, mc := range maps {
		if !h.has(mc.addr) && !seen[mc.addr] {
			seen[mc.addr] = true
			v.res.NewChunks++
			v.rt.newBytes += int64(len(mc.data))
		}
	}
	v.setRoot()
	if !h.has(v.rootAddr) {
		v.res.NewChunks++
	}
	lacking := h.lacking(addrs)
	if o.Appendix && (o.Compact || !h.hasAppendix() || float64(lacking) > o.threshold()*float64(src.pages)) {
		spec, size, err := v.writeAppendix(ctx, mdb, interior, o)
		if err != nil {
			return nil, err
		}
		v.app = &spec
		v.res.AppendixFile, v.res.AppendixBytes = spec.Name, size
		v.res.StoreBytes += size
		return v, nil
	}
	v.res.Lacking = lacking
	if err := v.writePlain(ctx, mdb, h, o); err != nil {
		return nil, err
	}
	return v, nil
}

// writePlain writes the chunks of the version that head h lacks to a new
// plain table file and puts it; with mergeFiles small plain files of one
// size tier in h, their chunks go into it too, and they are to be
// retired.
func (v *newVersion) writePlain(ctx context.Context, mdb *manifest.DB, h *head, o *ImportOptions) error {
	tmp, err := newTableBuf(o.inMemory, "chunkd-import-*.table")
	if err != nil {
		return err
	}
	defer tmp.close()
	w := tablefile.NewWriter(tmp)
	add := func(a addr.Addr, data []byte) error {
		if h.has(a) || w.Has(a) {
			return nil
		}
		v.written[a] = true
		return w.AddWithAddr(a, data)
	}
	page := make([]byte, v.src.pageSize)
	for i, a := range v.addrs {
		if h.has(a) || w.Has(a) {
			continue
		}
		if err := v.src.page(int64(i)+1, page); err != nil {
			return err
		}
		if err := add(a, page); err != nil {
			return err
		}
	}
	for _, mc := range v.maps {
		if err := add(mc.addr, mc.data); err != nil {
			return err
		}
	}
	if err := add(v.rootAddr, v.rootData); err != nil {
		return err
	}
	if small := h.mergeable(); len(small) > 0 {
		var as []addr.Addr
		for _, f := range small {
			for _, e := range f.Index.Entries() {
				as = append(as, e.Addr)
			}
		}
		err := readFiles(ctx, h.set, as, func(_ int, data []byte) error {
			a := addr.Of(data)
			v.written[a] = true
			return w.AddWithAddr(a, data)
		})
		if err != nil {
			return fmt.Errorf("merge small table files: %w", err)
		}
		for _, f := range small {
			v.retire = append(v.retire, f.Name)
		}
		v.res.Merged = v.retire
	}
	if w.Count() == 0 {
		return nil
	}
	spec, size, err := finishTable(ctx, mdb, w, tmp, o)
	if err != nil {
		return err
	}
	v.files = append(v.files, spec)
	v.res.TableFile, v.res.TableBytes = spec.Name, size
	v.res.StoreBytes += size
	return nil
}

// commit replaces the manifest of head h with one naming the new version,
// if nobody else did first; else it goes on top of whoever did, up to
// importAttempts times. It returns the head it committed on.
func (v *newVersion) commit(ctx context.Context, mdb *manifest.DB, h *head, o *ImportOptions) (*head, error) {
	for attempt := 1; ; attempt++ {
		retire := slices.Clone(v.retire)
		if v.app != nil {
			retire = append(retire, h.replaceableAppendix()...)
		}
		m, err := newManifest(h.m, v.files, v.app, retire, v.rootAddr)
		if err != nil {
			return h, err
		}
		if o.beforeUpdate != nil {
			o.beforeUpdate(attempt)
		}
		_, err = mdb.Update(ctx, h.version, m)
		if err == nil {
			v.res.StoreBytes += manifest.UpdateBytes(m)
			return h, nil
		}
		if !errors.Is(err, store.ErrPrecondition) {
			return h, err
		}
		if attempt == importAttempts {
			return h, fmt.Errorf("gave up after %d attempts: database %s changed under every one (other imports running at the same time?); its table files were uploaded but are not in the manifest: %w", attempt, mdb, err)
		}
		// Another writer won. Start over on top of its version: the
		// chunks are uploaded already, only the root names a new parent.
		sleep(ctx, time.Duration(attempt)*time.Duration(10+rand.IntN(40))*time.Millisecond)
		prev := h
		if h, err = loadHead(ctx, mdb, prev); err != nil {
			return prev, err
		}
		h.adoptAppendix(prev)
		if err := v.reparent(ctx, mdb, h); err != nil {
			return h, err
		}
	}
}

// reparent makes the new version's root name head h as its parent, and
// puts the new root chunk, with every chunk of the version that neither
// h's files nor this import's hold (a garbage collection may have dropped
// a file the import counted on), in a table file of its own. The file is
// left out when there is nothing to put.
func (v *newVersion) reparent(ctx context.Context, mdb *manifest.DB, h *head) error {
	v.rt.parent = h.root()
	v.setRoot()
	var buf bytes.Buffer
	rw := tablefile.NewWriter(&buf)
	var added []addr.Addr
	add := func(a addr.Addr, data []byte) error {
		if v.written[a] || h.has(a) || rw.Has(a) {
			return nil
		}
		added = append(added, a)
		return rw.AddWithAddr(a, data)
	}
	if err := add(v.rootAddr, v.rootData); err != nil {
		return err
	}
	for _, mc := range v.maps {
		if err := add(mc.addr, mc.data); err != nil {
			return err
		}
	}
	page := make([]byte, v.src.pageSize)
	for i, a := range v.addrs {
		if v.written[a] || h.has(a) || rw.Has(a) {
			continue
		}
		if err := v.src.page(int64(i)+1, page); err != nil {
			return err
		}
		if err := add(a, page); err != nil {
			return err
		}
	}
	if rw.Count() == 0 {
		return nil
	}
	name, err := rw.Finish()
	if err != nil {
		return err
	}
	if err := putTable(ctx, mdb, name, buf.Bytes()); err != nil {
		return err
	}
	v.files = append(v.files, manifest.Spec{Name: name, Chunks: uint32(rw.Count())})
	v.res.TableBytes += int64(buf.Len())
	v.res.StoreBytes += int64(buf.Len())
	for _, a := range added {
		v.written[a] = true
	}
	return nil
}

// pageMemo remembers the pages of one source between imports by a fast
// 128-bit hash (XXH3) beside their addresses, so that an import of the
// next snapshot hashes with SHA-512 only the pages whose fast hash
// changed (Publisher: a database that changed in a few pages costs a
// pass of XXH3 over its bytes, about a tenth of SHA-512's time). A page
// whose fast hash is unchanged is taken as unchanged: a collision of
// XXH3-128 between a page's old and new bytes is the one way it could be
// wrong, a chance of about 2^-128 a changed page for bytes no one chose
// to collide. Every chunk written is still hashed in full.
type pageMemo struct {
	pageSize int
	fast     []xxh3.Uint128
	addrs    []addr.Addr
}

// hashPages reads and hashes every page of src, a batch at a time (the
// hashing spread over the CPUs). It returns the addresses of all pages,
// how many are distinct, and the pages that look like interior B-tree
// pages. With o.memo, pages whose fast hash it remembers are not hashed
// again, and the memo is updated to src's pages.
func hashPages(ctx context.Context, src *source, o *ImportOptions) (addrs []addr.Addr, distinct int, interior []int64, err error) {
	pageSize, pages := src.pageSize, src.pages
	addrs = make([]addr.Addr, pages)
	memo := o.memo
	var fast []xxh3.Uint128
	if memo != nil {
		fast = make([]xxh3.Uint128, pages)
		if memo.pageSize != pageSize {
			memo.fast, memo.addrs = nil, nil
		}
	}
	seen := make(map[addr.Addr]struct{})
	buf := make([]byte, hashBatch*pageSize)
	workers := runtime.GOMAXPROCS(0)
	if o.oneThread {
		workers = 1
	}
	o.progress("read", 0, pages)
	for first := int64(0); first < pages; first += hashBatch {
		if err := ctx.Err(); err != nil {
			return nil, 0, nil, err
		}
		k := int(min(hashBatch, pages-first))
		b := buf[:k*pageSize]
		if _, err := src.r.ReadAt(b, first*int64(pageSize)); err != nil {
			return nil, 0, nil, fmt.Errorf("read snapshot: %w", err)
		}
		var wg sync.WaitGroup
		for wid := range min(workers, k) {
			wg.Go(func() {
				for i := wid; i < k; i += workers {
					n, page := first+int64(i), b[i*pageSize:(i+1)*pageSize]
					if memo != nil {
						fast[n] = xxh3.Hash128(page)
						if n < int64(len(memo.fast)) && memo.fast[n] == fast[n] {
							addrs[n] = memo.addrs[n]
							continue
						}
					}
					addrs[n] = addr.Of(page)
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
		}
		o.progress("read", first+int64(k), pages)
	}
	if memo != nil {
		memo.pageSize, memo.fast, memo.addrs = pageSize, fast, addrs
	}
	return addrs, len(seen), interior, nil
}

// finishTable finishes the table file w wrote to f and puts it.
func finishTable(ctx context.Context, mdb *manifest.DB, w *tablefile.Writer, f *tableBuf, o *ImportOptions) (manifest.Spec, int64, error) {
	name, err := w.Finish()
	if err != nil {
		return manifest.Spec{}, 0, fmt.Errorf("write table file: %w", err)
	}
	data, err := f.bytes()
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

// tableBuf is where an import builds a table file before it puts it: a
// temporary file, or memory (Publisher, whose source is in memory
// already: no file is written beside the database it follows).
type tableBuf struct {
	f   *os.File
	mem bytes.Buffer
}

func newTableBuf(inMemory bool, pattern string) (*tableBuf, error) {
	if inMemory {
		return &tableBuf{}, nil
	}
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return nil, err
	}
	return &tableBuf{f: f}, nil
}

func (b *tableBuf) Write(p []byte) (int, error) {
	if b.f == nil {
		return b.mem.Write(p)
	}
	return b.f.Write(p)
}

// bytes returns what was written.
func (b *tableBuf) bytes() ([]byte, error) {
	if b.f == nil {
		return b.mem.Bytes(), nil
	}
	return os.ReadFile(b.f.Name())
}

func (b *tableBuf) close() {
	if b.f != nil {
		b.f.Close()
		os.Remove(b.f.Name())
	}
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

// writeAppendix writes the appendix file of the version: the root, the
// page map from the top, the open set's pages (page 1 and the interior
// pages the root lists), then every other page in page order, and puts
// it. A service that has just started reads a version's whole open set
// (OpenSet) from the file's first bytes, in one ranged read of the store
// or from the first megabytes of its download, rather than an interior
// page at a time from all over it.
func (v *newVersion) writeAppendix(ctx context.Context, mdb *manifest.DB, interior []int64, o *ImportOptions) (manifest.Spec, int64, error) {
	f, err := newTableBuf(o.inMemory, "chunkd-import-*.appendix")
	if err != nil {
		return manifest.Spec{}, 0, err
	}
	defer f.close()
	w := tablefile.NewWriter(f)
	add := func(a addr.Addr, data []byte) error {
		v.written[a] = true
		return w.AddWithAddr(a, data)
	}
	if err := add(v.rootAddr, v.rootData); err != nil {
		return manifest.Spec{}, 0, err
	}
	for _, mc := range v.maps {
		if err := add(mc.addr, mc.data); err != nil {
			return manifest.Spec{}, 0, err
		}
	}
	page := make([]byte, v.src.pageSize)
	if v.src.pages > 0 {
		for _, n := range setPages(interior) {
			if err := v.src.page(n, page); err != nil {
				return manifest.Spec{}, 0, err
			}
			if err := add(v.addrs[n-1], page); err != nil {
				return manifest.Spec{}, 0, err
			}
		}
	}
	o.progress("appendix", 0, v.src.pages)
	for i, a := range v.addrs {
		if w.Has(a) {
			continue
		}
		if i%hashBatch == 0 {
			if err := ctx.Err(); err != nil {
				return manifest.Spec{}, 0, err
			}
			o.progress("appendix", int64(i), v.src.pages)
		}
		if err := v.src.page(int64(i)+1, page); err != nil {
			return manifest.Spec{}, 0, err
		}
		if err := add(a, page); err != nil {
			return manifest.Spec{}, 0, err
		}
	}
	o.progress("appendix", v.src.pages, v.src.pages)
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
	v       *root // the head version's root chunk, once read
}

func (h *head) root() addr.Addr {
	if h.m == nil {
		return addr.Addr{}
	}
	return h.m.Root
}

// current returns the head version's root chunk decoded, or nil for a
// database with no version yet.
func (h *head) current(ctx context.Context, mdb *manifest.DB) (*root, error) {
	if h.m == nil || h.m.Root.IsEmpty() {
		return nil, nil
	}
	if h.v == nil {
		r, err := readRoot(ctx, storeChunks{mdb, h.set}, h.m.Root)
		if err != nil {
			return nil, err
		}
		h.v = r
	}
	return h.v, nil
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

// hasAppendix reports whether the manifest names an appendix that opened.
func (h *head) hasAppendix() bool {
	for _, f := range h.files() {
		if f.Appendix {
			return true
		}
	}
	return false
}

// adoptAppendix names as h's appendix the files prev named so that h's
// manifest still lists, when h names none: the winner of a race may have
// had its sidecar overwritten by the loser's (manifest.DB.Update), and an
// appendix forgotten would cost a whole new one at the next import.
func (h *head) adoptAppendix(prev *head) {
	if h.m == nil || len(h.m.Appendix) > 0 || prev == nil || prev.m == nil {
		return
	}
	for _, name := range prev.m.Appendix {
		if f, ok := h.set.Get(name); ok {
			h.m.Appendix = append(h.m.Appendix, name)
			f.Appendix = true
		}
	}
}

// lacking counts the pages (of addrs, in page order) that no appendix
// file of the head holds.
func (h *head) lacking(addrs []addr.Addr) int64 {
	var apps []*tablefile.Table
	for _, f := range h.files() {
		if f.Appendix {
			apps = append(apps, f.Index)
		}
	}
	var n int64
	for _, a := range addrs {
		held := false
		for _, t := range apps {
			if t.Has(a) {
				held = true
				break
			}
		}
		if !held {
			n++
		}
	}
	return n
}

// mergeable returns mergeFiles plain files of h of at most mergeFileMax
// bytes that are in one size tier (the smallest tier that has as many),
// or none.
func (h *head) mergeable() []*tableset.File[struct{}] {
	tiers := map[int][]*tableset.File[struct{}]{}
	best := -1
	for _, f := range h.files() {
		if f.Appendix || f.Size > mergeFileMax {
			continue
		}
		t := bits.Len64(uint64(f.Size)) / 2
		tiers[t] = append(tiers[t], f)
		if len(tiers[t]) == mergeFiles && (best < 0 || t < best) {
			best = t
		}
	}
	if best < 0 {
		return nil
	}
	return tiers[best][:mergeFiles]
}

// replaceableAppendix returns the head's appendix files that a new
// appendix may replace in the manifest: those whose every chunk is also in
// one of the database's other files (so for appendixes of chunkd before
// ImportOptions.Appendix wrote new chunks once, which also went to a
// plain file). A new version's manifest need not name them; the objects
// stay in the store, so readers of older manifests are not disturbed. An
// appendix that holds chunks no other file does stays named, as a plain
// file, until gc finds no retained version needs it (Collect).
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
