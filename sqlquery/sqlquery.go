// Package sqlquery runs one SQL statement at a time on a SQLite database
// opened read-only, for statements from anyone: the cache service's query
// API (package sqlserve) runs what its clients send through it.
//
// Safe by construction, at every level a statement could write or reach
// beyond the database:
//
//   - The database is opened read-only (SQLITE_OPEN_READONLY; an image
//     of package sqlitevfs is also immutable, and its VFS refuses writes).
//   - An authorizer lets a statement read and nothing else: SELECT and
//     the columns it reads, recursive common table expressions, every
//     function but load_extension(), and the pragmas that only read
//     (table_info, index_list, integrity_check, page_count, and those
//     that set something with an argument only without one). Every
//     write, ATTACH and DETACH, BEGIN, SAVEPOINT, temporary tables and
//     views, ANALYZE, and any other pragma fail at prepare with
//     SQLITE_AUTH and a message naming what was refused.
//   - A prepared statement must be read-only by SQLite's own account
//     (sqlite3_stmt_readonly), and exactly one: SQLite compiles what
//     follows the first to make sure it holds no other.
//   - ATTACH is off by limit as well (SQLITE_LIMIT_ATTACHED 0), and so
//     are extension loading, the FTS3 tokenizer and a writable schema
//     (SQLITE_DBCONFIG_DEFENSIVE).
//   - Parameters are bound (Bind), never spliced into the text.
//   - InterruptOn stops a statement when its context ends
//     (sqlite3_interrupt): a time limit, or a client that left.
//
// Values come with their storage class as SQLite holds it
// (sqlitevfs.Value, the type sqlitevfs.DB.Each gives too): the package
// reads rows with SQLite's C interface rather than through database/sql,
// whose driver turns a column declared DATE or BOOLEAN into a time or a
// bool. Where DB.Each runs a trusted statement on a connection of a
// sqlitevfs.DB's pool (chunkd sql), a Conn is a connection of its own,
// locked down for statements from anyone, that keeps its statements
// compiled between queries and scopes an interrupt to one statement.
//
// The package uses cgo and the SQLite library that
// github.com/mattn/go-sqlite3 links into the program (package sqlitevfs
// registers its VFS there); sqlite.h declares what it calls.
package sqlquery

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Options are a connection's options.
type Options struct {
	// MaxLength, if positive, bounds the length in bytes of any string or
	// BLOB a statement makes (SQLITE_LIMIT_LENGTH, by default about 1 GB):
	// past it a statement fails with SQLITE_TOOBIG rather than take the
	// memory (zeroblob(1e9), a group_concat of a whole table).
	MaxLength int
}

// SQLite's primary result codes this package gives its own errors.
const (
	codeError     = 1  // SQLITE_ERROR
	codeInterrupt = 9  // SQLITE_INTERRUPT
	codeIOErr     = 10 // SQLITE_IOERR
	codeMismatch  = 20 // SQLITE_MISMATCH
	codeAuth      = 23 // SQLITE_AUTH
	codeRange     = 25 // SQLITE_RANGE
)

// Error is an error of SQLite, or one this package gives in SQLite's
// terms (a code and a message).
type Error struct {
	// Code is SQLite's primary result code (1 SQLITE_ERROR, 9
	// SQLITE_INTERRUPT, 23 SQLITE_AUTH, ...), ExtendedCode the extended
	// one (Code when there is none).
	Code, ExtendedCode int
	// Msg is SQLite's message (sqlite3_errmsg), or this package's.
	Msg string
	// Offset is where in the SQL text the error is, in bytes; -1 when
	// SQLite does not say.
	Offset int
}

func (e *Error) Error() string { return e.Msg + " (" + e.Name() + ")" }

// Name is the result code's name: "SQLITE_ERROR", "SQLITE_AUTH", ...
func (e *Error) Name() string {
	if e.ExtendedCode != 0 && e.ExtendedCode != e.Code {
		if n, ok := extendedNames[e.ExtendedCode]; ok {
			return n
		}
	}
	if n, ok := codeNames[e.Code]; ok {
		return n
	}
	return fmt.Sprintf("SQLITE_%d", e.Code)
}

// Interrupted reports whether the statement was stopped by Interrupt.
func (e *Error) Interrupted() bool { return e.Code == codeInterrupt }

// Refused reports whether the statement was refused for what it would do
// (SQLITE_AUTH): write, attach, load an extension, set a pragma.
func (e *Error) Refused() bool { return e.Code == codeAuth }

// ReadFailed reports whether SQLite could not read a page (SQLITE_IOERR):
// the database's source failed, not the statement.
func (e *Error) ReadFailed() bool { return e.Code == codeIOErr }

