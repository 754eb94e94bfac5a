// Package cache is the core of chunkd's cache service: it answers "chunk X of
// database D" from memory, from whole table files on local disk, from a
// file that is still downloading, or by reading through to the object
// store, and downloads whole files in the background so the next read is
// local.
//
// The index and bloom filter of every table file the service knows are
// kept in memory, so finding which file (and where in it) holds a chunk
// costs no IO, and a chunk served from disk costs exactly one read.
//
// No byte leaves the service, and none enters its memory tier, unless it
// was proven to hash to its address: bytes from the store are hashed
// (SHA-512); a download in progress proves each of its blocks once, as it
// arrives or when first read, and its reads are then checked as a cached
// file's are; bytes from a cached file, every chunk of which was hashed
// before the file was renamed into the cache, are checked against the
// file's sums (CRC-32C of the record or archive span, and an index region
// that hashes to the verified one). Store reads are hedged (store.Hedge).
//
// The package knows no transport: packages httpapi and grpcapi serve it
// over HTTP and gRPC, sqlserve adds SQLite's open sets and page images,
// and doltremote Dolt's remote protocol, each through the exported API.
//
// The files, one concern each: cache.go (the Cache and its chunk API),
// memory.go (the memory tier), database.go and state.go (databases, their
// manifests and saved state), files.go (a database's table files as
// files: snapshots and whole-file reads, for the Dolt remote), table.go
// (reads of one table file, and what a miss does), download.go
// (whole-file downloads: admission, their life from reservation to
// commit), blocks.go (a download's blocks and their states), fetch.go
// (how a download fetches its blocks: streams, readers' own reads, who
// waits for whom), proof.go (proving each block once, and reading proven
// ones), disk.go (the cache directory and its budget), view.go (what the
// service shows of itself), health.go (whether the store answers),
// errors.go (error kinds), metrics.go, config.go, priority_*.go (the
// low-priority thread that proves downloads), keys.go (tables by store
// key: one per file, whoever opens it, and what a cluster asks by key).
//
// The miss path is table.read and table.readMany (a chunk), and
// FileReader.Copy (a file): each asks the download in flight, if any
// (download.ensure), then the store, and tells admission (table.missed),
// which starts downloads; what a download fetches, from where and in which
// order, is fetch.go's alone.
//
// Lock order, outermost first: database.refreshMu (held for a whole
// manifest read), Cache.mu, database.mu, table.mu, download.mu, disk.mu,
// cachedFile.mu. Taken alone (nothing else is taken while they are
// held): database.stateMu, database.nowMu, storeHealth.mu, keyTables.mu. Counters are
// atomics.
package cache

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"golang.org/x/sync/singleflight"
)

// env is what databases and tables need of the service, given to them at
// construction.
type env struct {
	cfg     Config
	store   store.Store
	log     *slog.Logger
	metrics *metrics
	mem     *memory
	disk    *disk
	health  *storeHealth
	// hedge is the store as the service reads it (store is hedge): reads
	// slower than recent ones get a second request; its deadlines say how
	// long a read should take.
	hedge *store.Hedged
	// streamRate is how fast a download's stream delivers, lately.
	streamRate rate
	// lastRead is when a reader last asked for a chunk or a file's bytes
	// (unix nanoseconds): downloads prove at the service's own priority
	// only when readers have been quiet for a while.
	lastRead atomic.Int64

	ctx context.Context // canceled by Close: stops downloads and loads
	wg  sync.WaitGroup  // downloads and background loads in flight
	// dlSlots bounds the background streams of downloads running at once
	// (Config.Downloads).
	dlSlots chan struct{}
	// keys holds every open table by store key (keys.go).
	keys keyTables
}

// Cache is the cache service's core, shared by its HTTP and gRPC APIs
// and the features that plug into them.
type Cache struct {
	*env
	cancel context.CancelFunc

	mu    sync.Mutex
	dbs   map[string]*database
	loads singleflight.Group // database loads
}

// New opens a cache service over cfg.Store, keeping files in cfg.CacheDir.
// Files a previous run verified are found again without being re-read. It
// fails if another service holds the cache directory.
func New(cfg Config) (*Cache, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, log: cfg.Logger, dlSlots: make(chan struct{}, cfg.Downloads), health: &storeHealth{}, keys: keyTables{m: map[string]*table{}}}
	e.hedge = store.Hedge(watchedStore{Store: cfg.Store, h: e.health, log: cfg.Logger}, cfg.hedge)
	e.store = e.hedge
	c := &Cache{env: e, dbs: make(map[string]*database)}
	e.ctx, c.cancel = context.WithCancel(context.Background())
	e.metrics = newMetrics(cfg.Registry)
	registerHedges(cfg.Registry, e.hedge)
	var err error
	if e.mem, err = newMemory(cfg.MemBytes); err != nil {
		return nil, err
	}
	start := time.Now()
	var dropped int
	e.disk, dropped, err = openDisk(cfg.CacheDir, cfg.DiskBytes, !cfg.NoFsync, e.metrics, cfg.hooks)
	if err != nil {
		e.mem.close()
		return nil, err
	}
	if dropped > 0 {
		c.log.Warn("removed cached table files that were not written by this version's checked commit; they will be downloaded again", "dir", cfg.CacheDir, "files", dropped)
	}
	c.log.Info("cache directory loaded", "dir", cfg.CacheDir, "files", e.disk.fileCount(), "bytes", e.disk.usedBytes(), "took", time.Since(start).Round(time.Millisecond))
	e.metrics.diskBytes.Set(float64(e.disk.usedBytes()))
	c.registerViewMetrics(cfg.Registry)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.keepRootsFresh()
	}()
	return c, nil
}

