package sqlchunks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlitevfs"
)

// Pages serves the pages of one version of a chunkd SQLite database from a
// ChunkReader: it is a sqlitevfs.Pages and a sqlitevfs.PageRanger, so the
// VFS reads sequential runs ahead with one GetMany per batch.
//
// The page map is kept in memory (20 bytes a page; see pageMap for when
// its parts are read); a page read is one Get (a memory hit once a client
// has the chunk), a run of pages one GetMany. The reader checks every chunk
// against its address, so a page is either right or an error naming its
// chunk. Safe for concurrent use; it holds nothing that needs closing (the
// reader is the caller's).
type Pages struct {
	c ChunkReader
	v Version
	m *pageMap
	// img, when the reader gives one (WithImages), is read first; pages
	// it lacks are read through c.
	img PageImage
	// interior are the interior pages the root lists.
	interior []int64
	// preloaded are pages had at open (page 1 and the interior pages the
	// root lists: preload, openGiven); the map is never changed.
	preloaded map[int64]*heldPage
}

// heldPage is a page held in memory from the open. One given unchecked (by
// an open set) is checked against its address at its first read; one
// that fails is not held after all, and is read through the reader.
type heldPage struct {
	checked atomic.Bool // data is checked (or nil): no more lookups
	once    sync.Once
	data    []byte // nil once its check failed
}

// get returns page n's bytes, nil when it is not held.
func (h *heldPage) get(ctx context.Context, p *Pages, n int64) []byte {
	if h.checked.Load() {
		return h.data
	}
	a, err := p.m.addr(ctx, p.c, n)
	if err != nil {
		return nil // not checked, maybe not for good: the caller's read meets the error
	}
	h.once.Do(func() {
		if len(h.data) != p.v.PageSize || addr.Of(h.data) != a {
			h.data = nil
		}
		h.checked.Store(true)
	})
	return h.data
}

// checkedPage is a heldPage the reader has checked already.
func checkedPage(data []byte) *heldPage {
	h := &heldPage{data: data}
	h.checked.Store(true)
	return h
}

// OpenPages reads the root chunk root and the whole page map of the
// version (one GetMany per map level) and returns its pages. A root that
// is not a root chunk is an error wrapping ErrNotRoot; a page map that
// does not fit its root, one wrapping ErrBadMap.
func OpenPages(ctx context.Context, c ChunkReader, root addr.Addr) (*Pages, error) {
	p, err := openPages(ctx, c, root)
	if err != nil {
		return nil, err
	}
	p.attachImage(ctx)
	return p, nil
}

// attachImage gives p the page image its reader offers (WithImages).
func (p *Pages) attachImage(ctx context.Context) {
	if ir, ok := p.c.(imageReader); ok && ir.images.Open != nil {
		addrs, err := p.m.all(ctx, p.c)
		if err != nil {
			return
		}
		if img, err := ir.images.Open(ctx, p.v.PageSize, addrs); err == nil {
			p.img = img
		}
	}
}

// Close releases the page image, if the pages have one. Reads must have
// ended.
func (p *Pages) Close() error {
	if p.img == nil {
		return nil
	}
	return p.img.Close()
}

// Version returns the version whose pages p serves.
func (p *Pages) Version() Version { return p.v }

// PageSize implements sqlitevfs.Pages.
func (p *Pages) PageSize() int { return p.v.PageSize }

// PageCount implements sqlitevfs.Pages.
func (p *Pages) PageCount() int64 { return p.v.Pages }

// PageAddr returns the address of page n's chunk (1-based).
// A version opened by its page image reads its page map first.
func (p *Pages) PageAddr(n int64) (addr.Addr, bool) {
	if n < 1 || n > p.v.Pages {
		return addr.Addr{}, false
	}
	a, err := p.m.addr(context.Background(), p.c, n)
	return a, err == nil
}

