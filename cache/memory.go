package cache

import (
	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/internal/chunkmem"
	"github.com/maypok86/otter/v2"
)

// memory is the memory tier: decoded chunks keyed by address, shared by
// every database, bounded by weight (internal/chunkmem). Only proven bytes
// enter it (see the package comment): an address names its bytes, so one
// database's read may serve another's, but the tier is consulted only
// after the asking database's own index says it holds the address.
type memory struct {
	max   int64
	cache *otter.Cache[addr.Addr, []byte]
}

func newMemory(max int64) (*memory, error) {
	c, err := chunkmem.New(max)
	if err != nil {
		return nil, err
	}
	return &memory{max: max, cache: c}, nil
}

func (m *memory) get(a addr.Addr) ([]byte, bool) { return m.cache.GetIfPresent(a) }

// put keeps a proven chunk, unless it alone outweighs the tier (which
// would only evict everything else, and linger until the cache's next
// maintenance).
func (m *memory) put(a addr.Addr, data []byte) {
	if int64(len(data))+chunkmem.Overhead <= m.max {
		m.cache.Set(a, data)
	}
}

// forget drops a.
func (m *memory) forget(a addr.Addr) { m.cache.Invalidate(a) }

// weight is the bytes the tier holds, overheads included.
func (m *memory) weight() uint64 { return m.cache.WeightedSize() }

func (m *memory) close() { m.cache.StopAllGoroutines() }
