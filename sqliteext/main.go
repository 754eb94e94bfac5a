//go:build chunkd_ext

// Command sqliteext is chunkd as a SQLite loadable extension: any SQLite
// program - the sqlite3 shell, Python's sqlite3 module, a C program - that
// loads it can read a chunkd database in place, through the cache service
// or straight from the store, read-only. Build it with
//
//	./scripts/build-extension chunkd.so
//
// (go build -buildmode=c-shared -tags chunkd_ext). Loading it registers a
// VFS named "chunkd", never the default one, so the program's own files
// are untouched; a database is opened by URI:
//
//	file:DBNAME?vfs=chunkd&service=http://127.0.0.1:9460
//	file:DBNAME?vfs=chunkd&store=s3://bucket/prefix%3Fendpoint%3D...
//
// with the parameters of config (or the environment variables it names),
// and connections on it get the SQL functions chunkd_version(),
// chunkd_root(), chunkd_stats() and chunkd_last_error().
//
// The extension links no SQLite: its VFS (package sqlitevfs, built with
// the chunkd_ext tag) calls the host's SQLite through the routines the
// host hands the extension's entry point, so it works in any program
// with SQLite 3.31 or later, beside that program's own files.
package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/chunkd/chunkd/sqlitevfs"
)

func main() {} // a c-shared library: the entry point is sqlite3_chunkd_init (ext.c)

// SQLite result codes the extension gives.
const (
	sqliteOK       = 0
	sqliteIOErr    = 10
	sqliteCantOpen = 14
)

//export goExtInit
func goExtInit() *C.char {
	if err := sqlitevfs.SetOpener(open); err != nil {
		return C.CString("chunkd: " + err.Error())
	}
	return nil
}

//export goConnCheck
func goConnCheck(h C.uintptr_t, msg **C.char) C.int {
	_, _, err := sqlitevfs.ValueOf[*source](uintptr(h))
	if err == nil {
		return sqliteOK
	}
	var de *deferredError
	if errors.As(err, &de) {
		logger().Error("chunkd: the database did not open; its URI holds a secret, which a program may print with the error of an open, so the open goes on and its queries fail with \"disk I/O error\" (SELECT chunkd_last_error() gives this error)", "err", de.err)
		return sqliteOK
	}
	*msg = C.CString(err.Error())
	var oe *openError
	if errors.As(err, &oe) {
		return C.int(oe.code)
	}
	return sqliteCantOpen
}

// The kinds of goFunc (ext.c).
const (
	fnVersion = iota
	fnRoot
	fnStats
	fnLastError
)

// goFunc computes SQL function kind on the database open under h: its
// text, or NULL with *errOut set for an error, or NULL alone for SQL's
// NULL.
//
//export goFunc
func goFunc(kind C.int, h C.uintptr_t, errOut **C.char) *C.char {
	src, _, err := sqlitevfs.ValueOf[*source](uintptr(h))
	if kind == fnLastError {
		// The error of the last read that failed, or of the open that
		// did; NULL for none.
		switch {
		case err != nil:
			return C.CString("chunkd: the database did not open: " + strings.TrimPrefix(err.Error(), "chunkd: "))
		case src != nil && src.reads.lastError() != nil:
			return C.CString(src.reads.lastError().Error())
		}
		return nil
	}
	var out string
	if err == nil {
		switch {
		case kind == fnVersion:
			out = version()
		case src == nil:
			err = errors.New("not a database the extension opened")
		case kind == fnRoot:
			out = src.root.String()
		case kind == fnStats:
			out, err = src.statsJSON(sqlitevfs.PagesRead(uintptr(h)))
		default:
			err = fmt.Errorf("unknown function %d", int(kind))
		}
	}
	if err != nil {
		*errOut = C.CString("chunkd: " + err.Error())
		return nil
	}
	return C.CString(out)
}

// version names the build: chunkd's module version and commit.
func version() string {
	v := "chunkd (devel)"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v = "chunkd " + info.Main.Version
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+modified"
		}
	}
	return v
}
