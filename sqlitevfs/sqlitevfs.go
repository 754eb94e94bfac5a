// Package sqlitevfs lets SQLite query read-only database images whose pages
// come from Go code rather than from a file.
//
// A database image is anything that implements Pages. Register puts one
// under a name, Open returns a *sql.DB that reads it through the VFS
// registered with SQLite as "chunkd", and Unregister takes it away. Any
// number of images can be registered at once, each with its own Pages;
// connections to one never see pages of another. OpenImage does all three
// for one image, OpenFile for a local database file.
//
// The package knows nothing of where pages come from: a local file
// (FilePages), chunks in an object store (package sqlchunks), anything.
//
// Databases are opened read-only and immutable (mode=ro&immutable=1):
// SQLite takes no locks, looks for no journal or WAL, and refuses every
// write with SQLITE_READONLY ("attempt to write a readonly database").
// Temporary files SQLite needs while querying (sorter spills, temporary
// tables) are ordinary temporary files of SQLite's default VFS.
//
// SQLite reads whole pages almost always, but not only: it reads the
// 100-byte header at offset 0 when opening, may read only the used start of
// an overflow page, and reads may in principle start inside a page or span
// several. The VFS maps every read onto whole
// pages of the image, so a Pages implementation only ever sees full-page
// reads of pages 1..PageCount.
//
// Each SQLite connection (each connection of a *sql.DB pool) keeps its own
// page cache, 2000 KiB unless Options.CacheKiB says otherwise. When the
// Pages is also a PageRanger, sequential reads are fetched ahead in
// batches shared by all connections to the image (Options.ReadAhead), so a
// source with a high cost per request (a network round trip) pays it once
// per batch rather than once per page. When the Pages is also a
// PageLister, a scan that looks each row up in a table (an index scan that
// is not covering, a nested-loop join on a primary key) has the table
// leaves each scanned leaf names fetched with one request, before SQLite
// reads them, and a join that looks up a few rows per key has the rest of
// a key's table leaves fetched once it reads the first (package btree
// reads the pages for that). The VFS
// offers SQLite no memory mapping (its file methods are version 1, without
// xFetch), so PRAGMA mmap_size has no effect and there is nothing to turn
// off.
//
// When a page read fails, the query fails with SQLite's "disk I/O error"
// (SQLITE_IOERR_READ); LastReadError returns the error behind it. A panic in
// a Pages method is recovered and treated the same way.
//
// The package uses cgo: a small C shim (shim.c) implements the VFS on the
// SQLite library that github.com/mattn/go-sqlite3 compiles into the
// program, and calls into Go for opens and reads. It needs CGO_ENABLED=1
// and a C compiler. Built with the chunkd_ext tag, for the loadable
// extension (package sqliteext), the same shim calls the host program's
// SQLite instead, through the routines SQLite hands an extension, and the
// package links no SQLite (Open then has no driver; an Opener opens the
// databases).
package sqlitevfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// VFSName is the name the VFS is registered with in SQLite.
const VFSName = "chunkd"

// DefaultReadAhead is the default Options.ReadAhead.
const DefaultReadAhead = 64

// maxReadAhead caps Options.ReadAhead.
const maxReadAhead = 1024

// maxName is the longest database name SQLite will pass to the VFS.
const maxName = 1024

// DriverName is the database/sql driver Open uses (github.com/mattn/go-sqlite3).
const DriverName = "sqlite3"

// Pages is a read-only SQLite database image, addressed by page.
//
// Its methods may be called from many goroutines at once (one per SQLite
// connection reading it). The image must not change while registered.
type Pages interface {
	// PageSize is the database page size in bytes: a power of two from
	// 512 to 65536, equal to the page size in the image's header.
	PageSize() int
	// PageCount is the number of pages in the image.
	PageCount() int64
	// ReadPage reads page n (1-based) into p (len(p) == PageSize()).
	ReadPage(ctx context.Context, n int64, p []byte) error
}

// PageRanger is an optional interface of Pages for reading several
// consecutive pages at once, for a source where one request for many pages
// costs much less than many requests for one. The VFS uses it, when the
// Pages has it, for sequential read-ahead (see Options.ReadAhead) and for
// the rare SQLite read that spans more than one page.
type PageRanger interface {
	// ReadPages reads pages first, first+1, ..., first+len(ps)-1 into
	// ps[0], ps[1], ...; each len(ps[i]) == PageSize(). It is called from
	// a background goroutine too (prefetching the next batch), with a
	// context that ends at Unregister.
	ReadPages(ctx context.Context, first int64, ps [][]byte) error
}

