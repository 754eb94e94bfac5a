package server

import (
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
	corrupt    prometheus.Counter
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
			Name: "chunkd_corrupt_files_total", Help: "Cached table files dropped because a record failed its check when read (the chunk was read from the store instead).",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.hits, m.hitBytes, m.storeReqs, m.storeBytes, m.downloads, m.diskBytes, m.evictions, m.diskReads, m.corrupt)
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
	m.hits.WithLabelValues(t.String()).Inc()
	m.hitBytes.WithLabelValues(t.String()).Add(float64(n))
}

func (m *metrics) storeRead(n int) {
	m.storeReqs.Inc()
	m.storeBytes.Add(float64(n))
}
