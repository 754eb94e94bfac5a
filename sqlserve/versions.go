package sqlserve

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/sqlquery"
)

// versions are the versions the query API has open, each with a small
// pool of read-only connections: a version is opened through the
// service's own cache, from its page image (filled in the background,
// read with a pread and a CRC a page) and, for what the image lacks yet,
// the cache's tiers (memory, verified files on disk, the store). At most
// keep versions stay open, the least recently used closed first once no
// query holds it.
type versions struct {
	s     *Server
	conns int // connections per version
	keep  int

	mu   sync.Mutex
	open map[setKey]*version
}

// version is one open version and its connections.
type version struct {
	key   setKey
	ready chan struct{} // closed once db or err is set
	db    *sqlitevfs.DB // the image registered with the VFS (its pages)
	err   error

	idle chan *sqlquery.Conn // connections not in use

	// Guarded by versions.mu:
	opened  int // connections open
	users   int // leases out
	lastUse time.Time
	closing bool // evicted: the last lease closes it
}

func newVersions(s *Server, conns, keep int) *versions {
	return &versions{s: s, conns: conns, keep: keep, open: map[setKey]*version{}}
}

// lease is one connection of a version, taken for one query.
type lease struct {
	vs   *versions
	v    *version
	Conn *sqlquery.Conn
}

// name is the version's image name in the VFS (for its read errors).
func (l *lease) name() string { return l.v.db.Name() }

// conn takes a connection to version root of database db (a root that
// CheckVersion accepted), opening the version first if need be, and
// waiting for one while all are in use.
func (vs *versions) conn(ctx context.Context, db string, root addr.Addr) (*lease, error) {
	k := setKey{db, root}
	vs.mu.Lock()
	v := vs.open[k]
	if v == nil {
		v = &version{key: k, ready: make(chan struct{}), idle: make(chan *sqlquery.Conn, vs.conns)}
		vs.open[k] = v
		go vs.openVersion(v)
	}
	v.users++
	v.lastUse = time.Now()
	vs.evictLocked()
	vs.mu.Unlock()

	l := &lease{vs: vs, v: v}
	select {
	case <-v.ready:
	case <-ctx.Done():
		l.release()
		return nil, ctx.Err()
	}
	if v.err != nil {
		vs.mu.Lock()
		if vs.open[k] == v { // the next query tries again
			delete(vs.open, k)
		}
		vs.mu.Unlock()
		l.release()
		return nil, v.err
	}
	for {
		select {
		case c := <-v.idle:
			l.Conn = c
			return l, nil
		default:
		}
		vs.mu.Lock()
		more := v.opened < vs.conns
		if more {
			v.opened++
		}
		vs.mu.Unlock()
		if more {
			// No value larger than an answer may be: past it, a statement
			// fails rather than take the memory.
			c, err := sqlquery.Open(sqlitevfs.DSN(v.db.Name()), sqlquery.Options{MaxLength: int(max(vs.s.limits.maxBytes, 1<<20))})
			if err != nil {
				vs.mu.Lock()
				v.opened--
				vs.mu.Unlock()
				l.release()
				return nil, fmt.Errorf("database %q, version %s: open a connection: %w", db, root, err)
			}
			vs.s.metrics.conns.Inc()
			l.Conn = c
			return l, nil
		}
		select {
		case c := <-v.idle:
			l.Conn = c
			return l, nil
		case <-ctx.Done():
			l.release()
			return nil, ctx.Err()
		}
	}
}

// openVersion opens v's version through the cache, reading its pages
// from the version's page image where it can.
func (vs *versions) openVersion(v *version) {
	defer close(v.ready)
	// Not the first caller's context: others wait for the same open.
	ctx, cancel := context.WithTimeout(vs.s.ctx, time.Minute)
	defer cancel()
	db := v.key.db
	r := sqlchunks.WithImages(cacheReader{vs.s.c, db}, sqlchunks.Images{OpenVersion: vs.s.imageOpener(db)})
	v.db, v.err = sqlchunks.OpenVersion(ctx, r, v.key.root, nil)
	switch {
	case v.err == nil:
		vs.s.metrics.versions.Inc()
	case cache.KindOf(v.err) == cache.KindInternal:
		v.err = cache.Errorf(cache.KindBadRequest, v.err, "database %q, version %s: not a chunkd SQLite version", db, v.key.root)
	}
}

// release gives the lease's connection back (a connection whose query
// failed is given back too: a statement's error leaves it usable) and
// closes the version if it was evicted and this was its last lease.
func (l *lease) release() {
	vs, v := l.vs, l.v
	if l.Conn != nil {
		v.idle <- l.Conn // never blocks: at most conns are open
		l.Conn = nil
	}
	vs.mu.Lock()
	v.users--
	last := v.closing && v.users == 0
	vs.mu.Unlock()
	if last {
		vs.closeVersion(v)
	}
}

// evictLocked marks the least recently used versions beyond keep for
// closing (vs.mu held): closed now if no query holds them, else by their
// last lease.
func (vs *versions) evictLocked() {
	for len(vs.open) > vs.keep {
		var victim *version
		for _, v := range vs.open {
			if victim == nil || v.lastUse.Before(victim.lastUse) {
				victim = v
			}
		}
		delete(vs.open, victim.key)
		victim.closing = true
		if victim.users == 0 {
			go vs.closeVersion(victim)
		}
	}
}

// closeVersion closes v's connections and its image, once it is open.
func (vs *versions) closeVersion(v *version) {
	<-v.ready
	for {
		select {
		case c := <-v.idle:
			c.Close()
			vs.s.metrics.conns.Dec()
			continue
		default:
		}
		break
	}
	if v.db != nil {
		v.db.Close()
		vs.s.metrics.versions.Dec()
	}
}

// close closes every version (queries must have ended).
func (vs *versions) close() {
	vs.mu.Lock()
	open := vs.open
	vs.open = map[setKey]*version{}
	vs.mu.Unlock()
	for _, v := range open {
		vs.closeVersion(v)
	}
}

// imageOpener returns the function that opens a version of database db
// from its page image, as a same-host client does through the API
// (VersionImage), but reading the image in this process.
func (s *Server) imageOpener(db string) sqlchunks.VersionImageFunc {
	return func(ctx context.Context, root addr.Addr) (addr.Addr, []byte, sqlchunks.ShapedImage, error) {
		vi, err := s.VersionImage(ctx, db, root, false)
		if err != nil {
			return addr.Addr{}, nil, nil, err
		}
		head, err := addr.Parse(vi.Root)
		if err != nil {
			return addr.Addr{}, nil, nil, err
		}
		im := s.images.get(vi.Image.Name)
		if im == nil {
			return addr.Addr{}, nil, nil, fmt.Errorf("image %s evicted as it was registered", vi.Image.Name)
		}
		return head, vi.RootChunk, localImage{im}, nil
	}
}

// localImage is a page image of the service read in its own process
// (sqlchunks.ShapedImage): a filled slot costs a pread and a CRC.
type localImage struct{ im *image }

func (li localImage) Read(i int, p []byte) bool { return li.im.read(i, p) }
func (li localImage) Holds(i int) bool          { return li.im.filled(i) }
func (li localImage) Slots() int                { return len(li.im.addrs) }
func (li localImage) SlotSize() int             { return li.im.slotSize }

// Close does nothing: the image is the service's, kept for other
// readers until it is evicted.
func (li localImage) Close() error { return nil }
