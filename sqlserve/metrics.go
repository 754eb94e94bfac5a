package sqlserve

import (
	"sync/atomic"

	"github.com/chunkd/chunkd/internal/prom"
	"github.com/prometheus/client_golang/prometheus"
)

// queryMetrics are the query API's metrics (its requests are counted
// with every route's, in chunkd_requests_total{api="http_query"}).
type queryMetrics struct {
	// results counts answers by where they came from: "hit" (the result
	// cache, or an identical query's run), "miss" (run, and kept if it
	// fit), "off" (run, not kept: the cache is off, or the statement is
	// not deterministic).
	results      *prometheus.CounterVec
	hits, misses *atomic.Int64 // for the hit ratio
	// queries counts runs by how they ended: ok, truncated, or the kind
	// of their error.
	queries   *prometheus.CounterVec
	queryTime prometheus.Observer
	versions  prometheus.Gauge // versions open
	conns     prometheus.Gauge // connections open
}

func newQueryMetrics(reg prom.Registry, rs *results) queryMetrics {
	m := queryMetrics{
		results:   reg.CounterVec("chunkd_query_results_total", "Answers of the query API by where they came from: hit (the result cache, or an identical query's run), miss (run), off (run and not kept: the cache is off, or the statement is not deterministic).", "result"),
		queries:   reg.CounterVec("chunkd_queries_total", "Statements the query API ran, by how they ended: ok, truncated (a row or byte limit), or their error's kind.", "outcome"),
		queryTime: reg.Latency("chunkd_query_duration_seconds", "Time from a query's arrival to its last row, for the queries run (not the result cache's answers).", 100e-6, 18).WithLabelValues(),
		versions:  reg.Gauge("chunkd_query_versions_open", "Versions the query API has open."),
		conns:     reg.Gauge("chunkd_query_connections_open", "SQLite connections the query API has open, over all versions."),
	}
	for _, r := range []string{"hit", "miss", "off"} {
		m.results.WithLabelValues(r)
	}
	m.hits, m.misses = new(atomic.Int64), new(atomic.Int64)
	reg.GaugeFunc("chunkd_result_cache_hit_ratio", "Share of the query API's answers of deterministic statements that the result cache gave (hits over hits and misses), since the service started.", m.hitRatio)
	if rs != nil {
		reg.GaugeFunc("chunkd_result_cache_bytes", "Bytes of answers in the result cache (with its overhead per answer).", func() float64 { return float64(rs.weight()) })
		reg.GaugeFunc("chunkd_result_cache_entries", "Answers in the result cache.", func() float64 { return float64(rs.entries()) })
	}
	return m
}

// answered counts an answer by where it came from: "hit", "miss", "off".
func (m queryMetrics) answered(result string) {
	m.results.WithLabelValues(result).Inc()
	switch result {
	case "hit":
		m.hits.Add(1)
	case "miss":
		m.misses.Add(1)
	}
}

// hitRatio is hits over hits and misses, 0 before any.
func (m queryMetrics) hitRatio() float64 {
	h, mi := m.hits.Load(), m.misses.Load()
	if h+mi == 0 {
		return 0
	}
	return float64(h) / float64(h+mi)
}
