package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// table is one table file of a database: its in-memory index, and where
// its bytes are now: only in the store, partly downloaded, or whole on
// local disk.
type table struct {
	env      *env
	db       string
	name     string // as in the manifest
	key      string // object key in the store
	size     int64
	appendix atomic.Bool // named as an appendix by the latest manifest
	// idx is the file's index. Its own reads (archive dictionaries) go to
	// the store, and what it decodes is hashed before it is served.
	idx *tablefile.Table

	mu    sync.Mutex
	local *localCopy // the verified copy on disk, if any
	dl    *download  // the download in flight, if any
	adm   admission  // when to download (download.go)
}

// localCopy is a verified copy of the file on disk, with a view of the
// index that reads it and checks every read against the copy's sums.
type localCopy struct {
	cf   *cachedFile
	view *tablefile.Table
}

// storeFile reads one object of the store, each read with its own
// deadline, counted in the metrics.
type storeFile struct {
	env *env
	key string
}

func (s storeFile) ReadAt(p []byte, off int64) (int, error) {
	ctx, cancel := context.WithTimeout(s.env.ctx, s.env.cfg.StoreTimeout)
	defer cancel()
	ctx, origin := store.TrackOrigin(ctx)
	n, err := s.env.store.ReadAt(ctx, s.key, p, off)
	s.env.metrics.storeRead(n, origin)
	return n, err
}

func newTable(e *env, db, name, key string, size int64, appendix bool) *table {
	t := &table{env: e, db: db, name: name, key: key, size: size}
	t.appendix.Store(appendix)
	return t
}

// openTable opens table file o of database d (found in the store by the
// loader): the table already open under its key (keys.go), else from its
// verified copy on disk when there is one, else its index from the store.
func openTable(ctx context.Context, d *database, o tableset.Object) (*table, error) {
	return d.env.keys.open(o.Key, o.Size, func() (*table, error) { return openTableNow(ctx, d.env, d.name, o) })
}

func openTableNow(ctx context.Context, e *env, db string, o tableset.Object) (*table, error) {
	if t := openCachedTable(e, db, o.Name, o.Key, o.Size, o.Appendix); t != nil {
		return t, nil
	}
	t := newTable(e, db, o.Name, o.Key, o.Size, o.Appendix)
	var err error
	t.idx, err = tablefile.Open(o.TailReaderAt(storeFile{e, o.Key}), o.Size, &tablefile.Options{Tail: tableset.IndexTail(o, e.cfg.IndexTail), IndexHash: true})
	if err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	if o.Appendix {
		// An appendix is made to be downloaded, on its first miss: list
		// its units now (tens of ms for a large file), while the service
		// waits for the store, rather than when the download starts.
		go t.idx.Units(0, 0)
	}
	return t, nil
}

// openCachedTable opens table file key from its copy on disk, checking
// the copy's index against its sums; nil if there is no copy, or it fails
// the check (then it is dropped, to be downloaded again).
func openCachedTable(e *env, db, name, key string, size int64, appendix bool) *table {
	cf := e.disk.get(key)
	if cf == nil || cf.size != size || !cf.acquire() {
		return nil
	}
	defer cf.release()
	sums, err := cf.loadSums(e.disk)
	var view *tablefile.Table
	if err == nil {
		view, err = tablefile.Open(cf, size, &tablefile.Options{Sums: sums})
	}
	if err != nil {
		if e.disk.drop(cf) {
			e.metrics.corrupt.Inc()
			e.log.Error("cached table file fails its check when opened; dropped it (it will be downloaded again)", "db", db, "key", key, "err", err)
		}
		return nil
	}
	t := newTable(e, db, name, key, size, appendix)
	t.idx, _ = view.View(storeFile{e, key}, nil) // no sums: cannot fail
	t.local = &localCopy{cf: cf, view: view}
	e.log.Debug("table file found on disk", "key", key)
	return t
}

