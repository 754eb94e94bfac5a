package sqlitevfs

import (
	"slices"

	"github.com/chunkd/chunkd/sqlitevfs/btree"
)

// Watching and fetching the trees related to a table.
const (
	// relatedReads is how many leaves a connection reads, after a
	// lookup, during which a read of another tree's leaf holding a key
	// it looked up counts for that tree.
	relatedReads = 24
	// relatedJudged is how many lookups of a table the trees related to
	// it are judged over.
	relatedJudged = 32
	// maxRelatedKeys is the most keys of one lookup watched and fetched
	// for (a group's rowids: a title's few movies, say).
	maxRelatedKeys = 16
	// connLookups is how many of a connection's last lookups (in
	// different tables) are watched at once.
	connLookups = 4
)

// Fetching a table's related trees (related) is the read-ahead of the
// lookups that come after a row's: an application reads a movie's row,
// then its genres, its rating, its people, each by the movie's id, in
// tables or indexes whose first column is that id; each is a request, one
// after the other, and none is a scan a watch could learn from, nor a
// group follow could fetch.
//
// When follow finds the rowids a lookup of a rowid table came from (the
// entries of a leaf read before that name them), they are the lookup's
// keys. For the next relatedReads leaves the connection reads, a leaf of
// another tree whose keys span one of them (a table's rowids, an index's
// or WITHOUT ROWID table's first column) counts for that tree: once per
// lookup. Over each relatedJudged lookups of the table, the trees counted
// in at least half are its related trees until the next judgement (none:
// the table's lookups are passed over for followPause lookups). A lookup
// of a table with related trees fetches, in the background and with
// follow's fetch, the leaf of each related tree where each key's entries
// begin: a walk down the tree's interior pages (which the source usually
// holds in memory: Preloader). A guess that misses costs a page fetched
// for nothing, never a wrong byte, and the judgement keeps misses below
// half.
type relatedStats struct {
	lookups int           // since the last judgement
	hits    map[int32]int // per tree, the lookups whose keys it was read at since
	trees   []int32       // judged related: fetched for each lookup
	pause   int           // lookups still passed over
}

// keyLookup is a connection's lookup of keys in the table whose tree is
// from, watched for reads of the same keys in other trees.
type keyLookup struct {
	from int32
	keys []int64
	left int     // leaf reads still watched
	hit  []int32 // trees read at a key, counted already
}

// relating reports whether a lookup in the table whose tree is from is
// watched for and fetched with its related trees.
func (t *treeAhead) relating(from int32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.related[from]
	if st == nil {
		st = &relatedStats{hits: map[int32]int{}}
		t.related[from] = st
	}
	if st.pause > 0 {
		st.pause--
		return false
	}
	return true
}

// lookedUp notes that connection cs looked up the rowids hits (of a group
// whose rowids are values) in the table whose tree is from, and returns
// the leaves of its related trees for them.
func (t *treeAhead) lookedUp(cs *connScans, from int32, hits, values []int64) []int64 {
	lk := cs.lookupOf(from)
	lk.keys, lk.left, lk.hit = lk.keys[:0], relatedReads, lk.hit[:0]
	for _, v := range slices.Concat(hits, values) {
		if !slices.Contains(lk.keys, v) && len(lk.keys) < maxRelatedKeys {
			lk.keys = append(lk.keys, v)
		}
	}
	t.mu.Lock()
	st := t.related[from]
	if st.lookups++; st.lookups >= relatedJudged {
		st.trees = st.trees[:0]
		for tree, h := range st.hits {
			if 2*h >= st.lookups {
				st.trees = append(st.trees, tree)
			}
		}
		slices.Sort(st.trees)
		if len(st.trees) == 0 {
			st.pause = followPause
		}
		st.lookups = 0
		clear(st.hits)
	}
	trees := slices.Clone(st.trees)
	t.mu.Unlock()
	var out []int64
	for _, ix := range trees {
		tr := t.trees[ix]
		for _, v := range lk.keys {
			if n, err := t.leafFor(tr.root, tr.depth, v); err == nil && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// lookupOf returns the lookup of cs to note a new lookup in the table
// whose tree is from in: the last one in it, else the oldest.
func (cs *connScans) lookupOf(from int32) *keyLookup {
	for i := range cs.lookups {
		if lk := &cs.lookups[i]; lk.keys != nil && lk.from == from {
			return lk
		}
	}
	lk := &cs.lookups[cs.li]
	cs.li = (cs.li + 1) % connLookups
	lk.from = from
	return lk
}

// watchLookups counts connection cs's read of leaf n (its bytes p) of
// tree tree for the lookups it watches whose keys the leaf spans.
func (t *treeAhead) watchLookups(cs *connScans, tree int32, n int64, p []byte) {
	var lo, hi int64
	spanned := false
	for i := range cs.lookups {
		lk := &cs.lookups[i]
		if lk.left <= 0 || lk.from == tree || slices.Contains(lk.hit, tree) {
			continue
		}
		lk.left--
		if !spanned {
			var err error
			if lo, hi, err = keySpan(p, n, t.usable); err != nil {
				return
			}
			spanned = true
		}
		for _, v := range lk.keys {
			if lo <= v && v <= hi {
				lk.hit = append(lk.hit, tree)
				t.mu.Lock()
				t.related[lk.from].hits[tree]++
				t.mu.Unlock()
				break
			}
		}
	}
}

// keySpan returns the keys leaf page n (its bytes p) spans: a table
// leaf's rowids, an index leaf's first columns (btree.Record.FirstOrder).
func keySpan(p []byte, n int64, usable int) (lo, hi int64, err error) {
	pg, err := btree.Parse(p, n, usable)
	if err != nil {
		return 0, 0, err
	}
	if pg.Kind() == btree.TableLeaf {
		return pg.RowidSpan()
	}
	return pg.FirstSpan()
}
