package api

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/chunkd/chunkd/addr"
)

// Page images: a same-host client reads a database version's pages from a
// file the service keeps in its cache directory, with no request per
// page.
//
// An image is a list of chunk addresses in order (a SQLite version's pages,
// say), each chunk exactly SlotSize bytes. A client registers one with the
// service (PatternImages); the service names it by its contents
// (ImageName: a hash of the slot size and the addresses, so every client
// reading the same version shares one image) and keeps, under
// DIR/images/:
//
//	<name>.req    the registration (EncodeImageRequest)
//	<name>.img    slot i at offset i×SlotSize: chunk i's bytes, once filled
//	<name>.slots  one little-endian u64 per slot: 0 while empty, else
//	              ImageSlotFilled | CRC-32C (Castagnoli) of the slot's bytes
//
// The service fills a slot only with bytes it proved against the chunk's
// address, writes the slot's bytes before its entry, and never changes a
// filled slot's bytes. A client opens both read-only (the entries mapped), reads a slot
// whose entry says filled and whose bytes match the entry's CRC (rot since
// the service wrote it is caught there), and asks the service to fill the
// others (PatternImageFill): the answer carries their bytes, as frames of
// a batch whose Index is the slot number. Each image's registration is
// kept beside it (<name>.req), so a restarted service finds its images
// again. Images are evicted whole (least recently registered first) to
// stay within their budget; a client holding an evicted
// image keeps reading what was filled (the bytes never change) and reads
// the rest through its other tiers.
const (
	// PatternImages is the route of POST an image registration: the body
	// is EncodeImageRequest's, the answer an ImageInfo.
	PatternImages = "POST /v1/dbs/{db}/images"
	// PatternImage is the route of GET a registered image's ImageInfo by
	// its name: a client that has the name (ImageName) opens an image the
	// service already has without sending its addresses; an image the
	// service does not have is 404 ("unknown image"), and the client
	// registers it.
	PatternImage = "GET /v1/dbs/{db}/images/{image}"
	// PatternImageFill is the route of POST a fill: the body is slot
	// numbers, big-endian u32 each (at most MaxBatch); the answer is a
	// frame stream, one frame per slot, Index the slot number.
	PatternImageFill = "POST /v1/dbs/{db}/images/{image}/fill"
	// CacheImagesDir is the images' folder in the cache directory.
	CacheImagesDir = "images"
	// ImageSlotFilled marks a filled slot's entry.
	ImageSlotFilled = uint64(1) << 63
	// MaxImageSlots bounds an image's slots (64 GiB of 4 KiB pages).
	MaxImageSlots = 1 << 24
)

// ImageInfo describes a registered image, as PatternImages answers.
type ImageInfo struct {
	// Name is the image's name: ImageName of its request.
	Name string `json:"name"`
	// Slots and SlotSize are its shape.
	Slots    int `json:"slots"`
	SlotSize int `json:"slot_size"`
	// Data and Entries are the files' paths relative to the cache
	// directory ("images/<name>.img", "images/<name>.slots").
	Data    string `json:"data"`
	Entries string `json:"entries"`
}

// ImagesPath returns the URL path that registers images of database db.
func ImagesPath(db string) string { return DBPath(db) + "/images" }

// ImagePath returns the URL path of image name.
func ImagePath(db, name string) string { return ImagesPath(db) + "/" + name }

// ImageFillPath returns the URL path that fills slots of image name.
func ImageFillPath(db, name string) string { return ImagesPath(db) + "/" + name + "/fill" }

