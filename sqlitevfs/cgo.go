package sqlitevfs

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"

	// The SQLite library the shim registers with, and the database/sql
	// driver Open returns connections of.
	_ "github.com/mattn/go-sqlite3"
)

// SQLite result codes and flags the Go side of the VFS uses
// (https://sqlite.org/rescode.html, https://sqlite.org/c3ref/c_open_autoproxy.html).
const (
	sqliteOK             = 0
	sqliteReadOnly       = 8
	sqliteIOErr          = 10
	sqliteCantOpen       = 14
	sqliteIOErrRead      = sqliteIOErr | 1<<8
	sqliteIOErrShortRead = sqliteIOErr | 2<<8
	sqliteIOErrWrite     = sqliteIOErr | 3<<8
	sqliteIOErrClose     = sqliteIOErr | 16<<8

	openReadOnly     = 0x00000001
	openReadWrite    = 0x00000002
	openMainDB       = 0x00000100
	openWAL          = 0x00080000
	openMainJournal  = 0x00000800
	openSuperJournal = 0x00004000

	accessReadWrite = 1

	iocapImmutable = 0x00002000
)

// tempOpens counts temporary files opened (for tests).
var tempOpens atomic.Int64

var (
	registerOnce sync.Once
	registerErr  error
)

// maxName is the longest database name SQLite will pass to the VFS.
const maxName = 1024

// registerVFS registers the VFS with SQLite once per process.
func registerVFS() error {
	registerOnce.Do(func() {
		name := C.CString(VFSName)
		defer C.free(unsafe.Pointer(name))
		if rc := C.chunkd_register(name, maxName); rc != sqliteOK {
			registerErr = fmt.Errorf("sqlitevfs: registering VFS %q: SQLite error %d", VFSName, int(rc))
		}
	})
	return registerErr
}

// vfsFile is an open file of the VFS: a database image or a temporary file.
type vfsFile interface {
	readAt(p []byte, off int64) (int, error)
	writeAt(p []byte, off int64) error
	truncate(size int64) error
	size() int64
}

func fileOf(h C.uintptr_t) vfsFile {
	return cgo.Handle(h).Value().(vfsFile)
}

//export goOpen
func goOpen(name *C.char, flags C.int, outFlags *C.int, handle *C.uintptr_t, devchar, sector *C.int) C.int {
	var f vfsFile
	switch {
	case flags&openMainDB != 0:
		if name == nil {
			return sqliteCantOpen
		}
		r := lookup(C.GoString(name))
		if r == nil {
			return sqliteCantOpen
		}
		f = &dbFile{reg: r, window: uriInt(name, readAheadParam, maxReadAhead)}
		*outFlags = C.int(flags&^(openReadWrite) | openReadOnly)
		*devchar = iocapImmutable
		*sector = C.int(r.pageSize)
	case flags&(openMainJournal|openSuperJournal|openWAL) != 0:
		// Journals belong to writers; an immutable database has none.
		return sqliteCantOpen
	default:
		// Temporary databases, sorter spill files, statement journals:
		// private to one connection, kept in memory.
		f = &memFile{}
		tempOpens.Add(1)
		*outFlags = flags
		*sector = 4096
	}
	*handle = C.uintptr_t(cgo.NewHandle(f))
	return sqliteOK
}

// uriInt returns the integer URI parameter param of the database file
// name SQLite passed to xOpen, clamped to [0, limit]; 0 if absent.
func uriInt(name *C.char, param string, limit int) int {
	p := C.CString(param)
	defer C.free(unsafe.Pointer(p))
	v := C.sqlite3_uri_int64(name, p, 0)
	return int(max(0, min(int64(v), int64(limit))))
}

//export goClose
func goClose(h C.uintptr_t) C.int {
	if h == 0 {
		return sqliteIOErrClose
	}
	cgo.Handle(h).Delete()
	return sqliteOK
}

//export goRead
func goRead(h C.uintptr_t, buf unsafe.Pointer, n C.int, off C.sqlite3_int64) (rc C.int) {
	f := fileOf(h)
	p := unsafe.Slice((*byte)(buf), int(n))
	defer func() {
		// A panicking page source must not take the process down with it:
		// the query fails with an I/O error instead.
		if v := recover(); v != nil {
			if d, ok := f.(*dbFile); ok {
				d.reg.setErr(fmt.Errorf("sqlitevfs: %s: panic reading at offset %d: %v", d.reg.name, int64(off), v))
			}
			rc = sqliteIOErrRead
		}
	}()
	got, err := f.readAt(p, int64(off))
	if err == nil {
		return sqliteOK
	}
	if errors.Is(err, errShortRead) {
		// SQLite requires the unread tail to be zeroed.
		clear(p[got:])
		return sqliteIOErrShortRead
	}
	return sqliteIOErrRead
}

//export goWrite
func goWrite(h C.uintptr_t, buf unsafe.Pointer, n C.int, off C.sqlite3_int64) C.int {
	err := fileOf(h).writeAt(unsafe.Slice((*byte)(buf), int(n)), int64(off))
	switch {
	case err == nil:
		return sqliteOK
	case errors.Is(err, ErrReadOnly):
		return sqliteReadOnly
	default:
		return sqliteIOErrWrite
	}
}

//export goTruncate
func goTruncate(h C.uintptr_t, size C.sqlite3_int64) C.int {
	if err := fileOf(h).truncate(int64(size)); err != nil {
		return sqliteReadOnly
	}
	return sqliteOK
}

//export goFileSize
func goFileSize(h C.uintptr_t, size *C.sqlite3_int64) C.int {
	*size = C.sqlite3_int64(fileOf(h).size())
	return sqliteOK
}

//export goAccess
func goAccess(name *C.char, flags C.int) C.int {
	if name == nil || flags == accessReadWrite {
		return 0
	}
	if lookup(C.GoString(name)) != nil {
		return 1
	}
	return 0
}
