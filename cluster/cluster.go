// Package cluster makes several chunkd services one cache: each table file
// has one owner among the nodes (package cluster/ring: weighted rendezvous
// hashing of its store key over the nodes that are up), which alone
// downloads it and keeps it on disk; a node asked for a chunk of a file it
// does not own reads it from the owner, one hop, and keeps only the chunk
// in its memory tier. Concurrent misses for one file on any number of
// nodes then cost one download of it from the store, by its owner.
//
// The pieces, one concern each:
//
//   - membership.go: who the nodes are and whether they answer: a static
//     list (--peers), a DNS name re-resolved (--peers-dns), gossip through
//     hashicorp/memberlist (--join); every member is probed over HTTP
//     (POST /v1/cluster/hello), which also tells its id and weight, and
//     a node that introduces itself is known at once.
//   - store.go: the store the cache reads through (Node.Store): reads of
//     table files another node owns go to it (peer.go), hedged with a
//     read of the store when the owner shows no sign of life for
//     Config.HedgeAfter; everything else goes to the store.
//   - peer.go: the peer protocol: a ranged read of a table file, answered
//     by its owner through cache.FileReader (every unit proven, as the
//     Dolt remote's downloads are), in frames with keep-alives so that a
//     busy owner is told from a hung one; and the peers' authentication
//     (a cluster secret's HMAC, or TLS client certificates).
//   - routes.go: GET /v1/cluster (and gRPC chunkd.v1.Cluster/Members), a
//     database's routing table for clients (GET /v1/cluster/dbs/{db}/files)
//     and the peer routes.
//   - metrics.go.
//
// Trust: a node proves every chunk it serves against its address, whether
// it came from its disk, the store or a peer; a peer is trusted no more
// than the store. Tokens are checked by the node a client talks to; a
// forwarded read names a file of the database the client was allowed, and
// the peer routes refuse anyone but a peer.
package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cluster/ring"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Node.
type Config struct {
	// ID is this node's stable id (--node-id); files are placed by it, so
	// a node that restarts with the same id owns the same files.
	ID string
	// URL is this node's HTTP API as its peers and clients reach it
	// (--advertise, else from --listen).
	URL string
	// GRPC is its gRPC address as clients reach it ("" if none), shown in
	// GET /v1/cluster.
	GRPC string
	// Weight is this node's share of the files: its disk budget in bytes.
	Weight int64

	// Peers lists every node's HTTP URL, this node's included (--peers).
	Peers []string
	// PeersDNS is a name whose addresses are the nodes (--peers-dns: a
	// Kubernetes headless Service), as host or host:port (the port
	// defaults to URL's), re-resolved every DNSInterval (default 5 s).
	PeersDNS    string
	DNSInterval time.Duration
	// Join lists gossip addresses (host:port) of nodes to join (--join);
	// GossipListen is where this node's gossip listens (default
	// 127.0.0.1:7946), GossipAdvertise what others reach it at (default
	// GossipListen). Gossip runs when either Join or GossipListen is set.
	Join                          []string
	GossipListen, GossipAdvertise string

	// Secret authenticates peers to each other (an HMAC of each request,
	// and gossip's encryption key). "" relies on TLS client certificates
	// (ClientCerts), or, with neither, on the network.
	Secret string
	// ClientCerts says the HTTP listener verifies client certificates
	// (mutual TLS): without a Secret, a verified certificate is a peer's
	// credential.
	ClientCerts bool
	// TLS is the client side of peer connections (https:// peers): the
	// roots that sign the peers' certificates and this node's own. nil:
	// the system's roots, no certificate.
	TLS *tls.Config

	// ProbeInterval is how often each member is probed (default 1 s);
	// ProbeTimeout bounds a probe (default 1 s).
	ProbeInterval, ProbeTimeout time.Duration
	// HedgeAfter is how long a read forwarded to a file's owner waits for
	// the owner's next sign of life (its answer's head, a frame or a
	// keep-alive) before the store is read too (default 1 s).
	HedgeAfter time.Duration

	Logger   *slog.Logger
	Registry prometheus.Registerer
}

func (c *Config) setDefaults() error {
	if c.ID == "" {
		return errors.New("cluster: no node id")
	}
	u, err := normalURL(c.URL)
	if err != nil {
		return fmt.Errorf("cluster: this node's URL: %w", err)
	}
	c.URL = u
	if c.Weight <= 0 {
		c.Weight = 1
	}
	if c.DNSInterval <= 0 {
		c.DNSInterval = 5 * time.Second
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = time.Second
	}
	if c.HedgeAfter <= 0 {
		c.HedgeAfter = time.Second
	}
	if len(c.Join) > 0 && c.GossipListen == "" {
		c.GossipListen = "127.0.0.1:7946"
	}
	if c.GossipAdvertise == "" {
		c.GossipAdvertise = c.GossipListen
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	return nil
}

// normalURL returns an HTTP base URL in one spelling: lower-case scheme
// and host, no path, no trailing slash.
func normalURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("%q is not an http:// or https:// URL with a host", raw)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("%q: a node's URL has no path", raw)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host), nil
}