// ImageName names the image of addrs in slots of slotSize bytes: the text
// form of the first 20 bytes of the SHA-256 of the request body (SHA-256,
// not the chunks' SHA-512: a name is computed for every open, over about
// 1 MiB for a 200 MiB database, and most x86-64 and arm64 CPUs have instructions for SHA-256).
func ImageName(slotSize int, addrs []addr.Addr) string {
	// Hashed in place, as EncodeImageRequest would lay them out, without
	// the copy: an address is 20 bytes, so a slice of them is the
	// addresses back to back.
	h := sha256.New()
	var size [4]byte
	binary.BigEndian.PutUint32(size[:], uint32(slotSize))
	h.Write(size[:])
	if len(addrs) > 0 {
		h.Write(unsafe.Slice(&addrs[0][0], len(addrs)*addr.Size))
	}
	var a addr.Addr
	copy(a[:], h.Sum(nil))
	return a.String()
}

// ImageRequestName is ImageName of an encoded registration.
func ImageRequestName(req []byte) string {
	sum := sha256.Sum256(req)
	var a addr.Addr
	copy(a[:], sum[:])
	return a.String()
}

// EncodeImageRequest is the body of an image registration: the slot size
// as a big-endian u32, then the addresses back to back.
func EncodeImageRequest(slotSize int, addrs []addr.Addr) []byte {
	b := make([]byte, 4, 4+len(addrs)*addr.Size)
	binary.BigEndian.PutUint32(b, uint32(slotSize))
	for _, a := range addrs {
		b = append(b, a[:]...)
	}
	return b
}

// ErrBadImage: an image registration or fill request that is malformed.
var ErrBadImage = errors.New("bad image request")

// ReadImageRequest reads and checks an image registration body.
func ReadImageRequest(r io.Reader) (slotSize int, addrs []addr.Addr, err error) {
	b, err := io.ReadAll(io.LimitReader(r, 4+MaxImageSlots*addr.Size+1))
	if err != nil {
		return 0, nil, fmt.Errorf("reading image request: %w", err)
	}
	if len(b) < 4 || (len(b)-4)%addr.Size != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes is not a slot size and whole addresses", ErrBadImage, len(b))
	}
	slotSize = int(binary.BigEndian.Uint32(b))
	n := (len(b) - 4) / addr.Size
	if err := CheckImageShape(slotSize, n); err != nil {
		return 0, nil, err
	}
	addrs = make([]addr.Addr, n)
	for i := range addrs {
		copy(addrs[i][:], b[4+i*addr.Size:])
	}
	return slotSize, addrs, nil
}

// CheckImageShape checks that an image of slots slots of slotSize bytes
// is one a service keeps: a slot size that is a power of two from 512 to
// 65536 (a SQLite page size), 1 to MaxImageSlots slots.
func CheckImageShape(slotSize, slots int) error {
	if slotSize < 512 || slotSize > 64<<10 || slotSize&(slotSize-1) != 0 {
		return fmt.Errorf("%w: slot size %d is not a power of two from 512 to 65536", ErrBadImage, slotSize)
	}
	if slots < 1 || slots > MaxImageSlots {
		return fmt.Errorf("%w: %d slots (want 1 to %d)", ErrBadImage, slots, MaxImageSlots)
	}
	return nil
}

// EncodeSlots is the body of a fill request.
func EncodeSlots(slots []uint32) []byte {
	b := make([]byte, 4*len(slots))
	for i, s := range slots {
		binary.BigEndian.PutUint32(b[4*i:], s)
	}
	return b
}

// ReadSlots reads a fill request's body: slot numbers below n, at most
// MaxBatch of them.
func ReadSlots(r io.Reader, n int) ([]uint32, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4*MaxBatch+1))
	if err != nil {
		return nil, fmt.Errorf("reading fill request: %w", err)
	}
	if len(b)%4 != 0 || len(b) > 4*MaxBatch {
		return nil, fmt.Errorf("%w: a fill request of %d bytes (want whole u32 slot numbers, at most %d)", ErrBadImage, len(b), MaxBatch)
	}
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.BigEndian.Uint32(b[4*i:])
		if int(out[i]) >= n {
			return nil, fmt.Errorf("%w: slot %d of an image of %d", ErrBadImage, out[i], n)
		}
	}
	return out, nil
}
