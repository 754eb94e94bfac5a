package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cluster/ring"
	"github.com/chunkd/chunkd/internal/spin"
)

// ringService reads through a cluster of cache services (package
// cluster): each chunk from the node that owns its table file, by the
// placement the nodes use (cluster/ring), so a read costs the client one
// hop and the cluster none. It learns the members from the service it was
// given (GET /v1/cluster) and the database's files from its routing table
// (GET /v1/cluster/dbs/{db}/files), once an answer of that service says
// it is in a cluster (api.HeaderCluster); until it has both, and for a chunk
// no file of the table holds, it asks that service, which forwards. A
// node that fails to answer is skipped (1 s, doubling to 30 s) for the
// next in the chunk's order; a node silent for memberHedge is given up
// on for the next.
type ringService struct {
	entry *httpService // the service given (Options.Service)
	db    string
	auth  serviceAuth
	sp    *spin.Policy
	conc  int
	log   func(msg string, args ...any)

	mu      sync.Mutex
	members map[string]*ringMember // by id
	view    *ring.Ring             // members up, as the entry reported them
	files   *routeFiles            // nil until loaded
	loaded  time.Time              // when files was loaded
	misses  atomic.Int64           // chunks no file of files held, since loaded

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	routed    atomic.Int64 // requests sent to an owner
}

// memberHedge is how long a read waits for a node before it asks the next
// in the chunk's order (when there is one).
const memberHedge = 250 * time.Millisecond

// clusterRefresh is how often the client asks for the members again.
const clusterRefresh = 5 * time.Second

type ringMember struct {
	id  string
	svc *httpService
	bo  backoff
}

// routeFiles is a routing table: which file holds an address prefix.
type routeFiles struct {
	root  string
	keys  []string // file keys, in search order
	pfx   []uint64 // every prefix of every file, sorted
	owner []int32  // the file of pfx[i] (the first in search order)
}

func newRingService(entry *httpService, db string, auth serviceAuth, sp *spin.Policy, conc int, log func(string, ...any)) *ringService {
	r := &ringService{entry: entry, db: db, auth: auth, sp: sp, conc: conc, log: log, members: map[string]*ringMember{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	// The members are asked for once an answer of the service says it is
	// in a cluster: a service alone is asked nothing more than before.
	entry.onCluster(func() {
		r.startOnce.Do(func() { r.wg.Go(r.keepFresh) })
	})
	return r
}

// keepFresh learns the members, and the database's files, now and every
// clusterRefresh.
func (r *ringService) keepFresh() {
	t := time.NewTicker(clusterRefresh)
	defer t.Stop()
	for {
		if err := r.refresh(r.ctx); err != nil && r.ctx.Err() == nil {
			if errors.Is(err, errNotCluster) {
				return // a service alone: every read goes to it, as always
			}
			r.log("cluster: not routing by the placement for now", "service", r.entry.base, "err", err)
		}
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *ringService) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var info api.ClusterInfo
	if err := r.entry.getJSON(ctx, api.ClusterPath, &info); err != nil {
		return err
	}
	if info.Placement != ring.Version {
		return fmt.Errorf("the cluster places files by %q, this client knows %q", info.Placement, ring.Version)
	}
	var up []ring.Member
	r.mu.Lock()
	for _, m := range info.Members {
		if m.State != api.MemberUp {
			continue
		}
		rm := r.members[m.ID]
		if rm == nil || rm.svc.base != m.URL {
			u, err := url.Parse(m.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
				continue
			}
			if rm != nil {
				rm.svc.close()
			}
			tlsCfg := r.entry.tr.TLSClientConfig
			rm = &ringMember{id: m.ID, svc: newHTTPService(u, r.db, r.conc, tlsCfg, r.auth.token, r.sp), bo: backoff{min: minBackoff, max: maxBackoff}}
			r.members[m.ID] = rm
		}
		up = append(up, ring.Member{ID: m.ID, Weight: float64(m.Weight)})
	}
	if len(up) > 1 {
		r.view = ring.New(up)
	} else {
		r.view = nil
	}
	stale := r.files == nil || (r.misses.Load() > 0 && time.Since(r.loaded) > clusterRefresh)
	r.mu.Unlock()
	if len(up) <= 1 || !stale {
		return nil
	}
	var t api.RouteTable
	if err := r.entry.getJSON(ctx, api.ClusterFilesPath(r.db), &t); err != nil {
		return fmt.Errorf("routing table: %w", err)
	}
	files := newRouteFiles(t)
	r.mu.Lock()
	r.files, r.loaded = files, time.Now()
	r.misses.Store(0)
	r.mu.Unlock()
	return nil
}

func newRouteFiles(t api.RouteTable) *routeFiles {
	f := &routeFiles{root: t.Root}
	type pf struct {
		p    uint64
		file int32
	}
	var all []pf
	for i, rf := range t.Files {
		f.keys = append(f.keys, rf.Key)
		for j := 0; j+8 <= len(rf.Prefixes); j += 8 {
			all = append(all, pf{binary.BigEndian.Uint64(rf.Prefixes[j:]), int32(i)})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].p < all[j].p })
	for i, x := range all {
		if i > 0 && all[i-1].p == x.p {
			continue // the first file in search order holds it
		}
		f.pfx = append(f.pfx, x.p)
		f.owner = append(f.owner, x.file)
	}
	return f
}

// key returns the store key of the file holding a, or "".
func (f *routeFiles) key(a addr.Addr) string {
	p := binary.BigEndian.Uint64(a[:8])
	i := sort.Search(len(f.pfx), func(i int) bool { return f.pfx[i] >= p })
	if i < len(f.pfx) && f.pfx[i] == p {
		return f.keys[f.owner[i]]
	}
	return ""
}

// order returns the services to ask for a, best first: the owner of its
// file and the next by the placement (nodes being backed off from last),
// then the entry; just the entry when the client cannot route.
func (r *ringService) order(a addr.Addr) []*httpService {
	r.mu.Lock()
	view, files := r.view, r.files
	r.mu.Unlock()
	if view == nil || files == nil {
		return []*httpService{r.entry}
	}
	key := files.key(a)
	if key == "" {
		r.misses.Add(1)
		return []*httpService{r.entry}
	}
	var ok, later []*httpService
	r.mu.Lock()
	for _, id := range view.Order(key) {
		if m := r.members[id]; m != nil {
			if m.bo.allow() {
				ok = append(ok, m.svc)
			} else {
				later = append(later, m.svc)
			}
		}
	}
	r.mu.Unlock()
	return append(append(ok, later...), r.entry)
}

// failed backs off from the member serving svc after a connection failure.
func (r *ringService) failed(svc *httpService, err error) {
	var se *serviceError
	if !errors.As(err, &se) || !se.conn {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.svc == svc {
			if d, started := m.bo.fail(); started {
				r.log("cluster node unreachable; reading through the others", "node", m.id, "service", svc.base, "retry_in", d, "err", err)
			}
		}
	}
}

func (r *ringService) succeeded(svc *httpService) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.svc == svc {
			m.bo.succeed()
		}
	}
}

