package tableset_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// slowStore delays and counts a folder store's requests, and can make the
// requests for some keys hang (until their context ends) or fail.
type slowStore struct {
	store.Store
	delay time.Duration

	mu       sync.Mutex
	hang     map[string]bool  // key prefix -> hang
	fail     map[string]error // key prefix -> error
	running  int
	most     int // most requests running at once
	requests atomic.Int64
}

func (s *slowStore) begin(ctx context.Context, key string) (func(), error) {
	s.requests.Add(1)
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	var hang bool
	var fail error
	for p, h := range s.hang {
		hang = hang || h && strings.HasPrefix(key, p)
	}
	for p, err := range s.fail {
		if strings.HasPrefix(key, p) {
			fail = err
		}
	}
	s.mu.Unlock()
	end := func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}
	if hang {
		<-ctx.Done()
		end()
		return nil, ctx.Err()
	}
	if fail != nil {
		end()
		return nil, fail
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		end()
		return nil, ctx.Err()
	}
	return end, nil
}

func (s *slowStore) Head(ctx context.Context, key string) (store.Info, error) {
	end, err := s.begin(ctx, key)
	if err != nil {
		return store.Info{}, err
	}
	defer end()
	return s.Store.Head(ctx, key)
}

func (s *slowStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	end, err := s.begin(ctx, key)
	if err != nil {
		return 0, err
	}
	defer end()
	return s.Store.ReadAt(ctx, key, p, off)
}

func (s *slowStore) Get(ctx context.Context, key string) ([]byte, error) {
	end, err := s.begin(ctx, key)
	if err != nil {
		return nil, err
	}
	defer end()
	return s.Store.Get(ctx, key)
}

func (s *slowStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	end, err := s.begin(ctx, key)
	if err != nil {
		return nil, store.Info{}, err
	}
	defer end()
	return s.Store.Open(ctx, key)
}

func (s *slowStore) maxRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most
}

func newDB(t *testing.T, o testdb.Options) (*slowStore, *manifest.DB, *testdb.DB) {
	t.Helper()
	ctx := context.Background()
	fs := testdb.NewStore(t)
	db := testdb.MustMake(t, fs, "db", o)
	s := &slowStore{Store: fs, hang: map[string]bool{}, fail: map[string]error{}}
	mdb, err := manifest.Open(ctx, s, "db")
	if err != nil {
		t.Fatal(err)
	}
	return s, mdb, db
}

