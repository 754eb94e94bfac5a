//go:build chunkd_ext

package sqlitevfs

// Built into the loadable extension (package sqliteext), the shim calls
// the host program's SQLite through the routines it hands the extension
// (see shim.h); the program links no SQLite of its own.

// #cgo CFLAGS: -DCHUNKD_SQLITE_EXT
import "C"
