package doltremote

import (
	"time"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/prom"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Dolt remote's Prometheus metrics, prefixed chunkd_dolt_.
type metrics struct {
	requests  *prometheus.CounterVec   // by method, code
	latency   *prometheus.HistogramVec // by method
	fileBytes *prometheus.CounterVec   // by source
}

func newMetrics(reg prometheus.Registerer) *metrics {
	r := prom.Registry{Registerer: reg}
	m := &metrics{
		requests: r.CounterVec("chunkd_dolt_requests_total",
			"Dolt remote requests, by method (the gRPC method, or download) and status (gRPC code or HTTP status).", "method", "code"),
		latency: r.Latency("chunkd_dolt_request_duration_seconds",
			"Dolt remote request latency, by method; a download's covers its whole body.", 50e-6, 20, "method"), // 50µs .. 26s
		fileBytes: r.CounterVec("chunkd_dolt_file_bytes_total",
			"Table-file bytes sent to Dolt clients, by source (disk, partial, store).", "source"),
	}
	for _, s := range []string{"disk", "partial", "store"} {
		m.fileBytes.WithLabelValues(s)
	}
	return m
}

func (m *metrics) observe(method, code string, took time.Duration) {
	m.requests.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(took.Seconds())
}

func (m *metrics) served(st cache.FileStats) {
	m.fileBytes.WithLabelValues("disk").Add(float64(st.Disk))
	m.fileBytes.WithLabelValues("partial").Add(float64(st.Partial))
	m.fileBytes.WithLabelValues("store").Add(float64(st.Store))
}