// acquireLocal pins the verified local copy, or returns nil if there is
// none.
func (t *table) acquireLocal() *localCopy {
	t.mu.Lock()
	lc := t.local
	t.mu.Unlock()
	if lc == nil {
		return nil
	}
	if !lc.cf.acquire() {
		// Evicted since: forget it; a later miss may download it again.
		t.forgetLocal(lc)
		return nil
	}
	return lc
}

func (t *table) forgetLocal(lc *localCopy) {
	t.mu.Lock()
	if t.local == lc {
		t.local = nil
	}
	t.mu.Unlock()
}

// prove decodes bytes that did not come from a verified copy (the store,
// a download in progress) and hashes the chunk against its address.
func (t *table) prove(e tablefile.Entry, stored []byte) ([]byte, error) {
	t.env.metrics.proofs.Inc()
	data, err := t.idx.Decode(e, stored)
	if err == nil {
		if got := addr.Of(data); got != e.Addr {
			err = &tablefile.CorruptError{Offset: int64(e.Offset), Addr: e.Addr.String(), Reason: "contents hash to " + got.String()}
		}
	}
	if err != nil {
		t.env.metrics.proofFailures.Inc()
	}
	return data, err
}

// proveAll is prove for entries es, whose stored bytes buf holds from
// offset off: decoded one by one, then hashed together (addr.OfAll).
func (t *table) proveAll(es []tablefile.Entry, buf []byte, off uint64) ([][]byte, error) {
	t.env.metrics.proofs.Add(float64(len(es)))
	data := make([][]byte, len(es))
	for i, e := range es {
		d, err := t.idx.Decode(e, buf[e.Offset-off:e.End()-off])
		if err != nil {
			t.env.metrics.proofFailures.Inc()
			return nil, err
		}
		data[i] = d
	}
	sums := make([]addr.Addr, len(es))
	addr.OfAll(data, sums)
	for i, e := range es {
		if sums[i] != e.Addr {
			t.env.metrics.proofFailures.Inc()
			return nil, &tablefile.CorruptError{Offset: int64(e.Offset), Addr: e.Addr.String(), Reason: "contents hash to " + sums[i].String()}
		}
	}
	return data, nil
}

// read returns the chunk at e, with the tier that served it. Under the
// NotFound miss policy a miss returns nil data.
func (t *table) read(ctx context.Context, e tablefile.Entry) ([]byte, api.Tier, error) {
	m := t.env.metrics
	stored := make([]byte, e.Length)
	if lc := t.acquireLocal(); lc != nil {
		_, err := lc.cf.ReadAt(stored, int64(e.Offset))
		m.diskReads.Inc()
		var data []byte
		if err == nil {
			data, err = lc.view.Decode(e, stored) // the record's (or span's) CRC: the copy is verified
		}
		lc.cf.release()
		if err == nil {
			return data, api.TierDisk, nil
		}
		t.localFailed(lc, err)
	}
	tried := false // the download in flight was read
	if dl := t.acquireDownload(false); dl != nil {
		tried = true
		data, tier, err := t.readDownload(ctx, dl, e)
		t.releaseDownload(dl)
		if err == nil {
			return data, tier, nil
		}
		if !readElsewhere(err) {
			return nil, 0, err
		}
	}
	// Admission follows the read: a read that proves the store's copy
	// corrupt keeps the file from being downloaded.
	defer t.missed(int64(e.Length))
	if t.env.cfg.Miss == NotFound {
		return nil, api.TierStore, nil
	}
	t.downloadAppendix()
	if dl := t.acquireDownload(false); dl != nil && tried {
		t.releaseDownload(dl)
	} else if dl != nil { // the appendix's, just started: the read fills it
		data, tier, err := t.readDownload(ctx, dl, e)
		t.releaseDownload(dl)
		if err == nil {
			return data, tier, nil
		}
		if !readElsewhere(err) {
			return nil, 0, err
		}
	}
	if _, err := (storeFile{t.env, t.key}).ReadAt(stored, int64(e.Offset)); err != nil {
		return nil, 0, storeErr(err, "read chunk %s from %s", e.Addr, t.key)
	}
	data, err := t.prove(e, stored)
	if err != nil {
		return nil, 0, t.corruptInStore(err)
	}
	return data, api.TierStore, nil
}

