package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/grpcapi"
	"github.com/chunkd/chunkd/httpapi"
)

// Routes returns the cluster's HTTP routes over c: GET /v1/cluster (any
// token), a database's routing table (a token for the database), and the
// peer routes, open to the guard (a peer has no token) and refused by
// their handlers to anyone but a peer.
func (n *Node) Routes(c *cache.Cache) []httpapi.Route {
	rt := &routeTables{c: c, byDB: map[string]*routeEntry{}}
	return []httpapi.Route{
		{Pattern: api.PatternCluster, Handler: http.HandlerFunc(n.serveInfo), Need: auth.AnyToken, Metric: "http_cluster"},
		{Pattern: api.PatternClusterFiles, Handler: http.HandlerFunc(rt.serve), Need: auth.DBToken, Metric: "http_cluster_files"},
		{Pattern: "POST " + pathHello, Handler: http.HandlerFunc(n.serveHello), Need: auth.Open, Metric: "http_cluster_hello"},
		{Pattern: "GET " + pathRead, Handler: &peerReads{n: n, c: c}, Need: auth.Open, Metric: "http_cluster_read"},
	}
}

func (n *Node) serveInfo(w http.ResponseWriter, _ *http.Request) { httpapi.WriteJSON(w, n.Info()) }

// serveHello answers a peer's probe with this node's own ClusterMember,
// and learns the peer from the one it sent.
func (n *Node) serveHello(w http.ResponseWriter, r *http.Request) {
	if err := n.checkPeer(r); err != nil {
		api.WriteError(w, http.StatusForbidden, err.Error())
		return
	}
	var them api.ClusterMember
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&them); err != nil {
		api.WriteError(w, http.StatusBadRequest, "hello: "+err.Error())
		return
	}
	n.learn(them, "hello")
	httpapi.WriteJSON(w, n.self.info)
}

// peerReads answers a peer's read of a table file this node owns.
type peerReads struct {
	n *Node
	c *cache.Cache
}

func (p *peerReads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.n
	if err := n.checkPeer(r); err != nil {
		n.m.served.WithLabelValues("refused").Inc()
		api.WriteError(w, http.StatusForbidden, err.Error())
		return
	}
	q := r.URL.Query()
	key := q.Get("key")
	off, err1 := strconv.ParseInt(q.Get("off"), 10, 64)
	size, err2 := strconv.ParseInt(q.Get("n"), 10, 64)
	if _, _, err := cache.SplitKey(key); err != nil || err1 != nil || err2 != nil || off < 0 || size < 0 {
		api.WriteError(w, http.StatusBadRequest, fmt.Sprintf("want key (a table file's store key), off and n; got %q", r.URL.RawQuery))
		return
	}
	if !n.Owns(key) {
		// Views differ for a moment (a member just joined or left): the
		// asker reads the store rather than this node forwarding again.
		n.m.served.WithLabelValues("misdirected").Inc()
		api.WriteError(w, http.StatusMisdirectedRequest, fmt.Sprintf("node %s does not own %s", n.cfg.ID, key))
		return
	}
	w.Header().Set("Content-Type", frameType)
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w, rc: http.NewResponseController(w)}
	if fw.frame(frameKeep, nil) != nil { // the first sign of life, before any work
		return
	}
	stop := fw.keepAlive(n.cfg.HedgeAfter / 4)
	err := p.copy(r.Context(), fw, key, off, size)
	stop()
	if err != nil {
		n.m.served.WithLabelValues("failed").Inc()
		if r.Context().Err() == nil {
			n.log.Warn("a peer's read failed", "key", key, "off", off, "n", size, "err", err)
		}
		fw.frame(frameError, []byte(err.Error()))
		return
	}
	n.m.served.WithLabelValues("ok").Inc()
	n.m.servedBytes.Add(float64(size))
	fw.frame(frameEnd, nil)
}

func (p *peerReads) copy(ctx context.Context, w io.Writer, key string, off, size int64) error {
	f, err := p.c.OpenKey(ctx, key)
	if err != nil {
		return err
	}
	_, err = f.Copy(ctx, w, off, size)
	return err
}

// routeTables builds and keeps each database's routing table, one per
// manifest version.
type routeTables struct {
	c    *cache.Cache
	mu   sync.Mutex
	byDB map[string]*routeEntry
}

type routeEntry struct {
	version string
	built   time.Time
	body    []byte
}

func (rt *routeTables) serve(w http.ResponseWriter, r *http.Request) {
	db := r.PathValue("db")
	body, err := rt.table(r.Context(), db)
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.Write(body)
}

func (rt *routeTables) table(ctx context.Context, db string) ([]byte, error) {
	version, err := rt.c.ManifestVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	e := rt.byDB[db]
	rt.mu.Unlock()
	if e != nil && version != "" && e.version == version {
		return e.body, nil
	}
	root, files, err := rt.c.FileKeys(ctx, db)
	if err != nil {
		return nil, err
	}
	t := api.RouteTable{Root: root.String(), Files: make([]api.RouteFile, len(files))}
	for i, f := range files {
		b := make([]byte, 8*len(f.Prefixes))
		for j, p := range f.Prefixes {
			binary.BigEndian.PutUint64(b[8*j:], p)
		}
		t.Files[i] = api.RouteFile{Name: f.Name, Key: f.Key, Size: f.Size, Prefixes: b}
	}
	body, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	rt.byDB[db] = &routeEntry{version: version, built: time.Now(), body: body}
	rt.mu.Unlock()
	return body, nil
}

// GRPC returns the cluster's gRPC service (chunkd.v1.Cluster), for any
// token.
func (n *Node) GRPC() grpcapi.Service {
	return grpcapi.Service{Desc: &chunkpb.Cluster_ServiceDesc, Impl: &grpcCluster{n: n}, Need: auth.AnyToken}
}

type grpcCluster struct {
	chunkpb.UnimplementedClusterServer
	n *Node
}

func (g *grpcCluster) GetCluster(context.Context, *chunkpb.GetClusterRequest) (*chunkpb.GetClusterResponse, error) {
	info := g.n.Info()
	out := &chunkpb.GetClusterResponse{Self: info.Self, Placement: info.Placement}
	for _, m := range info.Members {
		out.Members = append(out.Members, &chunkpb.ClusterMember{Id: m.ID, Url: m.URL, Grpc: m.GRPC, Weight: m.Weight,
			State: m.State, Source: m.Source, LastSeenMs: m.LastSeenMS, Error: m.Error})
	}
	return out, nil
}

var _ = errors.New
