package cache

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/background"
	"github.com/chunkd/chunkd/tablefile"
)

// disk keeps whole, verified table files under dir/tables/<store key>,
// each with its sums under dir/sums/<store key>, bounded by max bytes,
// evicting the least recently used file that no reader holds. Downloads
// write to dir/tmp and are renamed in only after they are verified and
// synced, sums first, so a file under tables/ has always been checked and
// has its sums: at startup the service trusts them without re-reading
// (and checks each index against its sums when it opens it). The layout is
// api's (api.CacheLayout); a directory written by another version has its
// files removed at startup. One service at a time uses a directory: it
// holds dir/lock (flock) while open.
type disk struct {
	dir   string
	max   int64
	fsync bool
	m     *metrics
	lock  *os.File
	hooks *hooks
	// host is what the service tells clients of its directory, the
	// token of which it wrote to api.CacheHostFile at start.
	host api.HostInfo

	mu    sync.Mutex
	files map[string]*cachedFile // by store key
	used  int64                  // bytes of files plus reservations
}

// cachedFile is one verified table file on disk.
type cachedFile struct {
	key     string
	path    string
	size    int64
	lastUse atomic.Int64 // unix nanoseconds

	mu      sync.Mutex // guards refs, f, evicted, sums
	refs    int
	f       *os.File // opened by the first acquire; closed on eviction once unpinned
	evicted bool
	sums    *tablefile.Sums // loaded on first use (cachedFile.loadSums)
}

const (
	tablesDir = api.CacheTablesDir
	sumsDir   = api.CacheSumsDir
	tmpDir    = api.CacheTmpDir
)

// openDisk locks and loads the cache directory dir. dropped counts the
// files it removed: of another layout, or without their sums.
func openDisk(dir string, max int64, fsync bool, m *metrics, h *hooks) (d *disk, dropped int, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("cache directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	d = &disk{dir: dir, max: max, fsync: fsync, m: m, lock: lock, hooks: h, files: map[string]*cachedFile{}}
	for _, sub := range []string{tablesDir, sumsDir, tmpDir, api.CacheDBsDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, 0, fmt.Errorf("cache directory: %w", err)
		}
	}
	if dropped, err = checkLayout(dir); err != nil {
		return nil, 0, fmt.Errorf("cache directory: %w", err)
	}
	if d.host, err = writeHostFile(dir); err != nil {
		return nil, 0, fmt.Errorf("cache directory: %w", err)
	}
	// Partial downloads of a previous run are never served: remove them.
	tmps, _ := os.ReadDir(filepath.Join(dir, tmpDir))
	for _, e := range tmps {
		os.Remove(filepath.Join(dir, tmpDir, e.Name()))
	}
	root := filepath.Join(dir, tablesDir)
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		key := filepath.ToSlash(rel)
		cf := &cachedFile{key: key, path: p, size: info.Size()}
		if _, err := os.Stat(d.sumsPath(key)); err != nil {
			// A crash between the two renames of a commit (sums first),
			// or a file put there by hand: never trusted.
			dropped++
			return os.Remove(p)
		}
		cf.lastUse.Store(info.ModTime().UnixNano())
		d.files[key] = cf
		d.used += cf.size
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("scan cache directory: %w", err)
	}
	// Sums whose file is gone (a crash between an eviction's removals).
	sroot := filepath.Join(dir, sumsDir)
	filepath.WalkDir(sroot, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(sroot, p)
			if d.files[filepath.ToSlash(rel)] == nil {
				os.Remove(p)
			}
		}
		return nil
	})
	d.mu.Lock()
	for d.used > d.max && d.evictOneLocked() {
	}
	d.mu.Unlock()
	return d, dropped, nil
}

// lockDir takes the cache directory's lock (flock on dir/lock), so a second
// service on the same directory fails at start instead of emptying tmp/
// under the first one's downloads. The lock file holds the holder's pid.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, api.CacheLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "unknown"
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cache directory %s is in use by another chunkd service (pid %s); each service needs its own --cache-dir", dir, holder)
		}
		return nil, fmt.Errorf("cache directory: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// checkLayout makes dir's layout marker say api.CacheLayout. When it says
// anything else (or is missing), the files under tables/ may not have been
// checked the way the marker promises, so they are removed first (the
// service downloads them again when they are read).
func checkLayout(dir string) (dropped int, err error) {
	marker := filepath.Join(dir, api.CacheLayoutFile)
	if b, err := os.ReadFile(marker); err == nil && string(b) == api.CacheLayout {
		return 0, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	for _, sub := range []string{tablesDir, sumsDir} {
		err = filepath.WalkDir(filepath.Join(dir, sub), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			if sub == tablesDir {
				dropped++
			}
			return os.Remove(p)
		})
		if err != nil {
			return dropped, fmt.Errorf("remove files of an older layout: %w", err)
		}
	}
	tmp := filepath.Join(dir, tmpDir, api.CacheLayoutFile)
	if err := writeSynced(tmp, []byte(api.CacheLayout)); err != nil {
		return dropped, err
	}
	if err := os.Rename(tmp, marker); err != nil {
		return dropped, err
	}
	return dropped, syncDir(dir)
}

// writeSynced writes a new file and fsyncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d *disk) sumsPath(key string) string {
	return filepath.Join(d.dir, sumsDir, filepath.FromSlash(key))
}

