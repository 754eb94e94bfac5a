package sqlchunks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// CompactResult describes a Compact.
type CompactResult struct {
	// Root is the version the new appendix holds (the head).
	Root addr.Addr
	// Lacking is how many of its pages the old appendix lacked; 0 with no
	// AppendixFile: the appendix held the whole head already.
	Lacking int64
	// Pages is the version's page count.
	Pages int64
	// AppendixFile and AppendixBytes describe the new appendix ("" if
	// none was needed).
	AppendixFile  string
	AppendixBytes int64
	// Elapsed is how long it took.
	Elapsed time.Duration
}

// compactWindow is how many pages Compact reads from the store at a time.
const compactWindow = 4096

// Compact rewrites the appendix of database db in s with its current
// version, read from the store: root, page map, the open set's pages,
// then the other pages in page order (as ImportOptions.Appendix writes
// one), and makes it the manifest's appendix with a conditional write.
// The old appendix stays named as a plain file while it holds chunks no
// other file does (gc drops it once no retained version needs them). An
// appendix that holds every page of the head already is left alone.
// progress, if not nil, gets phase "appendix" (pages) and "upload"
// (bytes).
func Compact(ctx context.Context, s store.Store, db string, progress func(phase string, done, total int64)) (*CompactResult, error) {
	start := time.Now()
	res, err := compact(ctx, s, db, &ImportOptions{DB: db, Progress: progress})
	if err != nil {
		return nil, fmt.Errorf("sqlchunks: compact %s: %w", db, err)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func compact(ctx context.Context, s store.Store, db string, o *ImportOptions) (*CompactResult, error) {
	if err := o.check(s); err != nil {
		return nil, err
	}
	mdb, err := manifest.Open(ctx, s, db)
	if err != nil {
		return nil, err
	}
	h, err := loadHead(ctx, mdb, nil)
	if err != nil {
		return nil, err
	}
	if h.m == nil {
		return nil, fmt.Errorf("no database %s", mdb)
	}
	vc, err := readVersionChunks(ctx, storeChunks{mdb, h.set}, h.m.Root)
	if err != nil {
		return nil, err
	}
	res := &CompactResult{Root: h.m.Root, Pages: vc.r.pages, Lacking: h.lacking(vc.pages)}
	if res.Lacking == 0 && h.hasAppendix() {
		return res, nil
	}
	spec, size, err := writeStoreAppendix(ctx, mdb, h, vc, o)
	if err != nil {
		return nil, err
	}
	res.AppendixFile, res.AppendixBytes = spec.Name, size
	for attempt := 1; ; attempt++ {
		m, err := newManifest(h.m, nil, &spec, h.replaceableAppendix(), h.m.Root)
		if err != nil {
			return nil, err
		}
		if _, err = mdb.Update(ctx, h.version, m); err == nil {
			return res, nil
		}
		if !errors.Is(err, store.ErrPrecondition) || attempt == importAttempts {
			return nil, err
		}
		// An import went first: its version is the head now, and the new
		// appendix holds the one before it (as after any import that
		// does not rewrite the appendix).
		if h, err = loadHead(ctx, mdb, h); err != nil {
			return nil, err
		}
	}
}

// writeStoreAppendix writes and puts an appendix of version vc read from
// head h's files: the chunks of compactWindow pages at a time, each
// window's records read together.
func writeStoreAppendix(ctx context.Context, mdb *manifest.DB, h *head, vc *versionChunks, o *ImportOptions) (manifest.Spec, int64, error) {
	addrs := vc.pages
	f, err := newTableBuf(false, "chunkd-compact-*.appendix")
	if err != nil {
		return manifest.Spec{}, 0, err
	}
	defer f.close()
	w := tablefile.NewWriter(f)
	// The root and the page map, then the open set's pages: read together.
	first := []addr.Addr{vc.root}
	for _, mc := range vc.maps {
		first = append(first, mc.addr)
	}
	if len(addrs) > 0 {
		for _, n := range setPages(vc.r.interior) {
			first = append(first, addrs[n-1])
		}
	}
	put := func(as []addr.Addr) error {
		got := make([][]byte, len(as))
		if err := readFiles(ctx, h.set, as, func(i int, data []byte) error {
			got[i] = data
			return nil
		}); err != nil {
			return err
		}
		for i, data := range got {
			if err := w.AddWithAddr(as[i], data); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put(first); err != nil {
		return manifest.Spec{}, 0, err
	}
	o.progress("appendix", 0, int64(len(addrs)))
	for lo := 0; lo < len(addrs); lo += compactWindow {
		var as []addr.Addr
		seen := map[addr.Addr]bool{}
		for _, a := range addrs[lo:min(lo+compactWindow, len(addrs))] {
			if !w.Has(a) && !seen[a] {
				seen[a] = true
				as = append(as, a)
			}
		}
		if err := put(as); err != nil {
			return manifest.Spec{}, 0, err
		}
		o.progress("appendix", int64(min(lo+compactWindow, len(addrs))), int64(len(addrs)))
	}
	return finishTable(ctx, mdb, w, f, o)
}

// versionChunks are the chunks of one version: its root, page map and
// pages.
type versionChunks struct {
	root  addr.Addr
	r     *root
	pages []addr.Addr // page n at n-1
	maps  []mapChunk  // the page map, top first
}

// readVersionChunks reads version root's root chunk and page map through c.
// The map's chunks are built again from the pages' addresses (the map of
// a page list is one and the same) and checked against the root's.
func readVersionChunks(ctx context.Context, c ChunkReader, root addr.Addr) (*versionChunks, error) {
	p, err := openPages(ctx, c, root)
	if err != nil {
		return nil, err
	}
	pages, err := p.m.all(ctx, c)
	if err != nil {
		return nil, err
	}
	r := p.m.r
	mapRoot, _, maps := buildMap(pages, r.fanout)
	if mapRoot != r.mapRoot {
		return nil, fmt.Errorf("sqlchunks: version %s of database %q: %w: its pages make map %s, not %s", root, c.DB(), ErrBadMap, mapRoot, r.mapRoot)
	}
	return &versionChunks{root: root, r: r, pages: pages, maps: maps}, nil
}
