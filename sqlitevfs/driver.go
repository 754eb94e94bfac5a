//go:build cgo && !chunkd_ext

package sqlitevfs

// The SQLite library the shim registers with, and the database/sql driver
// Open returns connections of.
import _ "github.com/mattn/go-sqlite3"