// readDownload reads chunk e from download dl (held), once its blocks
// are proven: the tier is partial if they were there, store if this read
// fetched them. An error readElsewhere accepts sends the read to the
// store.
func (t *table) readDownload(ctx context.Context, dl *download, e tablefile.Entry) ([]byte, api.Tier, error) {
	fetched, err := dl.ensure(ctx, int64(e.Offset), int64(e.End()), nil, true)
	if err != nil {
		return nil, 0, err
	}
	data, err := dl.readChunk(e)
	if err != nil {
		if KindOf(err) == KindCorrupt {
			return nil, 0, err // the store's copy: readChunk proved it
		}
		// Proven, then changed on disk (another process?): the store decides.
		t.env.log.Warn("read downloading file", "key", t.key, "chunk", e.Addr, "err", err)
		return nil, 0, errGaveUp
	}
	if fetched {
		return data, api.TierStore, nil
	}
	return data, api.TierPartial, nil
}

// readElsewhere reports whether a read of a download that failed with
// err should read the store instead: the download ended, or a stream was
// too slow.
func readElsewhere(err error) bool {
	return errors.Is(err, errGaveUp) || errors.Is(err, errDownloadEnded)
}

// corruptInStore handles a chunk whose bytes from the store fail their
// proof: the object is corrupt or forged. It is never downloaded (its
// download could only fail), and the read is an error.
func (t *table) corruptInStore(err error) error {
	t.mu.Lock()
	first := t.adm.never == nil
	if first {
		t.adm.never = err
	}
	t.mu.Unlock()
	if first {
		t.env.metrics.storeCorrupt.Inc()
		t.env.log.Error("a chunk read from the store fails its proof: the object is corrupt; its chunks are served only when they prove themselves, and it is never downloaded", "db", t.db, "key", t.key, "err", err)
	}
	return Errorf(KindCorrupt, err, "%s in the store", t.key)
}

// localFailed handles a read of the verified local copy that failed. A
// record that fails its check (CRC-32C against the record or the copy's
// sums), or a file shorter than its index says, means the copy changed
// since it was verified (bit rot, another tool, a hand edit): it is
// dropped (once, whoever sees it first), counted and logged, what it may
// have put in memory is forgotten, and this read and later ones go to the
// store until the file is downloaded again. Any other error (EIO, say)
// only sends this read to the store.
func (t *table) localFailed(lc *localCopy, err error) {
	if !errors.Is(err, tablefile.ErrCorrupt) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.env.log.Warn("read cached file", "key", t.key, "err", err)
		return
	}
	t.forgetLocal(lc)
	if !t.env.disk.drop(lc.cf) {
		return
	}
	t.env.metrics.corrupt.Inc()
	t.env.log.Error("cached table file fails its check; dropped it, reading from the store", "db", t.db, "key", t.key, "err", err)
	// Every chunk in memory was proven on its way in, so none of this
	// file's can be wrong; forgetting them is a second line of defence.
	for _, e := range t.idx.Entries() {
		t.env.mem.forget(e.Addr)
	}
}

// chunkRead is one chunk read from a local file, passed on after the file
// is released.
type chunkRead struct {
	e    tablefile.Entry
	data []byte
}

// readRanges reads entries from r in merged ranges and decodes each with
// decode, stopping at the first range that fails (a range is all or
// nothing): it returns what it read and the entries it did not.
func (t *table) readRanges(r io.ReaderAt, entries []tablefile.Entry, decode func([]tablefile.Entry, [][]byte) ([][]byte, error)) (got []chunkRead, rest []tablefile.Entry, err error) {
	ranges := tablefile.MergeRanges(entries, 0, 1<<20)
	for i, rg := range ranges {
		buf := make([]byte, rg.Length)
		_, err = r.ReadAt(buf, int64(rg.Offset))
		t.env.metrics.diskReads.Inc()
		var reads []chunkRead
		if err == nil {
			stored := make([][]byte, len(rg.Entries))
			for k, e := range rg.Entries {
				stored[k] = buf[e.Offset-rg.Offset : e.End()-rg.Offset]
			}
			var data [][]byte
			if data, err = decode(rg.Entries, stored); err == nil {
				reads = make([]chunkRead, len(rg.Entries))
				for k, e := range rg.Entries {
					reads[k] = chunkRead{e, data[k]}
				}
			}
		}
		if err != nil {
			for _, r := range ranges[i:] {
				rest = append(rest, r.Entries...)
			}
			return got, rest, err
		}
		got = append(got, reads...)
	}
	return got, nil, nil
}

