package sqlchunks

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/chunkd/chunkd/addr"
)

// Pages serves the pages of one version of a chunkd SQLite database from a
// ChunkReader: it is a sqlitevfs.Pages and a sqlitevfs.PageRanger, so the
// VFS reads sequential runs ahead with one GetMany per batch.
//
// The whole page map is loaded by OpenPages and kept in memory (20 bytes a
// page); a page read is one Get (a memory hit once a client has the
// chunk), a run of pages one GetMany. The reader checks every chunk
// against its address, so a page is either right or an error naming its
// chunk. Safe for concurrent use; it holds nothing that needs closing (the
// reader is the caller's).
type Pages struct {
	c ChunkReader
	v Version
	// addrs: page n is addrs[n-1], loaded at open; nil for a version
	// opened by its page image (openByImage), whose page map is read
	// only when a page the image lacks is (lazy).
	addrs []addr.Addr
	lazy  *lazyMap
	// img, when the reader gives one (WithImages), is read first; pages
	// it lacks are read through c.
	img PageImage
	// interior are the interior pages the root lists.
	interior []int64
	// preloaded are pages read at open (page 1 and the interior pages
	// the root lists: preload), never changed.
	preloaded map[int64][]byte
}

// OpenPages reads the root chunk root and the whole page map of the
// version (one GetMany per map level) and returns its pages. A root that
// is not a root chunk is an error wrapping ErrNotRoot; a page map that
// does not fit its root, one wrapping ErrBadMap.
func OpenPages(ctx context.Context, c ChunkReader, root addr.Addr) (*Pages, error) {
	p, err := openPages(ctx, c, root, false)
	if err != nil {
		return nil, err
	}
	p.attachImage(ctx)
	return p, nil
}

// attachImage gives p the page image its reader offers (WithImages).
func (p *Pages) attachImage(ctx context.Context) {
	if ir, ok := p.c.(imageReader); ok && ir.images.Open != nil {
		if img, err := ir.images.Open(ctx, p.v.PageSize, p.addrs); err == nil {
			p.img = img
		}
	}
}

// lazyMap is the page map of a version opened by its page image, read
// the first time a page the image lacks is.
type lazyMap struct {
	r     *root
	mu    sync.Mutex
	addrs []addr.Addr
}

// pageAddrs returns the addresses of the version's pages, reading the
// page map first if it was not read at open (a failed read is tried
// again by the next caller).
func (p *Pages) pageAddrs(ctx context.Context) ([]addr.Addr, error) {
	if p.lazy == nil {
		return p.addrs, nil
	}
	l := p.lazy
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addrs == nil {
		addrs, err := loadMap(ctx, p.c, p.v.Root, l.r)
		if err != nil {
			return nil, err
		}
		l.addrs = addrs
	}
	return l.addrs, nil
}

// Close releases the page image, if the pages have one. Reads must have
// ended.
func (p *Pages) Close() error {
	if p.img == nil {
		return nil
	}
	return p.img.Close()
}

// loadMap reads the page map of root r, level by level from the top.
func loadMap(ctx context.Context, c ChunkReader, rootAddr addr.Addr, r *root) ([]addr.Addr, error) {
	counts := levelCounts(r.pages, r.fanout, r.depth)
	cur := []addr.Addr{r.mapRoot}
	for k := 0; k < r.depth; k++ {
		level := r.depth - 1 - k
		chunks := make([][]byte, len(cur))
		err := c.GetMany(ctx, cur, func(i int, data []byte) error {
			chunks[i] = data
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("sqlchunks: version %s of database %q: read page map level %d: %w", rootAddr, c.DB(), level, err)
		}
		next := make([]addr.Addr, 0, counts[k+1])
		for j, data := range chunks {
			first := int64(j) * int64(r.fanout)
			n := int(min(int64(r.fanout), counts[k+1]-first))
			next, err = decodeMap(next, data, level, first, n)
			if err != nil {
				return nil, fmt.Errorf("sqlchunks: version %s of database %q: map chunk %s (level %d, number %d): %w", rootAddr, c.DB(), cur[j], level, j, err)
			}
		}
		cur = next
	}
	if int64(len(cur)) != r.pages {
		return nil, fmt.Errorf("sqlchunks: version %s of database %q: %w: %d page addresses for %d pages", rootAddr, c.DB(), ErrBadMap, len(cur), r.pages)
	}
	return cur, nil
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
	addrs, err := p.pageAddrs(context.Background())
	if err != nil || n < 1 || n > int64(len(addrs)) {
		return addr.Addr{}, false
	}
	return addrs[n-1], true
}

// Preloaded implements sqlitevfs.Preloader: page 1 and the interior
// pages of a version opened from its open set are held in memory, or,
// with a page image, read from it as cheaply; either way a read of one
// starts no read-ahead run.
func (p *Pages) Preloaded(n int64) bool {
	if p.preloaded == nil && p.img == nil {
		return false
	}
	_, found := slices.BinarySearch(p.interior, n) // ascending, as the root lists them
	return n == 1 || found
}

// ReadPage implements sqlitevfs.Pages: from the page image when it holds
// the page, else with one Get.
func (p *Pages) ReadPage(ctx context.Context, n int64, b []byte) error {
	if err := p.check(n, 1, b); err != nil {
		return err
	}
	if data, ok := p.preloaded[n]; ok {
		copy(b, data)
		return nil
	}
	if p.img != nil && p.img.Read(int(n-1), b) {
		return nil
	}
	addrs, err := p.pageAddrs(ctx)
	if err != nil {
		return err
	}
	data, err := p.c.Get(ctx, addrs[n-1])
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
		if rr, ok := p.img.(rangeImage); ok {
			lo = rr.ReadRange(int(first-1), bs)
		} else {
			for lo < len(bs) && p.img.Read(int(first-1)+lo, bs[lo]) {
				lo++
			}
		}
		if lo == len(bs) {
			return nil
		}
		// From the first page missing on, through the reader (some after
		// it may be mapped already: reading them again costs little).
		first, bs = first+int64(lo), bs[lo:]
	}
	addrs, err := p.pageAddrs(ctx)
	if err != nil {
		return err
	}
	return p.c.GetMany(ctx, addrs[first-1:first-1+int64(len(bs))], func(i int, data []byte) error {
		n := first + int64(i)
		if err := p.checkData(n, data); err != nil {
			return err
		}
		copy(bs[i], data)
		return nil
	}) // errors name the chunks; the VFS adds the pages
}

func (p *Pages) check(first, n int64, b []byte) error {
	if first < 1 || n < 1 || first+n-1 > p.v.Pages {
		return fmt.Errorf("sqlchunks: pages %d-%d out of range of version %s (%d pages)", first, first+n-1, p.v.Root, p.v.Pages)
	}
	if len(b) != p.v.PageSize {
		return fmt.Errorf("sqlchunks: page buffer of %d bytes, want %d", len(b), p.v.PageSize)
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
