package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// table is one table file of a database: its in-memory index, and where
// its bytes are now: only in the store, partly downloaded, or whole on
// local disk.
type table struct {
	c        *Cache
	db       string
	name     string // as in the manifest
	key      string // object key in the store
	size     int64
	appendix atomic.Bool      // named as an appendix by the latest manifest
	idx      *tablefile.Table // reads go through table.ReadAt

	mu   sync.Mutex
	file *cachedFile // the verified local copy, once downloaded
	dl   *download   // the download in flight, if any
	// After a failed download the next one waits retryAfter, doubling
	// per failure up to maxRetryWait, so a file that cannot be cached
	// (corrupt in the store, larger than --disk) is not fetched on
	// every miss.
	failures   int
	retryAfter time.Time
}

const (
	firstRetryWait = time.Second
	maxRetryWait   = 5 * time.Minute
)

func (c *Cache) openTable(ctx context.Context, d *database, name string, appendix bool) (*table, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	key, size, err := d.mdb.ResolveTable(rctx, name)
	cancel()
	if err != nil {
		return nil, storeErr(err, "database %q: table file %s", d.name, name)
	}
	t, err := c.newTable(d, name, key, size, appendix)
	if errors.Is(err, store.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
		return nil, storeErr(err, "database %q: open index of %s", d.name, key)
	}
	return t, err
}

// newTable opens the index of the table file at key, of size bytes: from
// its copy on disk when there is one, else from the store.
func (c *Cache) newTable(d *database, name, key string, size int64, appendix bool) (*table, error) {
	t := &table{c: c, db: d.name, name: name, key: key, size: size}
	t.appendix.Store(appendix)
	if cf := c.disk.get(key); cf != nil && cf.size == size {
		t.file = cf
		c.log.Debug("table file found on disk", "key", key)
	}
	var err error
	t.idx, err = tablefile.Open(t, size, &tablefile.Options{Tail: c.cfg.IndexTail})
	if err != nil {
		return nil, fmt.Errorf("database %q: open index of %s: %w", d.name, key, err)
	}
	return t, nil
}

// ReadAt reads from wherever the bytes are: the local file, the part of a
// download that has arrived, or the store. The index and archive
// dictionaries are read through it.
func (t *table) ReadAt(p []byte, off int64) (int, error) {
	if cf := t.acquire(); cf != nil {
		n, err := cf.f.ReadAt(p, off)
		cf.release()
		if err == nil {
			return n, nil
		}
	}
	if dl := t.download(); dl != nil && off+int64(len(p)) <= dl.arrived.Load() {
		if n, err := dl.f.ReadAt(p, off); err == nil {
			return n, nil
		}
	}
	ctx, cancel := context.WithTimeout(t.c.ctx, t.c.cfg.StoreTimeout)
	defer cancel()
	n, err := t.c.cfg.Store.ReadAt(ctx, t.key, p, off)
	t.c.metrics.storeRead(n)
	return n, err
}

// acquire pins the local file, or returns nil if there is none.
func (t *table) acquire() *cachedFile {
	t.mu.Lock()
	cf := t.file
	t.mu.Unlock()
	if cf == nil {
		return nil
	}
	if !cf.acquire() {
		// Evicted since: forget it; the next miss downloads again.
		t.mu.Lock()
		if t.file == cf {
			t.file = nil
		}
		t.mu.Unlock()
		return nil
	}
	return cf
}

func (t *table) download() *download {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dl
}

