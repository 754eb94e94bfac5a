package sqlchunks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkd/chunkd/addr"
)

// Version describes one imported version of a chunkd SQLite database, as
// its root chunk records it.
type Version struct {
	// Root is the address of the version's root chunk.
	Root addr.Addr
	// Parent is the root of the version it was imported on top of; zero
	// for the first version.
	Parent addr.Addr
	// Time is when it was imported (whole seconds).
	Time time.Time
	// Message is the import's message.
	Message string
	// PageSize is the database's page size in bytes.
	PageSize int
	// Pages is the number of pages of the database file.
	Pages int64
	// NewBytes is how many bytes of pages and page-map chunks the version
	// added to the database when it was made; -1 if its root does not
	// say (imported by an older chunkd).
	NewBytes int64
	// Collected is when chunkd gc collected the version (its pages may
	// no longer read); zero for a version gc retains.
	Collected time.Time
}

// Size is the size of the version's database file.
func (v Version) Size() int64 { return v.Pages * int64(v.PageSize) }

func versionOf(a addr.Addr, r *root) Version {
	return Version{
		Root:     a,
		Parent:   r.parent,
		Time:     time.Unix(r.time, 0),
		Message:  r.message,
		PageSize: r.pageSize,
		Pages:    r.pages,
		NewBytes: r.newBytes,
	}
}

// Head returns the root of the database version c reads: the manifest's
// root as c loaded it (for a client, at client.Open or its last Refresh).
// It does not check that the database is a chunkd SQLite database;
// ReadVersion of the root does.
func Head(ctx context.Context, c ChunkReader) (addr.Addr, error) {
	a, err := c.Root(ctx)
	if err != nil {
		return addr.Addr{}, fmt.Errorf("sqlchunks: head of database %q: %w", c.DB(), err)
	}
	if a.IsEmpty() {
		return addr.Addr{}, fmt.Errorf("sqlchunks: database %q has an empty root (no version imported?)", c.DB())
	}
	return a, nil
}

// ReadVersion reads the root chunk at root. A chunk that is not a root
// chunk (a page, a page-map chunk, a Dolt chunk) is an error wrapping
// ErrNotRoot; a missing one, c's error for a missing chunk (for a client,
// one wrapping client.ErrNotFound).
func ReadVersion(ctx context.Context, c ChunkReader, root addr.Addr) (Version, error) {
	r, err := readRoot(ctx, c, root)
	if err != nil {
		return Version{}, err
	}
	return versionOf(root, r), nil
}

func readRoot(ctx context.Context, c ChunkReader, a addr.Addr) (*root, error) {
	if a.IsEmpty() {
		return nil, fmt.Errorf("sqlchunks: read version: %w (the zero address)", ErrNotRoot)
	}
	data, err := c.Get(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("sqlchunks: read version %s of database %q: %w", a, c.DB(), err)
	}
	r, err := decodeRoot(data)
	if err != nil {
		if errors.Is(err, ErrNotRoot) {
			return nil, fmt.Errorf("sqlchunks: chunk %s of database %q: %w", a, c.DB(), err)
		}
		return nil, fmt.Errorf("sqlchunks: version %s of database %q: %w", a, c.DB(), err)
	}
	return r, nil
}

// Log returns the history of the database from version from backwards:
// from itself, its parent, and so on, newest first, at most limit versions
// (limit <= 0: all of them). A zero from means the head (see Head). Every
// version costs one chunk read.
func Log(ctx context.Context, c ChunkReader, from addr.Addr, limit int) ([]Version, error) {
	return History(ctx, c, nil, from, limit)
}
