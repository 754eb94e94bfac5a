//go:build cgo && !chunkd_ext

package sqlquery

/*
#include <stdlib.h>
#include "sqlite.h"
*/
import "C"

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	// The SQLite library the functions come from, the chunkd VFS, and
	// the types of values and columns.
	"github.com/chunkd/chunkd/sqlitevfs"
)

// Conn is one read-only SQLite connection, made safe for statements from
// anyone (see the package doc). A Conn runs one statement at a time;
// Interrupt and InterruptOn may be called from any goroutine.
type Conn struct {
	db   *C.sqlite3
	auth *C.chunkd_q_auth // the authorizer's record, in C memory
	cols *C.chunkd_q_col  // a row's values, in C memory (ncols of them)
	ncol int

	// kept are statements prepared before and closed since, by their
	// SQL text, reset for the next Prepare of the same text; keptOrder
	// is their texts, the least recently closed first.
	kept      map[string]*Stmt
	keptOrder []string

	mu     sync.Mutex // guards closed and gen against Interrupt
	closed bool
	gen    uint64 // bumped when a statement's watch ends: late interrupts are dropped
}

// keptStmts is how many prepared statements a Conn keeps (closed, for
// their text: kept and keptOrder hold each text once).
const keptStmts = 32

// Open opens the SQLite database at uri (a URI filename, as
// sqlitevfs.DSN returns for an image registered with package sqlitevfs)
// read-only and locked down for untrusted statements, with options o.
func Open(uri string, o Options) (*Conn, error) {
	curi := C.CString(uri)
	defer C.free(unsafe.Pointer(curi))
	c := &Conn{auth: (*C.chunkd_q_auth)(C.calloc(1, C.size_t(unsafe.Sizeof(C.chunkd_q_auth{}))))}
	if rc := C.chunkd_q_open(curi, &c.db, c.auth); rc != C.CHUNKD_SQLITE_OK {
		err := c.lastError(int(rc))
		c.Close()
		return nil, err
	}
	if o.MaxLength > 0 {
		C.sqlite3_limit(c.db, C.CHUNKD_SQLITE_LIMIT_LENGTH, C.int(min(o.MaxLength, 1<<30)))
	}
	return c, nil
}

// Close closes the connection; its statements must be closed first.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for _, s := range c.kept {
		C.sqlite3_finalize(s.st)
	}
	c.kept, c.keptOrder = nil, nil
	var err error
	if c.db != nil {
		if rc := C.sqlite3_close_v2(c.db); rc != C.CHUNKD_SQLITE_OK {
			err = &Error{Code: int(rc), Msg: C.GoString(C.sqlite3_errstr(rc))}
		}
		c.db = nil
	}
	C.free(unsafe.Pointer(c.auth))
	if c.cols != nil {
		C.free(unsafe.Pointer(c.cols))
	}
	return err
}

// Interrupt makes the statement running on c stop soon with
// SQLITE_INTERRUPT (sqlite3_interrupt); with none running it does nothing.
func (c *Conn) Interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		C.sqlite3_interrupt(c.db)
	}
}

// InterruptOn interrupts the statement that runs on c when ctx ends,
// until stop is called: call it when the statement is done, before c
// runs another (an interrupt that comes after stop is dropped).
func (c *Conn) InterruptOn(ctx context.Context) (stop func()) {
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	unwatch := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed && c.gen == gen {
			C.sqlite3_interrupt(c.db)
		}
	})
	return func() {
		unwatch()
		c.mu.Lock()
		c.gen++
		c.mu.Unlock()
	}
}

