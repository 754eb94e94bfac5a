package cache

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
	"github.com/prometheus/client_golang/prometheus"
)

// The service's view of itself, for operators (what GET /v1/dbs, GET
// /v1/cache and DELETE /v1/dbs/{db}/cache answer), and the gauges of
// memory and disk in use.

// tierCounter counts chunks served, by api.Tier.
type tierCounter [api.TierStore + 1]atomic.Int64

func (c *tierCounter) add(t api.Tier) {
	if int(t) < len(c) {
		c[t].Add(1)
	}
}

func (c *tierCounter) counts() api.TierCounts {
	return api.TierCounts{Memory: c[api.TierMemory].Load(), Disk: c[api.TierDisk].Load(), Partial: c[api.TierPartial].Load(), Store: c[api.TierStore].Load()}
}

// hit counts a chunk of n bytes served from d by tier t.
func (d *database) hit(t api.Tier, n int) {
	d.served.add(t)
	d.env.metrics.hit(t, n)
}

// summary describes d; the cached files and bytes are the caller's (the
// disk knows them, loaded or not).
func (d *database) summary() api.DBSummary {
	d.mu.RLock()
	s := api.DBSummary{Name: d.name, State: api.DBLoaded, Root: d.root.String(), Files: len(d.tables) + d.missing}
	if d.loadedAt.IsZero() {
		s.State = api.DBSaved
	}
	tables := append([]*table(nil), d.tables...)
	d.mu.RUnlock()
	for _, t := range tables {
		s.Bytes += t.size
		t.mu.Lock()
		if t.dl != nil {
			s.Downloading++
		}
		t.mu.Unlock()
	}
	s.Served = d.served.counts()
	s.HitRatio = s.Served.HitRatio()
	return s
}

// downloading returns the downloads in flight of d's files and the bytes
// they have written.
func (d *database) downloading() (n int, bytes int64) {
	d.mu.RLock()
	tables := append([]*table(nil), d.tables...)
	d.mu.RUnlock()
	for _, t := range tables {
		t.mu.Lock()
		if t.dl != nil {
			n++
			bytes += t.dl.provenBytes()
		}
		t.mu.Unlock()
	}
	return n, bytes
}

// dirUse is how many cached files, and bytes, one database has on disk.
type dirUse struct {
	files int
	bytes int64
}

// known reports whether the service has database db loaded or a saved
// state of it.
func (c *Cache) known(db string) bool {
	c.mu.Lock()
	_, loaded := c.dbs[db]
	c.mu.Unlock()
	return loaded || slices.Contains(c.savedDBs(), db)
}

// savedDBs returns the names of the databases with a saved state in the
// cache directory.
func (c *Cache) savedDBs() []string {
	entries, _ := os.ReadDir(filepath.Join(c.cfg.CacheDir, api.CacheDBsDir))
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			if name, err := url.PathUnescape(n); err == nil {
				names = append(names, name)
			}
		}
	}
	return names
}

// Databases lists the databases the service knows: those loaded since it
// started, and those with files or a saved state in its cache directory.
func (c *Cache) Databases() []api.DBSummary {
	dbs := c.loaded()
	use := c.disk.byDB()
	seen := map[string]bool{}
	var out []api.DBSummary
	for _, d := range dbs {
		s := d.summary()
		s.FilesCached, s.BytesCached = use[d.name].files, use[d.name].bytes
		out = append(out, s)
		seen[d.name] = true
	}
	onDisk := c.savedDBs()
	for name := range use {
		onDisk = append(onDisk, name)
	}
	for _, name := range onDisk {
		if !seen[name] {
			seen[name] = true
			out = append(out, api.DBSummary{Name: name, State: api.DBOnDisk, FilesCached: use[name].files, BytesCached: use[name].bytes})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Summary describes the cache as a whole.
func (c *Cache) Summary() api.CacheSummary {
	var s api.CacheSummary
	s.Memory.Used, s.Memory.Budget, s.Memory.Chunks = int64(c.mem.weight()), c.cfg.MemBytes, int64(c.mem.cache.EstimatedSize())
	s.Disk.Used, s.Disk.Budget, s.Disk.Files = c.disk.usedBytes(), c.cfg.DiskBytes, c.disk.fileCount()
	s.Served = c.metrics.served.counts()
	s.HitRatio = s.Served.HitRatio()
	dbs := c.loaded()
	for _, d := range dbs {
		n, b := d.downloading()
		s.Downloads += n
		s.DownloadedBytes += b
	}
	s.StoreReads = c.metrics.storeReadCount.Load()
	s.StoreBytes = c.metrics.readBytes.Load()
	return s
}

// DropCached removes database db's cached files from disk (whether or not
// the database is loaded). Downloads in flight finish and are kept; the
// memory tier, shared by all databases, keeps what it holds.
func (c *Cache) DropCached(ctx context.Context, db string) (api.DropResult, error) {
	if err := manifest.ValidateName(db); err != nil {
		return api.DropResult{}, Errorf(KindBadRequest, err, "bad database name")
	}
	if err := ctx.Err(); err != nil {
		return api.DropResult{}, err
	}
	files, bytes := c.disk.dropDB(db)
	if files == 0 && !c.known(db) {
		// Nothing cached and nothing saved: a database the store does not
		// have is unknown (404), not one with nothing to drop.
		if err := c.LoadDB(ctx, db); err != nil {
			return api.DropResult{}, err
		}
	}
	if files > 0 {
		c.log.Info("dropped a database's cached files on request", "db", db, "files", files, "bytes", bytes)
	}
	return api.DropResult{DB: db, Files: files, Bytes: bytes}, nil
}

// Host says where the cache directory is and the token its host file
// holds, for a client on this host to prove it sees the directory
// (api.PatternHost).
func (c *Cache) Host() api.HostInfo { return c.disk.host }

// FilesInUse counts the cached files that readers hold open now. Files
// are released before answers are written, so a client that stalls
// holds none.
func (c *Cache) FilesInUse() int { return c.disk.inUse() }

// registerViewMetrics adds the gauges of memory and disk in use and their
// budgets.
func (c *Cache) registerViewMetrics(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkd_memory_bytes", Help: "Bytes of decoded chunks in the memory tier, per-chunk overheads included."},
			func() float64 { return float64(c.mem.weight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkd_memory_budget_bytes", Help: "The memory tier's budget (--mem)."},
			func() float64 { return float64(c.cfg.MemBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkd_disk_budget_bytes", Help: "The disk tier's budget (--disk)."},
			func() float64 { return float64(c.cfg.DiskBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkd_disk_files", Help: "Table files cached on disk."},
			func() float64 { return float64(c.disk.fileCount()) }),
	)
}
