package sqlitevfs

import (
	"context"
	"fmt"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
)

// DefaultReadAhead is the default PagesOptions.ReadAhead.
const DefaultReadAhead = 64

// Read-ahead bookkeeping of a ChunkPages.
const (
	// recentPages is how many recently read page numbers are remembered
	// to detect sequential reads (one per SQLite connection reading at
	// once, roughly).
	recentPages = 8
	// aheadWindows is how many read-ahead batches are kept at once.
	aheadWindows = 4
)

// PagesOptions tune OpenPages. The zero value is fine.
type PagesOptions struct {
	// ReadAhead is how many pages one batch fetches (one client.GetMany:
	// one service request, or a few merged store reads) when SQLite
	// reads sequentially, that is, reads page n right after page n-1. The
	// batch is held in memory, so the reads that follow are memory hits.
	// 0 means DefaultReadAhead; negative or 1 turns read-ahead off.
	ReadAhead int
}

// ChunkPages serves the pages of one version of a chunkd SQLite database
// from a client.Client. It implements Pages and PageRanger, for Register.
//
// The whole page map is loaded by OpenPages and kept in memory (20 bytes a
// page); a page read is one client.Get (a memory hit once the client has
// the chunk), and sequential reads are fetched ahead in batches (see
// PagesOptions.ReadAhead). Every chunk is checked against its address by
// the client, so a page is either right or an error naming its chunk.
// Safe for concurrent use; it holds nothing that needs closing (the
// client is the caller's).
type ChunkPages struct {
	c         *client.Client
	v         Version
	addrs     []addr.Addr // page n is addrs[n-1]
	readAhead int

	mu      sync.Mutex
	recent  [recentPages]int64
	ri      int
	windows [aheadWindows]window
	wi      int
	next    *prefetch // the background read of the window after the last one, if any
}

// prefetch is a background read of pages [first, first+n) into the
// client's memory tier, started when SQLite is half way through a
// read-ahead window, so the next window is (nearly) local when SQLite
// gets there and fetching overlaps with the query's own work.
type prefetch struct {
	first, n int64
	done     chan struct{}
}

// window is one read-ahead batch: the pages first, first+1, ...
type window struct {
	first int64
	pages [][]byte // shared with the client's memory tier; never modified
}

// OpenPages reads the root chunk root and the whole page map of the
// version (one client.GetMany per map level) and returns its pages. A root
// that is not a root chunk is an error wrapping ErrNotRoot; a page map
// that does not fit its root, one wrapping ErrBadMap.
func OpenPages(ctx context.Context, c *client.Client, root addr.Addr, o PagesOptions) (*ChunkPages, error) {
	r, err := readRoot(ctx, c, root)
	if err != nil {
		return nil, err
	}
	addrs, err := loadMap(ctx, c, root, r)
	if err != nil {
		return nil, err
	}
	ra := o.ReadAhead
	switch {
	case ra == 0:
		ra = DefaultReadAhead
	case ra < 0:
		ra = 0
	case ra > maxReadAhead:
		ra = maxReadAhead
	}
	p := &ChunkPages{c: c, v: versionOf(root, r), addrs: addrs, readAhead: ra}
	for i := range p.recent {
		p.recent[i] = -1
	}
	return p, nil
}

// loadMap reads the page map of root r, level by level from the top.
func loadMap(ctx context.Context, c *client.Client, rootAddr addr.Addr, r *root) ([]addr.Addr, error) {
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
			return nil, fmt.Errorf("sqlitevfs: version %s of database %q: read page map level %d: %w", rootAddr, c.DB(), level, err)
		}
		next := make([]addr.Addr, 0, counts[k+1])
		for j, data := range chunks {
			first := int64(j) * int64(r.fanout)
			n := int(min(int64(r.fanout), counts[k+1]-first))
			next, err = decodeMap(next, data, level, first, n)
			if err != nil {
				return nil, fmt.Errorf("sqlitevfs: version %s of database %q: map chunk %s (level %d, number %d): %w", rootAddr, c.DB(), cur[j], level, j, err)
			}
		}
		cur = next
	}
	if int64(len(cur)) != r.pages {
		return nil, fmt.Errorf("sqlitevfs: version %s of database %q: %w: %d page addresses for %d pages", rootAddr, c.DB(), ErrBadMap, len(cur), r.pages)
	}
	return cur, nil
}

// Version returns the version whose pages p serves.
func (p *ChunkPages) Version() Version { return p.v }

// PageSize implements Pages.
func (p *ChunkPages) PageSize() int { return p.v.PageSize }

// PageCount implements Pages.
func (p *ChunkPages) PageCount() int64 { return p.v.Pages }

// PageAddr returns the address of page n's chunk (1-based).
func (p *ChunkPages) PageAddr(n int64) (addr.Addr, bool) {
	if n < 1 || n > int64(len(p.addrs)) {
		return addr.Addr{}, false
	}
	return p.addrs[n-1], true
}

