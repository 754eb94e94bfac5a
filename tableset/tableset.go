// Package tableset opens the table files of a database in a store. A
// Loader reads the database's manifest, finds each table file's object
// ("<name>" or "<name>.darc"), opens its index, and returns the open files
// as a Set to find chunks in, with the files that could not be opened
// beside them:
//
//	set, err := (&tableset.Loader[struct{}]{DB: mdb}).Load(ctx, nil)
//	if err != nil { ... }           // the manifest could not be read
//	if err := set.Err(); err != nil { ... } // some files could not be opened
//	f, e, ok := set.Find(a)         // the first file holding chunk a
//
// What a broken file means is the caller's policy: an importer stops, the
// cache service serves the other files, and both can tell a store that
// does not answer (errors.Is(err, store.ErrUnreachable)) from a file that
// is corrupt or missing.
//
// The caller says how a file's index is opened (Loader.OpenIndex): the
// cache service reads it through its own copy of the file, a client from
// the store, both over io.ReaderAt values of their own that outlive the
// load (an archive's dictionaries are read later, on first use). What the
// opener returns beside the index rides along in File.Value.
//
// Search order: appendix files first (each holds a whole version, in a
// good order), then the others, in manifest order. The chunk journal of a
// local Dolt database (manifest.IsJournal) is listed in the manifest but is
// no table file; it is skipped and Set.Journal says so.
package tableset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// Defaults of Loader.
const (
	// DefaultConcurrency is how many files are opened at once.
	DefaultConcurrency = 8
	// DefaultIndexTail is the tail the default opener reads first: one
	// ranged read of a file's last 64 KiB usually holds its footer and
	// whole index.
	DefaultIndexTail = 64 << 10
)

// Object is one table file of a database, found in the store.
type Object struct {
	// Name is the file's name in the manifest (an address, without ".darc").
	Name string
	// Key is its object key: the name's key, plus ".darc" for a Dolt archive.
	Key string
	// Size is the object's size in bytes.
	Size int64
	// Appendix says the manifest names the file as an appendix file.
	Appendix bool
	// Chunks is the file's chunk count as the manifest gives it.
	Chunks uint32
	// Tail is the object's last bytes, read with its size (store.ReadTail)
	// when it was looked up: the index's first read (TailReaderAt).
	Tail []byte
}

// TailReaderAt returns a reader of o's bytes that answers reads within
// o.Tail from it and reads the rest through r.
func (o Object) TailReaderAt(r io.ReaderAt) io.ReaderAt {
	if len(o.Tail) == 0 {
		return r
	}
	return tailReader{r: r, at: o.Size - int64(len(o.Tail)), tail: o.Tail}
}

type tailReader struct {
	r    io.ReaderAt
	at   int64 // where tail starts in the object
	tail []byte
}

func (t tailReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= t.at && off+int64(len(p)) <= t.at+int64(len(t.tail)) {
		return copy(p, t.tail[off-t.at:]), nil
	}
	return t.r.ReadAt(p, off)
}

// IndexTail is how many bytes to read from the end of o in the first read
// of its index (tablefile.Options.Tail): at least least, and enough for the
// index of o's chunks as the manifest counts them (an index takes 28 bytes
// a chunk in a classic table file, a few more in an archive), so a large
// file's index comes in one read rather than a footer's read and then the
// index's, a round trip to the store saved. Never more than the file, nor
// than 16 MiB.
func IndexTail(o Object, least int) int {
	want := int64(o.Chunks)*32 + 4<<10
	return int(max(int64(least), min(want, o.Size, 16<<20)))
}

// File is one open table file of a Set.
type File[T any] struct {
	Object
	// Index is the file's index.
	Index *tablefile.Table
	// Value is what Loader.OpenIndex returned with the index.
	Value T
}

// FileError is a table file that could not be opened.
type FileError struct {
	// Name is the file's name in the manifest.
	Name string
	// Err is the cause, naming the database and the object. It wraps
	// store.ErrUnreachable when the store did not answer (in time),
	// store.ErrNotFound when the file is not in the store, and
	// tablefile.ErrCorrupt for an index that does not parse.
	Err error
}

