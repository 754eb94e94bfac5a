package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// fileTier reads chunks straight from the database's table files: the
// store's objects, or the verified copies a cache service on this host
// keeps (Options.LocalDir), which it opens instead where it has them.
type fileTier struct {
	opts *Options     // the client's, settled by Open
	mdb  *manifest.DB // nil without a store (Options.Store): then the root is the service's
	svc  service      // the cache service, nil without one: it names the root
	ctr  *counters    // the client's
	log  *slog.Logger
	ctx  context.Context // the client's: loads in the background end with it
	// keep hands each local copy opened to the client, which closes them.
	keep func(*os.File)

	mu      sync.Mutex
	cur     *snapshot     // nil until the first load succeeds
	loading chan struct{} // closed when the running load ends; nil if none runs
	loadErr error         // the last load's error
	// localAsked is set when localTables first started a load: it starts
	// one, once, as Open used to (a store that fails is not asked again
	// on every read; store reads retry through current).
	localAsked bool

	refreshMu sync.Mutex // one Refresh at a time

	// The first load publishes the manifest's root as soon as it has it,
	// before the table indexes are open: a reader that goes to the service
	// needs only the root.
	rootOnce   sync.Once
	rootReady  chan struct{}
	firstRoot  addr.Addr
	firstLocal []*table // local copies found by the first load, published with the root

	svcMu   sync.Mutex // guards svcRoot, held while the service is asked
	svcRoot addr.Addr  // the root the service gave
}

// localTables returns the table files opened from Options.LocalDir, as
// far as the store tier has loaded them; it does not wait. The first call
// starts the load (Open does not: a same-host client whose pages all come
// from a page image never needs the files, and loading their indexes
// would only take a core from its reads).
func (s *fileTier) localTables(ctx context.Context) []*table {
	s.mu.Lock()
	cur := s.cur
	if cur == nil && !s.localAsked && s.mdb != nil && s.svc != nil {
		s.localAsked = true
		s.startLoadLocked()
	}
	s.mu.Unlock()
	if cur == nil {
		// Not loaded yet: the files the first load found, if it has got
		// that far; else none for now (the service answers meanwhile).
		select {
		case <-s.rootReady:
			return s.firstLocal
		default:
			return nil
		}
	}
	var out []*table
	for _, t := range cur.tables {
		if t.local != nil {
			out = append(out, t)
		}
	}
	return out
}

// errNoStore is the store tier's answer when there is no store.
var errNoStore = errors.New("client: no store (Options.Store): the cache service is the only tier")

// root returns the root of the current version: the service's, when
// there is one that answers (no store round trip; at most its
// --manifest-ttl old, or checked first with Options.FreshRoot), else the
// store manifest's, waiting only for the manifest when nothing is loaded
// yet.
func (s *fileTier) root(ctx context.Context) (addr.Addr, error) {
	if s.svc != nil {
		root, err := s.serviceRoot(ctx)
		if err == nil || s.mdb == nil {
			return root, err
		}
		s.log.Warn("the cache service did not give the root; reading the store's manifest", "db", s.opts.DB, "err", err)
	}
	s.mu.Lock()
	if cur := s.cur; cur != nil {
		s.mu.Unlock()
		return cur.root, nil
	}
	done := s.startLoadLocked()
	s.mu.Unlock()
	select {
	case <-s.rootReady:
		return s.firstRoot, nil
	case <-done:
		snap, err := s.current(ctx)
		if err != nil {
			return addr.Addr{}, err
		}
		return snap.root, nil
	case <-ctx.Done():
		return addr.Addr{}, ctx.Err()
	}
}

// snapshot is one version of the database: its root and its table files,
// appendix files first (they hold everything, in a good order).
type snapshot struct {
	root   addr.Addr
	set    *tableset.Set[*table] // nil for a snapshot of local copies only
	tables []*table              // the set's files, in its search order
}

func newSnapshot(set *tableset.Set[*table]) *snapshot {
	snap := &snapshot{root: set.Root(), set: set, tables: make([]*table, len(set.Files))}
	for i, f := range set.Files {
		snap.tables[i] = f.Value
	}
	return snap
}

// table is one open table file.
type table struct {
	name  string
	key   string
	t     *tablefile.Table
	local *os.File // the cache service's verified copy on this host (Options.LocalDir), if any
	// hashed: the local copy's chunks were checked against their
	// addresses by the service (api.CacheLayout), so reads from it check
	// only record CRCs.
	hashed bool
}