// ReadPage implements Pages.
func (p *ChunkPages) ReadPage(ctx context.Context, n int64, b []byte) error {
	if err := p.check(n, 1, b); err != nil {
		return err
	}
	data, seq := p.note(n)
	if data != nil {
		copy(b, data)
		p.prefetchAfter(n)
		return nil
	}
	if seq && p.readAhead > 1 && n < p.v.Pages {
		p.waitPrefetch(ctx, n)
		w := min(int64(p.readAhead), p.v.Pages-n+1)
		if pages, err := p.fetch(ctx, n, w); err == nil {
			p.mu.Lock()
			p.windows[p.wi] = window{first: n, pages: pages}
			p.wi = (p.wi + 1) % aheadWindows
			p.mu.Unlock()
			copy(b, pages[0])
			return nil
		}
		// A page of the batch failed: read page n alone, so that an error
		// is about a page SQLite actually wants.
	}
	data, err := p.c.Get(ctx, p.addrs[n-1])
	if err != nil {
		return err // names the chunk; the VFS adds the page
	}
	if err := p.checkData(n, data); err != nil {
		return err
	}
	copy(b, data)
	return nil
}

// ReadPages implements PageRanger: the pages not already held from a
// read-ahead batch are read with one client.GetMany.
func (p *ChunkPages) ReadPages(ctx context.Context, first int64, bs [][]byte) error {
	if len(bs) == 0 {
		return nil
	}
	for _, b := range bs {
		if err := p.check(first, int64(len(bs)), b); err != nil {
			return err
		}
	}
	var missing []int64
	p.mu.Lock()
	for i, b := range bs {
		if data := p.bufferedLocked(first + int64(i)); data != nil {
			copy(b, data)
		} else {
			missing = append(missing, first+int64(i))
		}
	}
	p.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	as := make([]addr.Addr, len(missing))
	for i, n := range missing {
		as[i] = p.addrs[n-1]
	}
	var bad error
	err := p.c.GetMany(ctx, as, func(i int, data []byte) error {
		n := missing[i]
		if err := p.checkData(n, data); err != nil {
			bad = err
			return err
		}
		copy(bs[n-first], data)
		return nil
	})
	if bad != nil {
		return bad
	}
	return err // names the chunks; the VFS adds the pages
}

// fetch reads pages first..first+n-1 with one GetMany and returns them.
func (p *ChunkPages) fetch(ctx context.Context, first, n int64) ([][]byte, error) {
	pages := make([][]byte, n)
	err := p.c.GetMany(ctx, p.addrs[first-1:first-1+n], func(i int, data []byte) error {
		if err := p.checkData(first+int64(i), data); err != nil {
			return err
		}
		pages[i] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pages, nil
}

// note records a read of page n and returns the page if a read-ahead
// batch holds it, and whether page n-1 was read recently (a sequential
// read).
func (p *ChunkPages) note(n int64) (data []byte, seq bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.recent {
		if r == n-1 {
			seq = true
			break
		}
	}
	p.recent[p.ri] = n
	p.ri = (p.ri + 1) % recentPages
	return p.bufferedLocked(n), seq
}

// bufferedLocked returns page n from a read-ahead batch, or nil.
func (p *ChunkPages) bufferedLocked(n int64) []byte {
	for _, w := range p.windows {
		if n >= w.first && n < w.first+int64(len(w.pages)) {
			return w.pages[n-w.first]
		}
	}
	return nil
}

func (p *ChunkPages) check(first, n int64, b []byte) error {
	if first < 1 || n < 1 || first+n-1 > p.v.Pages {
		return fmt.Errorf("sqlitevfs: pages %d-%d out of range of version %s (%d pages)", first, first+n-1, p.v.Root, p.v.Pages)
	}
	if len(b) != p.v.PageSize {
		return fmt.Errorf("sqlitevfs: page buffer of %d bytes, want %d", len(b), p.v.PageSize)
	}
	return nil
}

// checkData checks that a chunk is page-sized (the client has already
// checked it against its address).
func (p *ChunkPages) checkData(n int64, data []byte) error {
	if len(data) != p.v.PageSize {
		return fmt.Errorf("%w: chunk %s of page %d is %d bytes, not a %d-byte page", ErrBadMap, p.addrs[n-1], n, len(data), p.v.PageSize)
	}
	return nil
}

// prefetchAfter starts reading the window after the one holding page n
// once SQLite is half way through it.
func (p *ChunkPages) prefetchAfter(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.windows {
		size := int64(len(w.pages))
		if n < w.first || n >= w.first+size || n-w.first < size/2 {
			continue
		}
		next := w.first + size
		if next > p.v.Pages || p.bufferedLocked(next) != nil || p.next != nil && p.next.first == next {
			return
		}
		pf := &prefetch{first: next, n: min(int64(p.readAhead), p.v.Pages-next+1), done: make(chan struct{})}
		p.next = pf
		go func() {
			defer close(pf.done)
			// Errors are left for the foreground read to meet and report.
			_ = p.c.GetMany(context.Background(), p.addrs[pf.first-1:pf.first-1+pf.n], func(int, []byte) error { return nil })
		}()
		return
	}
}

// waitPrefetch waits for a background read covering page n, so the
// foreground does not fetch the same pages again.
func (p *ChunkPages) waitPrefetch(ctx context.Context, n int64) {
	p.mu.Lock()
	pf := p.next
	p.mu.Unlock()
	if pf == nil || n < pf.first || n >= pf.first+pf.n {
		return
	}
	select {
	case <-pf.done:
	case <-ctx.Done():
	}
}
