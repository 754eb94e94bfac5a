package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/api"
)

// disk keeps whole, verified table files under dir/tables/<store key>,
// bounded by max bytes, evicting the least recently used file that no
// reader holds. Downloads write to dir/tmp and are renamed in only after
// they are verified and synced, so a file under tables/ has always been
// checked: at startup the service trusts them without re-reading. The
// layout is api's (see api.CacheLayout); a directory written by another
// version has its tables/ emptied at startup.
//
// Lock order: table.mu before disk.mu; cachedFile counters are atomics.
type disk struct {
	dir   string
	max   int64
	fsync bool
	m     *metrics

	mu    sync.Mutex
	files map[string]*cachedFile // by store key
	used  int64                  // bytes of files plus reservations
}

// cachedFile is one verified table file on disk.
type cachedFile struct {
	d       *disk
	key     string
	path    string
	size    int64
	lastUse atomic.Int64 // unix nanoseconds

	mu      sync.Mutex // guards refs, f, evicted
	refs    int
	f       *os.File
	evicted bool
}

const (
	tablesDir = api.CacheTablesDir
	tmpDir    = api.CacheTmpDir
)

// openDisk loads the cache directory dir. dropped counts the files of
// another layout it removed.
func openDisk(dir string, max int64, fsync bool, m *metrics) (d *disk, dropped int, err error) {
	d = &disk{dir: dir, max: max, fsync: fsync, m: m, files: map[string]*cachedFile{}}
	for _, sub := range []string{tablesDir, tmpDir, api.CacheDBsDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, 0, fmt.Errorf("cache directory: %w", err)
		}
	}
	if dropped, err = checkLayout(dir); err != nil {
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
		cf := &cachedFile{d: d, key: filepath.ToSlash(rel), path: p, size: info.Size()}
		cf.lastUse.Store(info.ModTime().UnixNano())
		d.files[cf.key] = cf
		d.used += cf.size
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("scan cache directory: %w", err)
	}
	d.mu.Lock()
	for d.used > d.max && d.evictOneLocked() {
	}
	d.mu.Unlock()
	return d, dropped, nil
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
	root := filepath.Join(dir, tablesDir)
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		dropped++
		return os.Remove(p)
	})
	if err != nil {
		return dropped, fmt.Errorf("remove files of an older layout: %w", err)
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

// get returns the cached file for key, or nil.
func (d *disk) get(key string) *cachedFile {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.files[key]
}

// errDiskFull means no room could be made for a download.
var errDiskFull = errors.New("disk cache full")

// reserve makes room for n more bytes, evicting least recently used files
// that no reader holds.
func (d *disk) reserve(n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	delete(d.files, victim.key)
	d.used -= victim.size
	os.Remove(victim.path)
	d.m.evictions.Inc()
	d.m.diskBytes.Set(float64(d.used))
	return true
}

// drop removes a file that failed a check at read time, even while other
// readers hold it: it leaves the index at once, so no new reader gets it,
// and its handle is closed by the last reader's release. It reports
// whether this call removed it (false: already gone).
func (d *disk) drop(cf *cachedFile) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	delete(d.files, cf.key)
	d.used -= cf.size
	os.Remove(cf.path)
	d.m.diskBytes.Set(float64(d.used))
	return true
}

// commit moves a verified, synced download into place. The open file
// (read-write, positioned anywhere) becomes the cached file's handle. The
// size was reserved by the download.
func (d *disk) commit(key string, tmp *os.File, size int64) (*cachedFile, error) {
	path := filepath.Join(d.dir, tablesDir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, err
	}
	if d.fsync {
		if err := syncDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	cf := &cachedFile{d: d, key: key, path: path, size: size, f: tmp}
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

// close closes the files, and records each one's last use as its mtime,
// which openDisk reads back: eviction after a restart follows use, not
// download order.
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
	return nil
}

// acquire pins the file against eviction and opens it if needed; false
// means it was evicted.
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

func (cf *cachedFile) isEvicted() bool {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	return cf.evicted
}
