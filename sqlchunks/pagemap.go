package sqlchunks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/chunkd/chunkd/addr"
)

// pageMap gives the addresses of a version's pages (page n's chunk).
//
// Its leaves, the map chunks that list page addresses, are had one of
// three ways: all read through the reader at open (openPages, one GetMany
// a level); none until a page's address is first asked for, then all at
// once (a version opened by its page image, which seldom asks); or given,
// unchecked, in an open set (openGiven), each leaf checked against its
// address and decoded the first time one of its pages is asked for, so
// that a fresh reader's first point lookup hashes the one leaf it needs
// rather than the whole map (20 bytes a page: a MiB for 200 MiB of
// pages). A given leaf that does not hash to its address is read through
// the reader instead. The levels above the leaves are small and always
// checked as they are read. A lookup in leaves already decoded takes no
// lock; reading and decoding leaves is done under mu.
type pageMap struct {
	db   string    // the database's name and
	root addr.Addr // the version's, for errors
	r    *root

	// leaves[j] is leaf j decoded (pages j·fanout+1 on), nil until then;
	// the slice itself is set once, with leafAt, under mu.
	leaves atomic.Pointer[[]atomic.Pointer[[]addr.Addr]]

	mu     sync.Mutex
	leafAt []addr.Addr // the leaves' addresses; nil until the levels above are read
	given  [][]byte    // leaf j as an open set gave it, unchecked; nil once used
}

// loadMap reads the whole page map of version rootAddr (root r) through c:
// one GetMany a level, top first.
func loadMap(ctx context.Context, c ChunkReader, rootAddr addr.Addr, r *root) (*pageMap, error) {
	m := &pageMap{db: c.DB(), root: rootAddr, r: r}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.readUpper(ctx, c); err != nil {
		return nil, err
	}
	if err := m.readLeaves(ctx, c, 0, int64(len(m.leafAt))-1); err != nil {
		return nil, err
	}
	return m, nil
}

// all returns the addresses of every page, page n at n-1.
func (m *pageMap) all(ctx context.Context, c ChunkReader) ([]addr.Addr, error) {
	if m.r.pages == 0 {
		return nil, nil
	}
	return m.addrs(ctx, c, 1, m.r.pages)
}

// addr returns the address of page n (1-based, in range).
func (m *pageMap) addr(ctx context.Context, c ChunkReader, n int64) (addr.Addr, error) {
	as, err := m.addrs(ctx, c, n, 1)
	if err != nil {
		return addr.Addr{}, err
	}
	return as[0], nil
}

// addrs returns the addresses of pages first to first+n-1 (in range, n
// at least 1), reading and checking the leaves that hold them if need be.
// The slice may be the map's own: the caller must not change it.
func (m *pageMap) addrs(ctx context.Context, c ChunkReader, first, n int64) ([]addr.Addr, error) {
	fanout := int64(m.r.fanout)
	lo, hi := (first-1)/fanout, (first+n-2)/fanout
	off := (first - 1) - lo*fanout
	for j := lo; j <= hi; j++ {
		if _, ok := m.leaf(j); !ok {
			m.mu.Lock()
			err := m.readLeaves(ctx, c, lo, hi)
			m.mu.Unlock()
			if err != nil {
				return nil, err
			}
			break
		}
	}
	if l, _ := m.leaf(lo); lo == hi {
		return l[off : off+n : off+n], nil
	}
	out := make([]addr.Addr, 0, n)
	for j := lo; j <= hi; j++ {
		l, _ := m.leaf(j)
		if j == lo {
			l = l[off:]
		}
		out = append(out, l[:min(int64(len(l)), n-int64(len(out)))]...)
	}
	return out, nil
}

// leaf returns leaf j decoded, if it is.
func (m *pageMap) leaf(j int64) ([]addr.Addr, bool) {
	if all := m.leaves.Load(); all != nil {
		if l := (*all)[j].Load(); l != nil {
			return *l, true
		}
	}
	return nil, false
}

