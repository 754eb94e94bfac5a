package api

// The cache service's cache directory (chunkd serve --cache-dir) is an
// interface too: a client on the same host reads the service's verified
// table files from it directly (client.Options.LocalDir), skipping a
// round trip to the service per read.
//
//	DIR/chunkd-cache        the layout marker, holding CacheLayout
//	DIR/tables/<store key>  whole table files, verified before they were put there
//	DIR/tmp/                downloads in progress; never read
//	DIR/dbs/<db>.json       each database's last known table files (the service's own)
//
// A file enters tables/ only by a rename after the service has checked its
// footer and index, every record's CRC-32C (or zstd frame), and that every
// chunk hashes to its address; it never changes after that. A same-host
// client therefore checks each record's CRC as it reads (against rot since
// the download), not the SHA-512 of each chunk, when the marker says so.
const (
	CacheTablesDir  = "tables"
	CacheTmpDir     = "tmp"
	CacheDBsDir     = "dbs"
	CacheLayoutFile = "chunkd-cache"
	// CacheLayout is the marker's contents for the layout above. A cache
	// directory without it (or with other contents) was written by another
	// version: the service empties its tables/ at startup, and clients
	// hash every chunk they read from it.
	CacheLayout = "chunkd cache directory, layout 2: every chunk under tables/ was checked against its address\n"
)
