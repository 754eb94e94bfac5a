package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
	"golang.org/x/sync/singleflight"
)

// database is one database the service has seen: its manifest and the
// in-memory indexes of all its table files.
type database struct {
	env  *env
	name string
	mdb  *manifest.DB

	mu     sync.RWMutex
	root   addr.Addr
	tables []*table // appendix files first: a miss prefers to download them
	byName map[string]*table
	// loadedAt is when the manifest was last read; zero while the
	// database is built from its saved state only (state.go), which is
	// never enough to call a chunk absent.
	loadedAt time.Time
	version  string // the manifest object's version when last read ("" unknown)
	// missing counts table files the database has but the service could
	// not open: files not on disk when it was built from its saved state,
	// or files whose index is unreadable. Until a refresh opens them, a
	// chunk found in no file is unknown, not absent, and find returns
	// missingErr.
	missing    int
	missingErr error

	refreshes singleflight.Group // manifest reads unless fresh, shared
	// refreshMu lets one refresh run at a time, so that they publish in
	// the order they read the store: a slow shared read must not publish
	// an older version after a fresh read has published a newer one.
	refreshMu sync.Mutex
	nowMu     sync.Mutex
	nowRead   *freshRead // the strictly fresh read under way (refreshNow)
	nowLast   time.Time  // when the last one began (nowMu)
	// rootAsked is when a client last asked for the root (unix nanos):
	// while recent, the manifest is re-checked ahead of time
	// (Cache.keepRootsFresh).
	rootAsked atomic.Int64

	m *manifest.Manifest // the manifest last published (mu); nil while served from saved state

	served tierCounter // chunks served from it, by tier (view.go)

	stateMu sync.Mutex
	saved   []byte // the state last saved (saveState)
}

// loadDatabase loads database name. When the cache directory has its
// saved state and some of its files, it is served from those at once
// while the manifest is read in the background (a restart does not wait
// on the store, and a store that is down or denies access leaves the
// files on disk readable); otherwise its manifest is read first.
func loadDatabase(e *env, name string) (*database, error) {
	mdb, err := manifest.Open(e.ctx, e.store, name)
	if err != nil {
		return nil, Errorf(KindBadRequest, err, "database %q", name)
	}
	d := &database{env: e, name: name, mdb: mdb, byName: map[string]*table{}}
	serr := d.loadSaved()
	if serr == nil && len(d.tables) > 0 {
		e.log.Info("serving the database's files on disk from its saved state; reading its manifest", "db", name, "files", len(d.tables), "not on disk", d.missing)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			if err := d.refreshShared(e.ctx); err != nil && e.ctx.Err() == nil {
				e.log.Warn("database manifest not read: serving its files on disk", "db", name, "err", err)
			}
		}()
		return d, nil
	}
	if err := d.refresh(e.ctx); err != nil {
		if serr == nil && isStoreFailure(err) {
			e.log.Warn("store failing: serving the database from its saved state", "db", name, "files", len(d.tables), "not on disk", d.missing, "err", err)
			return d, nil
		}
		if serr != nil && !errors.Is(serr, errNoState) {
			e.log.Warn("saved database state not used", "db", name, "err", serr)
		}
		return nil, err
	}
	return d, nil
}

// isStoreFailure reports whether err says the store could not be asked:
// unreachable, or denying access.
func isStoreFailure(err error) bool {
	k := KindOf(err)
	return k == KindStoreUnreachable || k == KindStoreDenied
}

// refreshShared reads the manifest again unless it is fresh, once for all
// concurrent callers; a caller whose ctx ends stops waiting. While it is
// fresh, it costs a look at the time of the last read: no goroutine, no
// channel (every "current" query of the query API asks for the root).
func (d *database) refreshShared(ctx context.Context) error {
	if d.fresh() {
		return nil
	}
	ch := d.refreshOlder(d.env.cfg.ManifestTTL)
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return Errorf(KindCanceled, ctx.Err(), "database %q: waiting for its manifest", d.name)
	}
}

// rootWatched reports whether a client asked for the root within
// rootWatch.
func (d *database) rootWatched() bool {
	return time.Since(time.Unix(0, d.rootAsked.Load())) < rootWatch
}

