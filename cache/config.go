package cache

import (
	"errors"
	"log/slog"
	"time"

	"github.com/chunkd/chunkd/store"
	"github.com/prometheus/client_golang/prometheus"
)

// MissPolicy says what the service does when a chunk is in none of its
// local files.
type MissPolicy int

const (
	// ReadThrough reads the chunk from the object store with one ranged
	// read, returns it, and downloads the whole file in the background.
	ReadThrough MissPolicy = iota
	// NotFound answers "not found" at once (the client goes to the store
	// itself) and downloads the whole file in the background.
	NotFound
)

// Config configures a Cache.
type Config struct {
	Store    store.Store // where the databases live
	CacheDir string      // where whole table files are kept

	MemBytes  int64 // decoded chunks kept in memory (default 256 MiB)
	DiskBytes int64 // table files kept on disk (default 10 GiB)
	NoFsync   bool  // skip fsync of downloads (faster, not crash safe)
	Miss      MissPolicy

	// StoreTimeout bounds one read-through from the store (default 10 s).
	StoreTimeout time.Duration
	// ManifestTTL is how old a database's manifest may be before a miss
	// makes the service read it again (default 5 s).
	ManifestTTL time.Duration
	// Downloads is how many ranged streams of the store download files
	// ahead of readers at once (default 8; a file takes up to 8, a
	// segment of 8 MiB each). What readers wait for is fetched beside
	// them, whatever this says.
	Downloads int
	// IndexTail is how many bytes to read from a file's end when opening
	// its index from the store (default 64 KiB: one request for most files).
	IndexTail int
	// ClientTimeout is the longest the service waits on a client: to send
	// a request's body, or to take the next part of an answer (default
	// 30 s). A client that stalls longer is cut off; it never holds a
	// cached file (files are released before answers are written).
	ClientTimeout time.Duration

	// Owns, if set, says which table files the service downloads and
	// keeps on disk, by store key: in a cluster (package cluster), those
	// this node owns. Reads of the others go through Store, which routes
	// them to their owner, and keep only the chunks read in memory. nil:
	// every file, as a service alone.
	Owns func(key string) bool

	Logger   *slog.Logger
	Registry prometheus.Registerer // default: a new registry

	hooks *hooks // file-system calls, replaced by tests (failpoints)
	// hedge tunes the hedging of store reads (tests; zero: the defaults).
	hedge store.HedgeOptions
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		return errors.New("server: no store")
	}
	if c.CacheDir == "" {
		return errors.New("server: no cache directory")
	}
	if c.MemBytes == 0 {
		c.MemBytes = 256 << 20
	}
	if c.DiskBytes == 0 {
		c.DiskBytes = 10 << 30
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = 10 * time.Second
	}
	if c.ManifestTTL == 0 {
		c.ManifestTTL = 5 * time.Second
	}
	if c.Downloads == 0 {
		c.Downloads = 8
	}
	if c.IndexTail == 0 {
		c.IndexTail = 64 << 10
	}
	if c.ClientTimeout == 0 {
		c.ClientTimeout = 30 * time.Second
	}
	if c.hooks == nil {
		c.hooks = defaultHooks()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	return nil
}