func (d *disk) fileCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.files)
}

func (d *disk) usedBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// fits reports whether n more bytes fit without evicting anything.
func (d *disk) fits(n int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used+n <= d.max
}

// get returns the cached file for key, or nil.
func (d *disk) get(key string) *cachedFile {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.files[key]
}

// errDiskFull means no room could be made for a download.
var errDiskFull = errors.New("disk cache full")

// reserve makes room for n more bytes, evicting least recently used files
// that no reader holds, but no more of them than n needs.
func (d *disk) reserve(n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n > d.max {
		return fmt.Errorf("%w: the file is %d bytes, more than --disk (%d)", errDiskFull, n, d.max)
	}
	for d.used+n > d.max {
		if !d.evictOneLocked() {
			return fmt.Errorf("%w: need %d bytes, %d of %d in use by files being read or downloaded", errDiskFull, n, d.used, d.max)
		}
	}
	d.used += n
	d.m.diskBytes.Set(float64(d.used))
	return nil
}

func (d *disk) unreserve(n int64) {
	d.mu.Lock()
	d.used -= n
	d.m.diskBytes.Set(float64(d.used))
	d.mu.Unlock()
}

// evictOne removes the least recently used file no reader holds, and
// returns its size, or false if there was none.
func (d *disk) evictOne() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	before := d.used
	if !d.evictOneLocked() {
		return 0, false
	}
	return before - d.used, true
}

// writeHostFile writes a new random token to dir's host file (a
// temporary file renamed over it: a reader sees the old token or the new
// one) and returns the directory's HostInfo.
func writeHostFile(dir string) (api.HostInfo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return api.HostInfo{}, err
	}
	b := make([]byte, 16)
	rand.Read(b)
	info := api.HostInfo{Dir: abs, Token: hex.EncodeToString(b)}
	tmp := filepath.Join(dir, tmpDir, api.CacheHostFile)
	if err := os.WriteFile(tmp, []byte(info.Token+"\n"), 0o644); err != nil {
		return api.HostInfo{}, err
	}
	return info, os.Rename(tmp, filepath.Join(dir, api.CacheHostFile))
}

// inUse counts the files readers hold.
func (d *disk) inUse() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, cf := range d.files {
		cf.mu.Lock()
		if cf.refs > 0 {
			n++
		}
		cf.mu.Unlock()
	}
	return n
}

// evictOneLocked removes the least recently used unpinned file.
func (d *disk) evictOneLocked() bool {
	var victim *cachedFile
	for _, cf := range d.files {
		if victim != nil && cf.lastUse.Load() >= victim.lastUse.Load() {
			continue
		}
		cf.mu.Lock()
		free := cf.refs == 0
		cf.mu.Unlock()
		if free {
			victim = cf
		}
	}
	if victim == nil {
		return false
	}
	victim.mu.Lock()
	if victim.refs > 0 { // pinned since we looked
		victim.mu.Unlock()
		return d.evictOneLocked()
	}
	victim.evicted = true
	if victim.f != nil {
		victim.f.Close()
		victim.f = nil
	}
	victim.mu.Unlock()
	d.removeLocked(victim)
	d.m.evictions.Inc()
	return true
}

// removeLocked takes cf out of the index and off the disk: the file, then
// its sums (a crash between the two leaves sums that startup removes).
func (d *disk) removeLocked(cf *cachedFile) {
	delete(d.files, cf.key)
	d.used -= cf.size
	os.Remove(cf.path)
	os.Remove(d.sumsPath(cf.key))
	d.m.diskBytes.Set(float64(d.used))
}

// drop removes a file that failed a check at read time, even while other
// readers hold it: it leaves the index at once, so no new reader gets it,
// and its handle is closed by the last reader's release. It reports
// whether this call removed it (false: already gone).
func (d *disk) drop(cf *cachedFile) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropLocked(cf)
}

// dropLocked is drop with d.mu held.
func (d *disk) dropLocked(cf *cachedFile) bool {
	cf.mu.Lock()
	cf.evicted = true
	if cf.refs == 0 && cf.f != nil {
		cf.f.Close()
		cf.f = nil
	}
	cf.mu.Unlock()
	if d.files[cf.key] != cf { // already evicted (or replaced by a new download)
		return false
	}
	d.removeLocked(cf)
	return true
}