// Pages is read by the VFS with every optional capability: ranges,
// lists, shared bytes, which pages are local, and the page image's file.
var (
	_ sqlitevfs.PageRanger = (*Pages)(nil)
	_ sqlitevfs.PageLister = (*Pages)(nil)
	_ sqlitevfs.PageSharer = (*Pages)(nil)
	_ sqlitevfs.LocalPages = (*Pages)(nil)
	_ sqlitevfs.SlotPages  = (*Pages)(nil)
)

// filedImage is an optional interface of a PageImage (client.Image has
// it) whose slots a reader may read itself.
type filedImage interface {
	Files() client.ImageFiles
	Slots() int
	SlotSize() int
}

// SlotFile implements sqlitevfs.SlotPages: the page image's files, one
// slot a page, which the VFS reads itself (in C: a pread and a CRC a
// page, with no call into Go) as Read would, leaving the pages the image
// does not hold (or that fail their check) to ReadPage.
func (p *Pages) SlotFile() (sqlitevfs.SlotFile, bool) {
	im, ok := p.img.(filedImage)
	if !ok || im.Slots() != int(p.v.Pages) || im.SlotSize() != p.v.PageSize {
		return sqlitevfs.SlotFile{}, false
	}
	f := im.Files()
	return sqlitevfs.SlotFile{Data: f.Data, Entries: f.Entries, Filled: api.ImageSlotFilled, Reads: f.Reads}, true
}

// Local implements sqlitevfs.LocalPages: page 1 and the interior pages
// of a version opened from its open set are held in memory, and with a
// page image, every page it holds is read from it as cheaply as from a
// local file: a read of one starts no read-ahead run (read-ahead of an
// image's pages cost more than the preads it saved: the seed's aggregate
// at large scale ran at 1.28–1.38× the local file with it, 1.05×
// without).
func (p *Pages) Local(n int64) bool {
	if p.preloaded == nil && p.img == nil {
		return false
	}
	if h, ok := p.img.(heldImage); ok && n >= 1 && h.Holds(int(n-1)) {
		return true
	}
	_, found := slices.BinarySearch(p.interior, n) // ascending, as the root lists them
	return n == 1 || found
}

// OnHost implements sqlitevfs.LocalPages: with a page image (a same-host
// service's) the pages are read from a file on this host, as a local
// file's are, and the VFS fetches no B-tree pages ahead of a scan; the
// pages the image lacks yet are still fetched ahead in batches.
func (p *Pages) OnHost() bool { return p.img != nil }

// ReadPage implements sqlitevfs.Pages: from the page image when it holds
// the page, else with one Get.
func (p *Pages) ReadPage(ctx context.Context, n int64, b []byte) error {
	if err := p.check(n, 1, b); err != nil {
		return err
	}
	if h, ok := p.preloaded[n]; ok {
		if data := h.get(ctx, p, n); data != nil {
			copy(b, data)
			return nil
		}
	}
	if p.img != nil && p.img.Read(int(n-1), b) {
		return nil
	}
	a, err := p.m.addr(ctx, p.c, n)
	if err != nil {
		return err
	}
	data, err := p.c.Get(ctx, a)
	if err != nil {
		return err // names the chunk; the VFS adds the page
	}
	if err := p.checkData(n, data); err != nil {
		return err
	}
	copy(b, data)
	return nil
}

// ReadPages implements sqlitevfs.PageRanger: from the page image what it
// holds, the rest with one GetMany.
func (p *Pages) ReadPages(ctx context.Context, first int64, bs [][]byte) error {
	if len(bs) == 0 {
		return nil
	}
	for _, b := range bs {
		if err := p.check(first, int64(len(bs)), b); err != nil {
			return err
		}
	}
	if p.img != nil {
		lo := 0 // the pages before lo are read
		for lo < len(bs) && p.img.Read(int(first-1)+lo, bs[lo]) {
			lo++
		}
		if lo == len(bs) {
			return nil
		}
		// From the first page missing on, through the reader (some after
		// it may be mapped already: reading them again costs little).
		first, bs = first+int64(lo), bs[lo:]
	}
	addrs, err := p.m.addrs(ctx, p.c, first, int64(len(bs)))
	if err != nil {
		return err
	}
	return p.c.GetMany(ctx, addrs, func(i int, data []byte) error {
		n := first + int64(i)
		if err := p.checkData(n, data); err != nil {
			return err
		}
		copy(bs[i], data)
		return nil
	}) // errors name the chunks; the VFS adds the pages
}

