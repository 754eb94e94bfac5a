//go:build cgo

package sqlitevfs

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// slotsInC reports whether the VFS reads SlotFiles in C: whether the CPU
// has the CRC-32C instruction.
func slotsInC() bool { return C.chunkd_crc32c_hw() != 0 }

// slotReader is a registration's SlotFile as the C side reads it (see
// slots.c): held by the registration and by each file open on it, and
// freed when the last of them lets go.
type slotReader struct {
	mu     sync.Mutex // guards c and refs
	c      *C.chunkd_slots
	refs   int
	pinner runtime.Pinner // the counters C adds to
}

// newSlotReader returns the C reader of p's SlotFile, counting pages in
// pagesRead too, or nil when p has none or it cannot be read in C.
func newSlotReader(p Pages, pagesRead *atomic.Int64) *slotReader {
	sp, ok := p.(SlotPages)
	if !ok || !slotsInC() {
		return nil
	}
	f, ok := sp.SlotFile()
	if !ok || f.Data == nil || f.Entries == nil {
		return nil
	}
	data, ok1 := fdOf(f.Data)
	entries, ok2 := fdOf(f.Entries)
	if !ok1 || !ok2 {
		return nil
	}
	sr := &slotReader{refs: 1}
	var reads *C.int64_t
	if f.Reads != nil {
		sr.pinner.Pin(f.Reads)
		reads = (*C.int64_t)(unsafe.Pointer(f.Reads))
	}
	sr.pinner.Pin(pagesRead)
	sr.c = C.chunkd_slots_new(C.int(data), C.int(entries), C.int(p.PageSize()), C.int64_t(p.PageCount()), C.uint64_t(f.Filled),
		reads, (*C.int64_t)(unsafe.Pointer(pagesRead)))
	runtime.KeepAlive(f.Data) // open until C has duplicated the descriptors
	runtime.KeepAlive(f.Entries)
	if sr.c == nil {
		sr.pinner.Unpin()
		return nil
	}
	return sr
}

// fdOf returns f's descriptor (without Fd's switch to blocking mode).
func fdOf(f *os.File) (int, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if rc.Control(func(d uintptr) { fd = int(d) }) != nil {
		return 0, false
	}
	return fd, fd >= 0
}

// acquire takes a reference for a file opening on the image; nil when
// there is no reader (any more).
func (sr *slotReader) acquire() *C.chunkd_slots {
	if sr == nil {
		return nil
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.c != nil {
		sr.refs++
	}
	return sr.c
}

// release lets go of a reference; the last frees the reader.
func (sr *slotReader) release() {
	if sr == nil {
		return
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.refs--; sr.refs == 0 && sr.c != nil {
		C.chunkd_slots_free(sr.c)
		sr.c = nil
		sr.pinner.Unpin()
	}
}

// unregistered stops the reads of files still open on the image (they
// fail through Go from now on, as Unregister says) and lets go of the
// registration's reference.
func (sr *slotReader) unregistered() {
	if sr == nil {
		return
	}
	sr.mu.Lock()
	if sr.c != nil {
		C.chunkd_slots_gone(sr.c)
	}
	sr.mu.Unlock()
	sr.release()
}

// slotCRC returns the CRC-32C of one page-sized slot as the C reader
// checks it (for tests).
func (sr *slotReader) slotCRC(b []byte) uint32 {
	return uint32(C.chunkd_slots_crc(sr.c, unsafe.Pointer(&b[0])))
}
