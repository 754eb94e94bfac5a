package sqlitevfs

import (
	"os"
	"sync/atomic"
)

// SlotFile is a file on this host that holds an image's pages, page n in
// slot n-1, beside a file of entries that say which slots are filled and
// the CRC-32C of each one's bytes: a same-host cache service's page image
// (client.Image) is one. The VFS reads such pages itself, in C, with no
// call into Go: a pread of the slot into SQLite's buffer and a check of
// its CRC (Castagnoli, with the SSE4.2 instruction), as cheap as a local
// file's read and a CRC. A page whose slot is not filled or fails its
// check, and any read that is not one whole page, is read through the
// Pages as any other; so is every page on a CPU without the instruction.
type SlotFile struct {
	// Data holds slot i (page i+1) at offset i*PageSize.
	Data *os.File
	// Entries holds slot i's entry at offset 8*i: a little-endian uint64
	// with the CRC-32C of the slot's bytes in its low 32 bits, and Filled
	// set once the slot holds them. A filled entry never changes.
	Entries *os.File
	// Filled is the bit of an entry that marks its slot filled.
	Filled uint64
	// Reads, if not nil, counts the pages the VFS reads from Data. It
	// must stay in memory (the VFS pins it) while the image is registered.
	Reads *atomic.Int64
}

// SlotPages is an optional interface of Pages whose pages sit in a
// SlotFile, one slot of PageSize bytes a page and PageCount slots. The
// VFS asks once, when the Pages is registered; the files may be closed
// after (the VFS reads its own duplicates of them).
type SlotPages interface {
	// SlotFile returns the file, or ok false when the pages have none.
	SlotFile() (f SlotFile, ok bool)
}
