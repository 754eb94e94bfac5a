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
	"net/url"
	"runtime/cgo"
	"sync"
	"unsafe"
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
	sqliteIOErrClose     = sqliteIOErr | 16<<8

	openReadOnly  = 0x00000001
	openReadWrite = 0x00000002

	accessReadWrite = 1

	iocapImmutable = 0x00002000
)

// tempOpens returns how many temporary files the VFS has opened (for
// tests).
func tempOpens() int64 { return int64(C.chunkd_temp_open_count()) }

var (
	registerOnce sync.Once
	registerErr  error
)

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

func fileOf(h C.uintptr_t) *dbFile {
	return cgo.Handle(h).Value().(*dbFile)
}

//export goOpen
func goOpen(name *C.char, flags C.int, outFlags *C.int, handle *C.uintptr_t, devchar, sector *C.int, slots **C.chunkd_slots) C.int {
	// Only main databases get here; the C side gives temporary files to
	// the default VFS.
	if name == nil {
		return sqliteCantOpen
	}
	f := &dbFile{reg: lookup(C.GoString(name)), release: func() {}}
	if f.reg == nil {
		if !haveOpener() {
			return sqliteCantOpen
		}
		f.reg, f.release = openDynamic(C.GoString(name), uriParams(name))
	}
	r := f.reg
	*outFlags = C.int(flags&^openReadWrite | openReadOnly)
	*devchar = iocapImmutable
	*sector = C.int(r.pageSize)
	if *slots = r.slots.acquire(); *slots != nil {
		f.slots = true
	}
	*handle = C.uintptr_t(cgo.NewHandle(f))
	return sqliteOK
}

// uriParams returns the URI parameters of the database file name SQLite
// passed to xOpen.
func uriParams(name *C.char) url.Values {
	params := url.Values{}
	for i := C.int(0); ; i++ {
		k := C.chunkd_uri_key(name, i)
		if k == nil {
			return params
		}
		var v string
		if cv := C.chunkd_uri_value(name, i); cv != nil {
			v = C.GoString(cv)
		}
		params.Add(C.GoString(k), v)
	}
}

//export goClose
func goClose(h C.uintptr_t) C.int {
	if h == 0 {
		return sqliteIOErrClose
	}
	f := fileOf(h)
	if f.slots {
		f.reg.slots.release()
	}
	f.release()
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
			f.reg.setErr(fmt.Errorf("sqlitevfs: %s: panic reading at offset %d: %v", f.reg.name, int64(off), v))
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
	// Never reached through SQL (SQLite refuses writes to a read-only
	// database before they get here); answer the same way regardless.
	if err := fileOf(h).writeAt(unsafe.Slice((*byte)(buf), int(n)), int64(off)); err != nil {
		return sqliteReadOnly
	}
	return sqliteOK
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

// openedValue returns the Image.Value of the database file SQLite has
// open under handle h (a file of this VFS: see chunkd_file_handle in
// shim.h), or the error its Opener failed with.
func openedValue(h uintptr) (any, error) { return fileOf(C.uintptr_t(h)).opened() }

// PagesRead returns how many pages SQLite has read through the VFS from
// the image of the database file open under handle h, over all the
// image's connections: the misses of SQLite's page caches.
func PagesRead(h uintptr) int64 { return fileOf(C.uintptr_t(h)).reg.pagesRead.Load() }
