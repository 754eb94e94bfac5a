package sqlitevfs

import (
	"bytes"
	"errors"
	"math"

	"github.com/chunkd/chunkd/sqlitevfs/btree"
)

// Following a group of lookups.
const (
	// followLeaves is how many of the leaves a connection read last
	// follow looks in for the entry a lookup came from.
	followLeaves = 4
	// maxFollowMatches is the most entries of one leaf whose references
	// may have led to a lookup: more, and the leaf says nothing of which.
	maxFollowMatches = 4
	// maxFollow is the most table leaves one follow fetches.
	maxFollow = 64
	// maxFollowCells is the most entries of a leaf follow decodes (a
	// 4 KiB index leaf of small integers holds about 450): it bounds what
	// a connection keeps of its last leaves.
	maxFollowCells = 4096
)

// Judging a way of following (a followPair), over its last lookups: after
// pairProbes looks into its leaves of which under one in 8 found a group
// naming leaves to fetch, or after it fetched followJudged pages of which
// SQLite read under a quarter, it passes over its next followPause
// lookups.
const (
	pairProbes   = 16
	followJudged = 64
	followPause  = 256
)

// noValue marks an entry whose column holds no integer.
const noValue = math.MinInt64

// Following a lookup's group (follow) is the read-ahead of joins that
// look up a few rows at a time: SQLite finds the entries of a key (a
// movie's five principal people, say, by the movie's id) in a leaf, and
// for each looks a row up by the reference the entry holds (the person's
// row, by its id): a request per row, one after the other, each waiting
// for the last, and too few rows a scan for a watch (treeAhead.step) to
// learn from.
//
// When a connection reads a table leaf T of a rowid table (a lookup's
// leaf, not taken from what is fetched ahead), follow looks in the
// leaves the connection read last for the entries that may have led to
// it: those with an integer column (one a watch would consider) within
// T's rowids. If the newest such leaf has one to maxFollowMatches of them,
// all in one column, each belongs to a group: the entries next to it
// with the same first column (the key SQLite was looking up: an
// index's value, a WITHOUT ROWID table's first key column, a table's
// first column). The table leaves the group's other entries name are then
// fetched with one ReadPageList, planned (treeAhead.planLocked): the
// group's next lookup fetches them all; a group of k lookups costs two
// requests, not k. A group is never a whole leaf (a table whose
// first column is its rowid holds NULL there: no group), so a fetch stays
// near what SQLite reads; and a way of following (the leaf's B-tree, the
// column, the table) whose fetched pages SQLite mostly leaves unread is
// passed over for a while (followStats).
type followPair struct {
	tree  int32 // the B-tree of the leaves whose entries are followed
	table int   // the targets index of the table they name
}

// followStats judges a way of following: since the last judgement, the
// looks into its leaves, those that found a group naming leaves to fetch
// (a leaf whose groups name only the lookup's leaf, as an index on the
// column its table is clustered by does, or only leaves held already, is
// decoded for nothing), the pages it fetched and those SQLite read; and
// the lookups it still passes over.
type followStats struct {
	probes, fruitful int
	fetched, taken   int
	inflight         int // its fetches not ended: the pages fetched are judged once none is
	pause            int
}

// seenLeaf is a leaf a connection read, and what follow decoded of it.
type seenLeaf struct {
	n    int64
	tree int32
	buf  []byte // its bytes: the connection's own buffer

	decoded bool
	recs    []btree.Record // its entries, in order (none: it did not parse)
	// vals holds, for each slot (a column a watch would consider: see
	// slotLast) and entry e, the entry's integer there at
	// vals[slot*len(recs)+e], noValue if none; used says which slots
	// hold any.
	vals []int64
	used [slots]bool
}

// An entry's slots: its first maxRefColumns columns, its last (if past
// those), its rowid (a table row's).
const (
	slotLast  = maxRefColumns
	slotRowid = maxRefColumns + 1
	slots     = maxRefColumns + 2
)

// refSlot returns the slot of column i of an entry of n columns, if it
// is one that may hold a reference (a watch's candidates and follow's
// look at the same ones): the first maxRefColumns and the last (an index
// entry's rowid).
func refSlot(i, n int) (int, bool) {
	switch {
	case i < maxRefColumns:
		return i, true
	case i == n-1:
		return slotLast, true
	}
	return 0, false
}

// remember keeps leaf n of tree tree (its bytes p) as the connection's
// newest.
func (cs *connScans) remember(n int64, tree int32, p []byte) {
	s := &cs.seen[cs.si]
	cs.si = (cs.si + 1) % followLeaves
	if cap(s.buf) < len(p) {
		s.buf = make([]byte, len(p))
	}
	s.n, s.tree, s.buf = n, tree, append(s.buf[:0], p...)
	s.decoded = false
}

// decode reads the integers of the entries of s, once.
func (s *seenLeaf) decode(usable int) {
	if s.decoded {
		return
	}
	s.decoded, s.recs, s.used = true, s.recs[:0], [slots]bool{}
	pg, err := btree.Parse(s.buf, s.n, usable)
	if err != nil {
		return
	}
	cells := pg.Cells()
	if cells > maxFollowCells {
		return
	}
	if cap(s.vals) < slots*cells {
		s.vals = make([]int64, slots*cells)
	}
	s.vals = s.vals[:slots*cells]
	e := 0
	put := func(slot int, v int64) {
		if !s.used[slot] {
			s.used[slot] = true
			for i := range s.vals[slot*cells : (slot+1)*cells] {
				s.vals[slot*cells+i] = noValue
			}
		}
		s.vals[slot*cells+e] = v
	}
	add := func(i, n int, v int64) {
		if slot, ok := refSlot(i, n); ok {
			put(slot, v)
		}
	}
	table := pg.Kind() == btree.TableLeaf
	err = pg.Entries(func(rowid int64, r btree.Record) error {
		if e == cells {
			return errors.New("more entries than cells")
		}
		s.recs = append(s.recs, r)
		if table {
			put(slotRowid, rowid)
		}
		r.Ints(add) // a record cut at the page gives what is on it
		e++
		return nil
	})
	if err != nil || e != cells {
		s.recs = s.recs[:0]
	}
}

