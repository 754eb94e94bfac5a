//go:build cgo && !chunkd_ext

package sqlitevfs

/*
#include <stdint.h>
#include <stdlib.h>

// The statement interface of SQLite (https://sqlite.org/c3ref/stmt.html),
// declared from its stable ABI as shim.h declares the VFS's; the
// functions are those of the SQLite that github.com/mattn/go-sqlite3
// links into the program.
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef long long sqlite3_int64;
int sqlite3_prepare_v2(sqlite3 *db, const char *zSql, int nByte, sqlite3_stmt **ppStmt, const char **pzTail);
int sqlite3_step(sqlite3_stmt *);
int sqlite3_finalize(sqlite3_stmt *);
int sqlite3_column_count(sqlite3_stmt *);
const char *sqlite3_column_name(sqlite3_stmt *, int);
const char *sqlite3_column_decltype(sqlite3_stmt *, int);
int sqlite3_column_type(sqlite3_stmt *, int);
sqlite3_int64 sqlite3_column_int64(sqlite3_stmt *, int);
double sqlite3_column_double(sqlite3_stmt *, int);
const void *sqlite3_column_blob(sqlite3_stmt *, int);
const unsigned char *sqlite3_column_text(sqlite3_stmt *, int);
int sqlite3_column_bytes(sqlite3_stmt *, int);
int sqlite3_bind_parameter_count(sqlite3_stmt *);
int sqlite3_bind_null(sqlite3_stmt *, int);
int sqlite3_bind_int64(sqlite3_stmt *, int, sqlite3_int64);
int sqlite3_bind_double(sqlite3_stmt *, int, double);
int sqlite3_bind_text(sqlite3_stmt *, int, const char *, int, void (*)(void *));
int sqlite3_bind_blob(sqlite3_stmt *, int, const void *, int, void (*)(void *));
int sqlite3_bind_zeroblob(sqlite3_stmt *, int, int);
const char *sqlite3_errmsg(sqlite3 *);
int sqlite3_extended_errcode(sqlite3 *);
void sqlite3_interrupt(sqlite3 *);

// chunkd_transient is SQLITE_TRANSIENT: SQLite copies a bound value.
static void (*chunkd_transient)(void *) = (void (*)(void *))-1;

static int chunkd_bind_text(sqlite3_stmt *s, int i, const char *p, int n) {
	return sqlite3_bind_text(s, i, p, n, chunkd_transient);
}
static int chunkd_bind_blob(sqlite3_stmt *s, int i, const void *p, int n) {
	return sqlite3_bind_blob(s, i, p, n, chunkd_transient);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/mattn/go-sqlite3"
)

// Type is the storage class of a value, as SQLite keeps it
// (https://sqlite.org/datatype3.html).
type Type int

// The storage classes, numbered as SQLite numbers them.
const (
	Integer Type = 1
	Float   Type = 2
	Text    Type = 3
	Blob    Type = 4
	Null    Type = 5
)

// Value is one value of a row exactly as SQLite holds it: no conversion
// by a column's declared type (database/sql through mattn/go-sqlite3
// turns a DATE, DATETIME or TIMESTAMP column's text into a time, the zero
// time when it does not parse, and a BOOLEAN's integer into true or
// false: not what the sqlite3 shell prints).
type Value struct {
	Type  Type
	Int   int64   // Integer
	Float float64 // Float
	// Bytes holds Text (UTF-8 as stored) and Blob. It is valid only
	// until the callback that got it returns.
	Bytes []byte
}

// Column is one column of a query's result.
type Column struct {
	Name     string
	DeclType string // the declared type of the table column it reads, if it reads one
}

// StatementError is an error SQLite gave a statement, with its extended
// result code (https://sqlite.org/rescode.html).
type StatementError struct {
	Code int
	Msg  string
}

func (e *StatementError) Error() string { return fmt.Sprintf("%s (%d)", e.Msg, e.Code) }

// Each runs query, one statement with args bound to its parameters (nil,
// bool, int, int64, float64, string, []byte), on a connection of d, and
// calls row for each row with the values exactly as SQLite holds them
// (Value); cols is given before the first row, and once even for none.
// Cancelling ctx interrupts the statement (sqlite3_interrupt). An error
// of row stops the statement and is returned.
func (d *DB) Each(ctx context.Context, query string, args []any, cols func([]Column) error, row func([]Value) error) error {
	conn, err := d.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("sqlitevfs: a connection of %T, not mattn/go-sqlite3's", dc)
		}
		db := connHandle(sc)
		if db == nil {
			return errors.New("sqlitevfs: the connection has no SQLite handle")
		}
		stop := context.AfterFunc(ctx, func() { C.sqlite3_interrupt(db) })
		defer stop()
		err := each(db, query, args, cols, row)
		if ctx.Err() != nil && err != nil {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return err
	})
}

// connHandle returns the sqlite3 handle of a mattn/go-sqlite3 connection
// (its unexported field db: the driver offers no accessor, and no way to
// read values without converting them by declared type).
// TestEachTypes fails if a version of the driver moves it.
func connHandle(sc *sqlite3.SQLiteConn) *C.sqlite3 {
	f := reflect.ValueOf(sc).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return nil
	}
	return *(**C.sqlite3)(unsafe.Pointer(f.UnsafeAddr()))
}

func stmtErr(db *C.sqlite3) error {
	return &StatementError{Code: int(C.sqlite3_extended_errcode(db)), Msg: C.GoString(C.sqlite3_errmsg(db))}
}

// each prepares query on db, binds args, and steps it to the end.
func each(db *C.sqlite3, query string, args []any, colsFn func([]Column) error, row func([]Value) error) error {
	csql := C.CString(query)
	defer C.free(unsafe.Pointer(csql))
	var stmt *C.sqlite3_stmt
	var tail *C.char
	if C.sqlite3_prepare_v2(db, csql, -1, &stmt, &tail) != 0 {
		return stmtErr(db)
	}
	if stmt == nil {
		return errors.New("sqlitevfs: no statement in the query")
	}
	defer C.sqlite3_finalize(stmt)
	if tail != nil && *tail != 0 { // what follows holds another statement, or only comments and spaces
		var next *C.sqlite3_stmt
		rc := C.sqlite3_prepare_v2(db, tail, -1, &next, nil)
		if next != nil {
			C.sqlite3_finalize(next)
		}
		if rc != 0 || next != nil {
			return fmt.Errorf("sqlitevfs: more than one statement in the query (then %q)", clip(C.GoString(tail)))
		}
	}
	if n := int(C.sqlite3_bind_parameter_count(stmt)); n != len(args) {
		return fmt.Errorf("sqlitevfs: the statement has %d parameters, %d values given", n, len(args))
	}
	for i, a := range args {
		if err := bind(db, stmt, C.int(i+1), a); err != nil {
			return fmt.Errorf("sqlitevfs: parameter %d: %w", i+1, err)
		}
	}
	n := int(C.sqlite3_column_count(stmt))
	cols := make([]Column, n)
	for i := range cols {
		cols[i].Name = C.GoString(C.sqlite3_column_name(stmt, C.int(i)))
		if dt := C.sqlite3_column_decltype(stmt, C.int(i)); dt != nil {
			cols[i].DeclType = C.GoString(dt)
		}
	}
	if colsFn != nil {
		if err := colsFn(cols); err != nil {
			return err
		}
	}
	vals := make([]Value, n)
	for {
		switch rc := C.sqlite3_step(stmt); rc {
		case 101: // SQLITE_DONE
			return nil
		case 100: // SQLITE_ROW
		default:
			return stmtErr(db)
		}
		for i := range vals {
			c := C.int(i)
			v := Value{Type: Type(C.sqlite3_column_type(stmt, c))}
			switch v.Type {
			case Integer:
				v.Int = int64(C.sqlite3_column_int64(stmt, c))
			case Float:
				v.Float = float64(C.sqlite3_column_double(stmt, c))
			case Text:
				p := C.sqlite3_column_text(stmt, c)
				v.Bytes = unsafe.Slice((*byte)(unsafe.Pointer(p)), int(C.sqlite3_column_bytes(stmt, c)))
			case Blob:
				p := C.sqlite3_column_blob(stmt, c)
				if n := int(C.sqlite3_column_bytes(stmt, c)); n > 0 {
					v.Bytes = unsafe.Slice((*byte)(p), n)
				} else {
					v.Bytes = []byte{}
				}
			}
			vals[i] = v
		}
		if err := row(vals); err != nil {
			return err
		}
	}
}

// bind binds a to parameter i.
func bind(db *C.sqlite3, stmt *C.sqlite3_stmt, i C.int, a any) error {
	var rc C.int
	switch x := a.(type) {
	case nil:
		rc = C.sqlite3_bind_null(stmt, i)
	case bool:
		var n C.sqlite3_int64
		if x {
			n = 1
		}
		rc = C.sqlite3_bind_int64(stmt, i, n)
	case int:
		rc = C.sqlite3_bind_int64(stmt, i, C.sqlite3_int64(x))
	case int64:
		rc = C.sqlite3_bind_int64(stmt, i, C.sqlite3_int64(x))
	case float64:
		rc = C.sqlite3_bind_double(stmt, i, C.double(x))
	case string:
		cs := C.CString(x)
		defer C.free(unsafe.Pointer(cs))
		rc = C.chunkd_bind_text(stmt, i, cs, C.int(len(x)))
	case []byte:
		if len(x) == 0 { // a NULL pointer would bind NULL, not x''
			rc = C.sqlite3_bind_zeroblob(stmt, i, 0)
			break
		}
		p := C.CBytes(x)
		defer C.free(p)
		rc = C.chunkd_bind_blob(stmt, i, p, C.int(len(x)))
	default:
		return fmt.Errorf("a %T cannot be bound", a)
	}
	if rc != 0 {
		return stmtErr(db)
	}
	return nil
}

// clip shortens s for a message.
func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
