package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tableset"
	"golang.org/x/sync/singleflight"
)

// This file keeps one table per store key, whoever opens it first (a
// database's load, its saved state, or a cluster peer asking for a file
// by key), so that a file has one download and one state however it is
// reached; and it answers what a cluster asks of the cache by key.

// keyTables holds every table the service has open, by store key.
type keyTables struct {
	mu    sync.Mutex
	m     map[string]*table
	opens singleflight.Group
}

// get returns the table open under key with that size, or nil.
func (k *keyTables) get(key string, size int64) *table {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t := k.m[key]; t != nil && t.size == size {
		return t
	}
	return nil
}

// has reports whether a table is open under key (of any size).
func (k *keyTables) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[key] != nil
}

// open returns the table open under key, or opens it with open, once for
// all concurrent callers.
func (k *keyTables) open(key string, size int64, open func() (*table, error)) (*table, error) {
	if t := k.get(key, size); t != nil {
		return t, nil
	}
	v, err, _ := k.opens.Do(key, func() (any, error) {
		if t := k.get(key, size); t != nil {
			return t, nil
		}
		t, err := open()
		if err != nil {
			return nil, err
		}
		k.mu.Lock()
		k.m[key] = t
		k.mu.Unlock()
		return t, nil
	})
	if err != nil {
		return nil, err
	}
	t := v.(*table)
	if t.size != size { // a concurrent open of another size (the file changed): not shared
		return open()
	}
	return t, nil
}

// cached returns the table open under key, or the one open makes from a
// copy on disk (nil if there is none).
func (k *keyTables) cached(key string, size int64, open func() *table) *table {
	t, err := k.open(key, size, func() (*table, error) {
		if t := open(); t != nil {
			return t, nil
		}
		return nil, errNotOnDisk
	})
	if err != nil {
		return nil
	}
	return t
}

var errNotOnDisk = errors.New("not on disk")

// forget drops t, which its database no longer names.
func (k *keyTables) forget(t *table) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m[t.key] == t {
		delete(k.m, t.key)
	}
}

// owns reports whether the service downloads and keeps table file key
// (Config.Owns).
func (e *env) owns(key string) bool { return e.cfg.Owns == nil || e.cfg.Owns(key) }

// SplitKey returns the database and table file name of a table file's
// store key ("<db>/<name>" or "<db>/<name>.darc"), or an error for a key
// that names no table file of a named database.
func SplitKey(key string) (db, name string, err error) {
	db, base := path.Dir(key), path.Base(key)
	name = strings.TrimSuffix(base, manifest.ArchiveSuffix)
	if err := manifest.ValidateName(db); err != nil || db == "." {
		return "", "", fmt.Errorf("key %q names no table file of a database: %v", key, err)
	}
	if _, err := addr.Parse(name); err != nil {
		return "", "", fmt.Errorf("key %q names no table file: %v", key, err)
	}
	return db, name, nil
}

// OpenKey returns a reader of the table file stored at key, for a cluster
// peer reading a file this node owns. It does not wait for the file's
// database to load here (that load may be waiting on the peer): the file
// is opened on its own, its size asked of the store, and shared with the
// database's load when it comes (one table per key).
func (c *Cache) OpenKey(ctx context.Context, key string) (*FileReader, error) {
	db, name, err := SplitKey(key)
	if err != nil {
		return nil, Errorf(KindBadRequest, err, "open by key")
	}
	c.keys.mu.Lock()
	t := c.keys.m[key]
	c.keys.mu.Unlock()
	if t != nil {
		return &FileReader{t: t}, nil
	}
	hctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	info, err := c.store.Head(hctx, key)
	cancel()
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, &Error{Kind: KindUnknownFile, Msg: fmt.Sprintf("no table file %q in the store", key), Err: ErrNoFile}
		}
		return nil, storeErr(err, "open %s", key)
	}
	o := tableset.Object{Name: name, Key: key, Size: info.Size}
	t, err = c.keys.open(key, info.Size, func() (*table, error) { return openTableNow(ctx, c.env, db, o) })
	if err != nil {
		if KindOf(err) == KindInternal {
			return nil, storeErr(err, "open %s", key)
		}
		return nil, err
	}
	return &FileReader{t: t}, nil
}

// FileKeys is one table file of a database as a router sees it: its store
// key, and the sorted prefixes (an address's first 8 bytes, big-endian) of
// its chunks, which tell which file holds a chunk without its index.
type FileKeys struct {
	Name, Key string
	Size      int64
	Prefixes  []uint64
}

// FileKeys returns database db's table files as a router sees them, in
// the order a chunk is looked for (appendix files first), with its root.
func (c *Cache) FileKeys(ctx context.Context, db string) (addr.Addr, []FileKeys, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return addr.Addr{}, nil, err
	}
	if !d.fresh() {
		if err := d.refreshShared(ctx); err != nil && !isStoreFailure(err) {
			return addr.Addr{}, nil, err
		}
	}
	d.mu.RLock()
	root, tables := d.root, d.tables
	d.mu.RUnlock()
	out := make([]FileKeys, 0, len(tables))
	for _, t := range tables {
		es := t.idx.Entries()
		ps := make([]uint64, len(es))
		for i, e := range es {
			ps[i] = binary.BigEndian.Uint64(e.Addr[:8])
		}
		slices.Sort(ps)
		out = append(out, FileKeys{Name: t.name, Key: t.key, Size: t.size, Prefixes: ps})
	}
	return root, out, nil
}