// Error implements error.
func (e *FileError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// Loader opens the table files of one database. Set DB; the other fields
// have defaults. A Loader may be used by several goroutines at once.
type Loader[T any] struct {
	// DB is the database.
	DB *manifest.DB
	// OpenIndex opens the index of a table file found in the store, with
	// whatever the caller keeps beside it. It is called for several files
	// at once. ctx is the load's: an io.ReaderAt that the index keeps for
	// later reads must not depend on it. nil means: read the index from
	// the store (each read with its own Timeout), with a zero Value; the
	// reader is bound to the load's ctx.
	OpenIndex func(ctx context.Context, o Object) (*tablefile.Table, T, error)
	// Timeout, if positive, bounds each store request the loader makes
	// on its own: the manifest load, each file's lookup, and each read of
	// the default OpenIndex. A load as a whole takes as long as it takes
	// (a database of a thousand files needs many round trips). A request
	// that runs out of time is an error wrapping store.ErrUnreachable.
	Timeout time.Duration
	// Concurrency is how many files are looked up and opened at once.
	// 0 means DefaultConcurrency.
	Concurrency int
	// IndexTail is the first read of the default OpenIndex (see
	// tablefile.Options.Tail). 0 means DefaultIndexTail.
	IndexTail int
	// AtHand, if set, reports whether table file name has a copy at hand
	// that OpenIndex opens without the store (on a local disk, or already
	// open): the store is then asked for the file's size alone, not for
	// its index's bytes too.
	AtHand func(name string) bool
	// Local, if set, opens a table file from a copy at hand with no store
	// IO (a same-host service's cache directory), before the store is
	// asked: a file it returns is taken as it is (with Appendix set from
	// the manifest); for nil, the store is asked. It is called for each
	// file Open does not already have, one at a time.
	Local func(name string) *File[T]
	// LocalDone, if set, is called once Local has been asked for every
	// file, with the files it opened, before the store is asked for the
	// others: a caller can use them while the rest load.
	LocalDone func(files []*File[T])
}

// Load reads the manifest and opens its table files, reusing the files
// prev (nil: none) has open. The error is the manifest's: a missing
// database is one wrapping store.ErrNotFound. Files that failed to open
// are in the Set (Set.Failed, Set.Err).
func (l *Loader[T]) Load(ctx context.Context, prev *Set[T]) (*Set[T], error) {
	m, version, err := l.Manifest(ctx)
	if err != nil {
		return nil, err
	}
	s := l.Open(ctx, m, prev.Get)
	s.Version = version
	return s, nil
}

// Manifest reads the database's manifest (manifest.DB.Load) under the
// loader's Timeout, returning it with the manifest object's version.
func (l *Loader[T]) Manifest(ctx context.Context) (*manifest.Manifest, string, error) {
	rctx, cancel := l.request(ctx)
	defer cancel()
	m, version, err := l.DB.Load(rctx)
	return m, version, l.timedOut(ctx, err)
}

// Open opens the table files of manifest m: each file that have returns
// (a previous Set's Get) or else Local opens is taken as it is, with
// Appendix set from m; every other one is looked up in the store and
// opened with OpenIndex, Concurrency at a time. have may be nil.
func (l *Loader[T]) Open(ctx context.Context, m *manifest.Manifest, have func(name string) (*File[T], bool)) *Set[T] {
	appendix := make(map[string]bool, len(m.Appendix))
	for _, name := range m.Appendix {
		appendix[name] = true
	}
	opened := make([]*File[T], len(m.Specs))
	failed := make([]*FileError, len(m.Specs))
	s := &Set[T]{Manifest: m, byName: make(map[string]*File[T], len(m.Specs))}
	take := func(i int, f *File[T]) {
		reused := *f
		reused.Appendix = appendix[reused.Name]
		opened[i] = &reused
	}
	var fromStore, locals []int
	for i, spec := range m.Specs {
		if manifest.IsJournal(spec.Name) {
			s.Journal = true
			continue
		}
		if have != nil {
			if f, ok := have(spec.Name); ok && f != nil {
				take(i, f)
				continue
			}
		}
		if l.Local != nil {
			if f := l.Local(spec.Name); f != nil {
				take(i, f)
				locals = append(locals, i)
				continue
			}
		}
		fromStore = append(fromStore, i)
	}
	if l.LocalDone != nil {
		files := make([]*File[T], len(locals))
		for k, i := range locals {
			files[k] = opened[i]
		}
		l.LocalDone(files)
	}
	var g errgroup.Group
	g.SetLimit(orDefault(l.Concurrency, DefaultConcurrency))
	for _, i := range fromStore {
		spec := m.Specs[i]
		g.Go(func() error {
			f, err := l.open(ctx, spec.Name, spec.Chunks, appendix[spec.Name])
			if err != nil {
				failed[i] = &FileError{Name: spec.Name, Err: err}
			}
			opened[i] = f
			return nil
		})
	}
	g.Wait()
	for pass := range 2 { // appendix files first, then the others
		for _, f := range opened {
			if f != nil && f.Appendix == (pass == 0) && s.byName[f.Name] == nil {
				s.Files = append(s.Files, f)
				s.byName[f.Name] = f
			}
		}
	}
	for _, e := range failed {
		if e != nil {
			s.Failed = append(s.Failed, e)
		}
	}
	return s
}

// open finds one table file in the store and opens its index.
func (l *Loader[T]) open(ctx context.Context, name string, chunks uint32, appendix bool) (*File[T], error) {
	// The index is at the file's end: read as much of it as its first
	// read would with the file's size, in one request where the store can.
	least := orDefault(l.IndexTail, DefaultIndexTail)
	var tail []byte // nil: the size alone (manifest.DB.ResolveTableTail)
	if l.AtHand == nil || !l.AtHand(name) {
		tail = make([]byte, IndexTail(Object{Chunks: chunks, Size: math.MaxInt64}, least))
	}
	rctx, cancel := l.request(ctx)
	key, size, n, err := l.DB.ResolveTableTail(rctx, name, tail)
	cancel()
	if err != nil {
		return nil, l.timedOut(ctx, err)
	}
	o := Object{Name: name, Key: key, Size: size, Appendix: appendix, Chunks: chunks, Tail: tail[:n:n]}
	var (
		idx *tablefile.Table
		v   T
	)
	if l.OpenIndex != nil {
		idx, v, err = l.OpenIndex(ctx, o)
	} else {
		idx, err = tablefile.Open(o.TailReaderAt(&storeReader{ctx: ctx, s: l.DB.Store(), key: key, timeout: l.Timeout}), size, &tablefile.Options{Tail: IndexTail(o, least)})
	}
	if err != nil {
		return nil, fmt.Errorf("database %s: open table file %s: %w", l.DB, key, l.timedOut(ctx, err))
	}
	return &File[T]{Object: o, Index: idx, Value: v}, nil
}

// request returns the context of one store request.
func (l *Loader[T]) request(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.Timeout > 0 {
		return context.WithTimeout(ctx, l.Timeout)
	}
	return context.WithCancel(ctx)
}

// timedOut marks an error of a request that ran out of its own time
// (while the load's ctx had not) as the store not answering.
func (l *Loader[T]) timedOut(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnreachable) {
		return err
	}
	if l.Timeout > 0 {
		return fmt.Errorf("%w: no answer within %v: %w", store.ErrUnreachable, l.Timeout, err)
	}
	return fmt.Errorf("%w: no answer in time: %w", store.ErrUnreachable, err)
}

