package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
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

// OpenSetFunc computes a version's open set (sqlchunks.OpenSet).
type OpenSetFunc func(ctx context.Context, src ChunkSource, root addr.Addr) (VersionSet, error)

// VersionSet is what OpenSetFunc computes of a version.
type VersionSet struct {
	// Chunks is the open set in order: the root chunk first, then the
	// page map, then, from PagesFrom on, pages (page 1 and the interior
	// pages).
	Chunks    [][]byte
	PagesFrom int
	// PageSize and Pages are the version's page size and its pages'
	// addresses in order (page n is Pages[n-1]): what its page image
	// holds (VersionImage).
	PageSize int
	Pages    []addr.Addr
	// image is the name of the image of Pages (api.ImageName), named
	// once when the set is kept.
	image string
	// frames is the set as its answer sends it (api frames, one a chunk,
	// Chunks pointing into it), encoded once when the set is kept;
	// pagesAt is where frame PagesFrom starts (the answer without pages
	// ends there).
	frames  []byte
	pagesAt int
}

// encode writes the set's chunks as the frames of its answer, and points
// Chunks into them. Every frame's tier is TierMemory: the answer comes
// from the set kept in memory.
func (s *VersionSet) encode() error {
	n := 0
	for _, c := range s.Chunks {
		n += api.FrameHeaderSize + len(c)
	}
	var b bytes.Buffer
	b.Grow(n)
	fw := api.NewFrameWriter(&b)
	at := make([]int, len(s.Chunks)) // where chunk i starts
	for i, c := range s.Chunks {
		if i == s.PagesFrom {
			s.pagesAt = b.Len()
		}
		at[i] = b.Len() + api.FrameHeaderSize
		if err := fw.WriteFrame(uint32(i), true, api.TierMemory, c); err != nil {
			return err
		}
	}
	if s.PagesFrom == len(s.Chunks) {
		s.pagesAt = b.Len()
	}
	s.frames = b.Bytes()
	for i, c := range s.Chunks {
		s.Chunks[i] = s.frames[at[i] : at[i]+len(c) : at[i]+len(c)]
	}
	return nil
}

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
// SQLite database (Config.OpenSet, sqlchunks.OpenSet), as its HTTP answer
// sends it (api.PatternOpenSet: the chunks as frames, which
// api.FrameReader reads; encoded once a version), without its pages
// unless pages: the zero root means the current one (checked against the
// store's manifest first with fresh), which it returns with how fresh it
// is (nil for a root asked for by name).
func (c *Cache) OpenSet(ctx context.Context, db string, root addr.Addr, fresh, pages bool) (addr.Addr, []byte, *api.RootInfo, error) {
	root, set, current, err := c.versionSet(ctx, db, root, fresh)
	if err != nil {
		return addr.Addr{}, nil, nil, err
	}
	if !pages {
		return root, set.frames[:set.pagesAt], current, nil
	}
	return root, set.frames, current, nil
}

// VersionImage registers the page image of version root of database db
// (the zero root: the current one, checked first with fresh), from the
// page map the service read and proved itself, and returns it with the
// version's root chunk (api.PatternVersionImage).
func (c *Cache) VersionImage(ctx context.Context, db string, root addr.Addr, fresh bool) (api.VersionImage, error) {
	root, set, current, err := c.versionSet(ctx, db, root, fresh)
	if err != nil {
		return api.VersionImage{}, err
	}
	if err := api.CheckImageShape(set.PageSize, len(set.Pages)); err != nil {
		return api.VersionImage{}, errorf(KindBadRequest, err, "database %q, version %s: no page image of %d pages of %d bytes", db, root, len(set.Pages), set.PageSize)
	}
	info, err := c.registerImage(ctx, db, set.image, set.PageSize, set.Pages)
	if err != nil {
		return api.VersionImage{}, err
	}
	return api.VersionImage{Root: root.String(), RootChunk: set.Chunks[0], Image: info, Current: current}, nil
}

// versionSet returns version root's VersionSet (the zero root: the
// current one, which it returns with how fresh it is), computed once and
// kept. A fresh request for the current root fails if the store's
// manifest could not be read for it.
func (c *Cache) versionSet(ctx context.Context, db string, root addr.Addr, fresh bool) (addr.Addr, VersionSet, *api.RootInfo, error) {
	if c.cfg.OpenSet == nil {
		return addr.Addr{}, VersionSet{}, nil, errorf(KindNotServed, nil, "this service computes no SQLite open sets (Config.OpenSet)")
	}
	d, err := c.database(ctx, db)
	if err != nil {
		return addr.Addr{}, VersionSet{}, nil, err
	}
	var current *api.RootInfo
	if root.IsEmpty() {
		info, why, err := d.rootInfo(ctx, fresh)
		if err != nil {
			return addr.Addr{}, VersionSet{}, nil, err
		}
		if fresh && info.Stale {
			// The store's kind: unreachable (503) or denying access (502).
			return addr.Addr{}, VersionSet{}, nil, errorf(kindOf(why), why, "database %q: a fresh root was asked for, but the store's manifest could not be read (the last root known, %s, was read %d ms ago)", db, info.Root, info.AgeMS)
		}
		if root, err = addr.Parse(info.Root); err != nil {
			return addr.Addr{}, VersionSet{}, nil, fmt.Errorf("database %q: root: %w", db, err)
		}
		current = &info
	}
	if set, ok := d.sets.get(root); ok {
		return root, set, current, nil
	}
	set, err := c.cfg.OpenSet(ctx, cacheReader{c, db}, root)
	if err != nil {
		if kindOf(err) == KindInternal {
			err = errorf(KindBadRequest, err, "database %q, version %s: not a chunkd SQLite version", db, root)
		}
		return addr.Addr{}, VersionSet{}, nil, err
	}
	if set.PagesFrom < 1 || set.PagesFrom > len(set.Chunks) || addr.Of(set.Chunks[0]) != root {
		return addr.Addr{}, VersionSet{}, nil, fmt.Errorf("database %q, version %s: an open set of %d chunks whose pages start at %d, not starting with the root chunk", db, root, len(set.Chunks), set.PagesFrom)
	}
	set.image = api.ImageName(set.PageSize, set.Pages)
	set.Chunks = slices.Clone(set.Chunks) // encode points them into its frames
	if err := set.encode(); err != nil {
		return addr.Addr{}, VersionSet{}, nil, fmt.Errorf("database %q, version %s: open set: %w", db, root, err)
	}
	d.sets.put(root, set)
	return root, set, current, nil
}

// keptOpenSets is how many versions' open sets a database keeps.
const keptOpenSets = 4

// openSets keeps the open sets of a database's versions last asked for:
// a version's open set never changes (its chunks are those of its
// addresses), and computing it again for every fresh client costs a read
// and decode of the whole page map. At most keptOpenSets, the oldest put
// dropped first (about 2.7 MiB each for a 200 MiB database: 1.7 MiB of
// chunks, kept as the frames of their answer, and 1 MiB of page
// addresses).
type openSets struct {
	mu    sync.Mutex
	roots []addr.Addr // oldest first
	sets  map[addr.Addr]VersionSet
}

func (s *openSets) get(root addr.Addr) (VersionSet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, ok := s.sets[root]
	return set, ok
}

func (s *openSets) put(root addr.Addr, set VersionSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sets[root]; ok {
		return
	}
	if s.sets == nil {
		s.sets = make(map[addr.Addr]VersionSet)
	}
	if len(s.roots) == keptOpenSets {
		delete(s.sets, s.roots[0])
		s.roots = s.roots[1:]
	}
	s.roots = append(s.roots, root)
	s.sets[root] = set
}
