package cluster

import (
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/prom"
	"github.com/prometheus/client_golang/prometheus"
)

// Where a forwarded read was answered.
const (
	resultPeer       = "peer"        // by the owner
	resultStore      = "store"       // by the store, after the owner failed
	resultHedgeStore = "hedge_store" // by the store, the owner silent past HedgeAfter
)

// metrics are the cluster's Prometheus metrics, all prefixed
// chunkd_cluster_.
type metrics struct {
	forwards         *prometheus.CounterVec // by result
	forwardBytes     *prometheus.CounterVec // by result
	forwardSeconds   prometheus.Histogram
	hedges           prometheus.Counter
	served           *prometheus.CounterVec // peer reads answered, by result
	servedBytes      prometheus.Counter
	probes           *prometheus.CounterVec
	dnsLookups       *prometheus.CounterVec
	placementChanges prometheus.Counter
	sharedReads      prometheus.Counter
	streamBytes      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, n *Node) *metrics {
	r := prom.Registry{Registerer: reg}
	m := &metrics{
		forwards: r.CounterVec("chunkd_cluster_forwards_total",
			"Reads of table files another node owns, by where they were answered: peer (the owner), store (the owner failed), hedge_store (the owner showed no sign of life within the hedge deadline).", "result"),
		forwardBytes: r.CounterVec("chunkd_cluster_forward_bytes_total",
			"Bytes of the reads in chunkd_cluster_forwards_total, by where they were answered (those answered by the store count in chunkd_store_bytes_total too).", "result"),
		hedges: r.Counter("chunkd_cluster_hedges_total",
			"Forwarded reads whose owner showed no sign of life within the hedge deadline, so the store was read too (and the owner taken out of the placement until it answers a probe)."),
		served: r.CounterVec("chunkd_cluster_peer_reads_total",
			"Reads of this node's table files asked by other nodes, by result: ok, misdirected (this node does not own the file by its view), refused (no peer credential), failed.", "result"),
		servedBytes: r.Counter("chunkd_cluster_peer_read_bytes_total", "Bytes sent to other nodes for reads of this node's table files."),
		probes:      r.CounterVec("chunkd_cluster_probes_total", "Probes of other nodes (POST /v1/cluster/hello), by result: ok, failed.", "result"),
		dnsLookups:  r.CounterVec("chunkd_cluster_dns_lookups_total", "Lookups of --peers-dns, by result: ok, failed.", "result"),
		sharedReads: r.Counter("chunkd_cluster_shared_reads_total",
			"Reads of files this node owns answered from the one stream of the file its download shares with them, not the store."),
		streamBytes: r.Counter("chunkd_cluster_stream_bytes_total",
			"Bytes read from the store by a shared read of a file this node owns that no download took (a download's are in chunkd_store_bytes_total): add it to chunkd_store_bytes_total for what the store served this node."),
		placementChanges: r.Counter("chunkd_cluster_placement_changes_total",
			"Times the set of members up (or a weight) changed, moving the files of the nodes that left or joined."),
	}
	m.forwardSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chunkd_cluster_forward_seconds",
		Help: "Time of a read of another node's table file, hedge and fallback included.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)})
	reg.MustRegister(m.forwardSeconds)
	states := prometheus.NewDesc("chunkd_cluster_members", "Nodes this node knows, itself included, by state: up (in the placement), down, unknown (listed, never answered).", []string{"state"}, nil)
	reg.MustRegister(memberStates{desc: states, n: n})
	for _, res := range []string{resultPeer, resultStore, resultHedgeStore} {
		m.forwards.WithLabelValues(res)
		m.forwardBytes.WithLabelValues(res)
	}
	for _, res := range []string{"ok", "misdirected", "refused", "failed"} {
		m.served.WithLabelValues(res)
	}
	return m
}

func (m *metrics) forwarded(result string, hedged bool, n int, took time.Duration) {
	m.forwards.WithLabelValues(result).Inc()
	m.forwardBytes.WithLabelValues(result).Add(float64(n))
	m.forwardSeconds.Observe(took.Seconds())
}

// memberStates collects chunkd_cluster_members from the node's view.
type memberStates struct {
	desc *prometheus.Desc
	n    *Node
}

func (c memberStates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c memberStates) Collect(ch chan<- prometheus.Metric) {
	count := map[string]int{api.MemberUp: 0, api.MemberDown: 0, api.MemberUnknown: 0}
	for _, mb := range c.n.Info().Members {
		count[mb.State]++
	}
	for s, k := range count {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(k), s)
	}
}
