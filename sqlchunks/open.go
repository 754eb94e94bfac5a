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
	p, ok, err := openFromSet(ctx, c, root)
	if err != nil {
		return nil, err
	}
	if !ok {
		if root.IsEmpty() {
			if root, err = Head(ctx, c); err != nil {
				return nil, err
			}
		}
		if p, err = OpenPages(ctx, c, root); err != nil {
			return nil, err
		}
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
