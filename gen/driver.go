package gen

// The generator writes through mattn/go-sqlite3, the cgo binding around the
// SQLite amalgamation that chunkd reads with (see package sqlitevfs).
import _ "github.com/mattn/go-sqlite3"

// driverName is the database/sql driver the generator writes with.
const driverName = "sqlite3"
