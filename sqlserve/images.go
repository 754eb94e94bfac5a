package sqlserve

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/prometheus/client_golang/prometheus"
)

// images keeps the page images of the cache directory (api.PatternImages
// documents them): files of chunks in a client's order, which clients on
// this host map and read with no request per chunk. Bounded by max bytes
// (of slots), evicting the least recently registered image whole. Each
// image's registration is kept beside it (<name>.req), so a restarted
// service finds its images again: a slot's entry is written only after its
// proven bytes, and readers check each slot's CRC, so a slot torn by a
// crash is refilled, never served.
type images struct {
	dir   string
	max   int64
	bytes prometheus.Gauge // chunkd_image_bytes

	mu     sync.Mutex
	byName map[string]*image
	used   int64

	fillSlots chan struct{} // one background fill at a time
}

// image is one page image.
type image struct {
	name     string
	db       string // the database that registered it (its background fill reads there)
	slotSize int
	addrs    []addr.Addr
	lastUse  atomic.Int64

	mu      sync.RWMutex // writers and readers of the files; remove takes it
	data    *os.File
	entries []byte // the .slots file, mapped read-write; nil once removed
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func openImages(dir string, max int64, bytes prometheus.Gauge) (*images, error) {
	dir = filepath.Join(dir, api.CacheImagesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	is := &images{dir: dir, max: max, bytes: bytes, byName: map[string]*image{}, fillSlots: make(chan struct{}, 1)}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	keep := map[string]bool{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".req")
		if !ok {
			continue
		}
		if im, err := is.reopen(name); err == nil {
			keep[name] = true
			is.byName[name] = im
			is.used += int64(im.slotSize) * int64(len(im.addrs))
		}
	}
	for _, e := range ents { // what no kept image owns: orphans of a crash, damaged images
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".req"), ".img"), ".slots")
		if !keep[base] {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	is.mu.Lock()
	for is.used > is.max {
		is.evictOneLocked()
	}
	is.mu.Unlock()
	bytes.Set(float64(is.used))
	return is, nil
}

// reopen finds image name again after a restart, if its three files agree.
func (is *images) reopen(name string) (*image, error) {
	req, err := os.ReadFile(filepath.Join(is.dir, name+".req"))
	if err != nil {
		return nil, err
	}
	slotSize, addrs, err := api.ReadImageRequest(bytes.NewReader(req))
	if err != nil {
		return nil, err
	}
	if api.ImageName(slotSize, addrs) != name {
		return nil, fmt.Errorf("image %s: its request names another image", name)
	}
	im := &image{name: name, slotSize: slotSize, addrs: addrs}
	fi, err := os.Stat(im.dataPath(is.dir))
	if err != nil || fi.Size() != int64(slotSize)*int64(len(addrs)) {
		return nil, fmt.Errorf("image %s: data file missing or of the wrong size", name)
	}
	im.lastUse.Store(fi.ModTime().UnixNano())
	if im.data, err = os.OpenFile(im.dataPath(is.dir), os.O_RDWR, 0); err != nil {
		return nil, err
	}
	if err := im.mapEntries(is.dir, false); err != nil {
		im.data.Close()
		return nil, err
	}
	// The database is not kept: a background fill after a restart runs
	// only for images registered again (which names it).
	return im, nil
}

// get returns image name, or nil.
func (is *images) get(name string) *image {
	is.mu.Lock()
	defer is.mu.Unlock()
	im := is.byName[name]
	if im != nil {
		im.lastUse.Store(time.Now().UnixNano())
	}
	return im
}

