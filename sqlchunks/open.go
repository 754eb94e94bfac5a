package sqlchunks

import (
	"context"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/sqlitevfs"
)

// OpenVersion opens version root of the chunkd SQLite database that c
// reads (the zero root: the head, see Head) read-only through the VFS,
// with options o (nil for the defaults). A reader that is a SetReader (a
// client of a cache service) opens it from the version's open set, one
// request; any other, with a request for the root chunk and one per level
// of the page map. The DB does not own c: close the DB first, then c.
func OpenVersion(ctx context.Context, c ChunkReader, root addr.Addr, o *sqlitevfs.Options) (*sqlitevfs.DB, error) {
	p, err := OpenVersionPages(ctx, c, root)
	if err != nil {
		return nil, err
	}
	root = p.v.Root
	db, err := sqlitevfs.OpenImage(c.DB()+"@"+root.String(), p.ForVFS(), o)
	if err != nil {
		p.Close()
		return nil, err
	}
	db.Cleanup(p.Close) // the page image, if there is one
	return db, nil
}

// OpenVersionPages returns the pages of version root (the zero root: the
// head) as OpenVersion opens them, for a caller that gives them to a VFS
// of its own (the loadable extension): by the version's page image or
// open set when c can read them, else by its root chunk and page map.
// Close the Pages when done.
func OpenVersionPages(ctx context.Context, c ChunkReader, root addr.Addr) (*Pages, error) {
	p, ok, err := openFromSet(ctx, c, root)
	if err != nil || ok {
		return p, err
	}
	if root.IsEmpty() {
		if root, err = Head(ctx, c); err != nil {
			return nil, err
		}
	}
	return OpenPages(ctx, c, root)
}
