// Package folder is a store.Store kept in a local directory: each object is
// a file, and slashes in keys are subdirectories.
//
// It registers the "file" scheme, so store.Open accepts "file:///abs/path"
// and plain paths once this package is imported.
//
// Writes are atomic and durable: Put writes a temporary file next to the
// object, syncs it, renames it into place and syncs the directory, so a
// reader sees the whole old object or the whole new one, even after a
// crash. Temporary files and the lock file are named with the prefix
// ".chunkd-", which List skips and keys may not use.
//
// An object's version is a hash of its contents (the first 128 bits of its
// SHA-256, in hex). Put records the hash in an extended attribute of the
// file, so Head and List need not read the file again; where extended
// attributes are unsupported, or the file was written by something else,
// the hash is computed from the contents.
//
// PutIf is safe between processes sharing the folder (on a local file
// system): the check and the rename happen under an exclusive flock(2) on
// the file ".chunkd-lock" in the folder's root, which Put and Delete take
// too while they change the namespace.
package folder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/chunkd/chunkd/store"
)

func init() { store.Register("file", store.OpenerOf(Open)) }

// Reserved is the name prefix of the files the store keeps for itself
// (temporary files and the lock file). List skips them, and a key with a
// path element starting with it is rejected with store.ErrBadKey.
const Reserved = ".chunkd-"

const (
	lockName   = Reserved + "lock"
	tempPrefix = Reserved + "tmp-"
	// versionAttr is the extended attribute caching an object's version.
	versionAttr = "user.chunkd.version"
	// versionLen is the length of a version string, in hex digits.
	versionLen = 32
)

// Store is a store.Store in a local directory. Its methods are safe for
// concurrent use, also by several processes sharing the directory.
type Store struct {
	root string // absolute, cleaned
	lock *fileLock
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.RangeReader = (*Store)(nil)
)

// New opens the store rooted at the directory dir. A directory that does
// not exist yet is made (with its parents) by the first write, so that
// opening a mistyped path to read creates nothing: reads from it fail
// with ErrNotFound and say that the folder does not exist.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open folder store: empty path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open folder store %q: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("open folder store %q: %w", dir, mapErr(err))
	case !fi.IsDir():
		return nil, fmt.Errorf("open folder store %q: not a directory", dir)
	}
	return &Store{root: abs, lock: newFileLock(filepath.Join(abs, lockName))}, nil
}

// Exists reports whether the store's directory exists (a store opened on
// a path that does not exist has none until its first write).
func (s *Store) Exists() bool {
	fi, err := os.Stat(s.root)
	return err == nil && fi.IsDir()
}

// Open opens a store from a URL: "file:///abs/path", "file://localhost/path",
// or a URL whose Path is a plain (possibly relative) path, as store.Open
// makes of one. Query parameters are not accepted.
func Open(_ context.Context, u *url.URL) (*Store, error) {
	if u.Scheme != "" && u.Scheme != "file" {
		return nil, fmt.Errorf("open folder store %q: scheme is not file", u.Redacted())
	}
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("open folder store %q: remote host %q not supported", u.Redacted(), u.Host)
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("open folder store %q: unknown parameters %q: a folder store takes only latency= and bandwidth= (a folder whose name holds '?' is file:///path%%3F...)", u.Redacted(), u.RawQuery)
	}
	p := u.Path
	if u.Opaque != "" { // "file:relative/path"
		p = u.Opaque
	}
	return New(filepath.FromSlash(p))
}

// Root returns the absolute path of the store's directory.
func (s *Store) Root() string { return s.root }

// String returns the store's file URL.
func (s *Store) String() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(s.root)}).String()
}

// Close releases the lock file. The store must not be used afterwards.
func (s *Store) Close() error { return s.lock.close() }

// where names an object in error messages.
func (s *Store) where(key string) string {
	return strings.TrimSuffix(s.String(), "/") + "/" + key
}

// fail wraps err as the failure of op on key, mapping it to the store errors.
func (s *Store) fail(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) && !s.Exists() {
		return fmt.Errorf("file %s %s: %w (the store folder %s does not exist)", op, s.where(key), mapErr(err), s.root)
	}
	return fmt.Errorf("file %s %s: %w", op, s.where(key), mapErr(err))
}

// mapErr maps file system errors to the store's sentinel errors, keeping
// the original for errors.As.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, errIsDir):
		return store.ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w (%w)", store.ErrAccessDenied, err)
	}
	return err
}

var errIsDir = errors.New("is a directory")

// path checks key and returns its file path.
func (s *Store) path(key string) (string, error) {
	if err := store.CheckKey(key); err != nil {
		return "", err
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, Reserved) {
			return "", fmt.Errorf("%w %q: names starting with %q are reserved", store.ErrBadKey, key, Reserved)
		}
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// begin checks the context and the key of an operation.
func (s *Store) begin(ctx context.Context, op, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("file %s %s: %w", op, s.where(key), err)
	}
	p, err := s.path(key)
	if err != nil {
		return "", fmt.Errorf("file %s: %w", op, err)
	}
	return p, nil
}