// Prepare compiles sql, which must be exactly one statement that only
// reads. The errors are *Error: SQLite's own (a syntax error, an unknown
// table), SQLITE_AUTH for a statement that would do what the connection
// refuses (see the package doc), SQLITE_ERROR for no statement or more
// than one.
func (c *Conn) Prepare(sql string) (*Stmt, error) {
	if s, ok := c.kept[sql]; ok { // prepared, checked and reset before
		delete(c.kept, sql)
		c.unkeep(sql)
		return s, nil
	}
	if i := strings.IndexByte(sql, 0); i >= 0 {
		// SQLite would read up to it and take the rest for nothing.
		return nil, &Error{Code: codeError, ExtendedCode: codeError, Offset: i, Msg: fmt.Sprintf("the SQL text holds a NUL byte (at offset %d)", i)}
	}
	*c.auth = C.chunkd_q_auth{}
	csql := C.CString(sql)
	defer C.free(unsafe.Pointer(csql))
	var st *C.sqlite3_stmt
	var tail *C.char
	if rc := C.sqlite3_prepare_v3(c.db, csql, C.int(len(sql)), 0, &st, &tail); rc != C.CHUNKD_SQLITE_OK {
		return nil, c.prepareError(int(rc), sql)
	}
	if st == nil {
		return nil, &Error{Code: codeError, ExtendedCode: codeError, Msg: "no SQL statement (only blanks, comments or semicolons)", Offset: -1}
	}
	s := &Stmt{c: c, st: st, deterministic: c.auth.nondeterministic == 0}
	// The rest must hold no other statement: SQLite compiles it to find
	// out (and finds none in blanks, comments and semicolons).
	at := int(uintptr(unsafe.Pointer(tail)) - uintptr(unsafe.Pointer(csql)))
	for at < len(sql) {
		var next *C.sqlite3_stmt
		rest := (*C.char)(unsafe.Add(unsafe.Pointer(csql), at))
		rc := C.sqlite3_prepare_v3(c.db, rest, C.int(len(sql)-at), 0, &next, &tail)
		if next != nil {
			C.sqlite3_finalize(next)
		}
		if rc != C.CHUNKD_SQLITE_OK || next != nil {
			s.Close()
			return nil, &Error{Code: codeError, ExtendedCode: codeError, Offset: at,
				Msg: "more than one statement: the query API runs one per request (the second begins: " + clip(strings.TrimSpace(sql[at:]), 60) + ")"}
		}
		next2 := int(uintptr(unsafe.Pointer(tail)) - uintptr(unsafe.Pointer(csql)))
		if next2 <= at { // cannot happen without a NUL, refused above; never loop
			s.Close()
			return nil, &Error{Code: codeError, ExtendedCode: codeError, Offset: at, Msg: "SQLite read nothing of the SQL text's rest"}
		}
		at = next2
	}
	if C.sqlite3_stmt_readonly(st) == 0 {
		s.Close()
		return nil, &Error{Code: codeAuth, ExtendedCode: codeAuth, Offset: -1, Msg: "not authorized: the statement would write, and this connection is read-only"}
	}
	n := int(C.sqlite3_column_count(st))
	s.cols = make([]sqlitevfs.Column, n)
	for i := range s.cols {
		s.cols[i] = sqlitevfs.Column{Name: C.GoString(C.sqlite3_column_name(st, C.int(i)))}
		if t := C.sqlite3_column_decltype(st, C.int(i)); t != nil {
			s.cols[i].DeclType = C.GoString(t)
		}
	}
	if n > c.ncol {
		if c.cols != nil {
			C.free(unsafe.Pointer(c.cols))
		}
		c.cols = (*C.chunkd_q_col)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.chunkd_q_col{}))))
		c.ncol = n
	}
	s.row = make([]sqlitevfs.Value, n)
	s.sql, s.keep = sql, true
	return s, nil
}

// prepareError is the error of a prepare that failed with rc: the
// authorizer's refusal named, or SQLite's message.
func (c *Conn) prepareError(rc int, sql string) error {
	err := c.lastError(rc)
	if e, ok := err.(*Error); ok && c.auth.denied != 0 {
		// SQLITE_AUTH, or SQLITE_ERROR for a function refused
		a, b, _ := strings.Cut(C.GoString(&c.auth.what[0]), "\x1f")
		e.Code, e.ExtendedCode = codeAuth, codeAuth
		e.Msg = "not authorized: " + deniedWhat(int(c.auth.denied), a, b) + " (the query API only reads)"
	}
	return err
}

// lastError is the connection's last error, for result code rc.
func (c *Conn) lastError(rc int) error {
	e := &Error{Code: rc & 0xff, ExtendedCode: rc, Offset: -1}
	if c.db == nil {
		e.Msg = C.GoString(C.sqlite3_errstr(C.int(rc)))
		return e
	}
	e.ExtendedCode = int(C.sqlite3_extended_errcode(c.db))
	e.Code = e.ExtendedCode & 0xff
	e.Msg = C.GoString(C.sqlite3_errmsg(c.db))
	e.Offset = int(C.sqlite3_error_offset(c.db))
	return e
}

// Stmt is a prepared statement of a Conn.
type Stmt struct {
	c             *Conn
	st            *C.sqlite3_stmt
	sql           string
	keep          bool // the statement passed Prepare's checks: Close keeps it for its text
	cols          []sqlitevfs.Column
	row           []sqlitevfs.Value
	deterministic bool
}

// Columns returns the statement's result columns.
func (s *Stmt) Columns() []sqlitevfs.Column { return s.cols }

// Deterministic reports whether the statement's result is a function of
// the database and its parameters alone: it calls none of the functions
// that are not (random(), the date and time functions, changes(), ...).
func (s *Stmt) Deterministic() bool { return s.deterministic }