// rootWatch is how long after a client last asked for a database's root
// the service keeps re-checking its manifest ahead of time.
const rootWatch = 10 * time.Minute

// keepRootsFresh re-checks, every half ManifestTTL, the manifest of each
// database whose root a client asked for within rootWatch, so that the
// next client to ask (a new SQL process opening the database) finds it
// fresh and does not wait on the store: one conditional read per half
// TTL per database in use, none for databases only read by address.
func (c *Cache) keepRootsFresh() {
	t := time.NewTicker(max(c.cfg.ManifestTTL/2, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		dbs := c.loaded()
		for _, d := range dbs {
			if d.rootWatched() {
				if err := d.refreshAhead(); err != nil && c.ctx.Err() == nil {
					c.log.Debug("manifest not re-checked ahead of time", "db", d.name, "err", err)
				}
			}
		}
	}
}

// Close stops downloads (their partial files are removed) and background
// loads, waits for them, and releases the cache directory. In-flight reads
// finish on their own.
func (c *Cache) Close() error {
	c.cancel()
	c.wg.Wait()
	c.mem.close()
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
	c.lastRead.Store(time.Now().UnixNano())
	d, err := c.database(ctx, db)
	if err != nil {
		return Result{}, err
	}
	t, e, err := d.findFresh(ctx, a)
	if err != nil || t == nil {
		return Result{}, err
	}
	// The database holds the chunk: memory may answer (it is shared by
	// all databases, and holds only proven bytes).
	if data, ok := c.mem.get(a); ok {
		d.hit(api.TierMemory, len(data))
		return Result{data, true, api.TierMemory}, nil
	}
	data, tier, err := t.read(ctx, e)
	if err != nil || data == nil { // data == nil: the NotFound miss policy
		return Result{}, err
	}
	c.mem.put(a, data)
	d.hit(tier, len(data))
	return Result{data, true, tier}, nil
}

// GetChunks answers many addresses of one database, calling fn once per
// address (in no particular order; i is the position in addrs). Memory
// hits are answered first; the rest are grouped per file and read with
// merged reads.
//
// flush, if not nil, is called once after the memory hits have been passed
// to fn, so a streaming caller can push them to its client early.
func (c *Cache) GetChunks(ctx context.Context, db string, addrs []addr.Addr, fn func(i int, r Result) error, flush func()) error {
	c.lastRead.Store(time.Now().UnixNano())
	d, err := c.database(ctx, db)
	if err != nil {
		return err
	}
	type want struct {
		i int
		e tablefile.Entry
	}
	perTable := map[*table][]want{}
	var (
		order  []*table
		misses []int
	)
	for i, a := range addrs {
		t, e, err := d.find(ctx, a)
		if err != nil {
			return err
		}
		if t == nil {
			misses = append(misses, i)
			continue
		}
		if data, ok := c.mem.get(a); ok {
			d.hit(api.TierMemory, len(data))
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
	// What no known file holds is looked for again once the manifest has
	// been read now (a version published a moment ago), then answered.
	if len(misses) > 0 {
		if err := d.refreshNow(ctx); err != nil {
			return err
		}
		for _, i := range misses {
			t, e, err := d.find(ctx, addrs[i])
			if err != nil {
				return err
			}
			if t == nil {
				if err := fn(i, Result{}); err != nil {
					return err
				}
				continue
			}
			if perTable[t] == nil {
				order = append(order, t)
			}
			perTable[t] = append(perTable[t], want{i, e})
		}
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
			err := t.readMany(bctx, entries, func(e tablefile.Entry, data []byte, tier api.Tier) error {
				if data != nil {
					c.mem.put(e.Addr, data)
					d.hit(tier, len(data))
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

// HasChunks reports which addresses database db holds: those Locate
// finds.
func (c *Cache) HasChunks(ctx context.Context, db string, addrs []addr.Addr) ([]bool, error) {
	locs, err := c.Locate(ctx, db, addrs)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(locs))
	for i, l := range locs {
		out[i] = l.File != ""
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

// WaitCached waits until the table files of database db that match
// (every file, if match is nil) are all on disk, and at least one file
// matches. It gives up after timeout, or when ctx ends, with an error
// naming the files still missing. It only watches: downloads start with
// misses.
func (c *Cache) WaitCached(ctx context.Context, db string, timeout time.Duration, match func(api.TableInfo) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pause := time.Millisecond
	for {
		info, err := c.DBInfo(ctx, db)
		if err != nil {
			return err
		}
		matched := false
		var missing []string
		for _, ti := range info.Tables {
			if match == nil || match(ti) {
				matched = true
				if ti.State != api.StateCached {
					missing = append(missing, ti.Name)
				}
			}
		}
		if matched && len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if !matched {
				return fmt.Errorf("database %s: no table file to wait for: %w", db, ctx.Err())
			}
			return fmt.Errorf("database %s: table files %v not cached: %w", db, missing, ctx.Err())
		case <-time.After(pause):
			pause = min(2*pause, 50*time.Millisecond)
		}
	}
}

// Root returns database db's current root and how fresh it is (see
// api.RootInfo); fresh asks the service to check the store's manifest
// first (one HEAD when it has not changed).
func (c *Cache) Root(ctx context.Context, db string, fresh bool) (api.RootInfo, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return api.RootInfo{}, err
	}
	return d.currentRoot(ctx, fresh)
}

// CheckVersion checks that root names a version of database db: that
// one of its files holds the root chunk. A root it does not know yet
// makes it read the store's manifest again first (a version published a
// moment ago is known at once, not after ManifestTTL), in a read that
// began after the call, shared by concurrent callers and at most one per
// database every minFreshInterval. A root no version has (the all-zero
// root included) is an error of KindNoSuchVersion.
func (c *Cache) CheckVersion(ctx context.Context, db string, root addr.Addr) error {
	d, err := c.database(ctx, db)
	if err != nil {
		return err
	}
	if root.IsEmpty() {
		return Errorf(KindNoSuchVersion, nil, "no such version %s of database %q: the all-zero root names no version", root, db)
	}
	for fresh := false; ; fresh = true {
		t, _, err := d.find(ctx, root)
		if err != nil {
			return err
		}
		if t != nil {
			return nil
		}
		if fresh {
			return Errorf(KindNoSuchVersion, nil, "no such version %s of database %q: no table file of its manifest holds that root", root, db)
		}
		if err := d.refreshNow(ctx); err != nil {
			return err
		}
	}
}

// ManifestVersion returns the version of database db's manifest object as
// the cache last read it ("" while it serves the database from its saved
// state): it changes whenever the manifest does (a new version, or gc
// dropping files), for a feature that keeps what it read of the database
// until then.
func (c *Cache) ManifestVersion(ctx context.Context, db string) (string, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return "", err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.version, nil
}

// FreshRoot is Root checked against the store now: where Root with fresh
// answers the last root known, marked stale, when the store's manifest
// cannot be read, FreshRoot fails with the store's kind (unreachable,
// denied).
func (c *Cache) FreshRoot(ctx context.Context, db string) (api.RootInfo, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return api.RootInfo{}, err
	}
	info, why, err := d.rootInfo(ctx, true)
	if err != nil {
		return api.RootInfo{}, err
	}
	if info.Stale {
		return api.RootInfo{}, Errorf(KindOf(why), why, "database %q: a fresh root was asked for, but the store's manifest could not be read (the last root known, %s, was read %d ms ago)", db, info.Root, info.AgeMS)
	}
	return info, nil
}

// Ready says whether the service can serve, and how: "" when all is well,
// else what a reader should know (the store is unreachable or denies
// access, and reads are served from the files on disk).
func (c *Cache) Ready() (ok bool, note string) {
	if c.ctx.Err() != nil {
		return false, "shutting down"
	}
	return true, c.health.note()
}

// LoadDB loads database db if it is not loaded yet (as every call that
// names it does), and returns the error that makes it unservable: a bad
// name, an unknown database, a store that cannot be read. Callers that
// answer in a stream call it first, so that such errors are answered
// before the stream begins.
func (c *Cache) LoadDB(ctx context.Context, db string) error {
	_, err := c.database(ctx, db)
	return err
}

// Store is the store the cache reads, as it reads it (its failures count
// in the service's health), for a feature that reads objects of its own
// beside the databases' files.
func (c *Cache) Store() store.Store { return c.store }

// Logger is the logger the cache was configured with, for the APIs that
// serve it.
func (c *Cache) Logger() *slog.Logger { return c.log }

// database returns the loaded database db, loading it on first use: from
// its saved state and files on disk when it has them (the manifest is
// read in the background), else from the store.
func (c *Cache) database(ctx context.Context, name string) (*database, error) {
	if err := manifest.ValidateName(name); err != nil {
		return nil, Errorf(KindBadRequest, err, "bad database name")
	}
	c.mu.Lock()
	d := c.dbs[name]
	c.mu.Unlock()
	if d != nil {
		return d, nil
	}
	v, err, _ := c.loads.Do(name, func() (any, error) {
		c.mu.Lock()
		d := c.dbs[name]
		c.mu.Unlock()
		if d != nil {
			return d, nil
		}
		// The load is shared by every request waiting on it, so it runs
		// on the service's context: one caller giving up must not fail
		// the others.
		d, err := loadDatabase(c.env, name)
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

// loaded returns the databases loaded so far, a snapshot taken under c.mu.
func (c *Cache) loaded() []*database {
	c.mu.Lock()
	defer c.mu.Unlock()
	dbs := make([]*database, 0, len(c.dbs))
	for _, d := range c.dbs {
		dbs = append(dbs, d)
	}
	return dbs
}