// openFile opens the object at path for reading; a directory counts as
// missing.
func openFile(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, errIsDir
	}
	return f, fi, nil
}

// ReadAt reads len(p) bytes of key at off.
func (s *Store) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	path, err := s.begin(ctx, "read", key)
	if err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("file read %s: negative offset %d", s.where(key), off)
	}
	f, _, err := openFile(path)
	if err != nil {
		return 0, s.fail("read", key, err)
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if err == io.EOF {
		if n == len(p) {
			return n, nil
		}
		return n, fmt.Errorf("file read %s: %d bytes at offset %d: %w", s.where(key), len(p), off, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return n, s.fail("read", key, err)
	}
	return n, nil
}

// ReadTail reads the last len(p) bytes of key, or all of it if it is
// shorter, and returns its size (store.TailReader), from one open file.
func (s *Store) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	path, err := s.begin(ctx, "read", key)
	if err != nil {
		return 0, 0, err
	}
	f, fi, err := openFile(path)
	if err != nil {
		return 0, 0, s.fail("read", key, err)
	}
	defer f.Close()
	size := fi.Size()
	n := int(min(int64(len(p)), size))
	m, err := f.ReadAt(p[:n], size-int64(n))
	if err == io.EOF && m == n {
		err = nil
	}
	if err != nil {
		return m, size, s.fail("read", key, err)
	}
	return m, size, nil
}

// Get reads the whole object.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	path, err := s.begin(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	f, fi, err := openFile(path)
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	defer f.Close()
	// The file never changes once renamed into place, so its size is exact.
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, s.fail("get", key, err)
	}
	return b, nil
}

// Open streams the object. The returned Info describes the file being read.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	path, err := s.begin(ctx, "open", key)
	if err != nil {
		return nil, store.Info{}, err
	}
	f, fi, err := openFile(path)
	if err != nil {
		return nil, store.Info{}, s.fail("open", key, err)
	}
	info, err := infoOf(key, f, fi)
	if err != nil {
		f.Close()
		return nil, store.Info{}, s.fail("open", key, err)
	}
	return f, info, nil
}

// OpenRange streams n bytes of the object from off (store.RangeReader).
func (s *Store) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	path, err := s.begin(ctx, "open", key)
	if err != nil {
		return nil, err
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("file open %s: negative range [%d, +%d)", s.where(key), off, n)
	}
	f, _, err := openFile(path)
	if err != nil {
		return nil, s.fail("open", key, err)
	}
	r := struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}
	return store.ExactStream(r, n, fmt.Sprintf("file read %s at offset %d", s.where(key), off)), nil
}

// Head returns the object's size, time and version.
func (s *Store) Head(ctx context.Context, key string) (store.Info, error) {
	path, err := s.begin(ctx, "head", key)
	if err != nil {
		return store.Info{}, err
	}
	f, fi, err := openFile(path)
	if err != nil {
		return store.Info{}, s.fail("head", key, err)
	}
	defer f.Close()
	info, err := infoOf(key, f, fi)
	if err != nil {
		return store.Info{}, s.fail("head", key, err)
	}
	return info, nil
}

func infoOf(key string, f *os.File, fi os.FileInfo) (store.Info, error) {
	v, err := version(f, fi)
	if err != nil {
		return store.Info{}, err
	}
	return store.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), Version: v}, nil
}

// version returns the version of the open file f: the cached one from its
// extended attribute if that still matches its size and time, else a hash
// of its contents (which it then tries to cache).
func version(f *os.File, fi os.FileInfo) (string, error) {
	stamp := strconv.FormatInt(fi.Size(), 10) + " " + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
	if attr, err := getAttr(f, versionAttr); err == nil {
		if v, st, ok := strings.Cut(attr, " "); ok && st == stamp && len(v) == versionLen {
			return v, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, fi.Size())); err != nil {
		return "", err
	}
	v := sum(h)
	_ = setAttr(f, versionAttr, v+" "+stamp) // a cache only: a read-only folder is fine
	return v, nil
}

func sum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil))[:versionLen] }

// Version returns the version the store gives an object with contents data.
func Version(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])[:versionLen]
}

// List returns the objects whose keys start with prefix, sorted by key.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file list %s: %w", s.where(prefix), err)
	}
	// Walk only the deepest directory the prefix names.
	start := s.root
	if i := strings.LastIndex(prefix, "/"); i > 0 {
		if dir := prefix[:i]; store.CheckKey(dir) == nil {
			start = filepath.Join(s.root, filepath.FromSlash(dir))
		}
	}
	var infos []store.Info
	err := filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil // vanished meanwhile, or the prefix names no directory
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == s.root {
			return nil
		}
		if strings.HasPrefix(d.Name(), Reserved) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(s.root, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			// Skip directories that cannot hold a matching key.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || store.CheckKey(key) != nil {
			return nil
		}
		f, fi, err := openFile(path) // follows symlinks to regular files
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errIsDir) {
				return nil
			}
			return err
		}
		info, err := infoOf(key, f, fi)
		f.Close()
		if err != nil {
			return err
		}
		infos = append(infos, info)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("file list %s: %w", s.where(prefix), ctx.Err())
		}
		return nil, fmt.Errorf("file list %s: %w", s.where(prefix), mapErr(err))
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	return infos, nil
}