// group returns, for leaf s, the values of the column whose values in
// [lo, hi] may have led to the lookup of a leaf holding those rowids, in
// the groups of the entries that hold them. found is false if no entry
// holds such a value (the lookup came from elsewhere); values is empty if
// one does but there is no group to follow.
func (s *seenLeaf) group(usable int, lo, hi int64) (values []int64, found bool) {
	s.decode(usable)
	cells := len(s.recs)
	var hits [maxFollowMatches]int
	nhits, slot := 0, -1
	for sl := range slots {
		if !s.used[sl] || cells == 0 {
			continue
		}
		for e, v := range s.vals[sl*cells : (sl+1)*cells] {
			if v == noValue || v < lo || v > hi {
				continue
			}
			if slot >= 0 && slot != sl || nhits == maxFollowMatches {
				return nil, true // in two columns, or too many entries: no telling
			}
			slot = sl
			hits[nhits] = e
			nhits++
		}
	}
	if nhits == 0 {
		return nil, false
	}
	vs := s.vals[slot*cells : (slot+1)*cells]
	for _, e := range hits[:nhits] {
		from, to, ok := s.keyRun(e)
		if !ok || to-from < 2 || to-from == cells {
			continue // no key, alone, or the whole leaf: no group
		}
		for _, v := range vs[from:to] {
			if v != noValue {
				values = append(values, v)
			}
		}
	}
	return values, true
}

// keyRun returns the entries [from, to) next to entry e whose first column
// holds what e's does; ok is false if e's first column is NULL or does not
// decode.
func (s *seenLeaf) keyRun(e int) (from, to int, ok bool) {
	key, err := s.recs[e].Column(0)
	if err != nil || key == nil {
		return 0, 0, false
	}
	same := func(i int) bool {
		v, err := s.recs[i].Column(0)
		if err != nil {
			return false
		}
		if kb, isBytes := key.([]byte); isBytes {
			vb, ok := v.([]byte)
			return ok && bytes.Equal(kb, vb)
		}
		return v == key
	}
	from, to = e, e+1
	for from > 0 && same(from-1) {
		from--
	}
	for to < len(s.recs) && same(to) {
		to++
	}
	return from, to, true
}

// follow is connection cs's read of leaf n (its bytes p) of the rowid
// table targets[ti], whose tree is tree, from the source: it fetches the
// table leaves of the rest of the group the lookup came from, if it finds
// one.
func (t *treeAhead) follow(cs *connScans, tree int32, ti int, n int64, p []byte) {
	pg, err := btree.Parse(p, n, t.usable)
	if err != nil {
		return
	}
	lo, hi, err := pg.RowidSpan()
	if err != nil {
		return
	}
	for k := 1; k <= followLeaves; k++ { // newest first
		s := &cs.seen[(cs.si-k+followLeaves)%followLeaves]
		if s.buf == nil || s.tree == tree {
			continue
		}
		pair := followPair{tree: s.tree, table: ti}
		if !t.probe(pair) {
			continue
		}
		values, found := s.group(t.usable, lo, hi)
		leaves, err := t.leavesOf(ti, values)
		if err != nil {
			return
		}
		t.mu.Lock()
		st := t.follows[pair]
		want := t.toFetchLocked(leaves, n)
		if st.probes++; len(want) > 0 {
			st.fruitful++
		}
		if found && len(want) > 0 {
			st.fetched += len(want)
			t.planLocked(want, st)
		}
		t.mu.Unlock()
		if found {
			return
		}
	}
}

// probe reports whether follow looks into a leaf for pair's lookup: not
// while the pair passes over lookups; judged when it has looked or
// fetched enough.
func (t *treeAhead) probe(pair followPair) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.follows[pair]
	if st == nil {
		st = &followStats{}
		t.follows[pair] = st
	}
	if st.pause > 0 {
		st.pause--
		return false
	}
	if st.probes >= pairProbes {
		if 8*st.fruitful < st.probes {
			st.pause = followPause
		}
		st.probes, st.fruitful = 0, 0
	}
	if st.fetched >= followJudged && st.inflight == 0 {
		if 4*st.taken < st.fetched {
			st.pause = followPause
		}
		st.fetched, st.taken = 0, 0
	}
	return st.pause == 0
}

// toFetchLocked returns the leaves of a group that a fetch would get: but
// for leaf n (read already) and those held, on their way or read lately;
// at most maxFollow. A group that names none (a hot table's leaves, all
// held) is no reason to decode a leaf.
func (t *treeAhead) toFetchLocked(leaves []int64, n int64) []int64 {
	want := leaves[:0]
	for _, l := range leaves {
		if _, held := t.held[l]; l != n && !held && !t.aheadHasLocked(l) && !t.recent.has(l) && len(want) < maxFollow {
			want = append(want, l)
		}
	}
	return want
}
