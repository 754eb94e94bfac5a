package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
)

// Image is a page image of a cache service on this host (api.PatternImages
// documents them): a list of chunks in order, each in a fixed-size slot of
// a file in the service's cache directory, which the client reads with no
// request per chunk: the slots with pread, the entries from a read-only
// mapping. The service fills slots in the
// background and on request, only with bytes it proved against their
// addresses; the client reads a slot only when its entry says it is filled
// and its bytes match the entry's CRC-32C, and reads the others through
// its other tiers.
//
// A slot whose bytes fail their CRC (rot since the service wrote it) is
// reported absent, and filled again by the service in the background.
// An Image is safe for concurrent use. It stays readable after the service
// evicts it or restarts (the mapped bytes never change); a repair then
// fails with ErrImageGone, and the next open registers the image again.
type Image struct {
	c        *Client
	svc      *httpService
	name     string
	slots    int
	slotSize int
	// data is the .img file, open (it stays readable after the service
	// removes it) and mapped read-only (mapped). A slot's first read in
	// this process is a pread, its later ones a copy from the mapping
	// (read marks the slots read once): the first touch of a page of a
	// mapping is a page fault, 4 to 10 times a 4 KiB pread on the machine
	// of docs/benchmarks.md, so a new process, whose reads are mostly
	// first ones, preads; a long-running one, which reads its hot pages
	// again and again, copies them from memory after one fault each.
	data        *os.File
	mapped      []byte
	read        []atomic.Uint32 // a bit per slot: read once already
	entriesFile *os.File        // the .slots file, open (for Files)
	entries     []byte          // and mapped read-only
	// repairing is set while a repair fill runs.
	repairing atomic.Bool
}

// ErrNoImage: the client cannot have a page image: it needs a cache
// service over HTTP and the service's cache directory (Options.LocalDir).
var ErrNoImage = errors.New("client: page images need an HTTP cache service on this host and its cache directory (LocalDir)")

// ErrImageGone: the service no longer has the image (evicted, or it
// restarted); register it again.
var ErrImageGone = errors.New("client: the cache service no longer has the page image")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenImage registers the image of addrs, each chunk slotSize bytes, with
// the same-host cache service, and maps its files: one request.
func (c *Client) OpenImage(ctx context.Context, slotSize int, addrs []addr.Addr) (*Image, error) {
	h, ok := httpOf(c.svc)
	if !ok || c.opts.LocalDir == "" {
		return nil, ErrNoImage
	}
	name := api.ImageName(slotSize, addrs)
	c.ctr.svcRequests.Add(1)
	info, err := h.imageInfo(ctx, name)
	if errors.Is(err, ErrImageGone) { // not registered yet, or evicted
		c.ctr.svcRequests.Add(1)
		info, err = h.registerImage(ctx, api.EncodeImageRequest(slotSize, addrs))
	}
	if err != nil {
		return nil, err
	}
	if info.Name != name || info.Slots != len(addrs) || info.SlotSize != slotSize {
		return nil, fmt.Errorf("client: cache service %s registered image %+v for %d slots of %d bytes named %s", h.base, info, len(addrs), slotSize, name)
	}
	return c.mapImage(h, info)
}

// OpenVersionImage asks the same-host cache service for the page image of
// chunkd SQLite version root (the zero root: the current one, checked
// first with Options.FreshRoot), which the service names and registers
// from the version's page map as it read and proved it
// (api.PatternVersionImage), and maps its files: one request, and no page
// map to read, prove or hash into a name. It returns the version's root
// and root chunk, which the caller checks hash to each other, and the
// image, whose shape (Slots, SlotSize) the caller checks against the
// root chunk.
func (c *Client) OpenVersionImage(ctx context.Context, root addr.Addr) (addr.Addr, []byte, *Image, error) {
	h, ok := httpOf(c.svc)
	if !ok || c.opts.LocalDir == "" {
		return addr.Addr{}, nil, nil, ErrNoImage
	}
	c.ctr.svcRequests.Add(1)
	fresh := root.IsEmpty() && c.opts.FreshRoot
	req, err := h.newRequest(ctx, http.MethodGet, api.VersionImagePath(h.db, root, fresh), nil)
	if err != nil {
		return addr.Addr{}, nil, nil, err
	}
	var vi api.VersionImage
	if err := h.jsonAnswer(req, "page image of a version", &vi, false); err != nil {
		return addr.Addr{}, nil, nil, err
	}
	got, err := addr.Parse(vi.Root)
	if err != nil || (!root.IsEmpty() && got != root) {
		return addr.Addr{}, nil, nil, fmt.Errorf("client: cache service %s: page image of version %q, asked for %s", h.base, vi.Root, root)
	}
	if fresh && vi.Current != nil && vi.Current.Stale {
		return addr.Addr{}, nil, nil, errStaleRoot(h.base, h.db)
	}
	if err := api.CheckImageShape(vi.Image.SlotSize, vi.Image.Slots); err != nil {
		return addr.Addr{}, nil, nil, fmt.Errorf("client: cache service %s: page image %+v of version %s: %w", h.base, vi.Image, got, err)
	}
	im, err := c.mapImage(h, vi.Image)
	if err != nil {
		return addr.Addr{}, nil, nil, err
	}
	return got, vi.RootChunk, im, nil
}