// Delete removes the object, and then any directories left empty by it.
func (s *Store) Delete(ctx context.Context, key string) error {
	path, err := s.begin(ctx, "delete", key)
	if err != nil {
		return err
	}
	if !s.Exists() {
		return nil // nothing to delete, and no directory to make for the lock
	}
	unlock, err := s.lock.lock(ctx)
	if err != nil {
		return s.fail("delete", key, err)
	}
	fi, err := os.Lstat(path)
	if err == nil && fi.IsDir() {
		err = errIsDir // a "directory" is no object; nothing to delete
	} else if err == nil {
		err = os.Remove(path)
	}
	unlock()
	if err != nil {
		if errors.Is(mapErr(err), store.ErrNotFound) {
			return nil
		}
		return s.fail("delete", key, err)
	}
	s.pruneDirs(filepath.Dir(path))
	if err := syncDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.fail("delete", key, err)
	}
	return nil
}

// pruneDirs removes dir and its parents up to the root while they are empty.
func (s *Store) pruneDirs(dir string) {
	for dir != s.root && strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// Put writes the object atomically.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.put(ctx, "put", key, data, nil)
	return err
}

// PutIf writes the object if its current version is ifVersion, or, when
// ifVersion is "", if it does not exist. It returns the new version.
func (s *Store) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	return s.put(ctx, "putif", key, data, &ifVersion)
}

// put writes data to a temporary file and renames it over key; when
// ifVersion is not nil, only if key's current version matches.
func (s *Store) put(ctx context.Context, op, key string, data []byte, ifVersion *string) (string, error) {
	path, err := s.begin(ctx, op, key)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	tmp, v, err := s.writeTemp(dir, data)
	if err != nil {
		return "", s.fail(op, key, err)
	}
	committed := false
	defer func() {
		if !committed {
			os.Remove(tmp)
			s.pruneDirs(dir)
		}
	}()
	unlock, err := s.lock.lock(ctx)
	if err != nil {
		return "", s.fail(op, key, err)
	}
	if ifVersion != nil {
		if err := checkVersion(path, *ifVersion); err != nil {
			unlock()
			return "", fmt.Errorf("file %s %s: %w", op, s.where(key), err)
		}
	}
	err = os.Rename(tmp, path)
	unlock()
	if err != nil {
		if fi, serr := os.Lstat(path); serr == nil && fi.IsDir() {
			err = fmt.Errorf("a directory of that name holds other objects: %w", err)
		}
		return "", s.fail(op, key, err)
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return "", s.fail(op, key, err)
	}
	return v, nil
}

// checkVersion returns an error wrapping store.ErrPrecondition unless the
// object at path has version want ("" meaning: does not exist).
func checkVersion(path, want string) error {
	f, fi, err := openFile(path)
	if err != nil {
		if errors.Is(mapErr(err), store.ErrNotFound) { // a directory is no object either; the rename will fail
			if want == "" {
				return nil
			}
			return fmt.Errorf("%w: object does not exist, want version %s", store.ErrPrecondition, want)
		}
		return mapErr(err)
	}
	defer f.Close()
	if want == "" {
		return fmt.Errorf("%w: object exists", store.ErrPrecondition)
	}
	got, err := version(f, fi)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: version is %s, want %s", store.ErrPrecondition, got, want)
	}
	return nil
}

// writeTemp writes data to a new, synced temporary file in dir (made if
// need be) and returns its path and the data's version.
func (s *Store) writeTemp(dir string, data []byte) (string, string, error) {
	for attempt := 0; ; attempt++ {
		if err := s.mkdirAll(dir); err != nil {
			return "", "", err
		}
		f, err := os.CreateTemp(dir, tempPrefix+"*")
		if err != nil {
			// A concurrent Delete may have pruned dir after we made it.
			if errors.Is(err, fs.ErrNotExist) && attempt < 10 {
				continue
			}
			return "", "", err
		}
		v, err := fillTemp(f, data)
		if err != nil {
			os.Remove(f.Name())
			return "", "", err
		}
		return f.Name(), v, nil
	}
}

func fillTemp(f *os.File, data []byte) (string, error) {
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	if err := f.Chmod(0o644); err != nil {
		return "", err
	}
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	v := Version(data)
	stamp := strconv.FormatInt(fi.Size(), 10) + " " + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
	_ = setAttr(f, versionAttr, v+" "+stamp) // optional cache
	if err := f.Sync(); err != nil {
		return "", err
	}
	return v, f.Close()
}

// mkdirAll makes dir and its missing parents, syncing each parent that
// gained an entry so the new directories survive a crash.
func (s *Store) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is an object, so it cannot hold others", dir)
		}
		return nil
	}
	if dir == s.root || !strings.HasPrefix(dir, s.root) {
		return os.MkdirAll(dir, 0o755)
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirAll(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return syncDir(parent)
}

// syncDir flushes a directory's entries to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) { // file systems that cannot sync directories
		return nil
	}
	return err
}