// register returns the image of addrs, named name (api.ImageName of
// slotSize and addrs), making it if need be (created reports that).
func (is *images) register(db, name string, slotSize int, addrs []addr.Addr) (im *image, created bool, err error) {
	if im := is.get(name); im != nil {
		return im, im.adopt(db), nil
	}
	size := int64(slotSize) * int64(len(addrs))
	if size > is.max {
		return nil, false, cache.Errorf(cache.KindTooLarge, nil, "an image of %d slots of %d bytes (%d bytes) is larger than the images' budget (%d, --images)", len(addrs), slotSize, size, is.max)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if im := is.byName[name]; im != nil { // made meanwhile
		return im, false, nil
	}
	for is.used+size > is.max {
		is.evictOneLocked()
	}
	im = &image{name: name, db: db, slotSize: slotSize, addrs: addrs}
	if err := im.create(is.dir, size); err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(filepath.Join(is.dir, name+".req"), api.EncodeImageRequest(slotSize, addrs), 0o644); err != nil {
		im.remove(is.dir)
		return nil, false, err
	}
	im.lastUse.Store(time.Now().UnixNano())
	is.byName[name] = im
	is.used += size
	is.bytes.Set(float64(is.used))
	return im, true, nil
}

func (im *image) create(dir string, size int64) (err error) {
	defer func() {
		if err != nil {
			im.remove(dir)
		}
	}()
	im.data, err = os.OpenFile(im.dataPath(dir), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := im.data.Truncate(size); err != nil { // sparse until filled
		return err
	}
	return im.mapEntries(dir, true)
}

// mapEntries maps the .slots file read-write: a new, empty one, or the one
// there (which must be of the image's size).
func (im *image) mapEntries(dir string, create bool) error {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_TRUNC
	}
	ef, err := os.OpenFile(im.entriesPath(dir), flags, 0o644)
	if err != nil {
		return err
	}
	defer ef.Close()
	n := 8 * len(im.addrs)
	if create {
		err = ef.Truncate(int64(n))
	} else if fi, serr := ef.Stat(); serr != nil || fi.Size() != int64(n) {
		err = fmt.Errorf("%s: not %d bytes", ef.Name(), n)
	}
	if err != nil {
		return err
	}
	im.entries, err = syscall.Mmap(int(ef.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s: %w", ef.Name(), err)
	}
	return nil
}

func (im *image) dataPath(dir string) string    { return filepath.Join(dir, im.name+".img") }
func (im *image) entriesPath(dir string) string { return filepath.Join(dir, im.name+".slots") }

// remove closes and deletes the image's files, once no fill is writing.
// Clients that map them keep what they map (the bytes never change).
func (im *image) remove(dir string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.entries != nil {
		syscall.Munmap(im.entries)
		im.entries = nil
	}
	if im.data != nil {
		im.data.Close()
		im.data = nil
	}
	os.Remove(im.dataPath(dir))
	os.Remove(im.entriesPath(dir))
	os.Remove(filepath.Join(dir, im.name+".req"))
}

// evictOneLocked removes the least recently registered image.
func (is *images) evictOneLocked() {
	var victim *image
	for _, im := range is.byName {
		if victim == nil || im.lastUse.Load() < victim.lastUse.Load() {
			victim = im
		}
	}
	if victim == nil {
		return
	}
	delete(is.byName, victim.name)
	is.used -= int64(victim.slotSize) * int64(len(victim.addrs))
	is.bytes.Set(float64(is.used))
	victim.remove(is.dir)
}

// close unmaps and closes every image; the files stay for the next start.
func (is *images) close() {
	is.mu.Lock()
	defer is.mu.Unlock()
	for _, im := range is.byName {
		im.mu.Lock()
		if im.entries != nil {
			syscall.Munmap(im.entries)
			im.entries = nil
		}
		if im.data != nil {
			used := time.Unix(0, im.lastUse.Load())
			os.Chtimes(im.dataPath(is.dir), used, used) // eviction order after the restart
			im.data.Close()
			im.data = nil
		}
		im.mu.Unlock()
	}
	is.byName = map[string]*image{}
}

// adopt gives an image found again after a restart the database of its
// first registration since, and reports whether it did: that
// registration starts the background fill of what is still empty.
func (im *image) adopt(db string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.db != "" {
		return false
	}
	im.db = db
	return true
}

// entry returns slot i's entry word in the mapped .slots file (im.mu
// held, entries not nil).
func (im *image) entry(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&im.entries[8*i]))
}

// filled reports whether slot i has been written (false once removed).
func (im *image) filled(i int) bool {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.entries != nil && atomic.LoadUint64(im.entry(i))&api.ImageSlotFilled != 0
}

// evicted reports whether the image was removed.
func (im *image) evicted() bool {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.entries == nil
}

// write fills slot i with proven bytes: the bytes first, then the entry
// that says they are there.
func (im *image) write(i int, data []byte) error {
	if len(data) != im.slotSize {
		return fmt.Errorf("image %s: chunk %s of slot %d is %d bytes, not %d", im.name, im.addrs[i], i, len(data), im.slotSize)
	}
	im.mu.RLock()
	defer im.mu.RUnlock()
	if im.entries == nil {
		return errImageEvicted
	}
	if _, err := im.data.WriteAt(data, int64(i)*int64(im.slotSize)); err != nil {
		return fmt.Errorf("image %s: write slot %d: %w", im.name, i, err)
	}
	atomic.StoreUint64(im.entry(i), api.ImageSlotFilled|uint64(crc32.Checksum(data, castagnoli)))
	return nil
}

var errImageEvicted = errors.New("image evicted")

// read copies slot i into p if it is filled and its bytes match their
// CRC, and reports whether it did: how the service's own queries read
// an image (a version it opened, versions.go).
func (im *image) read(i int, p []byte) bool {
	im.mu.RLock()
	defer im.mu.RUnlock()
	if im.entries == nil || i < 0 || i >= len(im.addrs) || len(p) < im.slotSize {
		return false
	}
	e := atomic.LoadUint64(im.entry(i))
	if e&api.ImageSlotFilled == 0 {
		return false
	}
	n, _ := im.data.ReadAt(p[:im.slotSize], int64(i)*int64(im.slotSize))
	return n == im.slotSize && crc32.Checksum(p[:n], castagnoli) == uint32(e)
}