// PageLister is an optional interface of Pages for reading pages that are
// not consecutive with one request. The VFS uses it, when the Pages has
// it, to fetch the table leaves a scan is about to look rows up in (see
// treeAhead).
type PageLister interface {
	// ReadPageList reads pages ns[0], ns[1], ... into ps[0], ps[1], ...;
	// each len(ps[i]) == PageSize() and each ns[i] is a page of the
	// image. It is called from a background goroutine too, with a
	// context that ends at Unregister (for an Opener's image, when its
	// last connection closes).
	ReadPageList(ctx context.Context, ns []int64, ps [][]byte) error
}

// PageSharer is an optional interface of a PageRanger or PageLister whose
// pages are bytes that never change once read (a cache's, say): it hands
// them over rather than copying them into buffers, and read-ahead holds
// them as they are (one copy a page, into SQLite's buffer, where there
// were two).
type PageSharer interface {
	// SharePageList returns the bytes of pages ns[0], ns[1], ..., each
	// PageSize() long, which no one may modify; the VFS keeps them as
	// long as it holds the pages. It is called as ReadPageList is.
	SharePageList(ctx context.Context, ns []int64) ([][]byte, error)
}

// readShared reads pages ns of src: the source's own bytes when it is a
// PageSharer, else copies that read makes into new buffers of ps bytes.
func readShared(ctx context.Context, src any, ns []int64, ps int, read func(bufs [][]byte) error) ([][]byte, error) {
	if sh, ok := src.(PageSharer); ok {
		pages, err := sh.SharePageList(ctx, ns)
		if err != nil {
			return nil, err
		}
		if len(pages) != len(ns) {
			return nil, fmt.Errorf("sqlitevfs: %d pages shared for %d asked", len(pages), len(ns))
		}
		for i, p := range pages {
			if len(p) != ps {
				return nil, fmt.Errorf("sqlitevfs: page %d shared with %d bytes, want %d", ns[i], len(p), ps)
			}
		}
		return pages, nil
	}
	bufs := pageBufs(make([]byte, len(ns)*ps), ps)
	if err := read(bufs); err != nil {
		return nil, err
	}
	return bufs, nil
}

// readList reads pages ns of src with one ReadPageList, or shared.
func readList(ctx context.Context, src PageLister, ns []int64, ps int) ([][]byte, error) {
	return readShared(ctx, src, ns, ps, func(bufs [][]byte) error { return src.ReadPageList(ctx, ns, bufs) })
}

// LocalPages is an optional interface of Pages that reads some pages
// without a request: held in memory (read when the source was opened: the
// interior pages of the B-trees, say), or read from a file on this host
// (a page image), as a local file's pages are. Read-ahead reads them
// directly, and a read of one is not part of a sequential run: a point
// lookup that walks down local interior pages to a leaf fetches the leaf
// alone rather than a batch from it.
type LocalPages interface {
	// Local reports whether page n is read without a request.
	Local(n int64) bool
	// OnHost reports whether the source reads its pages from a file on
	// this host (holding all of them, or soon), where the VFS fetches no
	// B-tree pages ahead of a scan (PageLister): parsing the pages read to
	// find those costs more than it saves when no read is a request.
	OnHost() bool
}

// Errors returned by this package (wrapped; test with errors.Is).
var (
	// ErrReadOnly: a write reached the VFS. Writes through SQL fail
	// before that with SQLite's own SQLITE_READONLY error.
	ErrReadOnly = errors.New("sqlitevfs: database is read-only")
	// ErrExists: Register was given a name already registered.
	ErrExists = errors.New("sqlitevfs: name already registered")
	// ErrNotRegistered: no database is registered under the name.
	ErrNotRegistered = errors.New("sqlitevfs: name not registered")
	// ErrUnregistered: the database was unregistered while still open.
	ErrUnregistered = errors.New("sqlitevfs: database unregistered")
	// ErrBadPages: a Pages reports an impossible geometry.
	ErrBadPages = errors.New("sqlitevfs: invalid page geometry")
)

// registration is one registered image.
type registration struct {
	name      string
	pages     Pages      // the source, or the read-ahead layer over it
	ranger    PageRanger // the source as a PageRanger, or nil
	pageSize  int
	pageCount int64
	opts      Options
	ctx       context.Context // canceled by Unregister
	cancel    context.CancelFunc
	gone      atomic.Bool // set by Unregister
	lastErr   atomic.Pointer[error]
	pagesRead atomic.Int64 // pages SQLite read (its page caches' misses)
	slots     *slotReader  // the pages' SlotFile as C reads it, or nil

	value any   // an Opener's Image.Value
	err   error // why an Opener's image did not open; no pages then
}

func (r *registration) setErr(err error) {
	r.lastErr.Store(&err)
	if r.opts.ReadFailed != nil {
		r.opts.ReadFailed(err)
	}
}

var (
	mu       sync.RWMutex
	registry = map[string]*registration{}
)

func lookup(name string) *registration {
	mu.RLock()
	defer mu.RUnlock()
	return registry[name]
}

