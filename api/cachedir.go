package api

// The cache service's cache directory (chunkd serve --cache-dir) is an
// interface too: a client on the same host reads the service's verified
// table files from it directly (client.Options.LocalDir), skipping a
// round trip to the service per read.
//
//	DIR/chunkd-cache        the layout marker, holding CacheLayout
//	DIR/lock                held (flock) by the one service using DIR; holds its pid
//	DIR/tables/<store key>  whole table files, verified before they were put there
//	DIR/sums/<store key>    each one's sums (tablefile.Sums), written before it
//	DIR/tmp/                downloads in progress; never read
//	DIR/dbs/<db>.json       each database's last known table files (the service's own)
//	DIR/host                a random token the running service wrote at its start
//
// A client finds out that it runs on the service's host (or shares its
// cache directory) without being told: it asks the service for its
// HostInfo (api.PatternHost), and reads the file HostInfo.Dir/host; if the
// file holds HostInfo.Token, the client sees the service's directory and
// reads it directly.
//
// A file enters tables/ only by a rename after the service has checked its
// footer and index, every record's CRC-32C (or zstd frame), and that every
// chunk hashes to its address, and after its sums (a SHA-256 of its index
// region, a CRC-32C of every archive span) are in sums/; it never changes
// after that. A same-host client therefore opens a file with its sums
// (tablefile.Options.Sums) and checks each record's CRC as it reads
// (against rot since the download), not the SHA-512 of each chunk, when
// the marker says so; a file without sums is not read.
const (
	CacheTablesDir  = "tables"
	CacheSumsDir    = "sums"
	CacheTmpDir     = "tmp"
	CacheDBsDir     = "dbs"
	CacheLayoutFile = "chunkd-cache"
	CacheLockFile   = "lock"
	CacheHostFile   = "host"
	// CacheLayout is the marker's contents for the layout above. A cache
	// directory without it (or with other contents) was written by another
	// version: the service empties its tables/ at startup, and clients
	// hash every chunk they read from it.
	CacheLayout = "chunkd cache directory, layout 3: every chunk under tables/ was checked against its address; sums/ holds each file's sums\n"
)

// PatternHost is the route of GET the service's HostInfo, asked for by a
// client of database {db} (with tokens, one that grants it: a client
// refused the database is not pointed at its files).
const PatternHost = "GET /v1/dbs/{db}/host"

// HostPath is the URL path of the service's HostInfo for a client of
// database db.
func HostPath(db string) string { return DBPath(db) + "/host" }

// HostInfo says where a service keeps its cache directory, and the token
// in its host file that proves a client sees the same directory.
type HostInfo struct {
	Dir   string `json:"cache_dir"` // absolute
	Token string `json:"token"`
}