// codeNames are the primary result codes' names.
var codeNames = map[int]string{
	0: "SQLITE_OK", 1: "SQLITE_ERROR", 2: "SQLITE_INTERNAL", 3: "SQLITE_PERM", 4: "SQLITE_ABORT",
	5: "SQLITE_BUSY", 6: "SQLITE_LOCKED", 7: "SQLITE_NOMEM", 8: "SQLITE_READONLY", 9: "SQLITE_INTERRUPT",
	10: "SQLITE_IOERR", 11: "SQLITE_CORRUPT", 12: "SQLITE_NOTFOUND", 13: "SQLITE_FULL", 14: "SQLITE_CANTOPEN",
	15: "SQLITE_PROTOCOL", 16: "SQLITE_EMPTY", 17: "SQLITE_SCHEMA", 18: "SQLITE_TOOBIG", 19: "SQLITE_CONSTRAINT",
	20: "SQLITE_MISMATCH", 21: "SQLITE_MISUSE", 22: "SQLITE_NOLFS", 23: "SQLITE_AUTH", 24: "SQLITE_FORMAT",
	25: "SQLITE_RANGE", 26: "SQLITE_NOTADB", 27: "SQLITE_NOTICE", 28: "SQLITE_WARNING",
}

// extendedNames are the extended result codes a read-only statement
// meets.
var extendedNames = map[int]string{
	10 | 1<<8:  "SQLITE_IOERR_READ",
	10 | 2<<8:  "SQLITE_IOERR_SHORT_READ",
	11 | 1<<8:  "SQLITE_CORRUPT_VTAB",
	8 | 1<<8:   "SQLITE_READONLY_RECOVERY",
	1 | 1<<8:   "SQLITE_ERROR_MISSING_COLLSEQ",
	1 | 3<<8:   "SQLITE_ERROR_SNAPSHOT",
	19 | 1<<8:  "SQLITE_CONSTRAINT_CHECK",
	23 | 1<<8:  "SQLITE_AUTH_USER",
	14 | 1<<8:  "SQLITE_CANTOPEN_NOTEMPDIR",
	27 | 1<<8:  "SQLITE_NOTICE_RECOVER_WAL",
	28 | 1<<8:  "SQLITE_WARNING_AUTOINDEX",
	10 | 12<<8: "SQLITE_IOERR_NOMEM",
}

// actionNames name the authorizer's actions
// (https://sqlite.org/c3ref/c_alter_table.html) in refusals.
var actionNames = map[int]string{
	1: "CREATE INDEX", 2: "CREATE TABLE", 3: "CREATE TEMP INDEX", 4: "CREATE TEMP TABLE",
	5: "CREATE TEMP TRIGGER", 6: "CREATE TEMP VIEW", 7: "CREATE TRIGGER", 8: "CREATE VIEW",
	9: "DELETE", 10: "DROP INDEX", 11: "DROP TABLE", 12: "DROP TEMP INDEX", 13: "DROP TEMP TABLE",
	14: "DROP TEMP TRIGGER", 15: "DROP TEMP VIEW", 16: "DROP TRIGGER", 17: "DROP VIEW",
	18: "INSERT", 19: "PRAGMA", 20: "READ", 21: "SELECT", 22: "a transaction", 23: "UPDATE",
	24: "ATTACH", 25: "DETACH", 26: "ALTER TABLE", 27: "REINDEX", 28: "ANALYZE",
	29: "CREATE VIRTUAL TABLE", 30: "DROP VIRTUAL TABLE", 31: "function", 32: "SAVEPOINT", 33: "RECURSIVE",
}

// deniedWhat describes a refused action of the authorizer with its two
// arguments (a, b; "" for none).
func deniedWhat(action int, a, b string) string {
	name, ok := actionNames[action]
	if !ok {
		name = fmt.Sprintf("action %d", action)
	}
	switch action {
	case 9, 18, 23: // DELETE, INSERT, UPDATE table
		switch strings.ToLower(a) {
		case "sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema":
			return "a change to the schema (CREATE, DROP, ALTER TABLE, ANALYZE: a write to " + a + ")"
		}
	case 19: // PRAGMA name [value]
		if b != "" {
			return fmt.Sprintf("PRAGMA %s = %s (this pragma only reads without an argument, if at all)", a, b)
		}
		return "PRAGMA " + a + " (not a pragma that only reads)"
	case 31: // function: a is NULL, b the name
		return b + "()"
	case 24: // ATTACH filename
		return "ATTACH"
	case 22, 32: // BEGIN, COMMIT...; SAVEPOINT op name
		return name + " (" + strings.TrimSpace(a+" "+b) + ")"
	}
	if a != "" {
		return name + " " + a
	}
	return name
}

// clip shortens s to at most n bytes (at a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