// readAt reads table bytes: from the local copy when there is one, else
// with a ranged read of the store. local says the bytes come from the
// local copy, checked that the service has already hashed its chunks.
func (s *fileTier) readAt(ctx context.Context, t *table, p []byte, off int64) (n int, checked, local bool, err error) {
	if t.local != nil {
		n, err := t.local.ReadAt(p, off)
		s.ctr.localReads.Add(1)
		if err == nil {
			return n, t.hashed, true, nil
		}
		s.log.Warn("read local copy; using the store", "key", t.key, "err", err)
	}
	n, err = s.opts.Store.ReadAt(ctx, t.key, p, off)
	s.ctr.storeRequests.Add(1)
	s.ctr.storeReadBytes.Add(int64(n))
	return n, false, false, err
}

// openLocal opens the cache service's copy of table file name from
// Options.LocalDir, if it has one. The service renames a file into its
// tables/ folder only after verifying it, so a file there is whole; hashed
// says whether the directory's layout promises that its chunks were
// checked against their addresses too, and that its sums are beside it
// (api.CacheLayout): then the copy is opened with its sums, which check
// its index and every record or archive span it reads, and is not used
// without them.
func (s *fileTier) openLocal(name string, hashed bool) *tableset.File[*table] {
	dir := s.opts.LocalDir
	key, err := s.mdb.TableKey(name)
	if err != nil {
		return nil
	}
	for _, k := range []string{key, key + manifest.ArchiveSuffix} {
		f, err := os.Open(filepath.Join(dir, api.CacheTablesDir, filepath.FromSlash(k)))
		if err != nil {
			continue
		}
		var opts tablefile.Options
		if hashed {
			opts.Sums, err = readSums(filepath.Join(dir, api.CacheSumsDir, filepath.FromSlash(k)))
		}
		var st os.FileInfo
		if err == nil {
			st, err = f.Stat()
		}
		if err == nil {
			var tf *tablefile.Table
			if tf, err = tablefile.Open(f, st.Size(), &opts); err == nil {
				s.ctr.tablesOpened.Add(1)
				s.keep(f)
				return &tableset.File[*table]{
					Object: tableset.Object{Name: name, Key: k, Size: st.Size()},
					Index:  tf,
					Value:  &table{name: name, key: k, t: tf, local: f, hashed: hashed},
				}
			}
		}
		s.log.Warn("ignoring local copy", "path", f.Name(), "err", err)
		f.Close()
	}
	return nil
}

// readSums reads a cached file's sums (tablefile.Sums).
func readSums(path string) (*tablefile.Sums, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s tablefile.Sums
	if err := s.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// current returns the loaded database, loading it (or waiting for the
// load in progress) first if need be. A failed load is retried by the
// next caller.
func (s *fileTier) current(ctx context.Context) (*snapshot, error) {
	s.mu.Lock()
	if cur := s.cur; cur != nil {
		s.mu.Unlock()
		return cur, nil
	}
	done := s.startLoadLocked()
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		return s.cur, nil
	}
	return nil, s.loadErr
}

// startLoadLocked starts a load unless one is running or done, and
// returns the channel closed when the load ends. s.mu is held.
func (s *fileTier) startLoadLocked() chan struct{} {
	if s.cur != nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	if s.loading != nil {
		return s.loading
	}
	done := make(chan struct{})
	s.loading = done
	go func() {
		// The client's context, not a caller's: a reader that gives up
		// waiting must not fail the load for everyone else.
		snap, err := s.load(s.ctx, nil)
		s.mu.Lock()
		if err == nil && s.cur == nil {
			s.cur = snap
		}
		s.loadErr = err
		s.loading = nil
		s.mu.Unlock()
		close(done)
	}()
	return done
}

// serviceRoot returns the root the service reads, asking it once (until a
// refresh).
func (s *fileTier) serviceRoot(ctx context.Context) (addr.Addr, error) {
	s.svcMu.Lock()
	defer s.svcMu.Unlock()
	if !s.svcRoot.IsEmpty() {
		return s.svcRoot, nil
	}
	s.ctr.svcRequests.Add(1)
	root, err := s.svc.root(ctx, s.opts.FreshRoot)
	if err != nil {
		return addr.Addr{}, err
	}
	s.svcRoot = root
	return root, nil
}

