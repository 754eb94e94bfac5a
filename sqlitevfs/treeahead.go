package sqlitevfs

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chunkd/chunkd/sqlitevfs/btree"
)

// Index-scan read-ahead bookkeeping.
const (
	// maxHeldBytes bounds the pages fetched ahead that are held, for all
	// connections: the oldest batches go first beyond it (each scan needs
	// two: the leaf SQLite is on and the next one, fetched ahead).
	maxHeldBytes = 16 << 20
	// maxAhead is how many fetches ahead run at once.
	maxAhead = 4
	// maxBatchBytes caps the table leaves fetched for one index leaf (1,024
	// of 4 KiB): with maxAhead and the connections' own, it bounds the
	// pages in flight.
	maxBatchBytes = 4 << 20
	// maxLeaves caps the index leaves treeAhead maps (about 40 bytes
	// each): indexes past it are left alone.
	maxLeaves = 1 << 20
	// minJudged is the smallest batch whose use decides whether a scan
	// goes on fetching.
	minJudged = 16
)

// treeAhead fetches, for an index scan, the table leaves its rows will be
// looked up in, a whole index leaf's worth with one ReadPageList call,
// before SQLite asks for them one at a time.
//
// An index scan that is not covering (SELECT * ... WHERE indexed > x)
// reads an index leaf, then for each of its entries the table leaf that
// holds the entry's rowid: hundreds of reads of pages scattered over the
// table, each a request to a remote source. The index leaf names them
// all: its entries end with their rowids, and the table's interior pages
// (usually held in memory by the source: Preloader) say which leaf holds
// which rowid.
//
// It knows the indexes of rowid tables, found in the schema in the
// background at the first index leaf read. On one connection, a read of
// an index leaf next to the leaf it read last in that index (in key
// order, either way) is a scan's step. The scan's first leaf is entered
// anywhere; at the first leaf it reads whole, treeAhead only watches: if
// SQLite then reads at least half of the table leaves that leaf names,
// the scan looks rows up, and from the next step on it fetches the table
// leaves of the index leaf just read (unless fetched already) and, in the
// background, the next index leaf and its table leaves. A scan whose
// fetched pages go mostly unread stops fetching until it starts again; one
// that reads no table leaves (a covering scan, a filter on the index
// alone) never starts.
//
// A fetch passes over the table leaves read lately (the last half cache's
// worth of one connection, on any connection: most likely still in the
// reader's cache; a guess that costs, when wrong, single reads, never
// wrong bytes) and those held already. Fetched pages come from the
// source's ReadPageList, so they are exactly what a read of each would
// return; they are held for every connection until newer batches push
// them out, maxHeldBytes at most (4,096 pages of 4 KiB). Nothing here
// fails a read: a page that does not parse, a fetch that fails, leave
// SQLite to read as it would.
type treeAhead struct {
	src   PageLister
	pages Pages // the source, for the schema and interior pages
	ctx   context.Context

	initOnce sync.Once
	ready    atomic.Bool // init has run: the fields below are set
	usable   int
	leafOf   map[int64]leafPos // index leaf → its index and place in it
	indexes  []*scanIndex

	nodes sync.Map // table interior page → *tableNode

	mu      sync.Mutex
	held    map[int64]heldLeaf
	batches []*treeBatch // held, oldest first
	nheld   int          // pages of batches still held
	ahead   []*treeBatch // background fetches of next index leaves
	recent  recentLeaves
}

// connScans is how the scans of one connection (one SQLite file handle,
// whose calls SQLite serializes) are going, per index: scans of one index
// on two connections at once are two scans.
type connScans struct {
	byIndex map[int32]*scanProgress
	watch   *scanProgress // the scan whose first whole leaf is watched
}

// scanProgress is how a connection's scan of one index is going.
type scanProgress struct {
	last  int32 // ord of the index leaf read last, -1 for none
	dir   int32 // the scan's direction: +1 (ascending) or -1
	state scanState
	want  map[int64]bool // watching: table leaves the last index leaf names
	seen  int            // watching: reads of them since
}

// defaultCacheKiB is SQLite's default page cache per connection.
const defaultCacheKiB = 2000

// recentLeaves remembers the table leaves SQLite read last, as many as
// half its page cache holds: a fetch passes over them (SQLite has them,
// most likely; the cache holds index and interior pages too, so the
// older half may be gone), so that what is fetched is what SQLite will
// ask for.
type recentLeaves struct {
	ring  []int64
	i     int
	count map[int64]int
}