// decodeEach decodes chunks one by one with view (a verified copy's:
// checked, not hashed), for readRanges.
func decodeEach(view *tablefile.Table) func([]tablefile.Entry, [][]byte) ([][]byte, error) {
	return func(es []tablefile.Entry, stored [][]byte) ([][]byte, error) {
		out := make([][]byte, len(es))
		for i, e := range es {
			data, err := view.Decode(e, stored[i])
			if err != nil {
				return nil, err
			}
			out[i] = data
		}
		return out, nil
	}
}

// readMany reads entries of this file, merging nearby records into single
// reads: adjacent ones on disk, up to 64 KiB apart from the store, whose
// round trips cost far more than the bytes. fn gets nil data for misses
// under the NotFound policy. Records that fail their checks on local disk
// are read from the store instead. Local files are released before fn is
// called: a client that reads its answer slowly pins nothing.
func (t *table) readMany(ctx context.Context, entries []tablefile.Entry, fn func(e tablefile.Entry, data []byte, tier api.Tier) error) error {
	var (
		got    []chunkRead
		tier   api.Tier
		remote = entries
		tried  bool // the download in flight was read
	)
	if lc := t.acquireLocal(); lc != nil {
		var err error
		got, remote, err = t.readRanges(lc.cf, entries, decodeEach(lc.view))
		lc.cf.release()
		tier = api.TierDisk
		if err != nil {
			t.localFailed(lc, err)
		}
	} else if dl := t.acquireDownload(false); dl != nil {
		var err error
		tried = true
		got, remote, tier, err = t.readManyDownload(ctx, dl, entries)
		t.releaseDownload(dl)
		if err != nil {
			return err
		}
	}
	if err := pass(got, tier, fn); err != nil || len(remote) == 0 {
		return err
	}
	var n int64
	for _, e := range remote {
		n += int64(e.Length)
	}
	defer t.missed(n) // after the read (see read)
	if t.env.cfg.Miss == NotFound {
		for _, e := range remote {
			if err := fn(e, nil, api.TierStore); err != nil {
				return err
			}
		}
		return nil
	}
	t.downloadAppendix()
	if dl := t.acquireDownload(false); dl != nil && !tried { // the appendix's, just started: the read fills it
		var err error
		got, remote, tier, err = t.readManyDownload(ctx, dl, remote) // remote: what is left for the store
		t.releaseDownload(dl)
		if err == nil {
			err = pass(got, tier, fn)
		}
		if err != nil || len(remote) == 0 {
			return err
		}
	} else if dl != nil {
		t.releaseDownload(dl)
	}
	return t.readRemote(ctx, remote, fn)
}

// pass gives fn each chunk read, from tier.
func pass(got []chunkRead, tier api.Tier, fn func(e tablefile.Entry, data []byte, tier api.Tier) error) error {
	for _, r := range got {
		if err := fn(r.e, r.data, tier); err != nil {
			return err
		}
	}
	return nil
}