// Register makes p available under name for Open, with options o (nil for
// the defaults) for every connection to it. The page size and page count
// are read once, now: the image must not change while registered. Names
// are opaque keys (any non-empty string of at most 1024 bytes without
// NUL), not file paths.
func Register(name string, p Pages, o *Options) error {
	if name == "" || len(name) > maxName || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("sqlitevfs: bad database name %q", name)
	}
	if err := registerVFS(); err != nil {
		return err
	}
	r, err := newRegistration(name, p, o)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if registry[name] != nil {
		r.close()
		return fmt.Errorf("%w: %q", ErrExists, name)
	}
	registry[name] = r
	return nil
}

// newRegistration checks the geometry of p and sets up its reading.
func newRegistration(name string, p Pages, o *Options) (*registration, error) {
	ps, n := p.PageSize(), p.PageCount()
	if ps < 512 || ps > 65536 || ps&(ps-1) != 0 || n < 0 || n > (1<<62)/int64(ps) {
		return nil, fmt.Errorf("%w: page size %d, %d pages", ErrBadPages, ps, n)
	}
	r := &registration{name: name, pages: p, pageSize: ps, pageCount: n}
	if o != nil {
		r.opts = *o
	}
	r.ranger, _ = p.(PageRanger)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if size := r.opts.readAhead(); r.ranger != nil && size > 1 {
		r.pages = newReadAhead(r.ctx, p, r.ranger, size, r.opts.CacheKiB)
	}
	r.slots = newSlotReader(p, &r.pagesRead)
	return r, nil
}

// close ends the registration's reads: those of files still open on it
// fail from now on (with ErrUnregistered), and those in progress see
// their context canceled.
func (r *registration) close() {
	r.gone.Store(true)
	r.cancel()
	r.slots.unregistered()
}

// Unregister removes name. Opening it fails from now on; connections that
// still have it open fail their next page read with ErrUnregistered, and
// reads in progress see their context canceled. Close the *sql.DB first.
func Unregister(name string) error {
	mu.Lock()
	r := registry[name]
	delete(registry, name)
	mu.Unlock()
	if r == nil {
		return fmt.Errorf("%w: %q", ErrNotRegistered, name)
	}
	r.close()
	return nil
}

// LastReadError returns the most recent error a page read of the database
// registered as name failed with, or nil. A query that fails because a read
// failed reports SQLite's generic "disk I/O error" (SQLITE_IOERR_READ);
// this is the cause.
func LastReadError(name string) error {
	r := lookup(name)
	if r == nil {
		return nil
	}
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Options tune how an image is read. The zero value is fine.
type Options struct {
	// CacheKiB sets SQLite's page cache per connection (PRAGMA
	// cache_size=-CacheKiB). Zero keeps SQLite's default, 2000 KiB.
	CacheKiB int
	// ReadAhead applies when the Pages is a PageRanger: once SQLite reads
	// page n right after page n-1 (on any connection to the image), the
	// read fetches ReadAhead pages from n with one ReadPages call, and
	// the next batch is fetched in the background when SQLite is half
	// way through this one. A few recent batches are kept in memory, for
	// all connections to the image, so the reads that follow are memory
	// copies. 0 means DefaultReadAhead; negative or 1 turns it off.
	ReadAhead int
	// ReadFailed, if not nil, is called with the error of every read that
	// fails SQLite's read (the cause of its "disk I/O error"; what
	// LastReadError returns next), on the reading thread.
	ReadFailed func(error)
}

// readAhead returns the batch size, 0 for none.
func (o Options) readAhead() int {
	switch {
	case o.ReadAhead == 0:
		return DefaultReadAhead
	case o.ReadAhead < 2:
		return 0
	}
	return min(o.ReadAhead, maxReadAhead)
}

// DSN returns the data source name for sql.Open(DriverName, ...) that opens
// the database registered as name read-only through the VFS, with the
// page cache its Options ask for.
func DSN(name string) string {
	var b strings.Builder
	b.WriteString("file:")
	b.WriteString(escapeName(name))
	b.WriteString("?vfs=" + VFSName + "&mode=ro&immutable=1")
	if r := lookup(name); r != nil && r.opts.CacheKiB > 0 {
		fmt.Fprintf(&b, "&_cache_size=%d", -r.opts.CacheKiB)
	}
	return b.String()
}

// Open returns a *sql.DB for the database registered as name, read-only.
// Each connection of the pool is an SQLite connection with its own page
// cache. Close it before Unregister.
func Open(name string) (*sql.DB, error) {
	if lookup(name) == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotRegistered, name)
	}
	return sql.Open(DriverName, DSN(name))
}

// escapeName %-escapes everything but unreserved characters, so that an
// SQLite URI filename decodes back to exactly name.
func escapeName(name string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