// refreshAhead re-checks the manifest once it is half its TTL old,
// shared with the refreshes of misses and root requests.
func (d *database) refreshAhead() error {
	return (<-d.refreshOlder(d.env.cfg.ManifestTTL / 2)).Err
}

// refreshOlder reads the manifest again unless it was read within age,
// once for all concurrent callers (of any age).
func (d *database) refreshOlder(age time.Duration) <-chan singleflight.Result {
	return d.refreshes.DoChan("", func() (any, error) {
		d.refreshMu.Lock()
		defer d.refreshMu.Unlock()
		if d.youngerThan(age) { // read meanwhile, by a fresh request say
			return nil, nil
		}
		return nil, d.refreshLocked(d.env.ctx)
	})
}

func (d *database) fresh() bool { return d.youngerThan(d.env.cfg.ManifestTTL) }

// youngerThan reports whether the manifest was read within age.
func (d *database) youngerThan(age time.Duration) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return !d.loadedAt.IsZero() && time.Since(d.loadedAt) < age
}

// atHand reports whether table file name is on disk or open already
// (under either of its keys): opening it then needs no index bytes from
// the store (openTable).
func (d *database) atHand(name string) bool {
	base, err := d.mdb.TableKey(name)
	if err != nil {
		return false
	}
	e := d.env
	for _, k := range []string{base, base + manifest.ArchiveSuffix} {
		if e.disk.get(k) != nil || e.keys.has(k) {
			return true
		}
	}
	return false
}

// refresh reads the manifest again and opens the indexes of any files it
// has not seen (tableset.Loader); indexes of files it already knows are
// kept. Each store request has its own deadline (StoreTimeout), not the
// load as a whole: a database of a thousand files takes many round trips.
func (d *database) refresh(ctx context.Context) error {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	return d.refreshLocked(ctx)
}

// refreshLocked is refresh, with refreshMu held.
func (d *database) refreshLocked(ctx context.Context) error {
	e := d.env
	loader := &tableset.Loader[*table]{
		DB:        d.mdb,
		Timeout:   e.cfg.StoreTimeout,
		IndexTail: e.cfg.IndexTail,
		AtHand:    d.atHand,
		OpenIndex: func(ctx context.Context, o tableset.Object) (*tablefile.Table, *table, error) {
			t, err := openTable(ctx, d, o)
			if err != nil {
				return nil, nil, err
			}
			return t.idx, t, nil
		},
	}
	if unchanged, err := d.manifestUnchanged(ctx); err != nil {
		return err
	} else if unchanged {
		return nil
	}
	m, version, err := loader.Manifest(ctx)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Errorf(KindUnknownDB, nil, "unknown database %q: no manifest in %s", d.name, e.store)
		}
		return storeErr(err, "load database %q", d.name)
	}
	d.mu.RLock()
	known := d.byName
	d.mu.RUnlock()
	set := loader.Open(ctx, m, func(name string) (*tableset.File[*table], bool) {
		t := known[name]
		if t == nil {
			return nil, false
		}
		return &tableset.File[*table]{Object: tableset.Object{Name: t.name, Key: t.key, Size: t.size}, Index: t.idx, Value: t}, true
	})
	// A store that cannot be asked fails the load (the next request tries
	// again). A file that cannot be opened (corrupt, missing from the
	// store) does not keep the others from being served, unless none can
	// be.
	for _, fe := range set.Failed {
		if isStoreFailure(fe.Err) {
			return storeErr(fe.Err, "database %q: table file %s", d.name, fe.Name)
		}
	}
	var missingErr error
	if err := set.Err(); err != nil {
		if len(set.Files) == 0 {
			return storeErr(err, "database %q", d.name)
		}
		// Its own kind: the cause (a file missing from the store, say)
		// must not turn "unknown" into a 404, which reads as "absent".
		missingErr = Errorf(KindUnknownChunk, err, "database %q: %d of its table files could not be opened, and the chunk is in none of the others", d.name, len(set.Failed))
		e.log.Error("table files of the database could not be opened; serving the others", "db", d.name, "files", len(set.Failed), "err", err)
	}
	tables := make([]*table, 0, len(set.Files))
	byName := make(map[string]*table, len(set.Files))
	for _, f := range set.Files {
		f.Value.appendix.Store(f.Appendix)
		tables = append(tables, f.Value)
		byName[f.Name] = f.Value
	}
	d.publish(m.Root, tables, byName, len(set.Failed), missingErr, time.Now())
	// Files the manifest no longer names (gc collected them, or merged
	// them into others) leave the disk: nothing reads them any more.
	named := make(map[string]bool, len(m.Specs))
	for _, spec := range m.Specs {
		named[spec.Name] = true
	}
	for name, t := range known {
		if !named[name] {
			e.keys.forget(t)
			if cf := e.disk.get(t.key); cf != nil && e.disk.drop(cf) {
				e.log.Info("dropped a cached table file its database's manifest no longer names", "db", d.name, "file", name)
			}
		}
	}
	d.setManifest(m) // files.go
	d.mu.Lock()
	d.version = version
	d.mu.Unlock()
	d.saveState()
	return nil
}