// refresh loads the manifest again, keeping the tables already open.
func (s *fileTier) refresh(ctx context.Context) error {
	if s.svc != nil {
		s.svcMu.Lock()
		s.svcRoot = addr.Addr{}
		s.svcMu.Unlock()
		if s.mdb == nil {
			_, err := s.serviceRoot(ctx)
			return err
		}
	}
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	prev, err := s.current(ctx)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	snap, err := s.load(lctx, prev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cur = snap
	s.mu.Unlock()
	return nil
}

// load reads the manifest and opens the index of every table file it
// names that prev does not hold, several at once.
func (s *fileTier) load(ctx context.Context, prev *snapshot) (*snapshot, error) {
	if s.mdb == nil {
		return nil, errNoStore
	}
	l := &tableset.Loader[*table]{DB: s.mdb, OpenIndex: s.openIndex, Concurrency: s.opts.Concurrency}
	m, _, err := l.Manifest(ctx)
	s.ctr.manifestLoads.Add(1)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	var prevSet *tableset.Set[*table]
	if prev != nil {
		prevSet = prev.set
	}
	// Files a same-host service keeps (Options.LocalDir) open with no store
	// IO; they are published with the root, so reads can use them before
	// the other files' indexes arrive from the store.
	if s.opts.LocalDir != "" {
		marker, _ := os.ReadFile(filepath.Join(s.opts.LocalDir, api.CacheLayoutFile))
		hashed := string(marker) == api.CacheLayout
		l.Local = func(name string) *tableset.File[*table] { return s.openLocal(name, hashed) }
	}
	l.LocalDone = func(local []*tableset.File[*table]) {
		if prev != nil {
			return
		}
		s.rootOnce.Do(func() {
			s.firstRoot = m.Root
			for _, f := range local {
				s.firstLocal = append(s.firstLocal, f.Value)
			}
			close(s.rootReady)
		})
	}
	set := l.Open(ctx, m, prevSet.Get)
	if set.Journal {
		// A local Dolt database's chunk journal is no table file; its
		// chunks are out of reach (push to a remote, or gc, first).
		s.log.Warn("database lists a chunk journal, which the client cannot read; its chunks will be missing", "db", s.mdb.String())
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return newSnapshot(set), nil
}

// openIndex reads a table file's index from the store.
func (s *fileTier) openIndex(_ context.Context, o tableset.Object) (*tablefile.Table, *table, error) {
	// Index and dictionary reads go through metaReader, bound to the
	// client's lifetime rather than to the context of whichever read
	// happens to need a dictionary first.
	tf, err := tablefile.Open(&metaReader{s: s, key: o.Key}, o.Size, &tablefile.Options{Tail: s.opts.IndexTail})
	if err != nil {
		return nil, nil, err
	}
	s.ctr.tablesOpened.Add(1)
	return tf, &table{name: o.Name, key: o.Key, t: tf}, nil
}

// metaReader reads a table file's index and archive dictionaries.
type metaReader struct {
	s   *fileTier
	key string
}

func (r *metaReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.s.opts.Store.ReadAt(r.s.ctx, r.key, p, off)
	r.s.ctr.metaReads.Add(1)
	r.s.ctr.storeReadBytes.Add(int64(n))
	if err != nil && n < len(p) && errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// errNotInStore is the store's answer for a chunk in no table file.
var errNotInStore = fmt.Errorf("%w in any table file", ErrNotFound)

// read reads chunk a from the first table file that holds it and gives
// correct bytes, skipping table skip (one that already failed).
func (s *fileTier) read(ctx context.Context, snap *snapshot, a addr.Addr, skip *table) ([]byte, error) {
	var first error
	for t, e := range tablefile.Holding(snap.tables, (*table).index, a) {
		if t == skip {
			continue
		}
		data, err := s.readRecord(ctx, t, e)
		if err == nil {
			return data, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	return nil, errNotInStore
}

// readRecord reads and decodes the record of entry e of table t. A record
// of a local copy that fails its checks is read again from the store.
func (s *fileTier) readRecord(ctx context.Context, t *table, e tablefile.Entry) ([]byte, error) {
	stored := make([]byte, e.Length)
	_, checked, local, err := s.readAt(ctx, t, stored, int64(e.Offset))
	if err != nil {
		return nil, &ChunkError{Addr: e.Addr, Tier: TierStore, From: t.key, Err: err}
	}
	data, err := s.decode(t, e, stored, checked)
	if err == nil && local {
		s.ctr.localChunks.Add(1)
	}
	if err == nil || !local {
		return data, err
	}
	s.log.Warn("bad record in the cache service's local copy; reading it from the store", "path", t.local.Name(), "address", e.Addr.String(), "err", err)
	n, err := s.opts.Store.ReadAt(ctx, t.key, stored, int64(e.Offset))
	s.ctr.storeRequests.Add(1)
	s.ctr.storeReadBytes.Add(int64(n))
	if err != nil {
		return nil, &ChunkError{Addr: e.Addr, Tier: TierStore, From: t.key, Err: err}
	}
	return s.decode(t, e, stored, false)
}

// decode turns a record into its chunk (checking its CRC or zstd frame)
// and checks it against its address, unless the service already has
// (checked).
func (s *fileTier) decode(t *table, e tablefile.Entry, stored []byte, checked bool) ([]byte, error) {
	data, err := t.t.Decode(e, stored)
	if err != nil {
		if errors.Is(err, tablefile.ErrCorrupt) {
			s.ctr.storeBad.Add(1)
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, &ChunkError{Addr: e.Addr, Tier: TierStore, From: t.key, Err: err}
	}
	if checked {
		return data, nil
	}
	if got := addr.Of(data); got != e.Addr {
		s.ctr.storeBad.Add(1)
		return nil, &ChunkError{Addr: e.Addr, Tier: TierStore, From: t.key, Err: corruptHash(got)}
	}
	return data, nil
}

// corruptHash is the error for bytes that hash to got instead.
func corruptHash(got addr.Addr) error {
	return fmt.Errorf("%w: its bytes hash to %s", ErrCorrupt, got)
}

// readMany reads distinct addresses as, grouped per table file with
// nearby records merged into single reads, Concurrency reads at once. It
// calls fn exactly once per position, maybe from several goroutines at
// once. A chunk that fails in one file (bad bytes, failed read) is tried
// in the other files that hold it.
func (s *fileTier) readMany(ctx context.Context, snap *snapshot, as []addr.Addr, fn func(j int, data []byte, err error)) {
	pos := make(map[addr.Addr]int, len(as))
	perTable := make(map[*table][]tablefile.Entry)
	var order []*table
	for j, a := range as {
		t, e, ok := snap.find(a)
		if !ok {
			fn(j, nil, errNotInStore)
			continue
		}
		pos[a] = j
		if perTable[t] == nil {
			order = append(order, t)
		}
		perTable[t] = append(perTable[t], e)
	}
	type job struct {
		t *table
		r tablefile.Range
	}
	var jobs []job
	for _, t := range order {
		for _, r := range tablefile.MergeRanges(perTable[t], s.opts.Gap, s.opts.MaxRead) {
			jobs = append(jobs, job{t, r})
		}
	}
	if len(jobs) == 0 {
		return
	}
	runLimited(len(jobs), s.opts.Concurrency, func(i int) {
		t, r := jobs[i].t, jobs[i].r
		skip := t
		if t.local != nil {
			skip = nil // read reads a local copy's bad record from the store
		}
		retry := func(e tablefile.Entry, err error) {
			if ctx.Err() == nil {
				if data, err2 := s.read(ctx, snap, e.Addr, skip); err2 == nil {
					fn(pos[e.Addr], data, nil)
					return
				}
			}
			fn(pos[e.Addr], nil, err) // the first failure names the first file tried
		}
		buf := make([]byte, r.Length)
		_, checked, local, err := s.readAt(ctx, t, buf, int64(r.Offset))
		if err != nil {
			for _, e := range r.Entries {
				retry(e, &ChunkError{Addr: e.Addr, Tier: TierStore, From: t.key, Err: err})
			}
			return
		}
		for _, e := range r.Entries {
			data, err := s.decode(t, e, buf[e.Offset-r.Offset:e.End()-r.Offset], checked)
			if err != nil {
				retry(e, err)
				continue
			}
			if local {
				s.ctr.localChunks.Add(1)
			}
			fn(pos[e.Addr], data, nil)
		}
	})
}

// find returns the first table file that holds a (appendix files first).
func (snap *snapshot) find(a addr.Addr) (*table, tablefile.Entry, bool) {
	return tablefile.Find(snap.tables, (*table).index, a)
}

// index is the table file's index, which reads search.
func (t *table) index() *tablefile.Table { return t.t }

// localSnapshot returns a snapshot of just the local copies when the
// database is still loading and they hold every address asked for, so
// those reads need not wait for the other files' indexes; else nil.
func (s *fileTier) localSnapshot(ctx context.Context, want []addr.Addr, ks []int) *snapshot {
	if s.opts.LocalDir == "" {
		return nil
	}
	s.mu.Lock()
	loaded := s.cur != nil
	s.mu.Unlock()
	if loaded {
		return nil
	}
	snap := &snapshot{tables: s.localTables(ctx)}
	if len(snap.tables) == 0 {
		return nil
	}
	for _, k := range ks {
		if _, _, ok := snap.find(want[k]); !ok {
			return nil
		}
	}
	return snap
}
