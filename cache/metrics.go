package cache

import (
	"sync/atomic"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/prom"
	"github.com/chunkd/chunkd/store"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics, all prefixed chunkd_.
type metrics struct {
	hits       *prometheus.CounterVec // chunks served, by tier
	hitBytes   *prometheus.CounterVec // bytes served, by tier
	storeReqs  prometheus.Counter
	storeBytes prometheus.Counter
	downloads  *prometheus.CounterVec // by result: started, finished, failed
	diskBytes  prometheus.Gauge
	evictions  prometheus.Counter
	diskReads  prometheus.Counter
	corrupt    prometheus.Counter // cached files dropped for a failed check
	// storeCorrupt counts files whose store copy failed a proof.
	storeCorrupt  prometheus.Counter
	proofFailures prometheus.Counter // chunks from the store or a download that failed their hash
	proofs        prometheus.Counter // chunks hashed to their address

	// servedBytes and readBytes feed the store-bytes-per-served-byte gauge.
	servedBytes, readBytes atomic.Int64
	// served and storeReadCount feed GET /v1/cache (view.go).
	served         tierCounter
	storeReadCount atomic.Int64
	// tierHits and tierHitBytes are hits' and hitBytes' children per
	// tier, looked up once (a lookup hashes its labels: every chunk served
	// counts in both).
	tierHits, tierHitBytes [api.TierStore + 1]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	r := prom.Registry{Registerer: reg}
	m := &metrics{
		hits: r.CounterVec("chunkd_chunk_hits_total",
			"Chunks served, by the tier that had them (memory, disk, partial, store).", "tier"),
		hitBytes:   r.CounterVec("chunkd_chunk_bytes_total", "Decoded chunk bytes served, by tier.", "tier"),
		storeReqs:  r.Counter("chunkd_store_reads_total", "Ranged reads sent to the object store (read-through and index loads)."),
		storeBytes: r.Counter("chunkd_store_bytes_total", "Bytes read from the object store, downloads included."),
		downloads: r.CounterVec("chunkd_downloads_total",
			"Whole-file downloads, by result (started, finished, failed).", "result"),
		diskBytes: r.Gauge("chunkd_disk_bytes", "Bytes of table files on disk, including space reserved by downloads."),
		evictions: r.Counter("chunkd_evictions_total", "Table files evicted from disk."),
		diskReads: r.Counter("chunkd_disk_reads_total", "Read calls made on cached or downloading files to serve chunks."),
		corrupt: r.Counter("chunkd_corrupt_files_total",
			"Cached table files dropped because they failed a check when read or opened (the chunks were read from the store instead)."),
		storeCorrupt: r.Counter("chunkd_store_corrupt_files_total",
			"Table files whose copy in the store failed verification (a chunk that does not hash to its address); they are never downloaded."),
		proofFailures: r.Counter("chunkd_proof_failures_total",
			"Chunks read from the store or a download in progress whose bytes failed to decode or to hash to their address; none was served."),
		proofs: r.Counter("chunkd_chunk_proofs_total",
			"Chunks decoded and hashed to their address: each chunk of a download once, as it arrives, and each chunk read through from the store."),
	}
	r.GaugeFunc("chunkd_store_bytes_per_served_byte",
		"Bytes read from the store (downloads, read-through, index loads) per decoded chunk byte served, since start.",
		func() float64 {
			served := m.servedBytes.Load()
			if served == 0 {
				return 0
			}
			return float64(m.readBytes.Load()) / float64(served)
		})
	for _, r := range []string{"started", "finished", "failed"} {
		m.downloads.WithLabelValues(r)
	}
	for _, t := range []api.Tier{api.TierMemory, api.TierDisk, api.TierPartial, api.TierStore} {
		m.tierHits[t] = m.hits.WithLabelValues(t.String())
		m.tierHitBytes[t] = m.hitBytes.WithLabelValues(t.String())
	}
	return m
}

// registerHedges exports the hedging of store reads (store.Hedged).
func registerHedges(reg prometheus.Registerer, h *store.Hedged) {
	r := prom.Registry{Registerer: reg}
	r.CounterFunc("chunkd_store_hedges_total",
		"Second requests sent for store reads slower than the deadline recent reads set (their 95th percentile), at most 10% of reads.",
		func() float64 { return float64(h.Stats().Hedges) })
	r.CounterFunc("chunkd_store_hedge_wins_total", "Second requests for store reads that answered first.",
		func() float64 { return float64(h.Stats().Wins) })
	r.CounterFunc("chunkd_store_hedged_reads_total", "Store reads that could be hedged (ranged reads, streams opened, heads, gets).",
		func() float64 { return float64(h.Stats().Reads) })
}

func (m *metrics) hit(t api.Tier, n int) {
	m.served.add(t)
	if int(t) < len(m.tierHits) && m.tierHits[t] != nil {
		m.tierHits[t].Inc()
		m.tierHitBytes[t].Add(float64(n))
	} else {
		m.hits.WithLabelValues(t.String()).Inc()
		m.hitBytes.WithLabelValues(t.String()).Add(float64(n))
	}
	m.servedBytes.Add(int64(n))
}

// storeRead counts one ranged read of n bytes, unless a wrapper of the
// store answered it from elsewhere (a cluster peer, which counts it).
func (m *metrics) storeRead(n int, o *store.Origin) {
	if o.Elsewhere() {
		return
	}
	m.storeReqs.Inc()
	m.storeReadCount.Add(1)
	m.addStoreBytes(int64(n))
}

// addStoreBytes counts bytes read from the store.
func (m *metrics) addStoreBytes(n int64) {
	m.storeBytes.Add(float64(n))
	m.readBytes.Add(n)
}

// Hedges returns the counts of the service's hedged store reads: reads
// that could be hedged, second requests sent, and those that won.
func (c *Cache) Hedges() store.HedgeStats { return c.hedge.Stats() }

// StoreBytesPerServedByte returns the bytes read from the store per chunk
// byte served since the service started (0 before anything is served).
func (c *Cache) StoreBytesPerServedByte() float64 {
	served := c.metrics.servedBytes.Load()
	if served == 0 {
		return 0
	}
	return float64(c.metrics.readBytes.Load()) / float64(served)
}