func (r *ringService) get(ctx context.Context, a addr.Addr) (reply, error) {
	cands := dedupe(r.order(a))
	var err error
	for i, svc := range cands {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(cands)-1 {
			actx, cancel = context.WithTimeout(ctx, memberHedge)
		}
		var rep reply
		rep, err = svc.get(actx, a)
		cancel()
		if err == nil {
			if svc != r.entry {
				r.routed.Add(1)
			}
			r.succeeded(svc)
			return rep, nil
		}
		if ctx.Err() != nil {
			return reply{}, err
		}
		r.failed(svc, err)
	}
	return reply{}, err
}

// getMany asks each chunk's owner for it, the owners at once; chunks an
// owner does not answer are asked of the next in their order.
func (r *ringService) getMany(ctx context.Context, as []addr.Addr, fn func(j int, rep reply)) error {
	type group struct {
		cands []*httpService
		js    []int
	}
	groups := map[*httpService]*group{}
	var order []*httpService
	for j, a := range as {
		cands := dedupe(r.order(a))
		g := groups[cands[0]]
		if g == nil {
			g = &group{cands: cands}
			groups[cands[0]] = g
			order = append(order, cands[0])
		}
		g.js = append(g.js, j)
	}
	var mu sync.Mutex // fn is called from one goroutine at a time
	answered := make([]bool, len(as))
	var wg sync.WaitGroup
	errs := make([]error, len(order))
	for gi, head := range order {
		g := groups[head]
		wg.Go(func() {
			left := g.js
			for i, svc := range g.cands {
				sub := make([]addr.Addr, len(left))
				for k, j := range left {
					sub[k] = as[j]
				}
				actx, cancel := ctx, context.CancelFunc(func() {})
				if i < len(g.cands)-1 {
					actx, cancel = context.WithTimeout(ctx, memberHedge+time.Duration(len(sub))*time.Millisecond)
				}
				err := svc.getMany(actx, sub, func(k int, rep reply) {
					mu.Lock()
					defer mu.Unlock()
					if !answered[left[k]] {
						answered[left[k]] = true
						fn(left[k], rep)
					}
				})
				cancel()
				if err == nil {
					if svc != r.entry {
						r.routed.Add(int64(len(sub)))
					}
					r.succeeded(svc)
					return
				}
				errs[gi] = err
				if ctx.Err() != nil {
					return
				}
				r.failed(svc, err)
				mu.Lock()
				var rest []int
				for _, j := range left {
					if !answered[j] {
						rest = append(rest, j)
					}
				}
				mu.Unlock()
				if left = rest; len(left) == 0 {
					errs[gi] = nil
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func dedupe(ss []*httpService) []*httpService {
	out := ss[:0:0]
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s.base] {
			seen[s.base] = true
			out = append(out, s)
		}
	}
	return out
}

func (r *ringService) root(ctx context.Context, fresh bool) (addr.Addr, error) {
	return r.entry.root(ctx, fresh)
}

func (r *ringService) close() error {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		m.svc.close()
	}
	return r.entry.close()
}

func (r *ringService) inline() bool { return r.entry.inline() }

func (r *ringService) String() string { return r.entry.String() }

// errNotCluster: the service is not a node of a cluster.
var errNotCluster = errors.New("not a cluster")

// getJSON GETs path of the service and decodes its JSON answer.
func (h *httpService) getJSON(ctx context.Context, path string, v any) error {
	req, err := h.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("cache service %s: %w", h.base, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode == http.StatusNotFound && path == api.ClusterPath {
		return errNotCluster
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(h.base, resp)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<30)).Decode(v)
}

// httpOf returns the HTTP service a client talks to (the entry of a
// cluster), for what only the service given answers: its host, its page
// images and open sets.
func httpOf(s service) (*httpService, bool) {
	switch s := s.(type) {
	case *httpService:
		return s, true
	case *ringService:
		return s.entry, true
	}
	return nil, false
}
