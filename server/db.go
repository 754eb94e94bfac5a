package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// database is one database the service has seen: its manifest and the
// in-memory indexes of all its table files.
type database struct {
	name string
	mdb  *manifest.DB

	mu       sync.RWMutex
	root     addr.Addr
	tables   []*table // appendix files first: a miss prefers to download them
	byName   map[string]*table
	loadedAt time.Time
	// missing counts table files the database has but the service could
	// not open: files not on disk when it was loaded offline (loadOffline),
	// or files whose index is unreadable. Until a refresh opens them, a
	// chunk found in no file is unknown, not absent, and find returns
	// missingErr.
	missing    int
	missingErr error

	stateMu sync.Mutex
	saved   []byte // the state last saved (saveState)
}

func (c *Cache) loadDatabase(ctx context.Context, name string) (*database, error) {
	mdb, err := manifest.Open(ctx, c.cfg.Store, name)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, err, "database %q", name)
	}
	d := &database{name: name, mdb: mdb, byName: map[string]*table{}}
	if err := d.refresh(ctx, c); err != nil {
		if !errors.Is(err, ErrStoreUnreachable) {
			return nil, err
		}
		if oerr := c.loadOffline(d); oerr != nil {
			if !errors.Is(oerr, fs.ErrNotExist) {
				c.log.Warn("saved database state not used", "db", name, "err", oerr)
			}
			return nil, err
		}
		c.log.Warn("store unreachable: serving the database's files on disk from its saved state", "db", name, "files", len(d.tables), "not on disk", d.missing, "err", err)
	}
	return d, nil
}

// refresh reads the manifest again and opens the indexes of any files it
// has not seen. Indexes of files it already knows are kept.
//
// Each store request has its own deadline (StoreTimeout), not the load as
// a whole: a database of a thousand files takes many round trips.
func (d *database) refresh(ctx context.Context, c *Cache) error {
	mctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	m, _, err := d.mdb.Load(mctx)
	cancel()
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, nil, "unknown database %q: no manifest in %s", d.name, c.cfg.Store)
		}
		return storeErr(err, "load database %q", d.name)
	}
	appendix := map[string]bool{}
	for _, n := range m.Appendix {
		appendix[n] = true
	}
	d.mu.RLock()
	known := d.byName
	d.mu.RUnlock()

	var (
		wg          sync.WaitGroup
		sem         = make(chan struct{}, 8)
		errMu       sync.Mutex
		firstEr     error
		unreachable error
		broken      int
		opened      = make([]*table, len(m.Specs))
	)
	journals := 0
	for i, spec := range m.Specs {
		if manifest.IsJournal(spec.Name) {
			journals++
			continue // a local Dolt journal is not a table file
		}
		if t := known[spec.Name]; t != nil {
			t.appendix.Store(appendix[spec.Name])
			opened[i] = t
			continue
		}
		wg.Add(1)
		go func(i int, spec manifest.Spec) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t, err := c.openTable(ctx, d, spec.Name, appendix[spec.Name])
			errMu.Lock()
			defer errMu.Unlock()
			if err != nil {
				broken++
				if firstEr == nil {
					firstEr = err
				}
				if unreachable == nil && errors.Is(err, ErrStoreUnreachable) {
					unreachable = err
				}
				return
			}
			opened[i] = t
		}(i, spec)
	}
	wg.Wait()
	// An unreachable store fails the load (the next request tries again).
	// A file that cannot be opened (corrupt, missing from the store) does
	// not keep the others from being served, unless none can be.
	if unreachable != nil {
		return unreachable
	}
	var missingErr error
	if broken > 0 {
		if broken == len(m.Specs)-journals {
			return firstEr
		}
		// Its own status: the cause (a file missing from the store, say)
		// must not turn "unknown" into a 404, which reads as "absent".
		missingErr = errorf(http.StatusInternalServerError, nil, "database %q: %d of its table files could not be opened, and the chunk is in none of the others (first: %v)", d.name, broken, firstEr)
		c.log.Error("table files of the database could not be opened; serving the others", "db", d.name, "files", broken, "first", firstEr)
	}
	tables := make([]*table, 0, len(opened))
	byName := make(map[string]*table, len(opened))
	for _, t := range opened {
		if t != nil {
			tables = append(tables, t)
			byName[t.name] = t
		}
	}
	sort.SliceStable(tables, func(i, j int) bool { return tables[i].appendix.Load() && !tables[j].appendix.Load() })
	d.mu.Lock()
	d.root = m.Root
	d.tables = tables
	d.byName = byName
	d.loadedAt = time.Now()
	d.missing, d.missingErr = broken, missingErr
	d.mu.Unlock()
	c.saveState(d)
	return nil
}

// find returns the file holding a and the chunk's entry, or a nil table
// if the database does not hold it. No IO unless the manifest is stale.
func (d *database) find(ctx context.Context, c *Cache, a addr.Addr) (*table, tablefile.Entry, error) {
	for attempt := 0; ; attempt++ {
		d.mu.RLock()
		tables, loadedAt, missing, missingErr := d.tables, d.loadedAt, d.missing, d.missingErr
		d.mu.RUnlock()
		for _, t := range tables {
			if !t.idx.MayContain(a) {
				continue
			}
			if e, ok := t.idx.Lookup(a); ok {
				return t, e, nil
			}
		}
		if attempt > 0 || time.Since(loadedAt) < c.cfg.ManifestTTL {
			if missing > 0 {
				return nil, tablefile.Entry{}, fmt.Errorf("chunk %s: %w", a, missingErr)
			}
			return nil, tablefile.Entry{}, nil
		}
		// The database may have new files: read its manifest again, once
		// for all concurrent misses.
		_, err, _ := c.loads.Do("refresh/"+d.name, func() (any, error) {
			d.mu.RLock()
			fresh := time.Since(d.loadedAt) < c.cfg.ManifestTTL
			d.mu.RUnlock()
			if fresh {
				return nil, nil
			}
			return nil, d.refresh(c.ctx, c)
		})
		if err != nil {
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
