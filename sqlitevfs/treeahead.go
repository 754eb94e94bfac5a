package sqlitevfs

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chunkd/chunkd/sqlitevfs/btree"
)

// B-tree read-ahead bookkeeping.
const (
	// maxHeldBytes bounds the pages fetched ahead that are held, for all
	// connections: the oldest batches go first beyond it (each scan needs
	// 1+stepsAhead: the leaf SQLite is on and those fetched ahead).
	maxHeldBytes = 16 << 20
	// stepsAhead is how many leaves past the one SQLite reads a scan
	// fetches in the background: a leaf's fetch (the leaf, then its
	// table leaves: two requests) overlaps SQLite's work on those before.
	stepsAhead = 2
	// maxLeafRun is the most leaves a scan that looks nothing up fetches
	// ahead in key order at once (leafAhead).
	maxLeafRun = 64
	// maxAhead is how many fetches ahead run at once.
	maxAhead = 4
	// maxPlans is how many planned fetches are kept (planLocked).
	maxPlans = 8
	// maxBatchBytes caps the table leaves fetched for one scanned leaf
	// (1,024 of 4 KiB): with maxAhead and the connections' own, it bounds the
	// pages in flight.
	maxBatchBytes = 4 << 20
	// maxLeaves caps the leaves treeAhead maps (about 40 bytes each):
	// B-trees past it are not scanned ahead of.
	maxLeaves = 1 << 20
	// minJudged is the fewest table leaves a leaf of a fetching scan
	// must name (or name that were not read lately) for SQLite's reads of
	// them to decide whether the scan goes on fetching.
	minJudged = 8
)

// treeAhead fetches, for a scan whose rows name rows of a table, the
// table leaves those rows will be looked up in, a whole leaf of the scan's
// worth with one ReadPageList call, before SQLite asks for them one at a
// time; for a scan that looks nothing up, its own next leaves in key
// order when they are not the file's next pages (leafAhead).
//
// Two kinds of query read that way. An index scan that is not covering
// (SELECT * ... WHERE indexed > x) reads an index leaf, then for each of
// its entries the table leaf that holds the entry's rowid. A join that
// looks rows up by primary key (... JOIN a ON a.id = b.a_id, a nested
// loop over b) reads a leaf of b, then for each of its rows the leaf of a
// that holds the row's a_id. Either way hundreds of reads of pages
// scattered over a table, each a request to a remote source, that the
// scan's leaf names: an index entry ends with its rowid, a row holds its
// reference, and the table's interior pages (usually held in memory by
// the source: LocalPages) say which leaf holds which rowid.
//
// It knows the database's B-trees, found in the schema in the background
// once a connection has read a few leaves: every table and index, whose leaves a scan
// steps through, and the rowid tables, whose rows may be looked up. On
// one connection, a read of a leaf next to the leaf it read last in that
// B-tree (in key order, either way) is a scan's step. The scan's first
// leaf is entered anywhere; at the first leaf it reads whole, treeAhead
// only watches: for each column of its entries (the first maxRefColumns,
// the last, and the rowid of a table's rows) and each of the largest
// maxTargets rowid tables, the table leaves the column's integer values
// name, if they were rowids of that table. If SQLite then reads at least
// half (and two) of one such set of leaves, that column names rows of
// that table, and from the next step on, treeAhead fetches the table
// leaves the leaf just read names (unless fetched already) and, in the
// background, the next stepsAhead leaves of the scan and their table
// leaves. What it learned holds for the connection's next scans of the
// B-tree until SQLite reads none, or under an eighth, of what a scan's
// leaves named (counted over leaves until they name at least minJudged;
// stale). A scan that looks no rows up (a covering scan) never starts
// fetching, nor one that looks up fewer than half the rows of the leaf
// it watches (a filter on the scanned rows).
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
	leafOf   map[int64]leafPos // a scanned B-tree's leaf → its tree and place in it
	trees    []*scanTree       // B-trees a scan may step through
	targets  []rowTable        // rowid tables their rows may name
	targetOf map[int32]int     // a rowid table's tree → its index in targets

	nodes sync.Map // table interior page → *tableNode

	mu      sync.Mutex
	held    map[int64]heldLeaf
	byLeaf  map[int64]*treeBatch // batches held or being fetched, by their scanned leaf
	batches []*treeBatch         // held, oldest first
	nheld   int                  // pages of batches still held
	ahead   []*treeBatch         // background fetches of next leaves
	plans   []*treeBatch         // list fetches a read will start (planLocked)
	recent  recentLeaves
	follows map[followPair]*followStats
}

