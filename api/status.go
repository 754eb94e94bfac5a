package api

// Routes of the service's own state, for operators (chunkd status).
const (
	// PatternDBs is the route of GET the databases the service knows, a
	// []DBSummary sorted by name (with tokens, only those the token may
	// read).
	PatternDBs = "GET /v1/dbs"
	// PatternCache is the route of GET a CacheSummary.
	PatternCache = "GET /v1/cache"
	// PatternDropCache is the route of DELETE a database's cached files
	// (the answer is a DropResult).
	PatternDropCache = "DELETE /v1/dbs/{db}/cache"
)

// DBsPath is the URL path of the database list.
const DBsPath = "/v1/dbs"

// CachePath is the URL path of the CacheSummary.
const CachePath = "/v1/cache"

// DropCachePath returns the URL path that drops database db's cached files.
func DropCachePath(db string) string { return DBPath(db) + "/cache" }

// The states of a DBSummary.
const (
	// DBLoaded is a database whose manifest the service has read.
	DBLoaded = "loaded"
	// DBSaved is a database served from its saved state and the files
	// on disk, its manifest not read yet (a restart with the store
	// unreachable, or the read still under way).
	DBSaved = "saved"
	// DBOnDisk is a database with files or saved state in the cache
	// directory that no request has asked for since the service started.
	DBOnDisk = "on disk"
)

// TierCounts counts chunks served by the tier that had them.
type TierCounts struct {
	Memory  int64 `json:"memory"`
	Disk    int64 `json:"disk"`
	Partial int64 `json:"partial"`
	Store   int64 `json:"store"`
}

// Total returns the chunks served in all.
func (t TierCounts) Total() int64 { return t.Memory + t.Disk + t.Partial + t.Store }

// HitRatio is the share of chunks served without reading the store (from
// memory, disk or a partial download); 0 before any was served.
func (t TierCounts) HitRatio() float64 {
	if n := t.Total(); n > 0 {
		return float64(n-t.Store) / float64(n)
	}
	return 0
}

// DBSummary is one database as GET /v1/dbs lists it.
type DBSummary struct {
	Name  string `json:"name"`
	State string `json:"state"` // DBLoaded, DBSaved or DBOnDisk
	// Root is the version served ("" for DBOnDisk).
	Root string `json:"root,omitempty"`
	// Files and Bytes are the table files of the version (0 for DBOnDisk).
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// FilesCached and BytesCached are the database's files on disk.
	FilesCached int   `json:"files_cached"`
	BytesCached int64 `json:"bytes_cached"`
	// Downloading counts its files being downloaded.
	Downloading int `json:"downloading"`
	// Served counts the chunks served from it since the service started,
	// by tier, and HitRatio is the share not read from the store.
	Served   TierCounts `json:"served"`
	HitRatio float64    `json:"hit_ratio"`
}

// CacheSummary is the service's cache as GET /v1/cache describes it.
type CacheSummary struct {
	Memory struct {
		Used   int64 `json:"used"`   // bytes of chunks held, overheads included
		Budget int64 `json:"budget"` // --mem
		Chunks int64 `json:"chunks"` // estimated
	} `json:"memory"`
	Disk struct {
		Used   int64 `json:"used"`   // bytes of cached files, reservations included
		Budget int64 `json:"budget"` // --disk
		Files  int   `json:"files"`
	} `json:"disk"`
	// Served counts the chunks served since the service started, by
	// tier; HitRatio is the share not read from the store.
	Served   TierCounts `json:"served"`
	HitRatio float64    `json:"hit_ratio"`
	// Downloads counts whole-file downloads in flight, and
	// DownloadedBytes the bytes they have written so far.
	Downloads       int   `json:"downloads"`
	DownloadedBytes int64 `json:"downloaded_bytes"`
	// StoreReads and StoreBytes count ranged reads from the object store
	// and every byte read from it (downloads included) since the start.
	StoreReads int64 `json:"store_reads"`
	StoreBytes int64 `json:"store_bytes"`
	// Databases counts the databases of GET /v1/dbs.
	Databases int `json:"databases"`
}

// DropResult is the answer of DELETE /v1/dbs/{db}/cache.
type DropResult struct {
	DB    string `json:"db"`
	Files int    `json:"files"` // cached files removed
	Bytes int64  `json:"bytes"`
}