func newRecentLeaves(cacheKiB, pageSize int) recentLeaves {
	n := min(max(cacheKiB*1024/pageSize/2, 1), 1<<14)
	return recentLeaves{ring: make([]int64, n), count: make(map[int64]int, n)}
}

func (r *recentLeaves) add(n int64) {
	if old := r.ring[r.i]; old != 0 {
		if r.count[old]--; r.count[old] == 0 {
			delete(r.count, old)
		}
	}
	r.ring[r.i] = n
	r.count[n]++
	r.i = (r.i + 1) % len(r.ring)
}

func (r *recentLeaves) has(n int64) bool { return r.count[n] > 0 }

// leafPos places an index leaf: index ix's leaf number ord, in key order.
type leafPos struct{ ix, ord int32 }

// scanIndex is an index of a rowid table.
type scanIndex struct {
	table      int64   // the table's root page
	tableDepth int     // interior levels of the table's B-tree
	leaves     []int64 // the index's leaves in key order
}

type scanState int

const (
	scanNew      scanState = iota // a read that did not follow the last: perhaps a scan starts inside this leaf
	scanWatching                  // the scan's first whole leaf: does SQLite read the table leaves it names?
	scanFetching                  // it does: fetch ahead
	scanOff                       // it does not: leave this scan alone
)

// treeBatch is the table leaves of one index leaf (and, fetched in the
// background, the index leaf itself).
type treeBatch struct {
	leaf  int64   // the index leaf
	list  []int64 // pages it added to held
	used  int     // of them, pages read
	done  chan struct{}
	pages map[int64]bool // for a background fetch: what it will hold (set once the leaf is read)
}

type heldLeaf struct {
	data  []byte
	batch *treeBatch
	used  bool // read at least once
}

// tableNode is a decoded table interior page.
type tableNode struct{ keys, children []int64 }

// newTreeAhead returns the index-scan read-ahead over p, whose
// connections have page caches of cacheKiB (0: SQLite's default).
func newTreeAhead(ctx context.Context, p Pages, src PageLister, cacheKiB int) *treeAhead {
	if cacheKiB <= 0 {
		cacheKiB = defaultCacheKiB
	}
	return &treeAhead{src: src, pages: p, ctx: ctx, held: map[int64]heldLeaf{}, recent: newRecentLeaves(cacheKiB, p.PageSize())}
}

// take copies page n into p if it is held (or being fetched in the
// background). It stays held, for the other connections' scans, until
// newer batches push its batch out.
func (t *treeAhead) take(ctx context.Context, n int64, p []byte) bool {
	t.mu.Lock()
	if h, ok := t.held[n]; ok {
		copy(p, h.data)
		if !h.used {
			h.used = true
			h.batch.used++
			t.held[n] = h
		}
		t.mu.Unlock()
		return true
	}
	var a *treeBatch
	for _, b := range t.ahead {
		if b.leaf == n || b.pages[n] {
			a = b
		}
	}
	t.mu.Unlock()
	if a == nil {
		return false
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return false
	}
	return t.take(ctx, n, p)
}

// idle reports whether the database has no index to scan ahead of (found
// once the schema is read): then reads skip treeAhead altogether.
func (t *treeAhead) idle() bool { return t.ready.Load() && len(t.indexes) == 0 }

// saw notes that connection cs read page n (its bytes p): a table leaf
// counts for a watched scan; an index leaf may be a scan's next step.
func (t *treeAhead) saw(n int64, p []byte, cs *connScans) {
	switch btree.KindOf(p, n) {
	case btree.TableLeaf:
		t.mu.Lock()
		t.recent.add(n)
		t.mu.Unlock()
		if w := cs.watch; w != nil && w.want[n] {
			w.seen++
			delete(w.want, n)
		}
	case btree.IndexLeaf:
		if !t.ready.Load() {
			// The first index leaf read: find the indexes in the
			// background, never on a read's time.
			t.initOnce.Do(func() {
				go func() {
					t.init()
					t.ready.Store(true)
				}()
			})
			return
		}
		pos, ok := t.leafOf[n]
		if !ok {
			return
		}
		sp := cs.byIndex[pos.ix]
		if sp == nil {
			if cs.byIndex == nil {
				cs.byIndex = map[int32]*scanProgress{}
			}
			sp = &scanProgress{last: -1}
			cs.byIndex[pos.ix] = sp
		}
		t.step(t.indexes[pos.ix], pos, p, sp, cs)
	}
}

