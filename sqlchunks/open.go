package sqlchunks

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
)

// Source says where Open reads a version from, and how.
type Source struct {
	// DB is the database's name.
	DB string
	// Store holds the database; nil with a service over HTTP, which is
	// then the only tier. Open does not close it.
	Store store.Store
	// Service is a cache service's address (client.Options.Service).
	Service string
	// ServiceDir is the service's cache directory when it runs on this
	// host (client.Options.LocalDir): "" finds out by itself (and then
	// reads the version's page image and the service's verified files,
	// with no request per page, as a local file is read),
	// client.NoLocalDir never reads it, and a directory given must be
	// the service's, or Open fails saying why.
	ServiceDir string
	// At names the version: the zero At for the current one, a root, or
	// a time (ParseAt reads them as users give them).
	At At
	// FreshRoot asks the service to check the store's manifest before it
	// names the current root.
	FreshRoot bool
	// MemBytes bounds the in-process memory tier (client.Options.MemBytes:
	// 0 the default, negative none).
	MemBytes int64
	// Token, CAFile, CertFile and KeyFile are the service's credentials
	// (client.Options).
	Token, CAFile, CertFile, KeyFile string
	// ServiceTimeout is how long the client waits for the service before
	// it also asks the store (client.Options.ServiceTimeout).
	ServiceTimeout time.Duration
	// ReadTimeout, if positive, bounds each read: a service that stops
	// answering fails a read rather than hang the program.
	ReadTimeout time.Duration
	// ReadDone, if not nil, is called after each read of the version's
	// chunks with its error (nil when it worked): the loadable extension
	// tells when reads begin to fail, and when they work again.
	ReadDone func(error)
	Logger   *slog.Logger
}

// Opened is a version Open opened: its client and its pages, which a VFS
// reads (Pages is a sqlitevfs.Pages) or DB opens as a database.
type Opened struct {
	Client *client.Client
	Root   addr.Addr
	Pages  *Pages
}

// Open opens version src.At (the current one if zero) of database src.DB
// from a cache service, a store or both, through a new client: the one
// way chunkd sql, the loadable extension and the benchmarks open a
// version. Through a service it takes one request (the version's open
// set); on the service's host, the version's page image (and no page
// map). Close the Opened when done.
func Open(ctx context.Context, src Source) (*Opened, error) {
	c, err := client.Open(ctx, client.Options{
		Store: src.Store, DB: src.DB, Service: src.Service, LocalDir: src.ServiceDir, MemBytes: src.MemBytes,
		ServiceTimeout: src.ServiceTimeout, FreshRoot: src.FreshRoot, Token: src.Token,
		CAFile: src.CAFile, CertFile: src.CertFile, KeyFile: src.KeyFile, Logger: src.Logger,
	})
	if err != nil {
		return nil, err
	}
	var r ChunkReader = c
	if src.ReadTimeout > 0 || src.ReadDone != nil {
		r = boundReader{c, src.ReadTimeout, src.ReadDone}
	}
	if c.LocalDir() != "" { // on the service's host: its page images, no request per page
		r = WithImages(r, ImagesOf(c.OpenImage, c.OpenVersionImage))
	}
	root, err := Resolve(ctx, r, src.At)
	if err != nil {
		c.Close()
		return nil, err
	}
	p, err := OpenVersionPages(ctx, r, root)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &Opened{Client: c, Root: p.v.Root, Pages: p}, nil
}

// DB opens the version as a read-only database/sql database, with VFS
// options o (nil for the defaults). Close the DB before the Opened.
func (o *Opened) DB(opts *sqlitevfs.Options) (*sqlitevfs.DB, error) {
	return sqlitevfs.OpenImage(o.Client.DB()+"@"+o.Root.String(), o.Pages, opts)
}

// Close releases the version's page image and closes its client.
func (o *Opened) Close() error {
	return errors.Join(o.Pages.Close(), o.Client.Close())
}

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
	db, err := sqlitevfs.OpenImage(c.DB()+"@"+root.String(), p, o)
	if err != nil {
		p.Close()
		return nil, err
	}
	db.Cleanup(p.Close) // the page image, if there is one
	return db, nil
}

// OpenVersionPages returns the pages of version root (the zero root: the
// head) as OpenVersion opens them, for a caller that gives them to a VFS
// of its own: by the version's page image or open set when c can read
// them, else by its root chunk and page map. Close the Pages when done.
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

// boundReader is a client whose every call is bounded by d (if
// positive): a service that stops answering fails a read rather than
// hang the program; done, if not nil, hears of each read's outcome.
type boundReader struct {
	c    *client.Client
	d    time.Duration
	done func(error)
}

// bound returns ctx bounded by the reader's timeout.
func (r boundReader) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.d)
}

// report tells done of a read's outcome.
func (r boundReader) report(err error) error {
	if r.done != nil {
		r.done(err)
	}
	return err
}

func (r boundReader) Get(ctx context.Context, a addr.Addr) ([]byte, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b, err := r.c.Get(ctx, a)
	return b, r.report(err)
}

func (r boundReader) GetMany(ctx context.Context, as []addr.Addr, fn func(int, []byte) error) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	return r.report(r.c.GetMany(ctx, as, fn))
}

func (r boundReader) Root(ctx context.Context) (addr.Addr, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	return r.c.Root(ctx)
}

func (r boundReader) DB() string { return r.c.DB() }

// ReadOpenSet makes boundReader a SetReader, as the client is. The open
// set is the open's first try, so it gets at most half of what is left
// of the open's time: a service that never sends it leaves the other
// half to open without it (the root chunk and page map as chunks).
func (r boundReader) ReadOpenSet(ctx context.Context, root addr.Addr, pages bool) (addr.Addr, [][]byte, error) {
	d := r.d
	if deadline, ok := ctx.Deadline(); ok && (d <= 0 || time.Until(deadline)/2 < d) {
		d = time.Until(deadline) / 2
	}
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return r.c.ReadOpenSet(ctx, root, pages)
}
