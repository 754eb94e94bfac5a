package sqlchunks

import (
	"context"

	"github.com/chunkd/chunkd/addr"
)

// ChunkReader is what reading a version needs of a chunk source: the
// chunks of one database, by address. *client.Client is one (through its
// tiers: memory, cache service, store). A reader's methods are called from
// many goroutines at once.
type ChunkReader interface {
	// Get returns chunk a, whose bytes hash to a (the reader checks; a
	// chunk that does not is an error, never data). The bytes may be
	// shared with a cache: no one modifies them, and the caller may keep
	// them (read-ahead holds them as they are). A chunk the database
	// does not hold is an error of the reader's (client.ErrNotFound for a
	// client).
	Get(ctx context.Context, a addr.Addr) ([]byte, error)
	// GetMany reads the chunks at as, as one batch (that is its point: one
	// request for many chunks), and calls fn(i, data) for each position i
	// it got, in ascending i, with data as Get returns it. If some chunks
	// could not be read it returns an error after the calls; an error
	// from fn stops the calls and is returned as it is.
	GetMany(ctx context.Context, as []addr.Addr, fn func(i int, data []byte) error) error
	// Root returns the root address of the database's current version:
	// the manifest's root as the reader last loaded it.
	Root(ctx context.Context) (addr.Addr, error)
	// DB names the database, for messages.
	DB() string
}