func TestLoadFindsEveryChunkAppendixFirst(t *testing.T) {
	ctx := context.Background()
	_, mdb, db := newDB(t, testdb.Options{Files: 3, Chunks: 20, ChunkSize: 512, Appendix: true})
	set, err := (&tableset.Loader[struct{}]{DB: mdb}).Load(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if len(set.Files) != 4 || set.Version == "" || set.Root() != db.Root || set.Journal {
		t.Fatalf("%d files, version %q, root %s, journal %v; want 4, a version, %s, false", len(set.Files), set.Version, set.Root(), set.Journal, db.Root)
	}
	app := db.Files[0] // testdb puts the appendix first
	if f := set.Files[0]; f.Name != app.Name || !f.Appendix || f.Key != app.Key || f.Size != app.Size {
		t.Fatalf("first file %+v, want the appendix %s (%s, %d bytes)", f.Object, app.Name, app.Key, app.Size)
	}
	for i, f := range set.Files[1:] {
		if f.Appendix || f.Name != db.Files[i+1].Name {
			t.Fatalf("file %d is %s (appendix %v), want %s in manifest order", i+1, f.Name, f.Appendix, db.Files[i+1].Name)
		}
	}
	for a, want := range db.Chunks {
		f, e, ok := set.Find(a)
		if !ok || f.Name != app.Name {
			t.Fatalf("chunk %s: found %v in %v, want the appendix", a, ok, f)
		}
		got, err := f.Index.Read(e)
		if err != nil || string(got) != string(want) {
			t.Fatalf("chunk %s: read %d bytes, %v", a, len(got), err)
		}
	}
	var missing [20]byte
	missing[0] = 1
	if _, _, ok := set.Find(missing); ok {
		t.Fatal("found a chunk no file holds")
	}
}

func TestLoadSkipsJournalAndReportsBrokenFiles(t *testing.T) {
	ctx := context.Background()
	s, mdb, db := newDB(t, testdb.Options{Files: 3, Chunks: 5, ChunkSize: 256})
	m, version, err := mdb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Specs = append(m.Specs, manifest.Spec{Name: manifest.JournalName, Chunks: 7})
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.Update(ctx, version, m); err != nil {
		t.Fatal(err)
	}
	// File 0 is gone from the store, file 1 is not a table file.
	if err := s.Store.Delete(ctx, db.Files[0].Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Store.Put(ctx, db.Files[1].Key, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	set, err := (&tableset.Loader[struct{}]{DB: mdb}).Load(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !set.Journal || len(set.Files) != 1 || set.Files[0].Name != db.Files[2].Name {
		t.Fatalf("journal %v, %d files; want the journal noted and only %s open", set.Journal, len(set.Files), db.Files[2].Name)
	}
	if len(set.Failed) != 2 || set.Failed[0].Name != db.Files[0].Name || set.Failed[1].Name != db.Files[1].Name {
		t.Fatalf("failed %v, want files 0 and 1", set.Failed)
	}
	if !errors.Is(set.Failed[0], store.ErrNotFound) || !errors.Is(set.Failed[1], tablefile.ErrNotTableFile) {
		t.Fatalf("causes %v; %v: want not found, not a table file", set.Failed[0], set.Failed[1])
	}
	err = set.Err()
	if !errors.Is(err, store.ErrNotFound) || !errors.Is(err, tablefile.ErrNotTableFile) || errors.Is(err, store.ErrUnreachable) {
		t.Fatalf("Err() = %v: want both causes, not unreachable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "2 of 3 table files") || !strings.Contains(msg, db.Files[0].Name) {
		t.Fatalf("Err() = %q: want the count and the first file", msg)
	}
}

func TestLoadMissingDatabase(t *testing.T) {
	s, _, _ := newDB(t, testdb.Options{})
	mdb, err := manifest.Open(context.Background(), s, "nope")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&tableset.Loader[struct{}]{DB: mdb}).Load(context.Background(), nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Load of a missing database: %v, want not found", err)
	}
}

// countingLoader is a loader of mdb that counts its store opens in opens;
// each file's Value is its open's number.
func countingLoader(s store.Store, mdb *manifest.DB, opens *atomic.Int64) *tableset.Loader[*int] {
	return &tableset.Loader[*int]{DB: mdb, OpenIndex: func(ctx context.Context, o tableset.Object) (*tablefile.Table, *int, error) {
		n := int(opens.Add(1))
		t, err := tablefile.Open(store.ReaderAt(context.Background(), s, o.Key), o.Size, nil)
		return t, &n, err
	}}
}

func TestLoadReusesOpenFiles(t *testing.T) {
	ctx := context.Background()
	s, mdb, db := newDB(t, testdb.Options{Files: 3, Chunks: 5, ChunkSize: 256})
	var opens atomic.Int64
	l := countingLoader(s, mdb, &opens)
	first, err := l.Load(ctx, nil)
	if err != nil || first.Err() != nil || opens.Load() != 3 {
		t.Fatalf("first load: %v, %v, %d opens", err, first.Err(), opens.Load())
	}
	// A new version names an appendix file holding everything.
	more := testdb.MustMake(t, s.Store, "other", testdb.Options{Files: 1, Chunks: 2, ChunkSize: 256, Seed: 9})
	data, err := s.Store.Get(ctx, more.Files[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := mdb.TableKey(more.Files[0].Name)
	if err := s.Store.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	m, version, err := mdb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.SetAppendix([]manifest.Spec{{Name: more.Files[0].Name, Chunks: 2}})
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.Update(ctx, version, m); err != nil {
		t.Fatal(err)
	}
	second, err := l.Load(ctx, first)
	if err != nil || second.Err() != nil {
		t.Fatal(err, second.Err())
	}
	if opens.Load() != 4 || len(second.Files) != 4 || second.Files[0].Name != more.Files[0].Name || !second.Files[0].Appendix {
		t.Fatalf("%d opens, %d files, first %s: want only the new file opened, and first", opens.Load(), len(second.Files), second.Files[0].Name)
	}
	for i, f := range db.Files {
		old, _ := first.Get(f.Name)
		now, _ := second.Get(f.Name)
		if now.Index != old.Index || now.Value != old.Value || now.Appendix {
			t.Fatalf("file %d was opened again or changed", i)
		}
	}
	if _, ok := (*tableset.Set[*int])(nil).Get("x"); ok {
		t.Fatal("a nil set has a file")
	}
}

// TestLoadLocalFirst: files Local opens are taken as they are, and
// LocalDone has them before the store is asked for any other file; the
// rest come from the store; Local is not asked for files the caller has.
func TestLoadLocalFirst(t *testing.T) {
	ctx := context.Background()
	s, mdb, db := newDB(t, testdb.Options{Files: 3, Chunks: 5, ChunkSize: 256})
	var storeOpens atomic.Int64
	l := countingLoader(s, mdb, &storeOpens)
	all, err := l.Load(ctx, nil) // the files, to hand out as "local copies"
	if err != nil || all.Err() != nil {
		t.Fatal(err, all.Err())
	}
	storeOpens.Store(0)
	local := db.Files[1].Name
	mark := 7
	var asked []string
	l.Local = func(name string) *tableset.File[*int] {
		asked = append(asked, name)
		if name != local {
			return nil
		}
		f, _ := all.Get(name)
		c := *f
		c.Value = &mark
		return &c
	}
	var done []*tableset.File[*int]
	l.LocalDone = func(files []*tableset.File[*int]) {
		if storeOpens.Load() != 0 {
			t.Errorf("LocalDone after %d store opens", storeOpens.Load())
		}
		done = files
	}
	m, _, err := l.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	have := db.Files[0].Name
	set := l.Open(ctx, m, func(name string) (*tableset.File[*int], bool) {
		if name == have {
			return all.Get(name)
		}
		return nil, false
	})
	if set.Err() != nil || len(set.Files) != 3 || storeOpens.Load() != 1 {
		t.Fatalf("%d files, %d store opens, %v: want 3 files, one of them from the store", len(set.Files), storeOpens.Load(), set.Err())
	}
	if len(done) != 1 || done[0].Name != local || done[0].Value != &mark || len(asked) != 2 || asked[0] == have || asked[1] == have {
		t.Fatalf("LocalDone had %d files, Local was asked %v: want the local copy, and Local asked for the two files not at hand", len(done), asked)
	}
	if f, _ := set.Get(local); f.Value != &mark {
		t.Fatal("the local copy was not taken")
	}
}

func TestLoadUnreachableStore(t *testing.T) {
	ctx := context.Background()
	s, mdb, db := newDB(t, testdb.Options{Files: 3, Chunks: 5, ChunkSize: 256})
	// Timeout bounds the requests that must succeed too: 2 s, so a loaded
	// machine does not time them out (the hanging ones wait it out).
	l := &tableset.Loader[struct{}]{DB: mdb, Timeout: 2 * time.Second}

	// A file whose requests never answer: its lookup times out.
	s.hang[db.Files[1].Key] = true
	set, err := l.Load(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Failed) != 1 || !errors.Is(set.Failed[0], store.ErrUnreachable) || !errors.Is(set.Failed[0], context.DeadlineExceeded) {
		t.Fatalf("failed %v, want file 1 unreachable after its deadline", set.Failed)
	}
	if len(set.Files) != 2 {
		t.Fatalf("%d files open, want the other 2", len(set.Files))
	}

	// A store that says it is unreachable.
	delete(s.hang, db.Files[1].Key)
	s.fail[db.Files[2].Key] = &wrapped{store.ErrUnreachable}
	set, err = l.Load(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Failed) != 1 || set.Failed[0].Name != db.Files[2].Name || !errors.Is(set.Err(), store.ErrUnreachable) {
		t.Fatalf("failed %v, want file 2 unreachable", set.Failed)
	}

	// The manifest too.
	s.hang["db/manifest"] = true
	if _, err := l.Load(ctx, nil); !errors.Is(err, store.ErrUnreachable) {
		t.Fatalf("Load with a hanging manifest: %v, want unreachable", err)
	}

	// A load canceled by its caller is not the store's fault.
	s.hang, s.fail = map[string]bool{db.Files[0].Key: true}, map[string]error{}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	set, err = (&tableset.Loader[struct{}]{DB: mdb}).Load(cctx, nil)
	if err == nil && errors.Is(set.Err(), store.ErrUnreachable) {
		t.Fatalf("a canceled load reported an unreachable store: %v", set.Err())
	}
}

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "dial tcp 127.0.0.1:1: connection refused: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// Each request has its own deadline, not the load: many files, each
// request well within the timeout (60 ms of 1 s, room for a loaded
// machine), the whole load well over it (24 files, two requests each, two
// at a time: at least 1.44 s).
func TestLoadDeadlinePerRequest(t *testing.T) {
	s, mdb, _ := newDB(t, testdb.Options{Files: 24, Chunks: 2, ChunkSize: 128})
	s.delay = 60 * time.Millisecond
	l := &tableset.Loader[struct{}]{DB: mdb, Timeout: time.Second, Concurrency: 2}
	start := time.Now()
	set, err := l.Load(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	// 24 files, 2 at a time, a lookup and an index read each.
	if took := time.Since(start); took < l.Timeout || len(set.Files) != 24 {
		t.Fatalf("%d files in %v; the test needs a load longer than one Timeout (%v)", len(set.Files), took, l.Timeout)
	}
	if n := s.maxRunning(); n > 2 {
		t.Fatalf("%d requests at once, want at most Concurrency (2)", n)
	}
}

func TestLoadDefaultConcurrency(t *testing.T) {
	s, mdb, _ := newDB(t, testdb.Options{Files: 40, Chunks: 1, ChunkSize: 128})
	s.delay = 20 * time.Millisecond
	set, err := (&tableset.Loader[struct{}]{DB: mdb}).Load(context.Background(), nil)
	if err != nil || set.Err() != nil {
		t.Fatal(err, set.Err())
	}
	// The manifest and sidecar reads run before the files, two at once.
	if n := s.maxRunning(); n > tableset.DefaultConcurrency || n < 2 {
		t.Fatalf("%d requests at once, want 2..%d", n, tableset.DefaultConcurrency)
	}
}

// A file whose index is larger than the loader's first read (here 4,000
// chunks, an index of about 112 KiB against 64 KiB) is opened with one
// ranged read all the same: the manifest's chunk count sizes it.
func TestLoadReadsALargeIndexAtOnce(t *testing.T) {
	ctx := context.Background()
	fs := testdb.NewStore(t)
	testdb.MustMake(t, fs, "db", testdb.Options{Files: 1, Chunks: 4000, ChunkSize: 64})
	reads := &rangedReads{Store: fs}
	mdb, err := manifest.Open(ctx, reads, "db")
	if err != nil {
		t.Fatal(err)
	}
	l := &tableset.Loader[struct{}]{DB: mdb}
	m, _, err := l.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reads.n.Store(0)
	set := l.Open(ctx, m, nil)
	if len(set.Files) != 1 || len(set.Failed) != 0 {
		t.Fatalf("%d files, failed %v", len(set.Files), set.Failed)
	}
	if n := reads.n.Load(); n != 1 {
		t.Fatalf("%d ranged reads to open an index of %d chunks, want 1", n, set.Files[0].Chunks)
	}
	if got := tableset.IndexTail(tableset.Object{Chunks: 10, Size: 1 << 30}, 64<<10); got != 64<<10 {
		t.Errorf("a small file's tail %d, want the least asked for", got)
	}
	if got := tableset.IndexTail(tableset.Object{Chunks: 1 << 30, Size: 100 << 20}, 64<<10); got != 16<<20 {
		t.Errorf("a huge index's tail %d, want 16 MiB at most", got)
	}
	if got := tableset.IndexTail(tableset.Object{Chunks: 4000, Size: 100 << 10}, 64<<10); got != 100<<10 {
		t.Errorf("tail %d of a 100 KiB file, want the whole file", got)
	}
}

// rangedReads counts ranged reads (ReadAt).
type rangedReads struct {
	store.Store
	n atomic.Int64
}

func (r *rangedReads) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	r.n.Add(1)
	return r.Store.ReadAt(ctx, key, p, off)
}
