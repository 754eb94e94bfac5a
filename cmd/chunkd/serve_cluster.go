package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chunkd/chunkd/cluster"
)

// clusterFlags are serve's cluster flags.
type clusterFlags struct {
	nodeID, advertise, peers, peersDNS, join, gossipListen, gossipAdvertise string
	secretFile                                                              string
	hedge, probe                                                            time.Duration
}

func addClusterFlags(fs *flag.FlagSet) *clusterFlags {
	c := &clusterFlags{}
	fs.StringVar(&c.peers, "peers", "", "make a cluster of these nodes: every node's HTTP URL, comma-separated, this one's included (found by --advertise, else --listen)")
	fs.StringVar(&c.peersDNS, "peers-dns", "", "make a cluster of the nodes this DNS name resolves to (host or host:port; a Kubernetes headless Service), re-resolved every 5s")
	fs.StringVar(&c.join, "join", "", "make a cluster by gossip (hashicorp/memberlist): join the nodes at these gossip addresses (host:port, comma-separated)")
	fs.StringVar(&c.gossipListen, "gossip-listen", "", "gossip address (default 127.0.0.1:7946 with --join; set it alone on the first node)")
	fs.StringVar(&c.gossipAdvertise, "gossip-advertise", "", "gossip address the other nodes reach this one at (default --gossip-listen)")
	fs.StringVar(&c.nodeID, "node-id", "", "this node's stable id in a cluster; files are placed by it (default: one kept in --cache-dir/"+cluster.NodeIDFile+")")
	fs.StringVar(&c.advertise, "advertise", "", "the HTTP URL the other nodes and clients reach this node at (default http(s)://--listen)")
	fs.StringVar(&c.secretFile, "cluster-secret-file", "", "a file holding the cluster's shared secret: it authenticates the nodes to each other and encrypts the gossip (or use --tls-client-ca)")
	fs.DurationVar(&c.hedge, "peer-hedge", time.Second, "how long a read forwarded to a file's owner waits for a sign of life before the store is read too")
	fs.DurationVar(&c.probe, "peer-probe", time.Second, "how often each other node is probed")
	return c
}

// on reports whether a cluster was asked for.
func (c *clusterFlags) on() bool {
	return c.peers != "" || c.peersDNS != "" || c.join != "" || c.gossipListen != ""
}

// config returns the cluster's configuration, nil without a cluster.
func (c *clusterFlags) config(cacheDir string, sec *secureFlags) (*cluster.Config, error) {
	if !c.on() {
		if c.secretFile != "" || c.nodeID != "" || c.advertise != "" {
			return nil, usagef("--cluster-secret-file, --node-id and --advertise need a cluster (--peers, --peers-dns or --join)")
		}
		return nil, nil
	}
	if c.hedge <= 0 || c.probe <= 0 {
		return nil, usagef("--peer-hedge and --peer-probe must be positive")
	}
	cfg := &cluster.Config{ID: c.nodeID, URL: c.advertise, PeersDNS: c.peersDNS,
		GossipListen: c.gossipListen, GossipAdvertise: c.gossipAdvertise,
		HedgeAfter: c.hedge, ProbeInterval: c.probe}
	if cfg.ID == "" {
		id, err := cluster.NodeID(cacheDir)
		if err != nil {
			return nil, err
		}
		cfg.ID = id
	}
	cfg.Peers = splitList(c.peers)
	cfg.Join = splitList(c.join)
	if c.secretFile != "" {
		b, err := os.ReadFile(c.secretFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-secret-file: %w", err)
		}
		if cfg.Secret = strings.TrimSpace(string(b)); len(cfg.Secret) < 16 {
			return nil, usagef("--cluster-secret-file: the secret must be at least 16 characters")
		}
	}
	if sec.tlsCert != "" {
		// Peers are reached over TLS: the client CA (which signs the
		// nodes' certificates too) is the root, and this node shows its
		// own certificate when asked.
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if sec.tlsClientCA != "" {
			pem, err := os.ReadFile(sec.tlsClientCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-client-ca: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			tc.RootCAs.AppendCertsFromPEM(pem)
		}
		cert, key := sec.tlsCert, sec.tlsKey
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, err
			}
			return &c, nil
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
