// Package server is chunkd's cache service: it answers "chunk X of
// database D" from memory, from whole table files on local disk, from a
// file that is still downloading, or by reading through to the object
// store, and downloads whole files in the background so the next read is
// local.
//
// The index and bloom filter of every table file the service knows are
// kept in memory, so finding which file (and where in it) holds a chunk
// costs no IO, and a chunk served from disk costs exactly one read.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/maypok86/otter/v2"
	"golang.org/x/sync/singleflight"
)

// Cache is the cache service's core, shared by its HTTP and gRPC APIs.
type Cache struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	mem     *otter.Cache[addr.Addr, []byte]
	disk    *disk

	ctx    context.Context // canceled by Close: stops downloads
	cancel context.CancelFunc
	wg     sync.WaitGroup // downloads in flight
	dlSem  chan struct{}

	mu    sync.Mutex
	dbs   map[string]*database
	loads singleflight.Group // database loads and manifest refreshes

	// writeAt writes downloads; tests replace it to fill the disk.
	writeAt func(f *os.File, b []byte, off int64) (int, error)
}

// New opens a cache service over cfg.Store, keeping files in cfg.CacheDir.
// Files a previous run verified are found again without being re-read.
func New(cfg Config) (*Cache, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Cache{
		cfg:   cfg,
		log:   cfg.Logger,
		dbs:   make(map[string]*database),
		dlSem: make(chan struct{}, cfg.Downloads),
		writeAt: func(f *os.File, b []byte, off int64) (int, error) {
			return f.WriteAt(b, off)
		},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.metrics = newMetrics(cfg.Registry)
	mem, err := otter.New(&otter.Options[addr.Addr, []byte]{
		MaximumWeight: uint64(cfg.MemBytes),
		Weigher:       func(_ addr.Addr, v []byte) uint32 { return uint32(len(v)) + memOverhead },
	})
	if err != nil {
		return nil, fmt.Errorf("memory cache: %w", err)
	}
	c.mem = mem
	start := time.Now()
	var dropped int
	c.disk, dropped, err = openDisk(cfg.CacheDir, cfg.DiskBytes, !cfg.NoFsync, c.metrics)
	if err != nil {
		return nil, err
	}
	if dropped > 0 {
		c.log.Warn("cache directory was written by another chunkd version; removed its table files, which will be downloaded again", "dir", cfg.CacheDir, "files", dropped)
	}
	c.log.Info("cache directory loaded", "dir", cfg.CacheDir, "files", c.disk.fileCount(), "bytes", c.disk.usedBytes(), "took", time.Since(start).Round(time.Millisecond))
	c.metrics.diskBytes.Set(float64(c.disk.usedBytes()))
	return c, nil
}

// memOverhead is what the memory tier charges per chunk beyond its bytes.
const memOverhead = 64

// Close stops downloads (their partial files are removed) and waits for
// them. In-flight reads finish on their own.
func (c *Cache) Close() error {
	c.cancel()
	c.wg.Wait()
	c.mem.StopAllGoroutines()
	return c.disk.close()
}

// Result is one chunk's answer.
type Result struct {
	Data  []byte // nil when not found
	Found bool
	Tier  api.Tier
}

// GetChunk returns chunk a of database db.
func (c *Cache) GetChunk(ctx context.Context, db string, a addr.Addr) (Result, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return Result{}, err
	}
	t, e, err := d.find(ctx, c, a)
	if err != nil || t == nil {
		return Result{}, err
	}
	if data, ok := c.mem.GetIfPresent(a); ok {
		c.metrics.hit(api.TierMemory, len(data))
		return Result{data, true, api.TierMemory}, nil
	}
	data, tier, err := t.read(ctx, c, e)
	if err != nil {
		return Result{}, err
	}
	if data == nil { // NotFound miss policy
		return Result{}, nil
	}
	c.remember(a, data)
	c.metrics.hit(tier, len(data))
	return Result{data, true, tier}, nil
}

// remember puts a chunk in the memory tier, unless it alone outweighs the
// tier (which would only evict everything else, and linger until the
// cache's next maintenance).
func (c *Cache) remember(a addr.Addr, data []byte) {
	if int64(len(data))+memOverhead <= c.cfg.MemBytes {
		c.mem.Set(a, data)
	}
}

