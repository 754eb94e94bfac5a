package server

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
// disk in f and may be served while the rest arrives.
type download struct {
	f       *os.File
	arrived atomic.Int64
}

// startDownload starts downloading the whole file in the background,
// unless it is already on disk or on its way (single flight).
func (t *table) startDownload() {
	c := t.c
	t.mu.Lock()
	if t.dl != nil || (t.file != nil && !t.file.isEvicted()) || c.ctx.Err() != nil || time.Now().Before(t.retryAfter) {
		t.mu.Unlock()
		return
	}
	dl := &download{}
	t.dl = dl
	t.file = nil
	c.wg.Add(1)
	t.mu.Unlock()

	c.metrics.downloads.WithLabelValues("started").Inc()
	go func() {
		defer c.wg.Done()
		start := time.Now()
		cf, err := t.fetch(dl)
		t.mu.Lock()
		t.dl = nil
		if err == nil {
			t.file = cf
			t.failures = 0
		} else {
			wait := firstRetryWait << min(t.failures, 16)
			t.retryAfter = time.Now().Add(min(wait, maxRetryWait))
			t.failures++
		}
		t.mu.Unlock()
		if err != nil {
			c.metrics.downloads.WithLabelValues("failed").Inc()
			if !errors.Is(err, context.Canceled) {
				c.log.Warn("download failed", "db", t.db, "key", t.key, "err", err)
			}
			return
		}
		c.metrics.downloads.WithLabelValues("finished").Inc()
		c.log.Info("downloaded", "db", t.db, "key", t.key, "bytes", t.size, "took", time.Since(start).Round(time.Millisecond))
	}()
}

// fetch downloads, verifies, syncs and commits the file.
func (t *table) fetch(dl *download) (cf *cachedFile, err error) {
	c := t.c
	select {
	case c.dlSem <- struct{}{}:
		defer func() { <-c.dlSem }()
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
	if err := c.disk.reserve(t.size); err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			c.disk.unreserve(t.size)
		}
	}()
	f, err := os.CreateTemp(filepath.Join(c.disk.dir, tmpDir), "download-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		if !committed {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	dl.f = f

	// A download has no overall deadline (a big file on a slow link takes
	// what it takes), but a store that sends nothing for StoreTimeout is
	// given up on, so a stalled connection does not hold a download slot.
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	idle := c.cfg.StoreTimeout
	watchdog := time.AfterFunc(idle, func() { cancel(errStalled) })
	defer watchdog.Stop()
	r, info, err := c.cfg.Store.Open(ctx, t.key)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", t.key, stalled(ctx, err, idle))
	}
	defer r.Close()
	if info.Size != 0 && info.Size != t.size {
		return nil, fmt.Errorf("%s is %d bytes, expected %d: changed in the store", t.key, info.Size, t.size)
	}
	buf := make([]byte, 1<<20)
	var off, freed int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if off+int64(n) > t.size {
				return nil, fmt.Errorf("%s is longer than %d bytes", t.key, t.size)
			}
			if err := c.writeDownload(f, buf[:n], off, t.key, t.size-off, &freed); err != nil {
				return nil, fmt.Errorf("write %s: %w", f.Name(), err)
			}
			off += int64(n)
			dl.arrived.Store(off)
			watchdog.Reset(idle)
			c.metrics.storeBytes.Add(float64(n))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("download %s at byte %d of %d: %w", t.key, off, t.size, stalled(ctx, rerr, idle))
		}
	}
	watchdog.Stop()
	if off != t.size {
		return nil, fmt.Errorf("%s: got %d bytes, expected %d", t.key, off, t.size)
	}
	if err := verifyDownload(c.ctx, f, t); err != nil {
		return nil, err
	}
	if !c.cfg.NoFsync {
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("fsync %s: %w", f.Name(), err)
		}
	}
	cf, err = c.disk.commit(t.key, f, t.size)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", t.key, err)
	}
	committed = true
	return cf, nil
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
func (c *Cache) writeDownload(f *os.File, b []byte, off int64, key string, need int64, freed *int64) error {
	for {
		_, err := c.writeAt(f, b, off)
		if err == nil || !errors.Is(err, syscall.ENOSPC) {
			return err
		}
		if *freed >= need {
			return fmt.Errorf("%w: the file system is full after evicting %d bytes of cached files for this download: %v", errDiskFull, *freed, err)
		}
		n, ok := c.disk.evictOne()
		if !ok {
			return fmt.Errorf("%w: the file system is full and no cached file can be evicted: %v", errDiskFull, err)
		}
		*freed += n
		c.log.Warn("file system full: evicted a cached file to make room for a download", "download", key, "bytes", n)
	}
}

// errStalled cancels a download whose store sent nothing for too long.
var errStalled = errors.New("the store sent no bytes")

// stalled names the stall when the download was cancelled for one.
func stalled(ctx context.Context, err error, idle time.Duration) error {
	if errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("%w for %v (--store-timeout): %v", errStalled, idle, err)
	}
	return err
}

// verifyDownload checks a downloaded file before it may be served as a
// whole: its footer and index must match the index the service already
// holds, every record must pass its CRC (or zstd) check, and every chunk
// must hash to its address — what api.CacheLayout promises same-host
// clients, which then check only CRCs. Hashing a large file takes a
// while: a cancelled ctx (shutdown) stops it at the next read.
func verifyDownload(ctx context.Context, f *os.File, t *table) error {
	got, err := tablefile.Open(ctxReaderAt{ctx, f}, t.size, nil)
	if err != nil {
		return fmt.Errorf("verify %s: %w", t.key, err)
	}
	if got.Count() != t.idx.Count() || got.DataEnd() != t.idx.DataEnd() || got.Format() != t.idx.Format() {
		return fmt.Errorf("verify %s: downloaded index differs from the store's", t.key)
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
		return fmt.Errorf("verify %s: %w", t.key, err)
	}
	return nil
}