// step is connection cs's read of index leaf pos (its bytes p) of ix, its
// scan of which is sp.
func (t *treeAhead) step(ix *scanIndex, pos leafPos, p []byte, sp *scanProgress, cs *connScans) {
	dir := pos.ord - sp.last
	scanning := sp.last >= 0 && (dir == 1 || dir == -1) && (sp.state == scanNew || dir == sp.dir)
	sp.last, sp.dir = pos.ord, dir
	if !scanning {
		// Perhaps a scan's start, somewhere inside this leaf.
		sp.state, sp.seen, sp.want = scanNew, 0, nil
		if cs.watch == sp {
			cs.watch = nil
		}
		return
	}
	switch sp.state {
	case scanNew:
		// A scan reads this leaf whole: watch whether SQLite reads the
		// table leaves its entries name.
		sp.state = scanWatching
		want, err := t.tableLeaves(ix, ix.leaves[pos.ord], p)
		if err != nil {
			sp.state = scanOff
			return
		}
		sp.want = make(map[int64]bool, len(want))
		for _, l := range want {
			sp.want[l] = true
		}
		cs.watch = sp
		return
	case scanWatching:
		sp.state = scanOff
		if total := sp.seen + len(sp.want); total > 0 && 2*sp.seen >= total {
			sp.state = scanFetching
		}
		sp.want = nil
		if cs.watch == sp {
			cs.watch = nil
		}
	case scanFetching:
		// The previous leaf's batch should have been read, mostly (a
		// small one says little: its pages are few because SQLite read
		// most of them lately).
		t.mu.Lock()
		if b := t.batchOfLocked(ix.leaves[pos.ord-dir]); b != nil && len(b.list) >= minJudged && 2*b.used < len(b.list) {
			sp.state = scanOff
		}
		t.mu.Unlock()
	}
	if sp.state != scanFetching {
		return
	}
	leaf := ix.leaves[pos.ord]
	t.mu.Lock()
	have := t.batchOfLocked(leaf) != nil
	t.mu.Unlock()
	if !have {
		t.fetch(t.ctx, ix, leaf, p, nil)
	}
	if next := pos.ord + dir; next >= 0 && int(next) < len(ix.leaves) {
		t.fetchAhead(ix, ix.leaves[next])
	}
}

// batchOfLocked returns the batch of index leaf leaf, if one is held or
// being fetched.
func (t *treeAhead) batchOfLocked(leaf int64) *treeBatch {
	for _, bs := range [][]*treeBatch{t.ahead, t.batches} {
		for _, b := range bs {
			if b.leaf == leaf {
				return b
			}
		}
	}
	return nil
}

// fetchAhead fetches index leaf leaf and its table leaves in the
// background, unless it is held or being fetched already.
func (t *treeAhead) fetchAhead(ix *scanIndex, leaf int64) {
	t.mu.Lock()
	if len(t.ahead) >= maxAhead || t.batchOfLocked(leaf) != nil {
		t.mu.Unlock()
		return
	}
	b := &treeBatch{leaf: leaf, done: make(chan struct{})}
	t.ahead = append(t.ahead, b)
	t.mu.Unlock()
	go func() {
		defer func() {
			t.mu.Lock()
			if i := slices.Index(t.ahead, b); i >= 0 {
				t.ahead = slices.Delete(t.ahead, i, i+1)
			}
			t.mu.Unlock()
			close(b.done)
		}()
		page := make([]byte, t.pages.PageSize())
		if err := t.src.ReadPageList(t.ctx, []int64{leaf}, [][]byte{page}); err != nil {
			return
		}
		t.fetch(t.ctx, ix, leaf, page, b)
	}()
}