// commit moves a verified, synced download into place: its sums into
// sums/ first, then the file into tables/, then fsyncs both directories.
// The download's own handle stays the download's (its partial readers may
// still hold it); the cached file opens its own. The size was reserved by
// the download.
func (d *disk) commit(key string, tmp *os.File, size int64, sums *tablefile.Sums) (*cachedFile, error) {
	path := filepath.Join(d.dir, tablesDir, filepath.FromSlash(key))
	spath := d.sumsPath(key)
	enc, err := sums.MarshalBinary()
	if err != nil {
		return nil, err
	}
	stmp, err := os.CreateTemp(filepath.Join(d.dir, tmpDir), "sums-*")
	if err != nil {
		return nil, err
	}
	_, err = stmp.Write(enc)
	if err == nil && d.fsync {
		err = d.hooks.sync(stmp)
	}
	if cerr := stmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(stmp.Name())
		return nil, fmt.Errorf("write sums: %w", err)
	}
	for _, p := range []string{path, spath} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			os.Remove(stmp.Name())
			return nil, err
		}
	}
	if err := d.hooks.rename(stmp.Name(), spath); err != nil {
		os.Remove(stmp.Name())
		return nil, err
	}
	if err := d.hooks.rename(tmp.Name(), path); err != nil {
		os.Remove(spath)
		return nil, err
	}
	if d.fsync {
		for _, dir := range []string{filepath.Dir(spath), filepath.Dir(path)} {
			if err := syncDir(dir); err != nil {
				return nil, err
			}
		}
	}
	cf := &cachedFile{key: key, path: path, size: size, sums: sums}
	cf.lastUse.Store(time.Now().UnixNano())
	d.mu.Lock()
	if old := d.files[key]; old != nil { // a stale entry from a previous run
		d.used -= old.size
	}
	d.files[key] = cf
	d.mu.Unlock()
	return cf, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// close closes the files, records each one's last use as its mtime, which
// openDisk reads back (eviction after a restart follows use, not download
// order), and releases the directory's lock.
func (d *disk) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cf := range d.files {
		used := time.Unix(0, cf.lastUse.Load())
		os.Chtimes(cf.path, used, used) // best effort: a failure costs only eviction order
		cf.mu.Lock()
		if cf.f != nil {
			cf.f.Close()
			cf.f = nil
		}
		cf.mu.Unlock()
	}
	return d.lock.Close() // closing the descriptor releases the flock
}

// acquire pins the file against eviction and opens it if needed; false
// means it was evicted (or cannot be opened).
func (cf *cachedFile) acquire() bool {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if cf.evicted {
		return false
	}
	if cf.f == nil {
		f, err := os.Open(cf.path)
		if err != nil {
			return false
		}
		cf.f = f
	}
	cf.refs++
	cf.lastUse.Store(time.Now().UnixNano())
	return true
}

func (cf *cachedFile) release() {
	cf.mu.Lock()
	cf.refs--
	if cf.evicted && cf.refs == 0 && cf.f != nil { // dropped while read
		cf.f.Close()
		cf.f = nil
	}
	cf.mu.Unlock()
}

// ReadAt reads the file; the caller holds it (acquire).
func (cf *cachedFile) ReadAt(p []byte, off int64) (int, error) {
	cf.mu.Lock()
	f := cf.f
	cf.mu.Unlock()
	if f == nil {
		return 0, os.ErrClosed
	}
	return f.ReadAt(p, off)
}

func (cf *cachedFile) isEvicted() bool {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	return cf.evicted
}

// loadSums returns the file's sums, reading them from sums/ the first
// time (files found at startup).
func (cf *cachedFile) loadSums(d *disk) (*tablefile.Sums, error) {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if cf.sums != nil {
		return cf.sums, nil
	}
	b, err := os.ReadFile(d.sumsPath(cf.key))
	if err != nil {
		return nil, err
	}
	var s tablefile.Sums
	if err := s.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%s: %w", d.sumsPath(cf.key), err)
	}
	cf.sums = &s
	return cf.sums, nil
}

// hooks are the file-system calls a test can fail (failpoints), the
// writes of downloads, and the low-priority thread downloads are proven
// on (a test can starve it, as a busy host does).
type hooks struct {
	writeAt    func(f *os.File, b []byte, off int64) (int, error)
	sync       func(f *os.File) error
	rename     func(from, to string) error
	background func(fn func())
}

func defaultHooks() *hooks {
	return &hooks{
		writeAt:    func(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) },
		sync:       func(f *os.File) error { return f.Sync() },
		rename:     os.Rename,
		background: background.Run,
	}
}

// byDB returns the cached files per database: a file's store key is its
// database's name, a slash and the file's name (which has no slash).
func (dk *disk) byDB() map[string]dirUse {
	dk.mu.Lock()
	defer dk.mu.Unlock()
	out := map[string]dirUse{}
	for key, cf := range dk.files {
		u := out[path.Dir(key)]
		u.files++
		u.bytes += cf.size
		out[path.Dir(key)] = u
	}
	return out
}

// dropDB removes every cached file of database db, as drop does one:
// readers holding a file finish with it; new reads go to the store (and
// may download the file again).
func (dk *disk) dropDB(db string) (files int, bytes int64) {
	dk.mu.Lock()
	defer dk.mu.Unlock()
	for key, cf := range dk.files {
		if path.Dir(key) == db && dk.dropLocked(cf) {
			files++
			bytes += cf.size
		}
	}
	return files, bytes
}
