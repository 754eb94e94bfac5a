// Package prom declares Prometheus metrics in one line each: every
// constructor makes a metric, registers it (panicking on a clash, as
// prometheus.MustRegister does) and returns it.
package prom

import "github.com/prometheus/client_golang/prometheus"

// Registry makes and registers metrics on one prometheus.Registerer.
type Registry struct{ prometheus.Registerer }

// Counter is a registered counter.
func (r Registry) Counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	r.MustRegister(c)
	return c
}

// CounterVec is a registered counter with labels.
func (r Registry) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	r.MustRegister(c)
	return c
}

// Gauge is a registered gauge.
func (r Registry) Gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	r.MustRegister(g)
	return g
}

// GaugeFunc is a registered gauge whose value fn gives when scraped.
func (r Registry) GaugeFunc(name, help string, fn func() float64) {
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// CounterFunc is a registered counter whose value fn gives when scraped.
func (r Registry) CounterFunc(name, help string, fn func() float64) {
	r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn))
}

// Latency is a registered histogram of seconds with exponential buckets
// from least, doubling, n of them.
func (r Registry) Latency(name, help string, least float64, n int, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(least, 2, n),
	}, labels)
	r.MustRegister(h)
	return h
}
