package sqlserve

import (
	"context"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/sqlchunks"
)

// collected keeps, per database, the versions chunkd gc collected
// (sqlchunks.Collected: its record in the store), read again when the
// database's manifest has changed since (gc writes the record before it
// replaces the manifest, so a collection is in the record by the time the
// cache reads the new manifest).
type collected struct {
	mu   sync.Mutex
	byDB map[string]collectedSet
}

type collectedSet struct {
	manifest string // the manifest's version when the record was read
	roots    map[addr.Addr]sqlchunks.Version
}

// check returns an error of kind cache.KindVersionCollected when gc
// collected version root of database db. A collected version's root chunk
// may survive in a file kept for later versions: the record, not the
// chunk's absence, is what tells.
func (s *Server) checkCollected(ctx context.Context, db string, root addr.Addr) error {
	version, err := s.c.ManifestVersion(ctx, db)
	if err != nil {
		return err
	}
	s.collected.mu.Lock()
	set, ok := s.collected.byDB[db]
	s.collected.mu.Unlock()
	if !ok || set.manifest != version {
		roots, err := sqlchunks.Collected(ctx, s.c.Store(), db)
		switch {
		case err != nil:
			// The record cannot be read (the store is failing): what was
			// read of it before stands (none: nothing known collected),
			// and a version by name is served from what the cache holds,
			// as without the store it is. The next request reads again.
			s.log.Debug("gc's record of collected versions not read", "db", db, "err", err)
		default:
			set = collectedSet{manifest: version, roots: roots}
			s.collected.mu.Lock()
			if s.collected.byDB == nil {
				s.collected.byDB = map[string]collectedSet{}
			}
			s.collected.byDB[db] = set
			s.collected.mu.Unlock()
		}
	}
	if v, ok := set.roots[root]; ok {
		return cache.Errorf(cache.KindVersionCollected, nil, "version %s of database %q was collected (chunkd gc, %s)", root, db, v.Collected.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return nil
}