// Node is this node's view of the cluster: its members, the placement
// over those up, and the peer connections.
type Node struct {
	cfg  Config
	log  *slog.Logger
	self member
	m    *metrics

	mu      sync.Mutex
	members map[string]*member // by URL, self excluded

	view atomic.Pointer[view]

	peers  *peerClient
	gossip *memberlist.Memberlist

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// view is the placement over the members up, and how to reach them.
type view struct {
	ring *ring.Ring
	byID map[string]api.ClusterMember
}

// New makes this node's view from cfg; nothing runs until Start. It fails
// when the static list does not name this node.
func New(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), members: map[string]*member{}, stop: make(chan struct{})}
	n.self = member{info: api.ClusterMember{ID: cfg.ID, URL: cfg.URL, GRPC: cfg.GRPC, Weight: cfg.Weight, State: api.MemberUp, Source: "self"}, seen: time.Now()}
	n.m = newMetrics(cfg.Registry, n)
	n.peers = newPeerClient(n)
	foundSelf := len(cfg.Peers) == 0
	for _, p := range cfg.Peers {
		u, err := normalURL(p)
		if err != nil {
			return nil, fmt.Errorf("cluster: --peers: %w", err)
		}
		if u == cfg.URL {
			foundSelf = true
			continue
		}
		n.members[u] = &member{info: api.ClusterMember{URL: u, State: api.MemberUnknown, Source: "static"}, static: true}
	}
	if !foundSelf {
		return nil, fmt.Errorf("cluster: --peers does not list this node's own URL %s (set --advertise to the URL the list names it by)", cfg.URL)
	}
	n.rebuild()
	return n, nil
}

// ID returns this node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Owns reports whether this node owns table file key: whether it
// downloads and keeps it (cache.Config.Owns).
func (n *Node) Owns(key string) bool {
	v := n.view.Load()
	return v.ring.Len() <= 1 || v.ring.Owner(key) == n.cfg.ID
}

// owner returns the member that owns key, or ok false when this node does.
func (n *Node) owner(key string) (api.ClusterMember, bool) {
	v := n.view.Load()
	id := v.ring.Owner(key)
	if id == "" || id == n.cfg.ID {
		return api.ClusterMember{}, false
	}
	return v.byID[id], true
}

// OwnerURL returns the HTTP URL of the node that owns table file key, ""
// when this node does (doltremote.Config.FileBase).
func (n *Node) OwnerURL(key string) string {
	if m, ok := n.owner(key); ok {
		return m.URL
	}
	return ""
}

// Info returns the cluster as this node sees it (GET /v1/cluster).
func (n *Node) Info() api.ClusterInfo {
	info := api.ClusterInfo{Self: n.cfg.ID, Placement: ring.Version}
	self := n.self.info
	self.LastSeenMS = 0
	info.Members = append(info.Members, self)
	n.mu.Lock()
	for _, m := range n.members {
		mi := m.info
		mi.LastSeenMS = -1
		if !m.seen.IsZero() {
			mi.LastSeenMS = time.Since(m.seen).Milliseconds()
		}
		info.Members = append(info.Members, mi)
	}
	n.mu.Unlock()
	sortMembers(info.Members)
	return info
}

// Start starts probing the members, resolving the DNS name and gossip, as
// configured. The HTTP API (Routes) must be serving: peers probe it.
func (n *Node) Start() error {
	if n.cfg.GossipListen != "" {
		if err := n.startGossip(); err != nil {
			return err
		}
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.probeLoop()
	}()
	if n.cfg.PeersDNS != "" {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.dnsLoop()
		}()
	}
	n.log.Info("cluster node started", "id", n.cfg.ID, "url", n.cfg.URL, "weight", n.cfg.Weight,
		"peers", len(n.cfg.Peers), "peers_dns", n.cfg.PeersDNS, "gossip", n.cfg.GossipListen, "join", strings.Join(n.cfg.Join, ","))
	return nil
}

// Close leaves the gossip (telling the others at once) and stops probing.
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	var err error
	if n.gossip != nil {
		err = n.gossip.Leave(time.Second)
		n.gossip.Shutdown()
	}
	n.wg.Wait()
	n.peers.close()
	return err
}
