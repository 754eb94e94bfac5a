package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/tablefile"
)

// download is a whole-file download in flight. The file is cut into
// blocks (blocks.go) that are fetched with ranged reads of the store into
// a temporary file (fetch.go), several at once, the blocks readers wait
// for first; each block is proven once (proof.go: every chunk hashed to
// its address, the index region to the index the service serves), and
// served from the file as soon as it is proven, with the checks a cached
// file's reads get (record and span CRCs). Once every block is proven,
// the file is synced and committed: verify, fsync, rename.
//
// Readers hold the file with table.acquireDownload; the last one out
// after the download ends closes it.
type download struct {
	t     *table
	ready chan struct{} // closed once prepare has made the file, or failed
	m     *blockMap
	f     *os.File // set under table.mu once the temp file exists
	// view reads the index like t.idx, but archive dictionaries from the
	// download (or the store, for spans not written yet): chunks proven
	// with it prove the dictionaries it holds, so that reads of proven
	// blocks decode with them unhashed.
	view *tablefile.Table

	ctx    context.Context // ends with the download (or the service)
	cancel context.CancelFunc
	wg     sync.WaitGroup // the download's streams

	mu       sync.Mutex
	state    []blockState
	owner    []*stream // the stream a blockStreamed block waits for
	streams  []*stream // running
	spanCRC  []uint32  // archives: each span's CRC-32C, once proven
	unitDone []bool    // each unit (m.units): proven
	left     []int     // each block: its units not proven yet
	proven   int       // blocks proven
	bytes    int64     // bytes proven
	changed  chan struct{}
	err      error     // why the download failed, once it has
	cursor   int       // where background streams go next: past the last block a reader asked for
	wanted   int       // background streams to run (backgroundWanted)
	failures int       // stream failures since the last block arrived
	lastErr  error     // the last stream failure
	freed    int64     // bytes of cached files evicted to make room for writes (writeDownload)
	begun    time.Time // when the download started

	refs int  // readers holding f (table.mu)
	done bool // the download ended (table.mu)
}

// admission is what decides whether a miss starts a download (table.mu).
//
// The rule: a file is downloaded when it fits, and
//   - it is named as an appendix (made to be read whole), or
//   - it fits in the free part of --disk (the download evicts nothing), or
//   - the bytes read through from the store for it since it was last on
//     disk reach the size of its chunk data (every chunk read once):
//     renting has cost what buying does, so a working set larger than
//     --disk costs at most about twice the store bytes that reading
//     through alone would (a file evicted before it paid off is not
//     downloaded again on its next miss).
//
// Never: a file larger than --disk or than the file system, a file whose
// store copy failed verification, and, after a failure, not before a
// backoff (1 s, doubling to 5 min).
type admission struct {
	rented     int64
	failures   int
	retryAfter time.Time
	never      error // why this file is never downloaded
}

const (
	firstRetryWait = time.Second
	maxRetryWait   = 5 * time.Minute
)

// acquireDownload returns the download in flight, holding its file open
// until releaseDownload, or nil; nil too while a download just started
// makes its file, unless wait (a whole-file reader waits: that is local
// work, milliseconds, where a read through the store costs a round trip).
func (t *table) acquireDownload(wait bool) *download {
	t.mu.Lock()
	dl := t.dl
	t.mu.Unlock()
	if dl == nil {
		return nil
	}
	select {
	case <-dl.ready:
	default:
		if !wait {
			return nil
		}
		<-dl.ready
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dl != dl || dl.f == nil {
		return nil
	}
	dl.refs++
	return dl
}

func (t *table) releaseDownload(dl *download) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dl.refs--
	if dl.done && dl.refs == 0 && dl.f != nil {
		dl.f.Close()
	}
}

// downloadAppendix starts the download of an appendix file (made to be
// read whole) before a read through the store rather than after it, as
// missed would: the reads that follow (a SQLite version's open set lies
// at the start of its appendix) find their bytes in the download, or on
// their way.
func (t *table) downloadAppendix() {
	if t.appendix.Load() {
		t.missed(0)
	}
}