// manifestUnchanged checks the manifest object's version with one HEAD
// (a conditional read): when it is the version last read and every file
// opened, the database is as it was, and only loadedAt moves.
func (d *database) manifestUnchanged(ctx context.Context) (bool, error) {
	d.mu.RLock()
	version, missing := d.version, d.missing
	d.mu.RUnlock()
	if version == "" || missing > 0 {
		return false, nil
	}
	hctx, cancel := context.WithTimeout(ctx, d.env.cfg.StoreTimeout)
	info, err := d.env.store.Head(hctx, d.mdb.ManifestKey())
	cancel()
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return false, nil // the full read says what is wrong
		}
		return false, storeErr(err, "check the manifest of database %q", d.name)
	}
	if info.Version != version {
		return false, nil
	}
	d.mu.Lock()
	d.loadedAt = time.Now()
	d.mu.Unlock()
	return true, nil
}

// currentRoot returns the root with how fresh it is: checked within
// ManifestTTL (at once when fresh is asked), or the last known one
// marked stale when the store cannot be asked.
func (d *database) currentRoot(ctx context.Context, fresh bool) (api.RootInfo, error) {
	info, _, err := d.rootInfo(ctx, fresh)
	return info, err
}

// rootInfo is currentRoot, with why the root is stale (the store's error)
// when it is.
func (d *database) rootInfo(ctx context.Context, fresh bool) (info api.RootInfo, why, err error) {
	d.rootAsked.Store(time.Now().UnixNano())
	if fresh {
		err = d.refreshNow(ctx)
	} else {
		err = d.refreshShared(ctx) // a no-op while the manifest is fresh
	}
	d.mu.RLock()
	info = api.RootInfo{Root: d.root.String(), AgeMS: -1, TTLMS: d.env.cfg.ManifestTTL.Milliseconds()}
	if !d.loadedAt.IsZero() {
		info.AgeMS = time.Since(d.loadedAt).Milliseconds()
	}
	known := !d.root.IsEmpty()
	d.mu.RUnlock()
	if err != nil {
		if !known || !isStoreFailure(err) {
			return api.RootInfo{}, nil, err
		}
		info.Stale = true
		return info, err, nil
	}
	return info, nil, nil
}

// refreshNow reads (or checks) the manifest now, for a caller that wants
// a strictly fresh answer: it shares a read only with other such callers,
// and only one that started after it asked (one that started before may
// have read the manifest before a version the caller knows of).
func (d *database) refreshNow(ctx context.Context) error {
	asked := time.Now()
	for {
		d.nowMu.Lock()
		r := d.nowRead
		if r == nil {
			// At most one strict read every minFreshInterval: a flood of
			// fresh roots, or of roots no version has, costs the store a
			// bounded number of reads (one HEAD each when the manifest has
			// not changed).
			start := time.Now()
			if next := d.nowLast.Add(minFreshInterval); next.After(start) {
				start = next
			}
			d.nowLast = start
			r = &freshRead{started: start, done: make(chan struct{})}
			d.nowRead = r
			go func() {
				time.Sleep(time.Until(start))
				if err := d.env.ctx.Err(); err != nil { // the service closed
					r.err = Errorf(KindShuttingDown, err, "database %q: the service is closing", d.name)
				} else {
					r.err = d.refresh(d.env.ctx)
				}
				d.nowMu.Lock()
				d.nowRead = nil
				d.nowMu.Unlock()
				close(r.done)
			}()
		}
		d.nowMu.Unlock()
		select {
		case <-r.done:
			if !r.started.Before(asked) {
				return r.err
			}
			// Started before this caller asked: read again.
		case <-ctx.Done():
			return Errorf(KindCanceled, ctx.Err(), "database %q: waiting for its manifest", d.name)
		}
	}
}