// ReadPageList implements sqlitevfs.PageLister: pages ns into bs, from
// the page image what it holds, the rest with one GetMany.
func (p *Pages) ReadPageList(ctx context.Context, ns []int64, bs [][]byte) error {
	if len(ns) != len(bs) {
		return fmt.Errorf("sqlchunks: %d pages into %d buffers", len(ns), len(bs))
	}
	for i, n := range ns {
		if err := p.check(n, 1, bs[i]); err != nil {
			return err
		}
	}
	pages, err := p.SharePageList(ctx, ns)
	if err != nil {
		return err
	}
	for i, b := range pages {
		copy(bs[i], b)
	}
	return nil
}

// SharePageList implements sqlitevfs.PageSharer: pages ns, those the page
// image holds read from it, the rest with one GetMany as the reader gives
// them (a chunk's bytes are never modified: the VFS may hold them as
// they are).
func (p *Pages) SharePageList(ctx context.Context, ns []int64) ([][]byte, error) {
	pages := make([][]byte, len(ns))
	need := ns   // the pages to read through the reader
	var at []int // their positions in ns, when not all of ns
	if p.img != nil {
		need = nil
		for i, n := range ns {
			if err := p.checkRange(n, 1); err != nil {
				return nil, err
			}
			if b := make([]byte, p.v.PageSize); p.img.Read(int(n-1), b) {
				pages[i] = b
				continue
			}
			need, at = append(need, n), append(at, i)
		}
		if len(need) == 0 {
			return pages, nil
		}
	}
	addrs, err := p.addrsOf(ctx, need)
	if err != nil {
		return nil, err
	}
	err = p.c.GetMany(ctx, addrs, func(k int, data []byte) error {
		if err := p.checkData(need[k], data); err != nil {
			return err
		}
		if at != nil {
			k = at[k]
		}
		pages[k] = data
		return nil
	}) // errors name the chunks; the VFS adds the pages
	if err != nil {
		return nil, err
	}
	return pages, nil
}

// addrsOf returns the addresses of pages ns: a run of consecutive pages
// (read-ahead's) with one look at the page map, whose leaves it reads
// with one request when it lacks some.
func (p *Pages) addrsOf(ctx context.Context, ns []int64) ([]addr.Addr, error) {
	run := len(ns) > 0
	for i, n := range ns {
		if err := p.checkRange(n, 1); err != nil {
			return nil, err
		}
		run = run && n == ns[0]+int64(i)
	}
	if run {
		return p.m.addrs(ctx, p.c, ns[0], int64(len(ns)))
	}
	addrs := make([]addr.Addr, len(ns))
	for i, n := range ns {
		a, err := p.m.addr(ctx, p.c, n)
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	return addrs, nil
}

func (p *Pages) check(first, n int64, b []byte) error {
	if err := p.checkRange(first, n); err != nil {
		return err
	}
	if len(b) != p.v.PageSize {
		return fmt.Errorf("sqlchunks: page buffer of %d bytes, want %d", len(b), p.v.PageSize)
	}
	return nil
}

func (p *Pages) checkRange(first, n int64) error {
	if first < 1 || n < 1 || first+n-1 > p.v.Pages {
		return fmt.Errorf("sqlchunks: pages %d-%d out of range of version %s (%d pages)", first, first+n-1, p.v.Root, p.v.Pages)
	}
	return nil
}

// checkData checks that a chunk is page-sized (the reader has already
// checked it against its address).
func (p *Pages) checkData(n int64, data []byte) error {
	if len(data) != p.v.PageSize {
		return fmt.Errorf("%w: chunk %s of page %d is %d bytes, not a %d-byte page", ErrBadMap, addr.Of(data), n, len(data), p.v.PageSize)
	}
	return nil
}