// mapImage opens and maps the files of image info.
func (c *Client) mapImage(h *httpService, info api.ImageInfo) (im *Image, err error) {
	im = &Image{c: c, svc: h, name: info.Name, slots: info.Slots, slotSize: info.SlotSize}
	size := int64(info.SlotSize) * int64(info.Slots)
	if im.data, err = openSized(filepath.Join(c.opts.LocalDir, filepath.FromSlash(info.Data)), size); err != nil {
		return nil, fmt.Errorf("client: page image: %w", err)
	}
	if im.mapped, err = syscall.Mmap(int(im.data.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED); err != nil {
		im.data.Close()
		return nil, fmt.Errorf("client: page image: map %s: %w", info.Data, err)
	}
	if im.entriesFile, im.entries, err = mapFile(filepath.Join(c.opts.LocalDir, filepath.FromSlash(info.Entries)), 8*int64(info.Slots)); err != nil {
		syscall.Munmap(im.mapped)
		im.data.Close()
		return nil, fmt.Errorf("client: page image: %w", err)
	}
	im.read = make([]atomic.Uint32, (info.Slots+31)/32)
	return im, nil
}

// openSized opens a file of at least size bytes for reading.
func openSized(path string, size int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() < size {
		f.Close()
		return nil, fmt.Errorf("%s is %d bytes, want %d", path, st.Size(), size)
	}
	return f, nil
}

// mapFile opens a file and maps its first size bytes read-only.
func mapFile(path string, size int64) (*os.File, []byte, error) {
	f, err := openSized(path, size)
	if err != nil {
		return nil, nil, err
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, m, nil
}

// Slots returns the image's number of slots.
func (im *Image) Slots() int { return im.slots }

// SlotSize returns the size of the image's slots.
func (im *Image) SlotSize() int { return im.slotSize }

// Read copies slot i into p (slotSize bytes) if the service has filled it
// and its bytes match their CRC, and reports whether it did. Files cut
// short under it (by something other than the service, which never
// shrinks an image) give a short read of the slot, or a fault on the
// entries' mapping, which is caught: the read reports false rather than
// crash the process.
func (im *Image) Read(i int, p []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			im.c.ctr.imageBad.Add(1)
			ok = false
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	e := im.entry(i)
	if e&api.ImageSlotFilled == 0 {
		return false
	}
	var n int
	if bit := uint32(1) << (i % 32); im.read[i/32].Load()&bit != 0 {
		n = copy(p[:im.slotSize], im.mapped[i*im.slotSize:(i+1)*im.slotSize]) // a fault if cut short: caught
	} else {
		n, _ = im.data.ReadAt(p[:im.slotSize], int64(i)*int64(im.slotSize)) // short: cut short under us
		im.read[i/32].Or(bit)
	}
	if !im.check(i, p[:n], e) {
		return false
	}
	im.c.ctr.imageReads.Add(1)
	return true
}

// entry loads slot i's entry (a CRC-32C and flags, written by the service
// after the slot's bytes).
func (im *Image) entry(i int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&im.entries[8*i])))
}

// check reports whether b, read from slot i, is the whole slot and
// matches its entry e; a slot that is not has the service fill it again.
func (im *Image) check(i int, b []byte, e uint64) bool {
	if len(b) == im.slotSize && crc32.Checksum(b, castagnoli) == uint32(e) {
		return true
	}
	im.c.ctr.imageBad.Add(1)
	im.repair(i)
	return false
}

