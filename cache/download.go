package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/tablefile"
)

// download is a whole-file download in flight. Bytes below arrived are on
// disk in f and may be served (after hashing) while the rest arrives.
// Readers hold f with table.acquireDownload; the last one out after the
// download ends closes it.
type download struct {
	f       *os.File // set under table.mu once the temp file exists
	arrived atomic.Int64
	// begun is when the download asked the store for the file (set with
	// f), flowing when its first bytes came (unix nanoseconds, 0 before),
	// over once it stopped streaming, whichever way: with arrived, how
	// soon the rest comes (await).
	begun, flowing atomic.Int64
	over           atomic.Bool
	refs           int  // readers holding f (table.mu)
	done           bool // the download ended (table.mu)
}

// await waits until the first end bytes of the file have arrived, as long
// as the download should bring them sooner than a read of the store
// would take (rtt, the store's recent average; 0, not known yet: no
// wait), and reports whether they arrived. It waits rtt at most, so a
// read that gives up on the download costs at most two store reads'
// time; one that does not saves a round trip to the store for bytes
// already on their way.
func (dl *download) await(ctx context.Context, end int64, rtt time.Duration) bool {
	if dl.arrived.Load() >= end {
		return true
	}
	if rtt <= 0 {
		return false
	}
	deadline := time.Now().Add(rtt)
	for {
		a := dl.arrived.Load()
		if a >= end {
			return true
		}
		now := time.Now()
		if dl.over.Load() || dl.eta(a, end, now, rtt) > deadline.Sub(now) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
		}
	}
}

// eta estimates how long until byte end arrives, arrived a at now: the
// rest at the rate so far, or, before the first bytes, the store's first
// byte about rtt after the download asked.
func (dl *download) eta(a, end int64, now time.Time, rtt time.Duration) time.Duration {
	f := dl.flowing.Load()
	if f == 0 {
		b := dl.begun.Load()
		if b == 0 {
			return time.Duration(1<<63 - 1) // waiting for a download slot: not soon
		}
		return time.Unix(0, b).Add(rtt).Sub(now)
	}
	flowed := now.Sub(time.Unix(0, f))
	if a <= 0 || flowed <= 0 {
		return 0
	}
	return time.Duration(float64(end-a) / float64(a) * float64(flowed))
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

func (t *table) acquireDownload() *download {
	t.mu.Lock()
	defer t.mu.Unlock()
	dl := t.dl
	if dl == nil || dl.f == nil {
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
// missed would: the file's first bytes then arrive about when that read
// ends, so the reads that follow (a SQLite version's open set lies at the
// start of its appendix) wait for the download rather than the store.
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
	dl := &download{}
	t.dl = dl
	t.local = nil
	e.wg.Add(1)
	t.mu.Unlock()

	e.metrics.downloads.WithLabelValues("started").Inc()
	go func() {
		defer e.wg.Done()
		start := time.Now()
		lc, err := t.fetch(dl)
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
		case errors.Is(err, errNeverFits), errors.Is(err, tablefile.ErrCorrupt):
			t.adm.never = err
		default:
			wait := firstRetryWait << min(t.adm.failures, 16)
			t.adm.retryAfter = time.Now().Add(min(wait, maxRetryWait))
			t.adm.failures++
		}
		t.mu.Unlock()
		if err != nil {
			e.metrics.downloads.WithLabelValues("failed").Inc()
			switch {
			case errors.Is(err, context.Canceled):
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
		e.log.Info("downloaded", "db", t.db, "key", t.key, "bytes", t.size, "took", time.Since(start).Round(time.Millisecond))
	}()
}

// errNeverFits: the file is larger than --disk or the file system.
var errNeverFits = errors.New("the file cannot fit")

// fetch downloads, verifies, syncs and commits the file.
func (t *table) fetch(dl *download) (lc *localCopy, err error) {
	e := t.env
	select {
	case e.dlSlots <- struct{}{}:
		defer func() { <-e.dlSlots }()
	case <-e.ctx.Done():
		return nil, e.ctx.Err()
	}
	if err := t.checkRoom(); err != nil {
		return nil, err
	}
	if err := e.disk.reserve(t.size); err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			e.disk.unreserve(t.size)
		}
	}()
	f, err := os.CreateTemp(filepath.Join(e.disk.dir, tmpDir), "download-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		if !committed {
			os.Remove(f.Name()) // readers of the part downloaded keep their handle
		}
	}()
	t.mu.Lock()
	dl.begun.Store(time.Now().UnixNano())
	dl.f = f
	t.mu.Unlock()

	err = t.stream(dl, f)
	dl.over.Store(true)
	if err != nil {
		return nil, err
	}
	var sums *tablefile.Sums
	inBackground(func() { sums, err = verifyDownload(e.ctx, f, t) })
	if err != nil {
		return nil, err
	}
	if !e.cfg.NoFsync {
		if err := e.disk.hooks.sync(f); err != nil {
			return nil, fmt.Errorf("fsync %s: %w", f.Name(), err)
		}
	}
	cf, err := e.disk.commit(t.key, f, t.size, sums)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", t.key, err)
	}
	committed = true
	view, err := t.idx.View(cf, sums)
	if err != nil { // verifyDownload matched the index hashes: cannot happen
		e.disk.drop(cf)
		return nil, err
	}
	return &localCopy{cf: cf, view: view}, nil
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
	total, avail := int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	if t.size > total {
		return fmt.Errorf("%w: %d bytes, more than the whole file system of %s (%d)", errNeverFits, t.size, d.dir, total)
	}
	if used := d.usedBytes(); t.size > avail+used {
		return fmt.Errorf("%w: %d bytes, more than the file system's %d free plus the cache's %d", errDiskFull, t.size, avail, used)
	}
	return nil
}