// fetch reads the table leaves index leaf leaf (its bytes p) names that
// are neither held nor read lately, with one ReadPageList call, and holds them as batch b (a
// new one if nil; a background fetch holds the index leaf too).
func (t *treeAhead) fetch(ctx context.Context, ix *scanIndex, leaf int64, p []byte, b *treeBatch) {
	want, err := t.tableLeaves(ix, leaf, p)
	if err != nil {
		return
	}
	t.mu.Lock()
	ns := want[:0]
	for _, n := range want {
		if _, ok := t.held[n]; !ok && !t.recent.has(n) {
			ns = append(ns, n)
		}
	}
	if b == nil {
		b = &treeBatch{leaf: leaf}
	} else {
		b.pages = make(map[int64]bool, len(ns))
		for _, n := range ns {
			b.pages[n] = true
		}
	}
	t.mu.Unlock()
	ps := t.pages.PageSize()
	buf := make([]byte, len(ns)*ps)
	bufs := make([][]byte, len(ns))
	for i := range bufs {
		bufs[i] = buf[i*ps : (i+1)*ps]
	}
	if len(ns) > 0 {
		if err := t.src.ReadPageList(ctx, ns, bufs); err != nil {
			return
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b.pages != nil { // fetched ahead: the index leaf itself is held too
		t.held[leaf] = heldLeaf{data: p, batch: b}
		b.list = append(b.list, leaf)
	}
	for i, n := range ns {
		t.held[n] = heldLeaf{data: bufs[i], batch: b}
	}
	b.list = append(b.list, ns...)
	t.batches = append(t.batches, b)
	t.nheld += len(b.list)
	for t.nheld*t.pages.PageSize() > maxHeldBytes && len(t.batches) > 1 {
		old := t.batches[0]
		t.batches = t.batches[1:]
		t.nheld -= len(old.list)
		for _, n := range old.list {
			if h, ok := t.held[n]; ok && h.batch == old {
				delete(t.held, n)
			}
		}
	}
}

// tableLeaves returns the distinct table leaves holding the rowids of
// index leaf leaf (its bytes p), at most maxBatchBytes of them, in the order its
// entries name them.
func (t *treeAhead) tableLeaves(ix *scanIndex, leaf int64, p []byte) ([]int64, error) {
	pg, err := btree.Parse(p, leaf, t.usable)
	if err != nil {
		return nil, err
	}
	rowids, err := pg.IndexRowids()
	if err != nil {
		return nil, err
	}
	seen := make(map[int64]bool, len(rowids))
	var out []int64
	for _, r := range rowids {
		n, err := t.tableLeaf(ix, r)
		if err != nil {
			return nil, err
		}
		if !seen[n] && len(out) < maxBatchBytes/t.pages.PageSize() {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// tableLeaf returns the leaf of ix's table that holds rowid.
func (t *treeAhead) tableLeaf(ix *scanIndex, rowid int64) (int64, error) {
	n := ix.table
	for range ix.tableDepth {
		node, err := t.node(n)
		if err != nil {
			return 0, err
		}
		n = btree.Step(node.keys, node.children, rowid)
	}
	return n, nil
}

// node returns table interior page n decoded, reading it once.
func (t *treeAhead) node(n int64) (*tableNode, error) {
	if v, ok := t.nodes.Load(n); ok {
		return v.(*tableNode), nil
	}
	b, err := t.read(n)
	if err != nil {
		return nil, err
	}
	p, err := btree.Parse(b, n, t.usable)
	if err != nil {
		return nil, err
	}
	keys, children, err := p.TableKeys()
	if err != nil {
		return nil, err
	}
	v, _ := t.nodes.LoadOrStore(n, &tableNode{keys: keys, children: children})
	return v.(*tableNode), nil
}

// read reads page n from the source (the schema, interior pages).
func (t *treeAhead) read(n int64) ([]byte, error) {
	b := make([]byte, t.pages.PageSize())
	if err := t.pages.ReadPage(t.ctx, n, b); err != nil {
		return nil, err
	}
	return b, nil
}

// init finds the indexes of rowid tables in the schema and their leaves.
// Any error leaves treeAhead without indexes: it then does nothing.
func (t *treeAhead) init() {
	page1, err := t.read(1)
	if err != nil {
		return
	}
	if btree.PageSize(page1) != t.pages.PageSize() {
		return // a header that does not fit the image: not worth a guess
	}
	if t.usable, err = btree.Usable(page1); err != nil {
		return
	}
	objs, err := btree.Schema(t.read, t.usable)
	if err != nil {
		return
	}
	tables := map[string]int64{}
	for _, o := range objs {
		if o.Type == "table" && o.Root > 0 {
			tables[o.Name] = o.Root
		}
	}
	leafOf := map[int64]leafPos{}
	var indexes []*scanIndex
	for _, o := range objs {
		root, ok := tables[o.Table]
		if o.Type != "index" || o.Root < 1 || !ok {
			continue
		}
		depth, kind, err := btree.Depth(t.read, root, t.usable)
		if err != nil || kind != btree.TableLeaf {
			continue // a WITHOUT ROWID table: its index holds no rowids
		}
		leaves, err := btree.Leaves(t.read, o.Root, t.usable)
		if err != nil || len(leaves) < 2 || len(leafOf)+len(leaves) > maxLeaves {
			continue // nothing to scan across, or past what is mapped
		}
		ix := &scanIndex{table: root, tableDepth: depth, leaves: leaves}
		for i, l := range leaves {
			leafOf[l] = leafPos{ix: int32(len(indexes)), ord: int32(i)}
		}
		indexes = append(indexes, ix)
	}
	t.leafOf, t.indexes = leafOf, indexes
}
