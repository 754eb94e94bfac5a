package sqlchunks

import (
	"context"
	"errors"
	"fmt"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
)

// A fresh reader of a version needs, before SQLite can find any row: the
// root chunk, the page map, page 1, and the interior B-tree pages it
// descends through. Read one after another, that is a round trip each; a
// cache service can send them all in one answer (its OpenSet), which the
// reader checks chunk by chunk as it opens the version from them
// (SetReader). Then a first point lookup costs that answer and the leaf.

// SetReader is an optional capability of a ChunkReader (client.Client,
// through a cache service): a version's open set in one request.
type SetReader interface {
	// ReadOpenSet returns the open set of version root (the zero root:
	// the head's, whose root it returns) as a cache service computed it
	// with OpenSet, in its order; without pages, its first pagesFrom
	// chunks only (the root chunk and the page map). The chunks are not
	// checked: the caller checks each against the address it expects.
	ReadOpenSet(ctx context.Context, root addr.Addr, pages bool) (addr.Addr, [][]byte, error)
}

// Set is a version's open set, as OpenSet computes it.
type Set struct {
	// Chunks are every chunk OpenSet read, in order: the root chunk, the
	// page map, then, from PagesFrom on, page 1 and the interior pages.
	Chunks    [][]byte
	PagesFrom int
	// PageSize and Pages are the version's page size and its pages'
	// addresses (page n is Pages[n-1]): what a page image of it holds.
	PageSize int
	Pages    []addr.Addr
}

// OpenSet reads version root through c as OpenVersion does, with the
// pages the root lists as interior B-tree pages (and page 1) besides, and
// returns every chunk it read in order: what a SetReader gives a fresh
// reader in one answer.
func OpenSet(ctx context.Context, c ChunkReader, root addr.Addr) (Set, error) {
	rec := &recorder{ChunkReader: c}
	p, err := openPages(ctx, rec, root)
	if err != nil {
		return Set{}, err
	}
	pagesFrom := len(rec.chunks)
	if err := p.preload(ctx, rec); err != nil {
		return Set{}, err
	}
	addrs, err := p.m.all(ctx, rec) // read at open: no chunk is read here
	if err != nil {
		return Set{}, err
	}
	return Set{Chunks: rec.chunks, PagesFrom: pagesFrom, PageSize: p.v.PageSize, Pages: addrs}, nil
}

// openPages reads the root chunk and the whole page map of version root.
func openPages(ctx context.Context, c ChunkReader, root addr.Addr) (*Pages, error) {
	r, err := readRoot(ctx, c, root)
	if err != nil {
		return nil, err
	}
	m, err := loadMap(ctx, c, root, r)
	if err != nil {
		return nil, err
	}
	return &Pages{c: c, v: versionOf(root, r), m: m, interior: r.interior}, nil
}

