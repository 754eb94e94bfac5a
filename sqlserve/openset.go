package sqlserve

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/sqlchunks"
)

// versionSet is what the server keeps of a version it computed the open
// set of (sqlchunks.OpenSet).
type versionSet struct {
	sqlchunks.Set
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
func (s *versionSet) encode() error {
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
	chunks := make([][]byte, len(s.Chunks)) // the caller's slice is left as it was
	for i, c := range s.Chunks {
		chunks[i] = s.frames[at[i] : at[i]+len(c) : at[i]+len(c)]
	}
	s.Chunks = chunks
	return nil
}

// cacheReader is one database's chunks read through the cache's own
// tiers (every chunk proven, as any the cache serves): the
// sqlchunks.ChunkReader that open sets are computed from.
type cacheReader struct {
	c  *cache.Cache
	db string
}

func (r cacheReader) DB() string { return r.db }

func (r cacheReader) Get(ctx context.Context, a addr.Addr) ([]byte, error) {
	res, err := r.c.GetChunk(ctx, r.db, a)
	if err != nil {
		return nil, err
	}
	if !res.Found {
		return nil, cache.Errorf(cache.KindBadRequest, nil, "database %q holds no chunk %s", r.db, a)
	}
	return res.Data, nil
}

func (r cacheReader) GetMany(ctx context.Context, as []addr.Addr, fn func(i int, data []byte) error) error {
	out := make([][]byte, len(as))
	err := r.c.GetChunks(ctx, r.db, as, func(i int, res cache.Result) error {
		if !res.Found {
			return cache.Errorf(cache.KindBadRequest, nil, "database %q holds no chunk %s", r.db, as[i])
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
// SQLite database (sqlchunks.OpenSet), as its HTTP answer sends it
// (api.PatternOpenSet: the chunks as frames, which api.FrameReader reads;
// encoded once a version), without its pages unless pages: the zero root
// means the current one (checked against the store's manifest first with
// fresh), which it returns with how fresh it is (nil for a root asked
// for by name).
func (s *Server) OpenSet(ctx context.Context, db string, root addr.Addr, fresh, pages bool) (addr.Addr, []byte, *api.RootInfo, error) {
	root, set, current, err := s.versionSet(ctx, db, root, fresh)
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
// page map the server read and proved itself, and returns it with the
// version's root chunk (api.PatternVersionImage).
func (s *Server) VersionImage(ctx context.Context, db string, root addr.Addr, fresh bool) (api.VersionImage, error) {
	root, set, current, err := s.versionSet(ctx, db, root, fresh)
	if err != nil {
		return api.VersionImage{}, err
	}
	if err := api.CheckImageShape(set.PageSize, len(set.Pages)); err != nil {
		return api.VersionImage{}, cache.Errorf(cache.KindBadRequest, err, "database %q, version %s: no page image of %d pages of %d bytes", db, root, len(set.Pages), set.PageSize)
	}
	info, err := s.registerImage(ctx, db, set.image, set.PageSize, set.Pages)
	if err != nil {
		return api.VersionImage{}, err
	}
	return api.VersionImage{Root: root.String(), RootChunk: set.Chunks[0], Image: info, Current: current}, nil
}

// versionSet returns version root's set (the zero root: the current one,
// which it returns with how fresh it is), computed once and kept. A
// fresh request for the current root fails if the store's manifest could
// not be read for it.
func (s *Server) versionSet(ctx context.Context, db string, root addr.Addr, fresh bool) (addr.Addr, *versionSet, *api.RootInfo, error) {
	if err := s.c.LoadDB(ctx, db); err != nil {
		return addr.Addr{}, nil, nil, err
	}
	var current *api.RootInfo
	if root.IsEmpty() {
		var (
			info api.RootInfo
			err  error
		)
		if fresh {
			info, err = s.c.FreshRoot(ctx, db)
		} else {
			info, err = s.c.Root(ctx, db, false)
		}
		if err != nil {
			return addr.Addr{}, nil, nil, err
		}
		if root, err = addr.Parse(info.Root); err != nil {
			return addr.Addr{}, nil, nil, fmt.Errorf("database %q: root: %w", db, err)
		}
		current = &info
	} else {
		if err := s.checkCollected(ctx, db, root); err != nil {
			return addr.Addr{}, nil, nil, err
		}
		if err := s.c.CheckVersion(ctx, db, root); err != nil {
			return addr.Addr{}, nil, nil, err // a root published a moment ago is known by now; one no version has is an error of its own
		}
	}
	key := setKey{db, root}
	if set := s.sets.get(key); set != nil {
		return root, set, current, nil
	}
	computed, err := sqlchunks.OpenSet(ctx, cacheReader{s.c, db}, root)
	if err != nil {
		if cache.KindOf(err) == cache.KindInternal {
			err = cache.Errorf(cache.KindBadRequest, err, "database %q, version %s: not a chunkd SQLite version", db, root)
		}
		return addr.Addr{}, nil, nil, err
	}
	if computed.PagesFrom < 1 || computed.PagesFrom > len(computed.Chunks) || addr.Of(computed.Chunks[0]) != root {
		return addr.Addr{}, nil, nil, fmt.Errorf("database %q, version %s: an open set of %d chunks whose pages start at %d, not starting with the root chunk", db, root, len(computed.Chunks), computed.PagesFrom)
	}
	set := &versionSet{Set: computed, image: api.ImageName(computed.PageSize, computed.Pages)}
	if err := set.encode(); err != nil {
		return addr.Addr{}, nil, nil, fmt.Errorf("database %q, version %s: open set: %w", db, root, err)
	}
	s.sets.put(key, set)
	return root, set, current, nil
}

// setKey names a version of a database.
type setKey struct {
	db   string
	root addr.Addr
}

// keptOpenSets is how many versions' open sets the server keeps per
// database.
const keptOpenSets = 4

// openSets keeps the open sets of the versions last asked for, at most
// keptOpenSets of each database, the oldest put dropped first: a
// version's open set never changes (its chunks are those of its
// addresses), and computing it again for every fresh client costs a read
// and decode of the whole page map (about 2.7 MiB kept for a 200 MiB
// database: 1.7 MiB of chunks, kept as the frames of their answer, and
// 1 MiB of page addresses).
type openSets struct {
	mu   sync.Mutex
	byDB map[string][]setKey // each database's keys, oldest first
	sets map[setKey]*versionSet
}

func (o *openSets) get(k setKey) *versionSet {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sets[k]
}

func (o *openSets) put(k setKey, set *versionSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.sets[k]; ok {
		return
	}
	if o.sets == nil {
		o.sets, o.byDB = map[setKey]*versionSet{}, map[string][]setKey{}
	}
	keys := o.byDB[k.db]
	if len(keys) == keptOpenSets {
		delete(o.sets, keys[0])
		keys = keys[1:]
	}
	o.byDB[k.db] = append(keys, k)
	o.sets[k] = set
}