// storeReader reads a table file from the store for the default
// OpenIndex, each read with its own deadline.
type storeReader struct {
	ctx     context.Context
	s       store.Store
	key     string
	timeout time.Duration
}

func (r *storeReader) ReadAt(p []byte, off int64) (int, error) {
	ctx, cancel := r.ctx, context.CancelFunc(func() {})
	if r.timeout > 0 {
		ctx, cancel = context.WithTimeout(r.ctx, r.timeout)
	}
	defer cancel()
	n, err := r.s.ReadAt(ctx, r.key, p, off)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// orDefault returns v if positive, else def.
func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Set is the open table files of one version of a database. It is not
// changed after Load returns it, and safe for concurrent use.
type Set[T any] struct {
	// Manifest is the manifest the set was opened from.
	Manifest *manifest.Manifest
	// Version is the manifest object's version (for manifest.DB.Update);
	// set by Load only.
	Version string
	// Files are the files that opened, in search order: appendix files
	// first, then the others, each group in manifest order.
	Files []*File[T]
	// Failed are the files that could not be opened, in manifest order.
	Failed []*FileError
	// Journal says the manifest lists a chunk journal, which was skipped:
	// chunks only it holds are out of reach.
	Journal bool

	byName map[string]*File[T]
}

// Root returns the root address the manifest names.
func (s *Set[T]) Root() addr.Addr { return s.Manifest.Root }

// Get returns the open file called name. A nil Set has no files.
func (s *Set[T]) Get(name string) (*File[T], bool) {
	if s == nil {
		return nil, false
	}
	f, ok := s.byName[name]
	return f, ok
}

// Find returns the first file, in search order, whose index holds a, with
// a's entry. It does no IO.
func (s *Set[T]) Find(a addr.Addr) (*File[T], tablefile.Entry, bool) {
	return tablefile.Find(s.Files, (*File[T]).table, a)
}

func (f *File[T]) table() *tablefile.Table { return f.Index }

// Err returns nil if every table file opened, else an error that names
// how many did not and the first, and wraps every FileError (errors.Is
// and errors.As look through all of them).
func (s *Set[T]) Err() error {
	if len(s.Failed) == 0 {
		return nil
	}
	return &openError{failed: s.Failed, opened: len(s.Files)}
}

// openError is Set.Err's error.
type openError struct {
	failed []*FileError
	opened int
}

func (e *openError) Error() string {
	if len(e.failed) == 1 {
		return e.failed[0].Error()
	}
	return fmt.Sprintf("%d of %d table files could not be opened; the first: %v", len(e.failed), len(e.failed)+e.opened, e.failed[0])
}

func (e *openError) Unwrap() []error {
	out := make([]error, len(e.failed))
	for i, f := range e.failed {
		out[i] = f
	}
	return out
}
