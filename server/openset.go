package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/chunkd/chunkd/addr"
)

// ChunkSource is one database's chunks, read through the cache's own
// tiers (every chunk proven, as any the cache serves): what
// Config.OpenSet reads a version's open set from. Its methods are those
// of sqlchunks.ChunkReader, whose contract they keep.
type ChunkSource interface {
	Get(ctx context.Context, a addr.Addr) ([]byte, error)
	GetMany(ctx context.Context, as []addr.Addr, fn func(i int, data []byte) error) error
	Root(ctx context.Context) (addr.Addr, error)
	DB() string
}

// OpenSetFunc computes a version's open set (sqlchunks.OpenSet): its
// chunks, of which those from pagesFrom on are pages (page 1 and the
// interior pages), the others the root chunk and the page map.
type OpenSetFunc func(ctx context.Context, src ChunkSource, root addr.Addr) (set [][]byte, pagesFrom int, err error)

// cacheReader is the ChunkSource of one database.
type cacheReader struct {
	c  *Cache
	db string
}

func (r cacheReader) DB() string { return r.db }

func (r cacheReader) Get(ctx context.Context, a addr.Addr) ([]byte, error) {
	res, err := r.c.GetChunk(ctx, r.db, a)
	if err != nil {
		return nil, err
	}
	if !res.Found {
		return nil, errorf(KindBadRequest, nil, "database %q holds no chunk %s", r.db, a)
	}
	return res.Data, nil
}

func (r cacheReader) GetMany(ctx context.Context, as []addr.Addr, fn func(i int, data []byte) error) error {
	out := make([][]byte, len(as))
	err := r.c.GetChunks(ctx, r.db, as, func(i int, res Result) error {
		if !res.Found {
			return errorf(KindBadRequest, nil, "database %q holds no chunk %s", r.db, as[i])
		}
		out[i] = res.Data
		return nil
	}, nil)
	if err != nil {
		return err
	}
	for i, data := range out { // in ascending i, as the contract says
		if err := fn(i, data); err != nil {
			return err
		}
	}
	return nil
}

func (r cacheReader) Root(ctx context.Context) (addr.Addr, error) {
	info, err := r.c.Root(ctx, r.db, false)
	if err != nil {
		return addr.Addr{}, err
	}
	return addr.Parse(info.Root)
}

// OpenSet returns the open set of version root of database db, a chunkd
// SQLite database (Config.OpenSet, sqlchunks.OpenSet), without its pages
// unless pages (api.PatternOpenSet): the zero root means the current one
// (checked against the store's manifest first with fresh), which it
// returns.
func (c *Cache) OpenSet(ctx context.Context, db string, root addr.Addr, fresh, pages bool) (addr.Addr, [][]byte, error) {
	if c.cfg.OpenSet == nil {
		return addr.Addr{}, nil, errorf(KindNotServed, nil, "this service computes no SQLite open sets (Config.OpenSet)")
	}
	if root.IsEmpty() {
		info, err := c.Root(ctx, db, fresh)
		if err != nil {
			return addr.Addr{}, nil, err
		}
		if root, err = addr.Parse(info.Root); err != nil {
			return addr.Addr{}, nil, fmt.Errorf("database %q: root: %w", db, err)
		}
	}
	d, err := c.database(ctx, db)
	if err != nil {
		return addr.Addr{}, nil, err
	}
	set, ok := d.sets.get(root)
	if !ok {
		chunks, pagesFrom, err := c.cfg.OpenSet(ctx, cacheReader{c, db}, root)
		if err != nil {
			if kindOf(err) == KindInternal {
				err = errorf(KindBadRequest, err, "database %q, version %s: not a chunkd SQLite version", db, root)
			}
			return addr.Addr{}, nil, err
		}
		if pagesFrom < 0 || pagesFrom > len(chunks) {
			return addr.Addr{}, nil, fmt.Errorf("database %q, version %s: open set of %d chunks whose pages start at %d", db, root, len(chunks), pagesFrom)
		}
		set = openSet{chunks, pagesFrom}
		d.sets.put(root, set)
	}
	if !pages {
		return root, set.chunks[:set.pagesFrom], nil
	}
	return root, set.chunks, nil
}

// openSet is a version's open set: its chunks, pages from pagesFrom on.
type openSet struct {
	chunks    [][]byte
	pagesFrom int
}

// keptOpenSets is how many versions' open sets a database keeps.
const keptOpenSets = 4

// openSets keeps the open sets of a database's versions last asked for:
// a version's open set never changes (its chunks are those of its
// addresses), and computing it again for every fresh client costs a read
// and decode of the whole page map. At most keptOpenSets, the oldest put
// dropped first (about 1.7 MiB each for a 200 MiB database).
type openSets struct {
	mu    sync.Mutex
	roots []addr.Addr // oldest first
	sets  map[addr.Addr]openSet
}

func (s *openSets) get(root addr.Addr) (openSet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, ok := s.sets[root]
	return set, ok
}

func (s *openSets) put(root addr.Addr, set openSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sets[root]; ok {
		return
	}
	if s.sets == nil {
		s.sets = make(map[addr.Addr]openSet)
	}
	if len(s.roots) == keptOpenSets {
		delete(s.sets, s.roots[0])
		s.roots = s.roots[1:]
	}
	s.roots = append(s.roots, root)
	s.sets[root] = set
}
