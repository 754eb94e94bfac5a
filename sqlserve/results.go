package sqlserve

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/maypok86/otter/v2"
	"golang.org/x/sync/singleflight"
)

// The result cache: whole answers of queries, by a key of everything an
// answer depends on (resultKey). A version never changes, so an answer
// kept under its root is never stale: a newly published version has
// another root, and its queries other keys; nothing is ever invalidated,
// only evicted when the cache is full (otter: adaptive W-TinyLFU, bounded
// by bytes). Identical queries that arrive while one runs wait for it
// and share its answer (singleflight).

// resultKey names an answer: a SHA-256 of the database, the version's
// root, the statement, its parameters, the format, and the limits.
type resultKey [sha256.Size]byte

// newResultKey computes the key of a query.
func newResultKey(db string, root addr.Addr, sql string, params *api.Params, f format, maxRows int, maxBytes int64) resultKey {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte("chunkd query v1"))
	field([]byte(db))
	field(root[:])
	field([]byte(sql))
	field([]byte{byte(f)})
	binary.BigEndian.PutUint64(n[:], uint64(maxRows))
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(maxBytes))
	h.Write(n[:])
	if params != nil {
		if params.Named != nil {
			field([]byte("named"))
			for _, k := range slices.Sorted(maps.Keys(params.Named)) {
				field([]byte(k))
				field(api.AppendValueJSON(nil, params.Named[k]))
			}
		} else {
			field([]byte("list"))
			for _, v := range params.List {
				field(api.AppendValueJSON(nil, v))
			}
		}
	}
	var k resultKey
	h.Sum(k[:0])
	return k
}

// etag is the key as an HTTP entity tag.
func (k resultKey) etag() string { return `"` + hex.EncodeToString(k[:16]) + `"` }

// result is a whole answer kept in the cache.
type result struct {
	body      []byte
	f         format
	rows      int
	truncated bool
}

// resultOverhead is what the cache charges a result beyond its body.
const resultOverhead = 256

// results is the result cache; nil when it is off.
type results struct {
	cache  *otter.Cache[resultKey, *result]
	flight singleflight.Group
	// maxEntry is the largest body kept: an answer larger would push out
	// too many others.
	maxEntry int
}

func newResults(bytes int64) (*results, error) {
	if bytes <= 0 {
		return nil, nil
	}
	c, err := otter.New(&otter.Options[resultKey, *result]{
		MaximumWeight: uint64(bytes),
		Weigher: func(_ resultKey, r *result) uint32 {
			return uint32(min(len(r.body)+resultOverhead, 1<<32-1))
		},
		// Upkeep on the caller's goroutine, not one started a write (see
		// internal/chunkmem for why).
		Executor: func(upkeep func()) { upkeep() },
	})
	if err != nil {
		return nil, fmt.Errorf("result cache of %d bytes: %w", bytes, err)
	}
	return &results{cache: c, maxEntry: int(min(bytes/8, 1<<30))}, nil
}

func (r *results) get(k resultKey) (*result, bool) { return r.cache.GetIfPresent(k) }

func (r *results) put(k resultKey, res *result) {
	if len(res.body) <= r.maxEntry {
		r.cache.Set(k, res)
	}
}

// weight and entries are what the cache holds.
func (r *results) weight() uint64 { return r.cache.WeightedSize() }
func (r *results) entries() int   { return r.cache.EstimatedSize() }