// readManyDownload reads entries from download dl (held): their blocks
// are proven first (fetched from the store where no one fetches them,
// several reads at once), then read from the file in merged reads. rest
// are the entries to read through the store (a stream was too slow, or
// the download ended); tier is partial, or store if some blocks were
// fetched for these entries.
func (t *table) readManyDownload(ctx context.Context, dl *download, entries []tablefile.Entry) (got []chunkRead, rest []tablefile.Entry, tier api.Tier, err error) {
	ranges := tablefile.MergeRanges(entries, 64<<10, 4<<20)
	ok := make([]bool, len(ranges))
	errs := make([]error, len(ranges))
	fetchedAny := make([]bool, len(ranges))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, r := range ranges {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			need := make([][2]int64, len(r.Entries)) // not the gaps between them
			for k, e := range r.Entries {
				need[k] = [2]int64{int64(e.Offset), int64(e.End())}
			}
			fetched, err := dl.ensure(ctx, int64(r.Offset), int64(r.Offset+r.Length), need, true)
			fetchedAny[i], ok[i] = fetched, err == nil
			if err != nil && !readElsewhere(err) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	tier = api.TierPartial
	var ready []tablefile.Entry
	for i, r := range ranges {
		if errs[i] != nil && err == nil {
			err = errs[i]
		}
		if fetchedAny[i] {
			tier = api.TierStore
		}
		if ok[i] {
			ready = append(ready, r.Entries...)
		} else {
			rest = append(rest, r.Entries...)
		}
	}
	if err != nil {
		return nil, nil, 0, err
	}
	got, more, rerr := t.readRanges(dl.f, ready, dl.decodeOrProve)
	if rerr != nil {
		if KindOf(rerr) == KindCorrupt {
			return nil, nil, 0, rerr // the store's copy: decodeOrProve proved it
		}
		t.env.log.Warn("read downloading file", "key", t.key, "err", rerr)
	}
	return got, append(rest, more...), tier, nil
}

// readRemote reads merged ranges from the store, up to 8 at once, and
// proves every chunk before fn sees it.
func (t *table) readRemote(ctx context.Context, entries []tablefile.Entry, fn func(e tablefile.Entry, data []byte, tier api.Tier) error) error {
	e := t.env
	ranges := tablefile.MergeRanges(entries, 64<<10, 4<<20)
	rctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
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
			octx, origin := store.TrackOrigin(rctx)
			n, err := e.store.ReadAt(octx, t.key, buf, int64(r.Offset))
			e.metrics.storeRead(n, origin)
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
		data, err := t.proveAll(res.r.Entries, res.buf, res.r.Offset)
		if err != nil {
			firstErr = t.corruptInStore(err)
			cancel()
			continue
		}
		for i, en := range res.r.Entries {
			if firstErr = fn(en, data[i], api.TierStore); firstErr != nil {
				cancel()
				break
			}
		}
	}
	return firstErr
}

func (t *table) info() api.TableInfo {
	ti := api.TableInfo{Name: t.name, Size: t.size, Chunks: t.idx.Count(), Appendix: t.appendix.Load(), State: api.StateRemote}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.local != nil && !t.local.cf.isEvicted():
		ti.State, ti.Downloaded = api.StateCached, t.size
	case t.dl != nil:
		ti.State, ti.Downloaded = api.StateDownloading, t.dl.provenBytes()
	}
	return ti
}

// extent widens [off, end) to whole units and returns them.
func (t *table) extent(off, end int64) (lo, hi int64, units []tablefile.Unit) {
	units = t.idx.Units(uint64(off), uint64(end))
	lo, hi = off, end
	if len(units) > 0 {
		lo, hi = min(lo, int64(units[0].Offset)), max(hi, int64(units[len(units)-1].End()))
	}
	return lo, hi, units
}

// checkLocal checks units of the verified copy (buf holds the file from
// offset lo) against its sums.
func (t *table) checkLocal(view *tablefile.Table, buf []byte, lo int64, units []tablefile.Unit) error {
	for _, u := range units {
		b := buf[int64(u.Offset)-lo : int64(u.End())-lo]
		checked, err := view.CheckUnit(u, b)
		if err != nil {
			return err
		}
		if !checked { // the copy's sums cover every unit; never trust less
			return &tablefile.CorruptError{Offset: int64(u.Offset), Reason: "the copy's sums do not cover this unit"}
		}
	}
	return nil
}

// index is the table file's index, which find searches.
func (t *table) index() *tablefile.Table { return t.idx }
