// Package chunkmem is the cache behind a memory tier, the service's and a
// client's alike: decoded chunks by address, bounded by their weight
// (otter: adaptive W-TinyLFU).
package chunkmem

import (
	"fmt"

	"github.com/chunkd/chunkd/addr"
	"github.com/maypok86/otter/v2"
)

// Overhead is what the cache charges per chunk beyond its bytes: the key,
// the slice header and the cache's own node.
const Overhead = 64

// New returns a cache of chunks weighing at most maxBytes, Overhead
// included.
//
// Its upkeep (the policy's record of reads and writes, and eviction) runs
// on the goroutine that reads or writes, when due. Otter's default starts
// a goroutine for it instead, about once a write: on a request path that
// is a wake-up of another thread per chunk read from the next tier
// (measured: 2.7–3.4 context switches per client Get of a chunk not in
// memory against 1.0–1.3 with the upkeep inline, and 20–30 µs more a
// read, on a 2-core VM). The caller that finds the upkeep due pays for it:
// a few µs in steady state, up to about a hundred after a burst of writes
// from many goroutines. Upkeep a pass leaves over (writes made while it
// ran) waits for the next call: until then an idle cache may hold a few
// chunks over its bound. With the upkeep inline, only GetIfPresent, Set,
// Invalidate and the size methods may be used: no Compute, loader or
// OnDeletion, which would run under the cache's locks.
func New(maxBytes int64) (*otter.Cache[addr.Addr, []byte], error) {
	c, err := otter.New(&otter.Options[addr.Addr, []byte]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(_ addr.Addr, v []byte) uint32 { return uint32(min(len(v)+Overhead, 1<<32-1)) },
		Executor:      func(upkeep func()) { upkeep() },
	})
	if err != nil {
		return nil, fmt.Errorf("memory cache of %d bytes: %w", maxBytes, err)
	}
	return c, nil
}