// GetChunks answers many addresses of one database, calling fn once per
// address (in no particular order; i is the position in addrs). Memory
// hits are answered first; the rest are grouped per file and read with
// merged reads.
//
// flush, if not nil, is called once after the memory hits have been passed
// to fn, so a streaming caller can push them to its client early.
func (c *Cache) GetChunks(ctx context.Context, db string, addrs []addr.Addr, fn func(i int, r Result) error, flush func()) error {
	d, err := c.database(ctx, db)
	if err != nil {
		return err
	}
	type want struct {
		i int
		e tablefile.Entry
	}
	perTable := map[*table][]want{}
	var order []*table
	for i, a := range addrs {
		// The database must hold the chunk before memory may answer: the
		// memory tier is shared by every database.
		t, e, err := d.find(ctx, c, a)
		if err != nil {
			return err
		}
		if t == nil {
			if err := fn(i, Result{}); err != nil {
				return err
			}
			continue
		}
		if data, ok := c.mem.GetIfPresent(a); ok {
			c.metrics.hit(api.TierMemory, len(data))
			if err := fn(i, Result{data, true, api.TierMemory}); err != nil {
				return err
			}
			continue
		}
		if perTable[t] == nil {
			order = append(order, t)
		}
		perTable[t] = append(perTable[t], want{i, e})
	}
	if flush != nil && len(order) > 0 {
		flush() // memory hits reach the client before any file is read
	}
	// Files are read at the same time (a batch over k cold files costs one
	// store round trip, not k); fn is called by one goroutine at a time.
	var (
		fnMu     sync.Mutex
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, t := range order {
		ws := perTable[t]
		entries := make([]tablefile.Entry, 0, len(ws))
		byAddr := make(map[addr.Addr][]int, len(ws))
		for _, w := range ws {
			if byAddr[w.e.Addr] == nil { // an address asked for twice is read once
				entries = append(entries, w.e)
			}
			byAddr[w.e.Addr] = append(byAddr[w.e.Addr], w.i)
		}
		wg.Add(1)
		go func(t *table) {
			defer wg.Done()
			err := t.readMany(bctx, c, entries, func(e tablefile.Entry, data []byte, tier api.Tier) error {
				if data != nil {
					c.remember(e.Addr, data)
					c.metrics.hit(tier, len(data))
				}
				res := Result{Data: data, Found: data != nil}
				if res.Found {
					res.Tier = tier
				}
				fnMu.Lock()
				defer fnMu.Unlock()
				for _, i := range byAddr[e.Addr] {
					if err := fn(i, res); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		}(t)
	}
	wg.Wait()
	return firstErr
}

// HasChunks reports which addresses database db holds, without IO.
func (c *Cache) HasChunks(ctx context.Context, db string, addrs []addr.Addr) ([]bool, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(addrs))
	for i, a := range addrs {
		t, _, err := d.find(ctx, c, a)
		if err != nil {
			return nil, err
		}
		out[i] = t != nil
	}
	return out, nil
}

// DBInfo describes a database: its root and table files, and which of
// them are cached.
func (c *Cache) DBInfo(ctx context.Context, db string) (api.DBInfo, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return api.DBInfo{}, err
	}
	return d.info(), nil
}

// database returns the loaded database db, loading its manifest and every
// table index on first use.
func (c *Cache) database(ctx context.Context, name string) (*database, error) {
	if err := manifest.ValidateName(name); err != nil {
		return nil, errorf(http.StatusBadRequest, nil, "%v", err)
	}
	c.mu.Lock()
	d := c.dbs[name]
	c.mu.Unlock()
	if d != nil {
		return d, nil
	}
	v, err, _ := c.loads.Do("db/"+name, func() (any, error) {
		c.mu.Lock()
		d := c.dbs[name]
		c.mu.Unlock()
		if d != nil {
			return d, nil
		}
		// The load is shared by every request waiting on it, so it runs
		// on the service's context: one caller giving up must not fail
		// the others.
		d, err := c.loadDatabase(c.ctx, name)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.dbs[name] = d
		c.mu.Unlock()
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*database), nil
}

// storeErr turns a store error into a service error.
func storeErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, err, "%s", msg)
	case errors.Is(err, store.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %v", msg, ErrStoreUnreachable, err)
	case errors.Is(err, store.ErrAccessDenied):
		return errorf(http.StatusBadGateway, err, "%s", msg)
	}
	return fmt.Errorf("%s: %w", msg, err)
}
