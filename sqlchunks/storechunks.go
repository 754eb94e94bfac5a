package sqlchunks

import (
	"context"
	"errors"
	"fmt"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// storeChunks reads chunks straight from the table files of one manifest
// of a database, as import, compact and gc see it: a ChunkReader without
// tiers or caches, checking every chunk against its address. Its files'
// readers are bound to the context of the load that opened them.
type storeChunks struct {
	mdb *manifest.DB
	set *tableset.Set[struct{}]
}

// errNoChunk is wrapped by storeChunks' error for a chunk no file holds.
var errNoChunk = errors.New("no table file of the database holds the chunk")

func (s storeChunks) DB() string { return s.mdb.Name() }

func (s storeChunks) Root(context.Context) (addr.Addr, error) { return s.set.Root(), nil }

func (s storeChunks) Get(ctx context.Context, a addr.Addr) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, e, ok := s.set.Find(a)
	if !ok {
		return nil, fmt.Errorf("chunk %s: %w", a, errNoChunk)
	}
	data, err := f.Index.Read(e)
	if err != nil {
		return nil, fmt.Errorf("table file %s: %w", f.Key, err)
	}
	if addr.Of(data) != a {
		return nil, fmt.Errorf("table file %s: chunk %s: %w: its bytes hash to %s", f.Key, a, tablefile.ErrCorrupt, addr.Of(data))
	}
	return data, nil
}

// GetMany reads the chunks file by file, nearby records in one read
// (readFiles), and calls fn in ascending i once all are read.
func (s storeChunks) GetMany(ctx context.Context, as []addr.Addr, fn func(int, []byte) error) error {
	got := make([][]byte, len(as))
	err := readFiles(ctx, s.set, as, func(i int, data []byte) error {
		got[i] = data
		return nil
	})
	for i, data := range got {
		if data == nil {
			continue
		}
		if ferr := fn(i, data); ferr != nil {
			return ferr
		}
	}
	return err
}

// readFiles reads chunks as from the set's files: each from the first
// file that holds it, a file's records with reads of up to 8 MiB that
// take in gaps of up to 64 KiB (a scan of a file reads it almost whole,
// in few requests). fn gets each chunk once it is checked against its
// address, in no set order, one call at a time. A chunk no file holds is
// an error wrapping errNoChunk, after the others.
func readFiles(ctx context.Context, set *tableset.Set[struct{}], as []addr.Addr, fn func(i int, data []byte) error) error {
	byFile := map[*tableset.File[struct{}]][]int{}
	var order []*tableset.File[struct{}]
	var missing []addr.Addr
	for i, a := range as {
		f, _, ok := set.Find(a)
		if !ok {
			missing = append(missing, a)
			continue
		}
		if byFile[f] == nil {
			order = append(order, f)
		}
		byFile[f] = append(byFile[f], i)
	}
	for _, f := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		idx := byFile[f]
		fas := make([]addr.Addr, len(idx))
		for k, i := range idx {
			fas[k] = as[i]
		}
		err := f.Index.GetMany(fas, tablefile.BatchOptions{Gap: 64 << 10, MaxRead: 8 << 20}, func(k int, data []byte) error {
			if addr.Of(data) != fas[k] {
				return fmt.Errorf("table file %s: chunk %s: %w: its bytes hash to %s", f.Key, fas[k], tablefile.ErrCorrupt, addr.Of(data))
			}
			return fn(idx[k], data)
		})
		if err != nil {
			return fmt.Errorf("table file %s: %w", f.Key, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d chunks, the first %s: %w", len(missing), missing[0], errNoChunk)
	}
	return nil
}
