package sqlitevfs

import (
	"context"
	"sync"
)

// Read-ahead bookkeeping.
const (
	// recentPages is how many recently read page numbers are remembered
	// to detect sequential reads (one per SQLite connection reading at
	// once, roughly).
	recentPages = 8
	// aheadBatches is how many read-ahead batches are kept at once.
	aheadBatches = 4
	// firstBatch is the pages of a run's first batch; each next batch of
	// the run is twice the last, up to Options.ReadAhead. A short run
	// (opening a database reads pages 1 and 2) costs a small batch, a
	// scan soon reads in large ones.
	firstBatch = 4
)

// readAhead serves the pages of a PageRanger to every connection of one
// image, fetching sequential runs ahead in batches (Options.ReadAhead).
//
// A read of page n is sequential when page n-1 was among the last few
// pages read (by any connection). Such a read that no batch holds fetches
// a batch from page n with one ReadPages call: firstBatch pages, or twice
// the batch that ended at n, up to size; once SQLite is half way through
// a batch, the next (twice as large, up to size) is fetched in the
// background, so that fetching overlaps the query's own work. Reads that
// are not sequential go to the source one page at a time.
type readAhead struct {
	Pages
	src   PageRanger
	ctx   context.Context // the registration's: background fetches end with it
	size  int64           // pages per batch
	local LocalPages      // the pages' LocalPages, if they have one
	tree  *treeAhead      // the table leaves scans look rows up in, if the pages are a PageLister not on this host

	mu      sync.Mutex
	recent  [recentPages]int64
	ri      int
	batches [aheadBatches]batch
	bi      int
	next    *prefetch // the background fetch of the batch after the last one, if any
}

// batch is pages first, first+1, ... held in memory.
type batch struct {
	first int64
	n     int64
	pages [][]byte // n pages: copies, or the source's own (PageSharer)
}

// prefetch is a background fetch of a batch.
type prefetch struct {
	first, n int64
	done     chan struct{}
}

// newReadAhead returns the read-ahead layer over p, reading batches of up
// to size pages from src, for connections whose page caches hold cacheKiB
// (0: SQLite's default).
func newReadAhead(ctx context.Context, p Pages, src PageRanger, size, cacheKiB int) *readAhead {
	ra := &readAhead{Pages: p, src: src, ctx: ctx, size: int64(size)}
	ra.local, _ = p.(LocalPages)
	if l, ok := p.(PageLister); ok && (ra.local == nil || !ra.local.OnHost()) {
		ra.tree = newTreeAhead(ctx, p, l, cacheKiB)
	}
	for i := range ra.recent {
		ra.recent[i] = -1
	}
	return ra
}

// ReadPage implements Pages.
func (ra *readAhead) ReadPage(ctx context.Context, n int64, p []byte) error {
	return ra.readPageOn(ctx, n, p, nil)
}

// readPageOn is a read of page n by the connection whose scans are cs (nil
// for a read of no connection's: it starts no B-tree read-ahead).
func (ra *readAhead) readPageOn(ctx context.Context, n int64, p []byte, cs *connScans) error {
	if ra.tree == nil || ra.tree.idle() {
		return ra.readPage(ctx, n, p)
	}
	took := ra.tree.take(ctx, n, p)
	if !took {
		if err := ra.readPage(ctx, n, p); err != nil {
			return err
		}
	}
	if cs != nil {
		ra.tree.saw(ctx, n, p, took, cs)
	}
	return nil
}

// readPage reads page n from a batch, a new batch or the source.
func (ra *readAhead) readPage(ctx context.Context, n int64, p []byte) error {
	if ra.isLocal(n) {
		return ra.Pages.ReadPage(ctx, n, p)
	}
	held, seq := ra.note(n, p)
	if held {
		ra.prefetchAfter(n)
		return nil
	}
	if seq && n < ra.PageCount() {
		if ra.waitPrefetch(ctx, n, p) {
			return nil
		}
		if b, err := ra.fetch(ctx, n, ra.batchAt(n)); err == nil {
			ra.mu.Lock()
			ra.addLocked(b)
			ra.mu.Unlock()
			copy(p, b.page(n))
			return nil
		}
		// A page of the batch failed: read page n alone, so that an error
		// is about a page SQLite actually wants.
	}
	return ra.Pages.ReadPage(ctx, n, p)
}

