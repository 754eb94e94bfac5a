package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cluster/ring"
	"github.com/hashicorp/memberlist"
)

// member is one other node as this node knows it (Node.mu).
type member struct {
	info   api.ClusterMember
	static bool      // listed by --peers: never forgotten
	seen   time.Time // last answer
	downAt time.Time // when it went down (zero while up)
	missed int       // probes failed in a row
}

// probesToDown is how many probes in a row a member must fail, each
// ProbeTimeout late or refused, to be taken down; a refused connection
// (nothing listens) takes it down at once.
const probesToDown = 2

// forgetAfter is how long a member found by DNS, gossip or its own hello
// stays listed once down: a node replaced for good leaves the list.
const forgetAfter = 10 * time.Minute

// rebuild makes the placement over the members up (Node.mu held, or
// before the node is shared).
func (n *Node) rebuild() {
	ms := []ring.Member{{ID: n.cfg.ID, Weight: float64(n.cfg.Weight)}}
	byID := map[string]api.ClusterMember{n.cfg.ID: n.self.info}
	for _, m := range n.members {
		if m.info.State == api.MemberUp && m.info.ID != "" && m.info.ID != n.cfg.ID {
			if _, dup := byID[m.info.ID]; dup {
				continue
			}
			ms = append(ms, ring.Member{ID: m.info.ID, Weight: float64(m.info.Weight)})
			byID[m.info.ID] = m.info
		}
	}
	old := n.view.Load()
	v := &view{ring: ring.New(ms), byID: byID}
	n.view.Store(v)
	if old != nil && !sameMembers(old, v) {
		n.m.placementChanges.Inc()
		ids := make([]string, 0, len(byID))
		for id := range byID {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		n.log.Info("cluster placement changed", "members_up", strings.Join(ids, ","))
	}
}

func sameMembers(a, b *view) bool {
	if len(a.byID) != len(b.byID) {
		return false
	}
	for id, m := range a.byID {
		if o, ok := b.byID[id]; !ok || o.Weight != m.Weight || o.URL != m.URL {
			return false
		}
	}
	return true
}

// learn records what a member said of itself (a probe's answer, its
// hello, its gossip): it is up.
func (n *Node) learn(info api.ClusterMember, source string) {
	u, err := normalURL(info.URL)
	if err != nil || u == n.cfg.URL || info.ID == "" {
		return
	}
	if info.ID == n.cfg.ID {
		n.log.Error("another node has this node's id: ids must be unique (--node-id)", "id", info.ID, "url", u)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.members[u]
	if m == nil {
		m = &member{info: api.ClusterMember{URL: u, Source: source}}
		n.members[u] = m
	}
	wasUp := m.info.State == api.MemberUp
	m.info.ID, m.info.GRPC, m.info.Weight = info.ID, info.GRPC, info.Weight
	m.info.State, m.info.Error = api.MemberUp, ""
	m.seen, m.downAt, m.missed = time.Now(), time.Time{}, 0
	if !wasUp {
		n.log.Info("cluster member up", "id", info.ID, "url", u, "weight", info.Weight, "via", source)
	}
	n.rebuild()
}

// markDown takes a member out of the placement until it answers a probe
// again: it did not answer one, or a read forwarded to it failed.
func (n *Node) markDown(u string, why error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.members[u]
	if m == nil || m.info.State == api.MemberDown {
		return
	}
	if m.info.State == api.MemberUp {
		n.log.Warn("cluster member down: its files are placed on the others until it answers again", "id", m.info.ID, "url", u, "err", why)
	}
	m.info.State, m.info.Error = api.MemberDown, why.Error()
	if m.info.ID == "" {
		m.info.State = api.MemberUnknown
	}
	m.downAt = time.Now()
	n.rebuild()
}

// probeLoop probes every member each ProbeInterval, and forgets members
// not listed by --peers that have been down for forgetAfter.
func (n *Node) probeLoop() {
	t := time.NewTicker(n.cfg.ProbeInterval)
	defer t.Stop()
	for {
		n.probeAll()
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

func (n *Node) probeAll() {
	n.mu.Lock()
	urls := make([]string, 0, len(n.members))
	for u, m := range n.members {
		if !m.static && !m.downAt.IsZero() && time.Since(m.downAt) > forgetAfter {
			delete(n.members, u)
			continue
		}
		urls = append(urls, u)
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() { n.probe(u) })
	}
	wg.Wait()
}

// probe says hello to the member at u, learning its id and weight.
func (n *Node) probe(u string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ProbeTimeout)
	defer cancel()
	info, err := n.peers.hello(ctx, u, n.self.info)
	if err != nil {
		n.m.probes.WithLabelValues("failed").Inc()
		n.mu.Lock()
		missed := 0
		if m := n.members[u]; m != nil {
			m.missed++
			missed = m.missed
		}
		n.mu.Unlock()
		if missed >= probesToDown || errors.Is(err, syscall.ECONNREFUSED) {
			n.markDown(u, fmt.Errorf("probe: %w", err))
		}
		return
	}
	n.m.probes.WithLabelValues("ok").Inc()
	n.mu.Lock()
	source := "static"
	if m := n.members[u]; m != nil {
		source = m.info.Source
	}
	n.mu.Unlock()
	info.URL = u
	n.learn(info, source)
}

// dnsLoop resolves PeersDNS every DNSInterval: each address is a node, at
// this node's scheme and the name's port (or this node's).
func (n *Node) dnsLoop() {
	t := time.NewTicker(n.cfg.DNSInterval)
	defer t.Stop()
	for {
		n.resolve()
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

func (n *Node) resolve() {
	host, port, err := net.SplitHostPort(n.cfg.PeersDNS)
	if err != nil {
		host = n.cfg.PeersDNS
		su, _ := url.Parse(n.cfg.URL)
		port = su.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[su.Scheme]
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ProbeTimeout)
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	cancel()
	if err != nil {
		n.m.dnsLookups.WithLabelValues("failed").Inc()
		n.log.Warn("--peers-dns: lookup failed; keeping the members found before", "name", host, "err", err)
		return
	}
	n.m.dnsLookups.WithLabelValues("ok").Inc()
	scheme := n.cfg.URL[:strings.Index(n.cfg.URL, "://")]
	found := map[string]bool{}
	for _, a := range addrs {
		found[scheme+"://"+net.JoinHostPort(a, port)] = true
	}
	n.mu.Lock()
	changed := false
	for u := range found {
		if u != n.cfg.URL && n.members[u] == nil {
			n.members[u] = &member{info: api.ClusterMember{URL: u, State: api.MemberUnknown, Source: "dns"}}
		}
	}
	for u, m := range n.members {
		if m.info.Source == "dns" && !found[u] {
			delete(n.members, u) // gone from DNS: the pod went away
			changed = true
		}
	}
	if changed {
		n.rebuild()
	}
	n.mu.Unlock()
}

// startGossip joins the gossip: members it finds are probed like any
// other, and one it declares dead is down at once.
func (n *Node) startGossip() error {
	host, portText, err := net.SplitHostPort(n.cfg.GossipListen)
	if err != nil {
		return fmt.Errorf("cluster: --gossip-listen %q: %w", n.cfg.GossipListen, err)
	}
	port, _ := strconv.Atoi(portText)
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.ID
	mc.BindAddr, mc.BindPort = host, port
	if ah, ap, err := net.SplitHostPort(n.cfg.GossipAdvertise); err == nil {
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	if n.cfg.Secret != "" {
		mc.SecretKey = gossipKey(n.cfg.Secret)
	}
	meta, _ := json.Marshal(n.self.info)
	mc.Delegate = gossipMeta(meta)
	mc.Events = &gossipEvents{n: n}
	mc.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("cluster: gossip on %s: %w", n.cfg.GossipListen, err)
	}
	n.gossip = ml
	if len(n.cfg.Join) > 0 {
		if _, err := ml.Join(n.cfg.Join); err != nil {
			// The others may not be up yet: they join this node when they
			// start, or a later probe finds them.
			n.log.Warn("gossip: joined none of --join yet", "join", strings.Join(n.cfg.Join, ","), "err", err)
		}
	}
	return nil
}

// gossipMeta is the node's metadata in the gossip: its ClusterMember.
type gossipMeta []byte

func (g gossipMeta) NodeMeta(limit int) []byte {
	if len(g) > limit {
		return nil
	}
	return g
}
func (gossipMeta) NotifyMsg([]byte)                {}
func (gossipMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (gossipMeta) LocalState(bool) []byte          { return nil }
func (gossipMeta) MergeRemoteState([]byte, bool)   {}

// gossipEvents feeds the gossip's view into the members.
type gossipEvents struct{ n *Node }

func (g *gossipEvents) NotifyJoin(node *memberlist.Node) { g.update(node) }
func (g *gossipEvents) NotifyUpdate(node *memberlist.Node) {
	g.update(node)
}
func (g *gossipEvents) NotifyLeave(node *memberlist.Node) {
	var info api.ClusterMember
	if json.Unmarshal(node.Meta, &info) != nil {
		return
	}
	if u, err := normalURL(info.URL); err == nil {
		g.n.markDown(u, fmt.Errorf("gossip: %s left or is dead", node.Name))
	}
}

func (g *gossipEvents) update(node *memberlist.Node) {
	var info api.ClusterMember
	if json.Unmarshal(node.Meta, &info) != nil || info.ID == g.n.cfg.ID {
		return
	}
	g.n.learn(info, "gossip")
}

func sortMembers(ms []api.ClusterMember) {
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].ID != ms[j].ID {
			return ms[i].ID < ms[j].ID
		}
		return ms[i].URL < ms[j].URL
	})
}
