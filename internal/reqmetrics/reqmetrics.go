// Package reqmetrics holds the metrics every API of the cache service
// counts its requests in (HTTP, gRPC, and the features served on them),
// so that one dashboard reads them all by their api label.
package reqmetrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Requests are the request metrics of one registry.
type Requests struct {
	Count    *prometheus.CounterVec   // chunkd_requests_total, by api and code
	Latency  *prometheus.HistogramVec // chunkd_request_duration_seconds, by api
	Rejected *prometheus.CounterVec   // chunkd_rejected_requests_total, by api and reason
}

// On returns the request metrics registered on reg, registering them
// the first time: every API of a service calls it with the service's
// registry and gets the same metrics.
func On(reg prometheus.Registerer) *Requests {
	return &Requests{
		Count: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_requests_total", Help: "API requests, by API and status code.",
		}, []string{"api", "code"})),
		Latency: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "chunkd_request_duration_seconds", Help: "API request latency, by API.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18), // 25µs .. 3.3s
		}, []string{"api"})),
		Rejected: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkd_rejected_requests_total",
			Help: "Requests refused before they reached an API handler, by reason (e.g. a gRPC message over the size limit).",
		}, []string{"api", "reason"})),
	}
}

// register registers c on reg, or returns the collector of the same
// description registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