// Holds reports whether the service has filled slot i (a Read of it may
// still find it cut short or failing its CRC).
func (im *Image) Holds(i int) (ok bool) {
	if i < 0 || i >= im.slots {
		return false
	}
	defer func() {
		if recover() != nil { // the entries cut short under us, as Read guards against
			ok = false
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return im.entry(i)&api.ImageSlotFilled != 0
}

// Filled counts the slots the service has filled.
func (im *Image) Filled() int {
	n := 0
	for i := range im.slots {
		if im.entry(i)&api.ImageSlotFilled != 0 {
			n++
		}
	}
	return n
}

// repair has the service fill slot i again, in the background, one
// repair at a time (others are dropped: a later read asks again). The
// answer's bytes are not used (the service rewrote the slot; a later read
// checks it as any).
func (im *Image) repair(i int) {
	if !im.repairing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer im.repairing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		im.c.ctr.svcRequests.Add(1)
		im.svc.fillImage(ctx, im.name, []uint32{uint32(i)}, func(uint32, []byte) error {
			im.c.ctr.imageFills.Add(1)
			return nil
		})
	}()
}

// ImageFiles are a page image's files, for a reader that reads its slots
// itself (the SQLite VFS, in C, with no call into Go): slot i at offset
// i*SlotSize of Data, its entry (api.PatternImages) at offset 8*i of
// Entries. Such a reader must use a slot's bytes only when its entry has
// api.ImageSlotFilled and they match its CRC-32C, as Read does, and
// leave the others to Read (which has a slot that fails its check filled
// again); it adds the slots it read to Reads, the client's count of
// image reads (Stats.ImageReads).
type ImageFiles struct {
	Data, Entries *os.File
	Reads         *atomic.Int64
}

// Files returns the image's files, open until Close.
func (im *Image) Files() ImageFiles {
	return ImageFiles{Data: im.data, Entries: im.entriesFile, Reads: &im.c.ctr.imageReads}
}

// Close unmaps the image and closes its files. Reads must have ended.
func (im *Image) Close() error {
	err := errors.Join(im.data.Close(), im.entriesFile.Close())
	for _, m := range [][]byte{im.mapped, im.entries} {
		if e := syscall.Munmap(m); err == nil {
			err = e
		}
	}
	return err
}

// imageInfo asks the service for image name, which it has when a client
// registered it before: one small request instead of a registration's
// addresses. An image the service does not have is ErrImageGone.
func (h *httpService) imageInfo(ctx context.Context, name string) (api.ImageInfo, error) {
	req, err := h.newRequest(ctx, http.MethodGet, api.ImagePath(h.db, name), nil)
	if err != nil {
		return api.ImageInfo{}, err
	}
	return h.imageAnswer(req, "page image "+name)
}

// registerImage registers an image with the service; body is
// api.EncodeImageRequest's.
func (h *httpService) registerImage(ctx context.Context, body []byte) (api.ImageInfo, error) {
	req, err := h.newRequest(ctx, http.MethodPost, api.ImagesPath(h.db), bytes.NewReader(body))
	if err != nil {
		return api.ImageInfo{}, err
	}
	req.Header.Set("Content-Type", api.ContentTypeBinary)
	return h.imageAnswer(req, "register page image")
}

// imageAnswer sends req and reads the ImageInfo it answers.
func (h *httpService) imageAnswer(req *http.Request, what string) (api.ImageInfo, error) {
	var info api.ImageInfo
	err := h.jsonAnswer(req, what, &info, req.Method == http.MethodGet)
	return info, err
}

// jsonAnswer sends req and decodes the JSON it answers into v; with
// gone, a 404 is ErrImageGone.
func (h *httpService) jsonAnswer(req *http.Request, what string, v any, gone bool) error {
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("cache service %s: %w", h.base, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode == http.StatusNotFound && gone {
		return fmt.Errorf("cache service %s: %w: %w", h.base, ErrImageGone, api.ReadError(resp))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cache service %s: %s: %w", h.base, what, api.ReadError(resp))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("cache service %s: %s: %w", h.base, what, err)
	}
	return nil
}

// fillImage asks the service to fill slots and reads their bytes
// (unchecked: fn must not pass them on).
func (h *httpService) fillImage(ctx context.Context, name string, slots []uint32, fn func(slot uint32, data []byte) error) error {
	req, err := h.newRequest(ctx, http.MethodPost, api.ImageFillPath(h.db, name), bytes.NewReader(api.EncodeSlots(slots)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", api.ContentTypeBinary)
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("cache service %s: %w", h.base, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %w", ErrImageGone, api.ReadError(resp))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cache service %s: fill page image: %w", h.base, api.ReadError(resp))
	}
	got := 0
	for f, err := range api.NewFrameReader(resp.Body).All() {
		if err != nil {
			return fmt.Errorf("cache service %s: fill cut short after %d of %d slots: %w", h.base, got, len(slots), err)
		}
		if !f.Found {
			return fmt.Errorf("cache service %s: fill answered slot %d as absent", h.base, f.Index)
		}
		if err := fn(f.Index, f.Data); err != nil {
			return err
		}
		got++
	}
	if got != len(slots) {
		return fmt.Errorf("cache service %s: fill answered %d of %d slots", h.base, got, len(slots))
	}
	return nil
}