// missed records a miss of n stored bytes read through from the store
// and starts the file's download if admission says so.
func (t *table) missed(n int64) {
	e := t.env
	t.mu.Lock()
	t.adm.rented += n
	if t.size > e.disk.max && t.adm.never == nil {
		t.adm.never = fmt.Errorf("%w: %d bytes, more than --disk (%d)", errNeverFits, t.size, e.disk.max)
		e.log.Warn("file is never downloaded: it is larger than --disk; its chunks are read from the store", "db", t.db, "key", t.key, "bytes", t.size)
	}
	local := t.local != nil && !t.local.cf.isEvicted()
	start := t.dl == nil && !local && e.ctx.Err() == nil && t.adm.never == nil && e.owns(t.key) &&
		!time.Now().Before(t.adm.retryAfter) &&
		(t.appendix.Load() || t.adm.rented >= t.idx.DataEnd() || e.disk.fits(t.size))
	if !start {
		t.mu.Unlock()
		return
	}
	dl := &download{t: t, ready: make(chan struct{}), changed: make(chan struct{}), begun: time.Now()}
	dl.ctx, dl.cancel = context.WithCancel(e.ctx)
	t.dl = dl
	t.local = nil
	e.wg.Add(1)
	t.mu.Unlock()

	e.metrics.downloads.WithLabelValues("started").Inc()
	go func() {
		defer e.wg.Done()
		var lc *localCopy
		err := t.prepare(dl)
		close(dl.ready)
		if err == nil {
			lc, err = t.fetch(dl)
		}
		t.ended(dl, lc, err)
	}()
}

// errNeverFits: the file is larger than --disk or the file system.
var errNeverFits = errors.New("the file cannot fit")

// prepare makes room for the file and its temporary file, and the
// download's blocks; on success the download's file is visible to
// readers (acquireDownload).
func (t *table) prepare(dl *download) error {
	e := t.env
	if err := t.checkRoom(); err != nil {
		return err
	}
	m := newBlockMap(t.idx.Units(0, uint64(t.size)))
	if err := m.check(t.size); err != nil {
		return fmt.Errorf("%s: %w", t.key, err)
	}
	view, err := t.idx.View(downloadSource{dl}, nil)
	if err != nil {
		return err
	}
	if err := e.disk.reserve(t.size); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(e.disk.dir, tmpDir), "download-*")
	if err != nil {
		e.disk.unreserve(t.size)
		return err
	}
	dl.m, dl.view = m, view
	dl.state = make([]blockState, m.count())
	dl.owner = make([]*stream, m.count())
	dl.unitDone = make([]bool, len(m.units))
	dl.left = make([]int, m.count())
	for b := range dl.left {
		dl.left[b] = len(m.blockUnits(b, b+1))
	}
	if t.idx.Format().IsArchive() {
		dl.spanCRC = make([]uint32, len(m.units)-1) // every unit but the index region is a span
	}
	t.mu.Lock()
	dl.f = f
	t.mu.Unlock()
	return nil
}

// fetch fills the download's file (fetch.go) until every block is
// proven, then syncs and commits it. The space reserved and the temporary
// file are released unless it is committed.
func (t *table) fetch(dl *download) (lc *localCopy, err error) {
	e := t.env
	committed := false
	defer func() {
		if !committed {
			e.disk.unreserve(t.size)
			os.Remove(dl.f.Name()) // readers of the part downloaded keep their handle
		}
	}()
	err = dl.fill()
	dl.stop(err)
	if err != nil {
		return nil, err
	}
	sums := dl.sums()
	if !e.cfg.NoFsync {
		if err := e.disk.hooks.sync(dl.f); err != nil {
			return nil, fmt.Errorf("fsync %s: %w", dl.f.Name(), err)
		}
	}
	cf, err := e.disk.commit(t.key, dl.f, t.size, sums)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", t.key, err)
	}
	committed = true
	view, err := t.idx.View(cf, sums)
	if err != nil { // the sums are of the index the service serves: cannot happen
		e.disk.drop(cf)
		return nil, err
	}
	return &localCopy{cf: cf, view: view}, nil
}

// ended records how download dl ended: committed as lc, or failed.
func (t *table) ended(dl *download, lc *localCopy, err error) {
	e := t.env
	told := false
	t.mu.Lock()
	t.dl = nil
	dl.done = true
	if dl.refs == 0 && dl.f != nil {
		dl.f.Close()
	}
	switch {
	case err == nil:
		t.local = lc
		t.adm.failures, t.adm.rented = 0, 0
	case errors.Is(err, tablefile.ErrCorrupt), errors.Is(err, errNeverFits):
		// A read that proved the store's copy corrupt first has counted
		// and logged it (table.corruptInStore).
		told = t.adm.never != nil
		t.adm.never = err
	default:
		wait := firstRetryWait << min(t.adm.failures, 16)
		t.adm.retryAfter = time.Now().Add(min(wait, maxRetryWait))
		t.adm.failures++
	}
	t.mu.Unlock()
	dl.stop(err) // wakes readers waiting for blocks that will not come
	if err != nil {
		e.metrics.downloads.WithLabelValues("failed").Inc()
		switch {
		case errors.Is(err, context.Canceled), told:
		case errors.Is(err, tablefile.ErrCorrupt):
			e.metrics.storeCorrupt.Inc()
			e.log.Error("download failed verification: the store's copy is corrupt; never downloaded again, and its chunks are served only when each proves itself", "db", t.db, "key", t.key, "err", err)
		case errors.Is(err, errNeverFits):
			e.log.Warn("file is never downloaded: it cannot fit; its chunks are read from the store", "db", t.db, "key", t.key, "err", err)
		default:
			e.log.Warn("download failed", "db", t.db, "key", t.key, "err", err)
		}
		return
	}
	e.metrics.downloads.WithLabelValues("finished").Inc()
	e.log.Info("downloaded", "db", t.db, "key", t.key, "bytes", t.size, "took", time.Since(dl.begun).Round(time.Millisecond))
}