// preload reads page 1 and the interior pages the root lists through c
// and keeps them.
func (p *Pages) preload(ctx context.Context, c ChunkReader) error {
	if p.v.Pages == 0 {
		return nil
	}
	ns := setPages(p.interior)
	as := make([]addr.Addr, len(ns))
	for i, n := range ns {
		a, err := p.m.addr(ctx, p.c, n)
		if err != nil {
			return err
		}
		as[i] = a
	}
	p.preloaded = make(map[int64]*heldPage, len(ns))
	err := c.GetMany(ctx, as, func(i int, data []byte) error {
		if err := p.checkData(ns[i], data); err != nil {
			return err
		}
		p.preloaded[ns[i]] = checkedPage(data)
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlchunks: version %s of database %q: read page 1 and the interior pages: %w", p.v.Root, c.DB(), err)
	}
	return nil
}

// openFromSet opens version root (zero: the head) from the open set a
// SetReader gives, checking every chunk against the address reading it
// asks for; the Pages then read through c. ok is false when there is no
// set to open from (c is no SetReader, or it failed).
func openFromSet(ctx context.Context, c ChunkReader, root addr.Addr) (p *Pages, ok bool, err error) {
	ir, images := c.(imageReader)
	if images && ir.images.OpenVersion != nil {
		p, err := openByImage(ctx, ir, root)
		if err == nil {
			return p, true, nil
		}
		if err := versionAnswer(err, c.DB(), root); err != nil {
			return nil, false, err
		}
		// No image by version (an older service, or none on this host):
		// by the open set, then the image of the pages' addresses.
	}
	sr, isSet := c.(SetReader)
	if !isSet {
		return nil, false, nil
	}
	// With a page image, page 1 and the interior pages are read from it
	// as any page is (a pread and a CRC): the set need not carry them.
	head, chunks, err := sr.ReadOpenSet(ctx, root, !images)
	if err != nil {
		if err := versionAnswer(err, c.DB(), root); err != nil {
			return nil, false, err // the service knows: no other way will find it
		}
		return nil, false, nil
	}
	if p, err = openGiven(ctx, c, head, chunks, !images); err != nil {
		if errors.Is(err, errReplay) {
			return nil, false, nil // a set that is not this version's: read it as usual
		}
		return nil, false, err
	}
	p.attachImage(ctx)
	if p.img == nil && images {
		// No image after all (none on this host, or over the service's
		// budget): page 1 and the interior pages in one request.
		if err := p.preload(ctx, c); err != nil {
			return nil, false, err
		}
	}
	return p, true, nil
}

// openGiven opens version head from its open set, chunks (with page 1 and
// the interior pages when withPages), read through c from then on. The
// root chunk and the map levels above the leaves are checked here; the
// leaves and the pages are kept as given and each is checked the first
// time it is used (pageMap, heldPage). A set that does not fit the version
// is an error wrapping errReplay.
func openGiven(ctx context.Context, c ChunkReader, head addr.Addr, chunks [][]byte, withPages bool) (*Pages, error) {
	rp := &replayer{ChunkReader: c, chunks: chunks}
	r, err := readRoot(ctx, rp, head)
	if err != nil {
		return nil, err
	}
	m := &pageMap{db: c.DB(), root: head, r: r}
	m.mu.Lock() // not shared yet; readUpper wants it held
	err = m.readUpper(ctx, rp)
	if err == nil {
		m.given, err = rp.take(len(m.leafAt))
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	p := &Pages{c: c, v: versionOf(head, r), m: m, interior: r.interior}
	if withPages && r.pages > 0 {
		ns := setPages(r.interior)
		data, err := rp.take(len(ns))
		if err != nil {
			return nil, err
		}
		p.preloaded = make(map[int64]*heldPage, len(ns))
		for i, n := range ns {
			p.preloaded[n] = &heldPage{data: data[i]}
		}
	}
	return p, nil
}

// openByImage opens version root (zero: the head) from the page image
// the same-host service registered for it (Images.OpenVersion): one
// request for the root chunk and the image, which holds page 1 and the
// interior pages as every other; the page map is read only if a page the
// image lacks is. The root chunk must hash to the version's root, and the
// image be one slot a page of the page size.
func openByImage(ctx context.Context, ir imageReader, root addr.Addr) (*Pages, error) {
	head, data, img, err := ir.images.OpenVersion(ctx, root)
	if err != nil {
		return nil, err
	}
	r, err := decodeRoot(data)
	switch {
	case !root.IsEmpty() && head != root:
		err = fmt.Errorf("sqlchunks: asked for the page image of version %s of database %q, given %s's", root, ir.DB(), head)
	case addr.Of(data) != head:
		err = fmt.Errorf("sqlchunks: the root chunk of version %s of database %q does not hash to it", head, ir.DB())
	case err != nil:
		err = fmt.Errorf("sqlchunks: version %s of database %q: %w", head, ir.DB(), err)
	case int64(img.Slots()) != r.pages || img.SlotSize() != r.pageSize:
		err = fmt.Errorf("sqlchunks: version %s of database %q: a page image of %d slots of %d bytes for %d pages of %d", head, ir.DB(), img.Slots(), img.SlotSize(), r.pages, r.pageSize)
	}
	if err != nil {
		img.Close()
		return nil, err
	}
	return &Pages{c: ir, v: versionOf(head, r), m: &pageMap{db: ir.DB(), root: head, r: r}, interior: r.interior, img: img}, nil
}

// recorder is a ChunkReader that keeps every chunk read, in order.
type recorder struct {
	ChunkReader
	chunks [][]byte
}

func (r *recorder) Get(ctx context.Context, a addr.Addr) ([]byte, error) {
	data, err := r.ChunkReader.Get(ctx, a)
	if err == nil {
		r.chunks = append(r.chunks, data)
	}
	return data, err
}

func (r *recorder) GetMany(ctx context.Context, as []addr.Addr, fn func(i int, data []byte) error) error {
	got := make([][]byte, len(as))
	err := r.ChunkReader.GetMany(ctx, as, func(i int, data []byte) error {
		got[i] = data
		return fn(i, data)
	})
	if err == nil {
		r.chunks = append(r.chunks, got...)
	}
	return err
}

// errReplay: a recorded open set does not fit the reads made from it.
var errReplay = errors.New("the open set does not match the version")

// replayer is a ChunkReader that answers reads from an open set, in the
// order OpenSet recorded them, checking each chunk against its address.
type replayer struct {
	ChunkReader
	chunks [][]byte
}

func (r *replayer) next(a addr.Addr) ([]byte, error) {
	if len(r.chunks) == 0 {
		return nil, fmt.Errorf("%w: it ends before chunk %s", errReplay, a)
	}
	data := r.chunks[0]
	r.chunks = r.chunks[1:]
	if got := addr.Of(data); got != a {
		return nil, fmt.Errorf("%w: chunk %s hashes to %s", errReplay, a, got)
	}
	return data, nil
}

// take returns the next n chunks unchecked.
func (r *replayer) take(n int) ([][]byte, error) {
	if len(r.chunks) < n {
		return nil, fmt.Errorf("%w: it ends %d chunks short", errReplay, n-len(r.chunks))
	}
	got := r.chunks[:n:n]
	r.chunks = r.chunks[n:]
	return got, nil
}

func (r *replayer) Get(_ context.Context, a addr.Addr) ([]byte, error) { return r.next(a) }

func (r *replayer) GetMany(_ context.Context, as []addr.Addr, fn func(i int, data []byte) error) error {
	for i, a := range as {
		data, err := r.next(a)
		if err != nil {
			return err
		}
		if err := fn(i, data); err != nil {
			return err
		}
	}
	return nil
}

// ErrCollected is wrapped by the error for a version chunkd gc collected.
var ErrCollected = errors.New("version collected")

// versionAnswer returns the error for a service's answer that version
// root does not exist or was collected, which is final (reading the root
// chunk some other way would only fail later, naming less); nil for any
// other error.
func versionAnswer(err error, db string, root addr.Addr) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return nil
	}
	switch ae.Kind {
	case api.KindNoSuchVersion:
		return fmt.Errorf("sqlchunks: %w %s of database %q (the service read its manifest again and no table file holds that root)", ErrNoVersion, root, db)
	case api.KindVersionCollected:
		return fmt.Errorf("sqlchunks: %w: %s", ErrCollected, ae.Message)
	}
	return nil
}