// minFreshInterval spaces the strictly fresh reads of one database's
// manifest (refreshNow).
const minFreshInterval = 50 * time.Millisecond

// freshRead is a manifest read for callers that want a strictly fresh
// answer (refreshNow).
type freshRead struct {
	started time.Time
	done    chan struct{}
	err     error // set before done is closed
}

// publish replaces what the database serves.
func (d *database) publish(root addr.Addr, tables []*table, byName map[string]*table, missing int, missingErr error, loadedAt time.Time) {
	sort.SliceStable(tables, func(i, j int) bool { return tables[i].appendix.Load() && !tables[j].appendix.Load() })
	d.mu.Lock()
	d.root, d.tables, d.byName = root, tables, byName
	d.missing, d.missingErr = missing, missingErr
	d.loadedAt = loadedAt
	d.mu.Unlock()
}

// find returns the file holding a and the chunk's entry, or a nil table
// if the database does not hold it. No IO unless the manifest is stale,
// and a chunk is absent only when the manifest is fresh and every one of
// the database's files could be opened.
// findFresh is find, but an address no known file holds is looked for
// again after a strict read of the manifest (at most one every
// minFreshInterval, shared by concurrent callers): a version published a
// moment ago is found at once, and "absent" is an answer about the
// manifest as it is now, not as it was up to ManifestTTL ago. Batch
// callers use find, then recheck once for all their misses.
func (d *database) findFresh(ctx context.Context, a addr.Addr) (*table, tablefile.Entry, error) {
	t, e, err := d.find(ctx, a)
	if t != nil || err != nil {
		return t, e, err
	}
	if err := d.refreshNow(ctx); err != nil {
		return nil, tablefile.Entry{}, err
	}
	return d.find(ctx, a)
}

func (d *database) find(ctx context.Context, a addr.Addr) (*table, tablefile.Entry, error) {
	for attempt := 0; ; attempt++ {
		d.mu.RLock()
		tables, loadedAt, missing, missingErr := d.tables, d.loadedAt, d.missing, d.missingErr
		d.mu.RUnlock()
		if t, e, ok := tablefile.Find(tables, (*table).index, a); ok {
			return t, e, nil
		}
		if attempt > 0 || (!loadedAt.IsZero() && time.Since(loadedAt) < d.env.cfg.ManifestTTL) {
			if missing > 0 {
				return nil, tablefile.Entry{}, fmt.Errorf("chunk %s: %w", a, missingErr)
			}
			if loadedAt.IsZero() {
				return nil, tablefile.Entry{}, Errorf(KindStoreUnreachable, nil, "chunk %s: database %q is served from its saved state until its manifest can be read", a, d.name)
			}
			return nil, tablefile.Entry{}, nil
		}
		// The database may have new files: read its manifest again, once
		// for all concurrent misses.
		if err := d.refreshShared(ctx); err != nil {
			return nil, tablefile.Entry{}, err
		}
	}
}

func (d *database) info() api.DBInfo {
	d.mu.RLock()
	defer d.mu.RUnlock()
	info := api.DBInfo{Name: d.name, Root: d.root.String()}
	for _, t := range d.tables {
		info.Tables = append(info.Tables, t.info())
	}
	return info
}

// setManifest records the manifest a refresh published.
func (d *database) setManifest(m *manifest.Manifest) {
	d.mu.Lock()
	d.m = m
	d.mu.Unlock()
}