// readLeaves makes sure leaves lo to hi are decoded: from the open set's
// when it gave them and they check, else every leaf not yet decoded nor
// given, read through c in one GetMany. m.mu must be held.
func (m *pageMap) readLeaves(ctx context.Context, c ChunkReader, lo, hi int64) error {
	if m.leafAt == nil {
		if err := m.readUpper(ctx, c); err != nil {
			return err
		}
	}
	leaves := *m.leaves.Load()
	missing := false
	for j := lo; j <= hi; j++ {
		if leaves[j].Load() != nil {
			continue
		}
		if data := m.given[j]; data != nil {
			m.given[j] = nil
			if addr.Of(data) == m.leafAt[j] {
				if err := m.decodeLeaf(int(j), data); err != nil {
					return err
				}
				continue
			}
		}
		missing = true
	}
	if !missing {
		return nil
	}
	var want []int
	for j := range leaves {
		if leaves[j].Load() == nil && m.given[j] == nil {
			want = append(want, j)
		}
	}
	as := make([]addr.Addr, len(want))
	for i, j := range want {
		as[i] = m.leafAt[j]
	}
	err := c.GetMany(ctx, as, func(i int, data []byte) error { return m.decodeLeaf(want[i], data) })
	if err != nil {
		return fmt.Errorf("sqlchunks: version %s of database %q: read page map level 0: %w", m.root, c.DB(), err)
	}
	return nil
}

// decodeLeaf decodes leaf j of the map, a checked chunk. m.mu must be
// held.
func (m *pageMap) decodeLeaf(j int, data []byte) error {
	first := int64(j) * int64(m.r.fanout)
	n := int(min(int64(m.r.fanout), m.r.pages-first))
	as, err := decodeMap(make([]addr.Addr, 0, n), data, 0, first, n)
	if err != nil {
		return fmt.Errorf("sqlchunks: version %s of database %q: map chunk %s (level 0, number %d): %w", m.root, m.db, m.leafAt[j], j, err)
	}
	(*m.leaves.Load())[j].Store(&as)
	return nil
}

// readUpper reads the levels of the map above the leaves through c, one
// GetMany a level, top first, and learns the leaves' addresses. m.mu must
// be held.
func (m *pageMap) readUpper(ctx context.Context, c ChunkReader) error {
	r := m.r
	counts := levelCounts(r.pages, r.fanout, r.depth)
	cur := []addr.Addr{r.mapRoot}
	for k := 0; k < r.depth-1; k++ {
		level := r.depth - 1 - k
		chunks := make([][]byte, len(cur))
		err := c.GetMany(ctx, cur, func(i int, data []byte) error {
			chunks[i] = data
			return nil
		})
		if err != nil {
			return fmt.Errorf("sqlchunks: version %s of database %q: read page map level %d: %w", m.root, c.DB(), level, err)
		}
		next := make([]addr.Addr, 0, counts[k+1])
		for j, data := range chunks {
			first := int64(j) * int64(r.fanout)
			n := int(min(int64(r.fanout), counts[k+1]-first))
			next, err = decodeMap(next, data, level, first, n)
			if err != nil {
				return fmt.Errorf("sqlchunks: version %s of database %q: map chunk %s (level %d, number %d): %w", m.root, c.DB(), cur[j], level, j, err)
			}
		}
		cur = next
	}
	if want := counts[r.depth-1]; int64(len(cur)) != want {
		return fmt.Errorf("sqlchunks: version %s of database %q: %w: %d leaf addresses for %d leaves", m.root, c.DB(), ErrBadMap, len(cur), want)
	}
	m.leafAt = cur
	leaves := make([]atomic.Pointer[[]addr.Addr], len(cur))
	m.leaves.Store(&leaves)
	if m.given == nil {
		m.given = make([][]byte, len(cur))
	}
	return nil
}