// connScans is how the scans of one connection (one SQLite file handle,
// whose calls SQLite serializes) are going, per B-tree: scans of one
// B-tree on two connections at once are two scans.
type connScans struct {
	byTree map[int32]*scanProgress
	leaves int // leaves read before the B-trees were known

	seen [followLeaves]seenLeaf // the leaves read last (follow), a ring
	si   int                    // where the next goes
}

// scanProgress is how a connection's scan of one B-tree is going.
type scanProgress struct {
	last  int32 // ord of the leaf read last, -1 for none
	dir   int32 // the scan's direction: +1 (ascending) or -1
	state scanState
	ref   *ref         // what the tree's entries name, learned by a watch; nil if not known
	cands []*candidate // the rows the leaf read last may name, whose reads are counted: each candidate when watching, the ref's when fetching
	reads int          // table leaf reads the connection may still make before cands are dropped (a scan left off)
	acc   candidate    // fetching: counts of the leaves since the last judgement, added up

	// A scan that looks nothing up: its last run of leaves fetched
	// ahead in key order ends at ord runEnd and was runSize long (0:
	// none yet).
	runEnd, runSize int32
}

// ref is what a scanned B-tree's entries name: the value of column col of
// each entry (colRowid: a table row's rowid) is a rowid of targets[table].
type ref struct{ col, table int }

// colRowid is a table leaf's rowid as a ref's column.
const colRowid = -1

// Bounds of what a watch considers.
const (
	// maxRefColumns is how many of an entry's first columns may be
	// references (an index entry's last column, its rowid, is always one).
	maxRefColumns = 8
	// initLeaves is how many leaves a connection reads before the
	// B-trees are looked for.
	initLeaves = 16
	// maxTargets is how many rowid tables references may point into: the
	// largest (small ones stay in SQLite's cache anyway).
	maxTargets = 8
)