// page returns page n of the batch.
func (b *batch) page(n int64) []byte { return b.pages[n-b.first] }

func (b *batch) holds(n int64) bool { return b.pages != nil && n >= b.first && n < b.first+b.n }

// batchAt returns the size of a batch starting at page n: twice the batch
// that ends at n, if one does, else firstBatch; at most size.
func (ra *readAhead) batchAt(n int64) int64 {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	size := int64(firstBatch)
	for _, b := range ra.batches {
		if b.pages != nil && b.first+b.n == n {
			size = 2 * b.n
		}
	}
	return min(size, ra.size)
}

// fetch reads the batch of n pages from page first (fewer at the end of
// the image) with one ReadPages call.
func (ra *readAhead) fetch(ctx context.Context, first, n int64) (batch, error) {
	n = min(n, ra.PageCount()-first+1)
	ns := make([]int64, n)
	for i := range ns {
		ns[i] = first + int64(i)
	}
	pages, err := readShared(ctx, ra.src, ns, ra.PageSize(), func(bufs [][]byte) error { return ra.src.ReadPages(ctx, first, bufs) })
	if err != nil {
		return batch{}, err
	}
	return batch{first: first, n: n, pages: pages}, nil
}

// pageBufs cuts buf into pages of ps bytes.
func pageBufs(buf []byte, ps int) [][]byte {
	bufs := make([][]byte, len(buf)/ps)
	for i := range bufs {
		bufs[i] = buf[i*ps : (i+1)*ps]
	}
	return bufs
}

// isLocal reports whether page n is read without a request (LocalPages).
func (ra *readAhead) isLocal(n int64) bool { return ra.local != nil && ra.local.Local(n) }

// note records a read of page n, copies the page into p if a batch holds
// it, and says whether the page before it was read recently (a
// sequential read); local pages, never recorded, are stepped over, so
// a scan whose leaves sit around an interior page stays sequential.
func (ra *readAhead) note(n int64, p []byte) (held, seq bool) {
	prev := n - 1
	for prev > 0 && ra.isLocal(prev) {
		prev--
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	for _, r := range ra.recent {
		if r == prev {
			seq = true
			break
		}
	}
	ra.recent[ra.ri] = n
	ra.ri = (ra.ri + 1) % recentPages
	return ra.copyLocked(n, p), seq
}

// copyLocked copies page n into p from a batch, if one holds it.
func (ra *readAhead) copyLocked(n int64, p []byte) bool {
	for i := range ra.batches {
		if b := &ra.batches[i]; b.holds(n) {
			copy(p, b.page(n))
			return true
		}
	}
	return false
}

func (ra *readAhead) heldLocked(n int64) bool {
	for i := range ra.batches {
		if ra.batches[i].holds(n) {
			return true
		}
	}
	return false
}

func (ra *readAhead) addLocked(b batch) {
	ra.batches[ra.bi] = b
	ra.bi = (ra.bi + 1) % aheadBatches
}

// prefetchAfter starts fetching the batch after the one holding page n
// once SQLite is half way through it.
func (ra *readAhead) prefetchAfter(n int64) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	for i := range ra.batches {
		b := &ra.batches[i]
		if !b.holds(n) || n-b.first < b.n/2 {
			continue
		}
		next := b.first + b.n
		if next > ra.PageCount() || ra.heldLocked(next) || ra.next != nil && ra.next.first == next {
			return
		}
		pf := &prefetch{first: next, n: min(2*b.n, ra.size, ra.PageCount()-next+1), done: make(chan struct{})}
		ra.next = pf
		go func() {
			defer close(pf.done)
			// Errors are left for the foreground read to meet and report.
			if b, err := ra.fetch(ra.ctx, pf.first, pf.n); err == nil {
				ra.mu.Lock()
				ra.addLocked(b)
				ra.mu.Unlock()
			}
		}()
		return
	}
}

// waitPrefetch waits for a background fetch covering page n, and copies
// the page into p if it arrived.
func (ra *readAhead) waitPrefetch(ctx context.Context, n int64, p []byte) bool {
	ra.mu.Lock()
	pf := ra.next
	ra.mu.Unlock()
	if pf == nil || n < pf.first || n >= pf.first+pf.n {
		return false
	}
	select {
	case <-pf.done:
	case <-ctx.Done():
		return false
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return ra.copyLocked(n, p)
}