// read returns the chunk at e, with the tier that served it. Under the
// NotFound miss policy a miss returns nil data.
func (t *table) read(ctx context.Context, c *Cache, e tablefile.Entry) ([]byte, api.Tier, error) {
	stored := make([]byte, e.Length)
	if cf := t.acquire(); cf != nil {
		_, err := cf.f.ReadAt(stored, int64(e.Offset))
		cf.release()
		c.metrics.diskReads.Inc()
		if err == nil {
			var data []byte
			if data, err = t.idx.Decode(e, stored); err == nil {
				return data, api.TierDisk, nil
			}
		}
		t.localFailed(ctx, cf, tablefile.Range{Offset: e.Offset, Length: uint64(e.Length), Entries: []tablefile.Entry{e}}, err)
	}
	if dl := t.download(); dl != nil && int64(e.End()) <= dl.arrived.Load() {
		_, err := dl.f.ReadAt(stored, int64(e.Offset))
		c.metrics.diskReads.Inc()
		if err == nil {
			var data []byte
			if data, err = t.idx.Decode(e, stored); err == nil {
				return data, api.TierPartial, nil
			}
		}
		// The download's own checks will fail it; the store has the chunk.
		c.log.Warn("read downloading file", "key", t.key, "chunk", e.Addr, "err", err)
	}
	t.startDownload()
	if c.cfg.Miss == NotFound {
		return nil, api.TierStore, nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	n, err := c.cfg.Store.ReadAt(rctx, t.key, stored, int64(e.Offset))
	c.metrics.storeRead(n)
	if err != nil {
		return nil, 0, storeErr(err, "read chunk %s from %s", e.Addr, t.key)
	}
	data, err := t.idx.Decode(e, stored)
	return data, api.TierStore, err
}

// localFailed handles a read of the local copy that failed (r, with err).
// A record that fails its check, or a file shorter than its index says,
// may mean the copy went bad after its download was verified (bit rot, a
// truncating crash of another tool, a hand edit). The same range is read
// from the store and decoded to be sure: if the store's bytes pass, the
// copy is dropped, so this read and later ones go to the store and the
// next miss downloads the file again; if they fail too, the fault is not
// the copy's (an archive dictionary that failed when it was loaded, say)
// and the file is kept. Any other error (a closed file at shutdown, EIO)
// only sends this read to the store.
func (t *table) localFailed(ctx context.Context, cf *cachedFile, r tablefile.Range, err error) {
	if !errors.Is(err, tablefile.ErrCorrupt) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.c.log.Warn("read cached file", "key", t.key, "err", err)
		return
	}
	buf := make([]byte, r.Length)
	rctx, cancel := context.WithTimeout(ctx, t.c.cfg.StoreTimeout)
	n, serr := t.c.cfg.Store.ReadAt(rctx, t.key, buf, int64(r.Offset))
	cancel()
	t.c.metrics.storeRead(n)
	if serr != nil {
		t.c.log.Warn("cached table file failed a check; the store could not be read to confirm", "key", t.key, "err", err, "store", serr)
		return
	}
	for _, e := range r.Entries {
		if _, derr := t.idx.Decode(e, buf[e.Offset-r.Offset:e.End()-r.Offset]); derr != nil {
			t.c.log.Warn("chunk fails its check from the store too; keeping the cached file", "key", t.key, "chunk", e.Addr, "err", derr)
			return
		}
	}
	if t.c.disk.drop(cf) { // once per file, not per reader that saw it
		t.c.log.Error("cached table file failed a check the store's copy passes; dropped it, reading from the store", "key", t.key, "err", err)
		t.c.metrics.corrupt.Inc()
	}
	t.mu.Lock()
	if t.file == cf {
		t.file = nil
	}
	t.mu.Unlock()
}

