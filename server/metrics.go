package server

import (
	"sync/atomic"

	"github.com/chunkd/chunkd/api"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics, all prefixed chunkd_.
type metrics struct {
	requests   *prometheus.CounterVec   // by api, code
	latency    *prometheus.HistogramVec // by api
	hits       *prometheus.CounterVec   // chunks served, by tier
	hitBytes   *prometheus.CounterVec   // bytes served, by tier
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
	rejected      *prometheus.CounterVec
	imageBytes    prometheus.Gauge

	// servedBytes and readBytes feed the store-bytes-per-served-byte gauge.
	servedBytes, readBytes atomic.Int64
	// served and storeReadCount feed GET /v1/cache (view.go).
	served         tierCounter
	storeReadCount atomic.Int64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_requests_total", Help: "API requests, by API and status code.",
		}, []string{"api", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chunkd_request_duration_seconds",
			Help:    "API request latency, by API.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18), // 25µs .. 3.3s
		}, []string{"api"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_chunk_hits_total", Help: "Chunks served, by the tier that had them (memory, disk, partial, store).",
		}, []string{"tier"}),
		hitBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_chunk_bytes_total", Help: "Decoded chunk bytes served, by tier.",
		}, []string{"tier"}),
		storeReqs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_store_reads_total", Help: "Ranged reads sent to the object store (read-through and index loads).",
		}),
		storeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_store_bytes_total", Help: "Bytes read from the object store, downloads included.",
		}),
		downloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_downloads_total", Help: "Whole-file downloads, by result (started, finished, failed).",
		}, []string{"result"}),
		diskBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chunkd_disk_bytes", Help: "Bytes of table files on disk, including space reserved by downloads.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_evictions_total", Help: "Table files evicted from disk.",
		}),
		diskReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_disk_reads_total", Help: "Read calls made on cached or downloading files to serve chunks.",
		}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_corrupt_files_total", Help: "Cached table files dropped because they failed a check when read or opened (the chunks were read from the store instead).",
		}),
		storeCorrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_store_corrupt_files_total", Help: "Table files whose copy in the store failed verification (a chunk that does not hash to its address); they are never downloaded.",
		}),
		proofFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkd_proof_failures_total", Help: "Chunks read from the store or a download in progress whose bytes failed to decode or to hash to their address; none was served.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_rejected_requests_total", Help: "Requests refused before they reached an API handler, by reason (e.g. a gRPC message over the size limit).",
		}, []string{"api", "reason"}),
		imageBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chunkd_image_bytes", Help: "Bytes of page images (slots) in the cache directory, filled or not.",
		}),
	}
	perServed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chunkd_store_bytes_per_served_byte", Help: "Bytes read from the store (downloads, read-through, index loads) per decoded chunk byte served, since start.",
	}, func() float64 {
		served := m.servedBytes.Load()
		if served == 0 {
			return 0
		}
		return float64(m.readBytes.Load()) / float64(served)
	})
	reg.MustRegister(m.requests, m.latency, m.hits, m.hitBytes, m.storeReqs, m.storeBytes, m.downloads, m.diskBytes, m.evictions, m.diskReads, m.corrupt, m.storeCorrupt, m.proofFailures, m.rejected, m.imageBytes, perServed)
	for _, r := range []string{"started", "finished", "failed"} {
		m.downloads.WithLabelValues(r)
	}
	for _, t := range []api.Tier{api.TierMemory, api.TierDisk, api.TierPartial, api.TierStore} {
		m.hits.WithLabelValues(t.String())
		m.hitBytes.WithLabelValues(t.String())
	}
	return m
}

func (m *metrics) hit(t api.Tier, n int) {
	m.served.add(t)
	m.hits.WithLabelValues(t.String()).Inc()
	m.hitBytes.WithLabelValues(t.String()).Add(float64(n))
	m.servedBytes.Add(int64(n))
}

// storeRead counts one ranged read of n bytes.
func (m *metrics) storeRead(n int) {
	m.storeReqs.Inc()
	m.storeReadCount.Add(1)
	m.addStoreBytes(int64(n))
}

// addStoreBytes counts bytes read from the store.
func (m *metrics) addStoreBytes(n int64) {
	m.storeBytes.Add(float64(n))
	m.readBytes.Add(n)
}

// StoreBytesPerServedByte returns the bytes read from the store per chunk
// byte served since the service started (0 before anything is served).
func (c *Cache) StoreBytesPerServedByte() float64 {
	served := c.metrics.servedBytes.Load()
	if served == 0 {
		return 0
	}
	return float64(c.metrics.readBytes.Load()) / float64(served)
}