// candidate is a ref a watch checks (or a fetching scan's ref): the table
// leaves the leaf's entries name by it, and how many of them SQLite has
// read since.
type candidate struct {
	ref
	want     map[int64]bool
	n        int // len(want) at the start
	uncached int // a fetching scan's: of them, not read lately nor taken from what is held
	seen     int
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

// leafPos places a leaf: tree ix's leaf number ord, in key order.
type leafPos struct{ ix, ord int32 }

// scanTree is a B-tree a scan may step through: a table or an index.
type scanTree struct {
	root   int64
	leaves []int64 // in key order
}

// rowTable is a rowid table: rows a scan's entries may name.
type rowTable struct {
	root   int64
	depth  int // interior levels of its B-tree
	leaves int
}

type scanState int

const (
	scanNew      scanState = iota // a read that did not follow the last: perhaps a scan starts inside this leaf
	scanWatching                  // the scan's first whole leaf: does SQLite read the table leaves its entries name?
	scanFetching                  // it does: fetch ahead
	scanOff                       // it does not: leave this scan alone
)

// treeBatch is the table leaves one leaf of a scan names (and, fetched in
// the background, that leaf itself).
type treeBatch struct {
	leaf  int64          // the scan's leaf
	list  []int64        // pages it added to held
	kept  bool           // in batches
	pages map[int64]bool // for a background fetch: what it will hold (set once the leaf is read)
	// follow, for a group's fetch (follow), counts SQLite's reads of it.
	follow *followStats
	want   []int64 // a list batch's pages (listBatch)

	// A background fetch's: done closes when it ends, leafDone once the
	// leaf is held (or could not be read).
	done, leafDone chan struct{}
	leafOnce       sync.Once
}

// leafReady closes b.leafDone (a background fetch of a leaf's), once.
func (b *treeBatch) leafReady() {
	if b.leafDone != nil {
		b.leafOnce.Do(func() { close(b.leafDone) })
	}
}

type heldLeaf struct {
	data  []byte
	batch *treeBatch
	read  bool // taken at least once: likely in a reader's cache now
}

// tableNode is a decoded table interior page.
type tableNode struct{ keys, children []int64 }

// newTreeAhead returns the B-tree read-ahead over p, whose
// connections have page caches of cacheKiB (0: SQLite's default).
func newTreeAhead(ctx context.Context, p Pages, src PageLister, cacheKiB int) *treeAhead {
	if cacheKiB <= 0 {
		cacheKiB = defaultCacheKiB
	}
	return &treeAhead{src: src, pages: p, ctx: ctx, held: map[int64]heldLeaf{}, byLeaf: map[int64]*treeBatch{}, follows: map[followPair]*followStats{}, recent: newRecentLeaves(cacheKiB, p.PageSize())}
}

// take copies page n into p if it is held (or being fetched in the
// background). It stays held, for the other connections' scans, until
// newer batches push its batch out.
func (t *treeAhead) take(ctx context.Context, n int64, p []byte) bool {
	t.mu.Lock()
	if t.copyHeldLocked(n, p) {
		t.mu.Unlock()
		return true
	}
	if b := t.planOfLocked(n); b != nil {
		// The first read of a planned list fetches all of it, here.
		t.ahead = append(t.ahead, b)
		t.mu.Unlock()
		t.runList(b)
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.copyHeldLocked(n, p)
	}
	var wait chan struct{}
	for _, b := range t.ahead {
		switch {
		case b.leaf == n:
			wait = b.leafDone
		case b.pages[n]:
			wait = b.done
		}
	}
	t.mu.Unlock()
	if wait == nil {
		return false
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.copyHeldLocked(n, p)
}

// copyHeldLocked copies page n into p if it is held.
func (t *treeAhead) copyHeldLocked(n int64, p []byte) bool {
	h, ok := t.held[n]
	if !ok {
		return false
	}
	copy(p, h.data)
	if !h.read {
		h.read = true
		t.held[n] = h
		if st := h.batch.follow; st != nil {
			st.taken++
		}
	}
	return true
}

// idle reports whether the database has no B-tree to scan ahead of or no
// rowid table to look rows up in (found once the schema is read): then
// reads skip treeAhead altogether.
func (t *treeAhead) idle() bool {
	return t.ready.Load() && (len(t.trees) == 0 || len(t.targets) == 0)
}

// saw notes that connection cs read page n (its bytes p; took: from what
// is held) for a read whose context is ctx: a table leaf counts for a
// watched scan; a leaf may be a scan's next step, or a lookup to follow.
func (t *treeAhead) saw(ctx context.Context, n int64, p []byte, took bool, cs *connScans) {
	kind := btree.KindOf(p, n)
	if kind != btree.TableLeaf && kind != btree.IndexLeaf {
		return
	}
	if kind == btree.TableLeaf {
		t.mu.Lock()
		t.recent.add(n)
		t.mu.Unlock()
		for _, sp := range cs.byTree { // a few B-trees, few watched
			if sp.cands == nil {
				continue
			}
			for _, c := range sp.cands {
				if c.want[n] {
					c.seen++
					delete(c.want, n)
				}
			}
			if sp.reads--; sp.reads <= 0 {
				sp.cands = nil // the scan left off: what follows is not its
			}
		}
	}
	if !t.ready.Load() {
		// A connection that reads many leaves: find the B-trees in the
		// background, never on a read's time (it reads a leaf of each
		// too; point lookups, which read few, pay nothing).
		if cs.leaves++; cs.leaves < initLeaves {
			return
		}
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
	if ti, ok := t.targetOf[pos.ix]; ok && !took {
		t.follow(cs, pos.ix, ti, n, p)
	}
	cs.remember(n, pos.ix, p)
	sp := cs.byTree[pos.ix]
	if sp == nil {
		if cs.byTree == nil {
			cs.byTree = map[int32]*scanProgress{}
		}
		sp = &scanProgress{last: -1}
		cs.byTree[pos.ix] = sp
	}
	t.step(ctx, t.trees[pos.ix], pos, p, sp)
}

// step is a connection's read of leaf pos (its bytes p) of tree tr, its
// scan of which is sp, for a read whose context is ctx.
func (t *treeAhead) step(ctx context.Context, tr *scanTree, pos leafPos, p []byte, sp *scanProgress) {
	dir := pos.ord - sp.last
	scanning := sp.last >= 0 && (dir == 1 || dir == -1) && (sp.state == scanNew || dir == sp.dir)
	sp.last, sp.dir = pos.ord, dir
	if !scanning {
		// Perhaps a scan's start, somewhere inside this leaf.
		sp.state, sp.cands, sp.runSize = scanNew, nil, 0
		return
	}
	leaf := tr.leaves[pos.ord]
	pg, err := btree.Parse(p, leaf, t.usable)
	if err != nil {
		sp.state, sp.cands = scanOff, nil
		return
	}
	switch sp.state {
	case scanNew:
		if sp.ref != nil {
			// The connection's last scans of this tree looked rows up.
			sp.state = scanFetching
			break
		}
		// A scan reads this leaf whole: watch whether SQLite reads the
		// table leaves its entries may name.
		sp.state = scanWatching
		t.watch(sp, t.candidates(pg))
		if sp.cands == nil {
			sp.state = scanOff
		}
		t.leafAhead(tr, pos, sp)
		return
	case scanWatching:
		sp.state, sp.ref, sp.acc = scanOff, judge(sp.cands), candidate{}
		if sp.ref != nil {
			sp.state = scanFetching
		}
	case scanFetching:
		// SQLite should have read some of the table leaves the leaves
		// before named, and more than a few of those not read lately nor
		// taken from what is held (those are likely in its cache): added
		// up over leaves until they are not too few to say.
		if len(sp.cands) == 1 {
			c := sp.cands[0]
			sp.acc.n, sp.acc.seen, sp.acc.uncached = sp.acc.n+c.n, sp.acc.seen+c.seen, sp.acc.uncached+c.uncached
		}
		if sp.acc.n >= minJudged {
			if stale(&sp.acc) {
				sp.state, sp.ref = scanOff, nil
			}
			sp.acc = candidate{}
		}
	}
	sp.cands = nil
	if sp.state != scanFetching {
		if sp.state == scanOff {
			t.leafAhead(tr, pos, sp)
		}
		return
	}
	// Count SQLite's reads of the table leaves this leaf names: a later
	// step judges.
	named, err := t.refLeaves(*sp.ref, pg)
	if err != nil {
		return
	}
	c := &candidate{ref: *sp.ref, want: make(map[int64]bool, len(named)), n: len(named)}
	t.mu.Lock()
	for _, n := range named {
		c.want[n] = true
		if !t.recent.has(n) && !t.held[n].read {
			c.uncached++
		}
	}
	have := t.byLeaf[leaf] != nil
	t.mu.Unlock()
	t.watch(sp, []*candidate{c})
	if !have {
		t.fetch(ctx, leaf, p, named, nil)
	}
	for i := int32(1); i <= stepsAhead; i++ {
		if next := pos.ord + i*dir; next >= 0 && int(next) < len(tr.leaves) {
			t.fetchAhead(*sp.ref, tr.leaves[next])
		}
	}
}

// watch counts SQLite's reads of the table leaves cands name for scan
// sp, for as many table leaf reads of its connection as a leaf's worth
// of lookups may take (nil: none to count).
func (t *treeAhead) watch(sp *scanProgress, cands []*candidate) {
	if len(cands) == 0 {
		sp.cands = nil
		return
	}
	most := 0
	for _, c := range cands {
		most = max(most, c.n)
	}
	sp.cands, sp.reads = cands, 4*most+64
}

// judge returns the ref of the watched candidate SQLite read the most
// leaves of, if it read at least two and half of them; nil if none.
func judge(cands []*candidate) *ref {
	var best *candidate
	for _, c := range cands {
		if c.seen >= 2 && 2*c.seen >= c.n && (best == nil || c.seen > best.seen) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	return &best.ref
}

// stale reports whether SQLite left unread most of what a fetching
// scan's leaves named (c, their counts added up): none of them, or under
// an eighth of those that were likely not in its cache (a guess: its
// cache holds more than what was read lately, most of a table not much
// larger than it).
func stale(c *candidate) bool {
	return c.n >= minJudged && c.seen == 0 || c.uncached >= minJudged && 8*c.seen < c.uncached
}

// fetchAhead fetches leaf leaf and the table leaves its entries name by r
// in the background, unless it is held or being fetched already.
func (t *treeAhead) fetchAhead(r ref, leaf int64) {
	t.mu.Lock()
	if len(t.ahead) >= maxAhead || t.byLeaf[leaf] != nil {
		t.mu.Unlock()
		return
	}
	b := &treeBatch{leaf: leaf, done: make(chan struct{}), leafDone: make(chan struct{})}
	t.ahead = append(t.ahead, b)
	t.byLeaf[leaf] = b
	t.mu.Unlock()
	go func() {
		defer t.endAhead(b)
		pages, err := readList(t.ctx, t.src, []int64{leaf}, t.pages.PageSize())
		if err != nil {
			return
		}
		page := pages[0]
		pg, err := btree.Parse(page, leaf, t.usable)
		if err != nil {
			return
		}
		named, err := t.refLeaves(r, pg)
		if err != nil {
			return
		}
		t.fetch(t.ctx, leaf, page, named, b)
	}()
}

// endAhead ends background fetch b: it leaves ahead (and byLeaf, unless
// it is held), and a read waiting for it goes on.
func (t *treeAhead) endAhead(b *treeBatch) {
	b.leafReady()
	t.mu.Lock()
	if i := slices.Index(t.ahead, b); i >= 0 {
		t.ahead = slices.Delete(t.ahead, i, i+1)
	}
	if b.follow != nil {
		b.follow.inflight--
	}
	if !b.kept && t.byLeaf[b.leaf] == b {
		delete(t.byLeaf, b.leaf)
	}
	t.mu.Unlock()
	close(b.done)
}

// fetch reads the table leaves named (those leaf leaf, its bytes p,
// names) that are neither held nor read lately, with one ReadPageList
// call, and holds them as batch b: a new one if nil, else a background
// fetch's, which holds the leaf too, from the start (SQLite may read it
// while its table leaves are on their way; a read of one of those waits
// for the batch).
func (t *treeAhead) fetch(ctx context.Context, leaf int64, p []byte, named []int64, b *treeBatch) {
	t.mu.Lock()
	var ns []int64
	for _, n := range named {
		if _, ok := t.held[n]; !ok && !t.recent.has(n) && (b == nil || n != leaf) {
			ns = append(ns, n)
		}
	}
	if b == nil {
		if len(ns) == 0 {
			t.mu.Unlock()
			return
		}
		b = &treeBatch{leaf: leaf}
		t.byLeaf[leaf] = b
	} else {
		b.pages = make(map[int64]bool, len(ns))
		for _, n := range ns {
			b.pages[n] = true
		}
		t.held[leaf] = heldLeaf{data: p, batch: b}
	}
	t.mu.Unlock()
	b.leafReady()
	var bufs [][]byte
	if len(ns) > 0 {
		var err error
		if bufs, err = readList(ctx, t.src, ns, t.pages.PageSize()); err != nil {
			t.mu.Lock()
			if h, ok := t.held[leaf]; ok && h.batch == b {
				delete(t.held, leaf) // never in batches: nothing else would drop it
			}
			if t.byLeaf[leaf] == b {
				delete(t.byLeaf, leaf)
			}
			t.mu.Unlock()
			return
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b.pages != nil {
		b.list = append(b.list, leaf)
	}
	t.keepLocked(b, ns, bufs)
}

// keepLocked holds pages ns (their bytes bufs) as batch b, and lets the
// oldest batches go beyond maxHeldBytes.
func (t *treeAhead) keepLocked(b *treeBatch, ns []int64, bufs [][]byte) {
	for i, n := range ns {
		t.held[n] = heldLeaf{data: bufs[i], batch: b}
	}
	b.list = append(b.list, ns...)
	b.kept = true
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
		if t.byLeaf[old.leaf] == old {
			delete(t.byLeaf, old.leaf)
		}
	}
}

// leafAhead fetches, for a scan that looks nothing up, the leaves of its
// B-tree next in key order when they are not the next pages of the file
// (a B-tree grown by inserts in no order: the sequential read-ahead finds
// few of them): a run of them with one ReadPageList in the background,
// 4 leaves, then twice the last run up to maxLeafRun, the next run once
// SQLite is half way through the last (SQLite's reads of held pages do
// not reach the sequential read-ahead: once started, runs go on to the
// scan's end). pos is the leaf SQLite reads.
func (t *treeAhead) leafAhead(tr *scanTree, pos leafPos, sp *scanProgress) {
	dir := sp.dir
	next := pos.ord + dir
	if next < 0 || int(next) >= len(tr.leaves) {
		return
	}
	if sp.runSize == 0 && tr.leaves[next] == tr.leaves[pos.ord]+int64(dir) {
		return // the next page of the file: the sequential read-ahead's
	}
	start, size := next, int32(4)
	if sp.runSize > 0 {
		left := (sp.runEnd - pos.ord) * dir // leaves of the last run still ahead
		if 2*left > sp.runSize {
			return // SQLite is not half way through it yet
		}
		if left >= 0 {
			start, size = sp.runEnd+dir, min(2*sp.runSize, maxLeafRun)
		}
	}
	var ns []int64
	end := start
	for o := start; o >= 0 && int(o) < len(tr.leaves) && (o-start)*dir < size; o += dir {
		ns, end = append(ns, tr.leaves[o]), o
	}
	if len(ns) == 0 {
		return
	}
	t.mu.Lock()
	if len(t.ahead) >= maxAhead {
		t.mu.Unlock()
		return
	}
	sp.runEnd, sp.runSize = end, size
	want := ns[:0]
	for _, n := range ns {
		if _, ok := t.held[n]; !ok && !t.aheadHasLocked(n) {
			want = append(want, n)
		}
	}
	if len(want) > 0 {
		t.listAheadLocked(want)
	}
	t.mu.Unlock()
}

// listAheadLocked fetches pages want with one ReadPageList in the
// background and holds them as one batch.
func (t *treeAhead) listAheadLocked(want []int64) {
	b := t.listBatch(want, nil)
	t.ahead = append(t.ahead, b)
	go t.runList(b)
}

// listBatch returns the batch of a fetch of pages want (follow: its
// counts, for a group's fetch).
func (t *treeAhead) listBatch(want []int64, follow *followStats) *treeBatch {
	b := &treeBatch{done: make(chan struct{}), pages: make(map[int64]bool, len(want)), follow: follow, want: want}
	if follow != nil {
		follow.inflight++
	}
	for _, n := range want {
		b.pages[n] = true
	}
	return b
}

// runList fetches list batch b (in t.ahead) with one ReadPageList and
// holds its pages.
func (t *treeAhead) runList(b *treeBatch) {
	defer t.endAhead(b)
	if bufs, err := readList(t.ctx, t.src, b.want, t.pages.PageSize()); err == nil {
		t.mu.Lock()
		t.keepLocked(b, b.want, bufs)
		t.mu.Unlock()
	}
}

// planLocked plans a fetch of pages want (follow: listBatch's): the
// first read of one of them fetches them all (take), on the reader's
// thread. A group's lookups come one right after the other, and a batch
// fetched in the background that a read must wait for costs that read two
// hand-offs between threads; a fetch on the reader's costs none. The
// oldest of more than maxPlans is dropped.
func (t *treeAhead) planLocked(want []int64, follow *followStats) {
	t.plans = append(t.plans, t.listBatch(want, follow))
	if len(t.plans) > maxPlans {
		if old := t.plans[0]; old.follow != nil {
			old.follow.inflight--
			old.follow.fetched -= len(old.want) // never fetched
		}
		t.plans = slices.Delete(t.plans, 0, 1)
	}
}

// planOfLocked returns the planned batch that holds page n, taken out of
// the plans; nil if none does.
func (t *treeAhead) planOfLocked(n int64) *treeBatch {
	for i, b := range t.plans {
		if b.pages[n] {
			t.plans = slices.Delete(t.plans, i, i+1)
			return b
		}
	}
	return nil
}

// aheadHasLocked reports whether a fetch in the background, or a planned
// one, will hold page n.
func (t *treeAhead) aheadHasLocked(n int64) bool {
	for _, b := range t.ahead {
		if b.leaf == n || b.pages[n] {
			return true
		}
	}
	for _, b := range t.plans {
		if b.pages[n] {
			return true
		}
	}
	return false
}

// entryValues returns, for each entry of leaf page pg in order, the
// integer values of its columns that keep(i, n) keeps (column i of n; a
// table row's rowid is column colRowid), keyed by column.
func entryValues(pg btree.Page, keep func(i, n int) bool) (map[int][]int64, error) {
	out := map[int][]int64{}
	add := func(i, n int, v int64) {
		if keep(i, n) {
			out[i] = append(out[i], v)
		}
	}
	table := pg.Kind() == btree.TableLeaf
	return out, pg.Entries(func(rowid int64, r btree.Record) error {
		if table {
			add(colRowid, 0, rowid)
		}
		r.Ints(add) // a record cut at the page gives what is on it
		return nil
	})
}

// candidates returns the refs a watch of leaf page pg checks: each column
// of its entries with integer values, into each rowid table, with the
// table leaves it names there (at least two).
func (t *treeAhead) candidates(pg btree.Page) []*candidate {
	// The columns that may be references: the first maxRefColumns, the
	// last (an index entry's rowid), a table row's rowid.
	vals, err := entryValues(pg, func(i, n int) bool { _, ok := refSlot(i, n); return ok })
	if err != nil {
		return nil
	}
	var out []*candidate
	for col, vs := range vals {
		for ti := range t.targets {
			ns, err := t.leavesOf(ti, vs)
			if err != nil || len(ns) < 2 {
				continue
			}
			c := &candidate{ref: ref{col: col, table: ti}, want: make(map[int64]bool, len(ns)), n: len(ns)}
			for _, n := range ns {
				c.want[n] = true
			}
			out = append(out, c)
		}
	}
	return out
}

// refLeaves returns the table leaves the entries of leaf page pg name by
// r, distinct, at most maxBatchBytes of them, in the order the entries
// name them.
func (t *treeAhead) refLeaves(r ref, pg btree.Page) ([]int64, error) {
	vals, err := entryValues(pg, func(i, _ int) bool { return i == r.col })
	if err != nil {
		return nil, err
	}
	return t.leavesOf(r.table, vals[r.col])
}

// leavesOf returns the leaves of targets[ti] that hold rowids, distinct,
// at most maxBatchBytes of them, in the order of rowids.
func (t *treeAhead) leavesOf(ti int, rowids []int64) ([]int64, error) {
	seen := make(map[int64]bool, len(rowids))
	var out []int64
	for _, r := range rowids {
		n, err := t.tableLeaf(&t.targets[ti], r)
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

// tableLeaf returns the leaf of table tb that holds rowid.
func (t *treeAhead) tableLeaf(tb *rowTable, rowid int64) (int64, error) {
	n := tb.root
	for range tb.depth {
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

// init finds the B-trees in the schema, their leaves, and the rowid
// tables. Any error leaves treeAhead without B-trees: it then does
// nothing.
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
	leafOf := map[int64]leafPos{}
	var trees []*scanTree
	var targets []rowTable
	for _, o := range objs {
		if o.Type != "table" && o.Type != "index" || o.Root < 1 {
			continue
		}
		depth, kind, err := btree.Depth(t.read, o.Root, t.usable)
		if err != nil || depth == 0 {
			continue // one leaf: nothing to scan across, nothing to look up ahead
		}
		leaves, err := btree.Leaves(t.read, o.Root, t.usable)
		if err != nil {
			continue
		}
		if kind == btree.TableLeaf {
			targets = append(targets, rowTable{root: o.Root, depth: depth, leaves: len(leaves)})
		}
		if len(leafOf)+len(leaves) > maxLeaves {
			continue // past what is mapped
		}
		for i, l := range leaves {
			leafOf[l] = leafPos{ix: int32(len(trees)), ord: int32(i)}
		}
		trees = append(trees, &scanTree{root: o.Root, leaves: leaves})
	}
	// The largest tables: references into small ones find their leaves
	// in SQLite's cache.
	slices.SortStableFunc(targets, func(a, b rowTable) int { return b.leaves - a.leaves })
	targets = targets[:min(len(targets), maxTargets)]
	targetOf := map[int32]int{}
	for ti, tb := range targets {
		for ix, tr := range trees {
			if tr.root == tb.root {
				targetOf[int32(ix)] = ti
			}
		}
	}
	t.leafOf, t.trees, t.targets, t.targetOf = leafOf, trees, targets, targetOf
}