// readMany reads entries of this file, merging nearby records into single
// reads: adjacent ones on disk, up to 64 KiB apart from the store, whose
// round trips cost far more than the bytes. fn gets nil data for misses
// under the NotFound policy. Records that fail their checks on local disk
// are read from the store instead.
func (t *table) readMany(ctx context.Context, c *Cache, entries []tablefile.Entry, fn func(e tablefile.Entry, data []byte, tier api.Tier) error) error {
	var local, partial, remote []tablefile.Entry
	var dl *download // the download partial was measured against
	cf := t.acquire()
	if cf != nil {
		defer cf.release()
		local = entries
	} else if dl = t.download(); dl != nil {
		arrived := uint64(dl.arrived.Load())
		for _, e := range entries {
			if e.End() <= arrived {
				partial = append(partial, e)
			} else {
				remote = append(remote, e)
			}
		}
	} else {
		remote = entries
	}
	// decode checks every record of a read before fn sees any of them, so
	// a range that fails can go to the store whole.
	decode := func(r tablefile.Range, buf []byte) ([][]byte, error) {
		out := make([][]byte, len(r.Entries))
		for i, e := range r.Entries {
			data, err := t.idx.Decode(e, buf[e.Offset-r.Offset:e.End()-r.Offset])
			if err != nil {
				return nil, err
			}
			out[i] = data
		}
		return out, nil
	}
	emit := func(r tablefile.Range, buf []byte, tier api.Tier) error {
		datas, err := decode(r, buf)
		if err != nil {
			return err
		}
		for i, e := range r.Entries {
			if err := fn(e, datas[i], tier); err != nil {
				return err
			}
		}
		return nil
	}
	// readLocal reads one range from f and passes it on, or returns false
	// when the range must come from the store.
	readLocal := func(f *os.File, r tablefile.Range, tier api.Tier) (bool, error) {
		buf := make([]byte, r.Length)
		_, err := f.ReadAt(buf, int64(r.Offset))
		c.metrics.diskReads.Inc()
		var datas [][]byte
		if err == nil {
			datas, err = decode(r, buf)
		}
		if err != nil {
			if tier == api.TierDisk {
				t.localFailed(ctx, cf, r, err)
			} else {
				c.log.Warn("read downloading file", "key", t.key, "err", err)
			}
			return false, nil
		}
		for i, e := range r.Entries {
			if err := fn(e, datas[i], tier); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	ranges := tablefile.MergeRanges(local, 0, 1<<20)
	for i, r := range ranges {
		ok, err := readLocal(cf.f, r, api.TierDisk)
		if err != nil {
			return err
		}
		if !ok { // a range failed: the rest comes from the store
			for _, r := range ranges[i:] {
				remote = append(remote, r.Entries...)
			}
			break
		}
	}
	if len(partial) > 0 {
		// The same download whose arrived mark chose these entries: its
		// file holds their bytes (a later download's may not yet).
		for _, r := range tablefile.MergeRanges(partial, 0, 1<<20) {
			ok, err := readLocal(dl.f, r, api.TierPartial)
			if err != nil {
				return err
			}
			if !ok {
				remote = append(remote, r.Entries...)
			}
		}
	}
	if len(remote) == 0 {
		return nil
	}
	t.startDownload()
	if c.cfg.Miss == NotFound {
		for _, e := range remote {
			if err := fn(e, nil, api.TierStore); err != nil {
				return err
			}
		}
		return nil
	}
	return t.readRemote(ctx, c, remote, emit)
}

// readRemote reads merged ranges from the store, up to 8 at once.
func (t *table) readRemote(ctx context.Context, c *Cache, entries []tablefile.Entry, emit func(tablefile.Range, []byte, api.Tier) error) error {
	ranges := tablefile.MergeRanges(entries, 64<<10, 4<<20)
	rctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	type result struct {
		r   tablefile.Range
		buf []byte
		err error
	}
	results := make(chan result, len(ranges))
	sem := make(chan struct{}, 8)
	for _, r := range ranges {
		go func(r tablefile.Range) {
			sem <- struct{}{}
			defer func() { <-sem }()
			buf := make([]byte, r.Length)
			n, err := c.cfg.Store.ReadAt(rctx, t.key, buf, int64(r.Offset))
			c.metrics.storeRead(n)
			results <- result{r, buf, err}
		}(r)
	}
	var firstErr error
	for range ranges {
		res := <-results
		if firstErr != nil {
			continue
		}
		if res.err != nil {
			firstErr = storeErr(res.err, "read %d chunks from %s", len(res.r.Entries), t.key)
			cancel()
			continue
		}
		if err := emit(res.r, res.buf, api.TierStore); err != nil {
			firstErr = err
			cancel()
		}
	}
	return firstErr
}

func (t *table) info() api.TableInfo {
	ti := api.TableInfo{Name: t.name, Size: t.size, Chunks: t.idx.Count(), Appendix: t.appendix.Load(), State: "remote"}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.file != nil && !t.file.isEvicted():
		ti.State, ti.Downloaded = "cached", t.size
	case t.dl != nil:
		ti.State, ti.Downloaded = "downloading", t.dl.arrived.Load()
	}
	return ti
}