// Params returns the names of the statement's parameters, in order: ""
// for an anonymous one (?), else the name with its prefix (":id", "?2").
func (s *Stmt) Params() []string {
	n := int(C.sqlite3_bind_parameter_count(s.st))
	out := make([]string, n)
	for i := range out {
		if p := C.sqlite3_bind_parameter_name(s.st, C.int(i+1)); p != nil {
			out[i] = C.GoString(p)
		}
	}
	return out
}

// Bind binds v to parameter i (1-based), copying its bytes.
func (s *Stmt) Bind(i int, v sqlitevfs.Value) error {
	var rc C.int
	switch v.Type {
	case sqlitevfs.Null:
		rc = C.sqlite3_bind_null(s.st, C.int(i))
	case sqlitevfs.Integer:
		rc = C.sqlite3_bind_int64(s.st, C.int(i), C.sqlite3_int64(v.Int))
	case sqlitevfs.Float:
		rc = C.sqlite3_bind_double(s.st, C.int(i), C.double(v.Float))
	case sqlitevfs.Text:
		rc = C.chunkd_q_bind_text(s.st, C.int(i), (*C.char)(unsafe.Pointer(unsafe.SliceData(v.Bytes))), C.int(len(v.Bytes)))
	case sqlitevfs.Blob:
		rc = C.chunkd_q_bind_blob(s.st, C.int(i), unsafe.Pointer(unsafe.SliceData(v.Bytes)), C.int(len(v.Bytes)))
	default:
		return &Error{Code: codeMismatch, Offset: -1, Msg: "parameter of no storage class"}
	}
	if rc != C.CHUNKD_SQLITE_OK {
		return s.c.lastError(int(rc))
	}
	return nil
}

// Step runs the statement to its next row and reports whether there is
// one (Row holds it); at the end, or on an error, it reports false.
func (s *Stmt) Step() (bool, error) {
	rc := C.chunkd_q_step(s.st, C.int(len(s.cols)), s.c.cols)
	switch rc {
	case C.CHUNKD_SQLITE_ROW:
	case C.CHUNKD_SQLITE_DONE:
		return false, nil
	default:
		return false, s.c.lastError(int(rc))
	}
	vals := unsafe.Slice(s.c.cols, len(s.cols))
	for i := range s.row {
		v, cv := &s.row[i], &vals[i]
		// SQLite's storage classes are sqlitevfs's Types, numbered alike.
		switch t := sqlitevfs.Type(cv._type); t {
		case sqlitevfs.Integer:
			*v = sqlitevfs.Value{Type: t, Int: int64(cv.i)}
		case sqlitevfs.Float:
			*v = sqlitevfs.Value{Type: t, Float: float64(cv.f)}
		case sqlitevfs.Text, sqlitevfs.Blob:
			*v = sqlitevfs.Value{Type: t, Bytes: []byte{}}
			if cv.n > 0 {
				v.Bytes = unsafe.Slice((*byte)(cv.p), int(cv.n))
			}
		default:
			*v = sqlitevfs.Value{Type: sqlitevfs.Null}
		}
	}
	return true, nil
}

// Row returns the current row. Its TEXT and BLOB bytes are SQLite's:
// valid until the next Step or Close, and not to be changed.
func (s *Stmt) Row() []sqlitevfs.Value { return s.row }

// Close ends the statement's run. The Conn keeps it, reset and its
// parameters cleared, for the next Prepare of the same text (SQLite's
// compiling a join costs about as much as running it on a few rows):
// the last keptStmts statements closed are kept.
func (s *Stmt) Close() error {
	if s.st == nil {
		return nil
	}
	c := s.c
	if !s.keep || c.closed || c.kept[s.sql] != nil {
		C.sqlite3_finalize(s.st)
		s.st = nil
		return nil
	}
	C.sqlite3_reset(s.st)
	C.sqlite3_clear_bindings(s.st)
	if c.kept == nil {
		c.kept = map[string]*Stmt{}
	}
	c.kept[s.sql] = s
	c.keptOrder = append(c.keptOrder, s.sql)
	if len(c.keptOrder) > keptStmts {
		old := c.keptOrder[0]
		c.keptOrder = c.keptOrder[1:]
		k := c.kept[old]
		C.sqlite3_finalize(k.st)
		k.st = nil
		delete(c.kept, old)
	}
	return nil
}

// unkeep takes text out of keptOrder (its statement is taken).
func (c *Conn) unkeep(text string) {
	for i, t := range c.keptOrder {
		if t == text {
			c.keptOrder = append(c.keptOrder[:i], c.keptOrder[i+1:]...)
			return
		}
	}
}
