package doltremote

import (
	"time"

	"github.com/chunkd/chunkd/server"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Dolt remote's Prometheus metrics, prefixed chunkd_dolt_.
type metrics struct {
	requests  *prometheus.CounterVec   // by method, code
	latency   *prometheus.HistogramVec // by method
	fileBytes *prometheus.CounterVec   // by source
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_dolt_requests_total", Help: "Dolt remote requests, by method (the gRPC method, or download) and status (gRPC code or HTTP status).",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chunkd_dolt_request_duration_seconds",
			Help:    "Dolt remote request latency, by method; a download's covers its whole body.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 20), // 50µs .. 26s
		}, []string{"method"}),
		fileBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_dolt_file_bytes_total", Help: "Table-file bytes sent to Dolt clients, by source (disk, partial, store).",
		}, []string{"source"}),
	}
	reg.MustRegister(m.requests, m.latency, m.fileBytes)
	for _, s := range []string{"disk", "partial", "store"} {
		m.fileBytes.WithLabelValues(s)
	}
	return m
}

func (m *metrics) observe(method, code string, took time.Duration) {
	m.requests.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(took.Seconds())
}

func (m *metrics) served(st server.FileStats) {
	m.fileBytes.WithLabelValues("disk").Add(float64(st.Disk))
	m.fileBytes.WithLabelValues("partial").Add(float64(st.Partial))
	m.fileBytes.WithLabelValues("store").Add(float64(st.Store))
}