// stream copies the object into f, advancing dl.arrived as it goes.
func (t *table) stream(dl *download, f *os.File) error {
	e := t.env
	// A download has no overall deadline (a big file on a slow link takes
	// what it takes), but a store that sends nothing for StoreTimeout is
	// given up on, so a stalled connection does not hold a download slot.
	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	idle := e.cfg.StoreTimeout
	started := time.Now()
	watchdog := time.AfterFunc(idle, func() { cancel(errStalled) })
	defer watchdog.Stop()
	r, info, err := e.store.Open(ctx, t.key)
	if err != nil {
		return fmt.Errorf("open %s: %w", t.key, stalled(ctx, err, started))
	}
	defer r.Close()
	if info.Size != 0 && info.Size != t.size {
		return fmt.Errorf("%s is %d bytes, expected %d: changed in the store", t.key, info.Size, t.size)
	}
	buf := make([]byte, 1<<20)
	var off, freed int64
	last := time.Now()
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if off+int64(n) > t.size {
				return fmt.Errorf("%s is longer than %d bytes", t.key, t.size)
			}
			if err := t.writeDownload(f, buf[:n], off, t.size-off, &freed); err != nil {
				return fmt.Errorf("write %s: %w", f.Name(), err)
			}
			if off == 0 {
				dl.flowing.Store(time.Now().UnixNano())
			}
			off += int64(n)
			dl.arrived.Store(off)
			last = time.Now()
			watchdog.Reset(idle)
			e.metrics.addStoreBytes(int64(n))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("download %s at byte %d of %d: %w", t.key, off, t.size, stalled(ctx, rerr, last))
		}
	}
	if off != t.size {
		return fmt.Errorf("%s: got %d bytes, expected %d", t.key, off, t.size)
	}
	return nil
}

// ctxReaderAt fails reads once ctx is done.
type ctxReaderAt struct {
	ctx context.Context
	r   io.ReaderAt
}

func (c ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.ReadAt(p, off)
}

// writeDownload writes b at off of a download. When the file system is
// full (it may be shared, so the --disk budget alone cannot prevent it),
// it evicts cached files that no reader holds, least recently used first,
// and writes again, but evicts no more than the rest of the download
// needs (*freed counts what this download has evicted): space held by
// something else is not the cache's to win back by emptying itself.
func (t *table) writeDownload(f *os.File, b []byte, off, need int64, freed *int64) error {
	e := t.env
	for {
		_, err := e.disk.hooks.writeAt(f, b, off)
		if err == nil || !errors.Is(err, syscall.ENOSPC) {
			return err
		}
		if *freed >= need {
			return fmt.Errorf("%w: the file system is full after evicting %d bytes of cached files for this download: %v", errDiskFull, *freed, err)
		}
		n, ok := e.disk.evictOne()
		if !ok {
			return fmt.Errorf("%w: the file system is full and no cached file can be evicted: %v", errDiskFull, err)
		}
		*freed += n
		e.log.Warn("file system full: evicted a cached file to make room for a download", "download", t.key, "bytes", n)
	}
}

// errStalled cancels a download whose store sent nothing for too long.
var errStalled = errors.New("the store sent no bytes")

// stalled names the stall, with how long the store was silent, when the
// download was cancelled for one.
func stalled(ctx context.Context, err error, since time.Time) error {
	if errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("%w for %v (--store-timeout): %v", errStalled, time.Since(since).Round(time.Second), err)
	}
	return err
}

// verifyDownload checks a downloaded file before it may be served as a
// whole, and returns its sums: its index region must hash to the index
// the service already serves (so every offset the service reads the copy
// at is the verified one), every record must pass its CRC (or zstd)
// check, and every chunk must hash to its address — what api.CacheLayout
// promises same-host clients. Hashing a large file takes a while: a
// cancelled ctx (shutdown) stops it at the next read.
func verifyDownload(ctx context.Context, f *os.File, t *table) (*tablefile.Sums, error) {
	got, err := tablefile.Open(ctxReaderAt{ctx, f}, t.size, &tablefile.Options{IndexHash: true})
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", t.key, err)
	}
	have, ok := t.idx.IndexHash()
	if gotHash, _ := got.IndexHash(); !ok || gotHash != have {
		return nil, fmt.Errorf("verify %s: %w", t.key, &tablefile.CorruptError{Offset: got.DataEnd(), Reason: "the downloaded index differs from the one the service read from the store"})
	}
	var bad error
	_, err = got.Verify("", func(p tablefile.Problem) {
		if bad == nil {
			bad = p.Err
		}
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", t.key, err)
	}
	sums, err := got.ComputeSums()
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", t.key, err)
	}
	return sums, nil
}