// sums returns the file's sums, from what its proofs recorded: the index
// region's SHA-256 (it hashed to the served index's) and each archive
// span's CRC-32C.
func (dl *download) sums() *tablefile.Sums {
	idx := dl.t.idx
	h, _ := idx.IndexHash()
	s := &tablefile.Sums{Size: dl.t.size, DataEnd: idx.DataEnd(), Index: h}
	dl.mu.Lock()
	s.Spans = slices.Clone(dl.spanCRC)
	dl.mu.Unlock()
	return s
}

// checkRoom fails a download that cannot fit: larger than --disk or the
// file system (never), or larger than the file system's free space plus
// what the cache could evict (not now: evicting would not be enough).
func (t *table) checkRoom() error {
	d := t.env.disk
	if t.size > d.max {
		return fmt.Errorf("%w: %d bytes, more than --disk (%d)", errNeverFits, t.size, d.max)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &st); err != nil {
		return nil // no figures: let the download find out
	}
	total, avail := int64(st.Blocks)*int64(st.Bsize), int64(st.Bavail)*int64(st.Bsize) // Bsize is uint32 on some systems
	if t.size > total {
		return fmt.Errorf("%w: %d bytes, more than the whole file system of %s (%d)", errNeverFits, t.size, d.dir, total)
	}
	if used := d.usedBytes(); t.size > avail+used {
		return fmt.Errorf("%w: %d bytes, more than the file system's %d free plus the cache's %d", errDiskFull, t.size, avail, used)
	}
	return nil
}

// write writes b at off of the download's file. When the file system is
// full (it may be shared, so the --disk budget alone cannot prevent it),
// it evicts cached files that no reader holds, least recently used first,
// and writes again, but evicts no more than the download's size in all:
// space held by something else is not the cache's to win back by
// emptying itself.
func (dl *download) write(b []byte, off int64) error {
	t := dl.t
	e := t.env
	for {
		_, err := e.disk.hooks.writeAt(dl.f, b, off)
		if err == nil || !errors.Is(err, syscall.ENOSPC) {
			if err != nil {
				return fmt.Errorf("write %s: %w", dl.f.Name(), err)
			}
			return nil
		}
		dl.mu.Lock()
		freed := dl.freed
		dl.mu.Unlock()
		if freed >= t.size {
			return fmt.Errorf("%w: the file system is full after evicting %d bytes of cached files for this download: %v", errDiskFull, freed, err)
		}
		n, ok := e.disk.evictOne()
		if !ok {
			return fmt.Errorf("%w: the file system is full and no cached file can be evicted: %v", errDiskFull, err)
		}
		dl.mu.Lock()
		dl.freed += n
		dl.mu.Unlock()
		e.log.Warn("file system full: evicted a cached file to make room for a download", "download", t.key, "bytes", n)
	}
}

// downloadSource is what a download's view reads archive dictionaries
// from: the download's file where their spans have been written, else the
// store. What it gives is unproven until a chunk decoded with it hashes
// to its address.
type downloadSource struct{ dl *download }

func (s downloadSource) ReadAt(p []byte, off int64) (int, error) {
	dl := s.dl
	if dl.written(off, off+int64(len(p))) {
		return dl.f.ReadAt(p, off)
	}
	return storeFile{dl.t.env, dl.t.key}.ReadAt(p, off)
}

// written reports whether bytes [lo, hi) are in the download's file.
func (dl *download) written(lo, hi int64) bool {
	i, j := dl.m.covering(lo, hi)
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for b := i; b < j; b++ {
		if dl.state[b] < blockArrived {
			return false
		}
	}
	return true
}

// provenBytes returns the bytes proven so far.
func (dl *download) provenBytes() int64 {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.bytes
}

// errStalled cancels a stream whose store sent nothing for too long.
var errStalled = errors.New("the store sent no bytes")

// errDownloadEnded: the download ended (failed, or committed) while a
// reader waited on it; the reader reads elsewhere.
var errDownloadEnded = errors.New("the download ended")

// errGaveUp: a reader stopped waiting for a stream's bytes and reads them
// from the store itself.
var errGaveUp = errors.New("gave up waiting for the download")
