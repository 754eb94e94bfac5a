// Package httpapi serves the cache service's HTTP API (package api
// documents its routes and formats) over a cache.Cache: the core's routes
// (chunks, databases, roots, the cache's view of itself), the routes that
// features plug in (Route: SQLite's open sets and page images, the Dolt
// remote's downloads), /metrics, /healthz and /readyz. Every route carries
// its own access rule (an auth.Need), checked by the guard after the
// request is routed, so this package names no route of any feature and
// the guard none at all.
//
// A read of one chunk, the most frequent request, is routed by hand where
// the mux would route it to api.PatternChunk, once a request, and the
// route's values (database, address) are passed down to its handler; on
// a plain HTTP/1.1 connection it is answered on the connection's own
// goroutine (HTTP1, ServeFast). A feature's route may answer some of its
// GETs that way too (Route.Fast: the query API's results kept in memory).
//
// The files: api.go (the API and its routing), routes.go (the core's
// routes), answer.go (writing answers and errors, metrics of each route),
// http1.go and poll_*.go (the fast path).
package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/reqmetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Route is one route of the API, served by the core or by a feature.
type Route struct {
	Pattern string // a ServeMux pattern
	Handler http.Handler
	// Need is who may call it; auth.DBToken reads the database from the
	// pattern's {db}. A route without one (the zero Need) is refused at
	// New.
	Need auth.Need
	// Metric names the route in chunkd_requests_total and its latency
	// ("http_open_set"); "" when the handler counts its own requests (the
	// Dolt remote's downloads).
	Metric string
	// Fast, if set, answers on the fast path (HTTP1) the route's GETs
	// that it can answer at once.
	Fast *FastRoute
}

// FastRoute answers some of a route's GETs on the fast path (HTTP1): on
// the connection's own goroutine, without net/http's per-request one, as
// reads of one chunk are. What it does not answer, the route's Handler
// does.
type FastRoute struct {
	// Match reports whether r is a request of the route, routed by hand
	// (the mux would route it to the route's pattern), and the database
	// it names (for the route's access rule).
	Match func(r *http.Request) (db string, ok bool)
	// Serve answers r if it can at once (small, and ready: a result kept
	// in memory), as the route's Handler would, and reports whether it
	// did; when it does not, it must have written nothing. r's access
	// has been checked; its path values are not set (Match's db is).
	Serve func(w http.ResponseWriter, r *http.Request, db string) bool
}

// Config configures an API.
type Config struct {
	Cache *cache.Cache
	// Guard checks tokens; nil serves every route to everyone.
	Guard *auth.Guard
	// Registry gets the request metrics; Gather is what /metrics serves.
	Registry prometheus.Registerer
	Gather   prometheus.Gatherer
	// ClientTimeout is the longest a route waits on a client: to send a
	// request's body, or to take each part of an answer (default 30 s). A
	// client that stalls longer is cut off; it holds no cached file
	// meanwhile (files are released before answers are written).
	ClientTimeout time.Duration
	// Routes are the features' routes.
	Routes []Route
}

// API is the HTTP API: an http.Handler, and the fast path's ServeFast.
type API struct {
	c       *cache.Cache
	guard   *auth.Guard
	timeout time.Duration
	req     *reqmetrics.Requests
	mux     *http.ServeMux
	// chunk serves reads of one chunk routed by hand; nil when a feature's
	// route could outrank api.PatternChunk, and the mux routes them.
	chunk *chunkHandler
	// fast are the routes with a fast path of their own.
	fast []fastRoute
}

// fastRoute is a route's FastRoute, with what checks and counts its
// requests.
type fastRoute struct {
	*FastRoute
	need    auth.Need
	pattern string
	o       *observer
}

// New returns the API over cfg.Cache. It panics if a route has no access
// rule: a route cannot be served before it says who may call it.
func New(cfg Config) *API {
	if cfg.ClientTimeout <= 0 {
		cfg.ClientTimeout = 30 * time.Second
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Gather == nil {
		cfg.Gather = prometheus.NewRegistry()
	}
	a := &API{c: cfg.Cache, guard: cfg.Guard, timeout: cfg.ClientTimeout, req: reqmetrics.On(cfg.Registry), mux: http.NewServeMux()}
	a.chunk = &chunkHandler{a: a, o: a.observer("http_get_chunk")}
	routes := append(a.coreRoutes(),
		Route{Pattern: "GET /metrics", Handler: promhttp.HandlerFor(cfg.Gather, promhttp.HandlerOpts{}), Need: auth.MetricsToken},
		Route{Pattern: "GET /healthz", Handler: http.HandlerFunc(healthz), Need: auth.Open},
		Route{Pattern: "GET /readyz", Handler: http.HandlerFunc(a.readyz), Need: auth.Open},
	)
	for _, r := range cfg.Routes {
		if mayOutrankChunk(r.Pattern) {
			a.chunk = nil // leave every match to the mux
		}
	}
	for _, r := range append(routes, cfg.Routes...) {
		if !r.Need.Valid() {
			panic("httpapi: route " + r.Pattern + " has no access rule (Route.Need)")
		}
		a.mux.Handle(r.Pattern, a.wrap(r))
		if r.Fast != nil {
			fr := fastRoute{FastRoute: r.Fast, need: r.Need, pattern: r.Pattern}
			if r.Metric != "" {
				fr.o = a.observer(r.Metric)
			}
			a.fast = append(a.fast, fr)
		}
	}
	return a
}

// wrap is what every route's handler runs in: the guard's check, the
// client's deadlines, and the route's metrics.
func (a *API) wrap(r Route) http.Handler {
	var o *observer
	if r.Metric != "" {
		o = a.observer(r.Metric)
	}
	h := r.Handler
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if o != nil {
			sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
			defer o.done(time.Now(), sw)
			w = sw
		}
		ctx, ok := a.allow(w, req, r.Need, req.PathValue("db"), r.Pattern)
		if !ok {
			return
		}
		if ctx != nil {
			req = req.WithContext(ctx)
		}
		rc := http.NewResponseController(w)
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			rc.SetReadDeadline(time.Now().Add(a.timeout))
		}
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, timeout: a.timeout}, req)
	})
}

// allow checks a request that needs n, naming database db, against the
// guard. It answers a refusal itself (ok false); else it returns the
// context carrying the token's grant, nil when there is none to carry.
func (a *API) allow(w http.ResponseWriter, r *http.Request, n auth.Need, db, route string) (_ context.Context, ok bool) {
	if a.guard == nil {
		return nil, true
	}
	g, err := a.guard.Check(n, auth.BearerToken(r.Header.Get("Authorization")), db, route, r.RemoteAddr)
	switch err {
	case nil:
	case auth.ErrUnauthenticated:
		w.Header().Set("WWW-Authenticate", `Bearer realm="chunkd"`)
		api.WriteError(w, http.StatusUnauthorized, err.Error())
		return nil, false
	default:
		api.WriteError(w, http.StatusForbidden, err.Error())
		return nil, false
	}
	if g == nil {
		return nil, true
	}
	return auth.NewContext(r.Context(), g), true
}

func healthz(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }

// readyz says whether the service can serve, and how (degraded: the store
// cannot be read, and reads are served from the files on disk).
func (a *API) readyz(w http.ResponseWriter, _ *http.Request) {
	ok, note := a.c.Ready()
	if !ok {
		api.WriteError(w, http.StatusServiceUnavailable, note)
		return
	}
	if note != "" {
		w.Write([]byte("ready, degraded: " + note + "\n"))
		return
	}
	w.Write([]byte("ready\n"))
}

// ServeHTTP answers r: a read of one chunk routed by hand, anything else
// by the mux, whose own answers for requests that take no route (404,
// 405) carry an api.Error body like every other error.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.ServeFast(w, r) {
		return
	}
	if _, pattern := a.mux.Handler(r); pattern == "" {
		a.mux.ServeHTTP(&noRouteWriter{ResponseWriter: w, r: r}, r)
		return
	}
	a.mux.ServeHTTP(w, r)
}

// ServeFast answers r if it is a read of one chunk that the API routes by
// hand, and reports whether it did; when it did not, it wrote nothing
// (HTTP1.Fast). The route is worked out once and its database and
// address passed down: the fast path, the guard and the mux each asking
// for a request's route (a mux lookup cleans the path and allocates) cost
// about 2 µs of the 26 µs of CPU a memory hit cost the service at eight
// clients, where routing by hand costs 21-24 ns (BenchmarkChunkRoute).
func (a *API) ServeFast(w http.ResponseWriter, r *http.Request) bool {
	if a.chunk != nil {
		if db, address, ok := chunkRoute(r); ok {
			r.Pattern = api.PatternChunk
			a.chunk.serve(w, r, db, address)
			return true
		}
	}
	if r.Method != http.MethodGet {
		return false
	}
	for i := range a.fast {
		if db, ok := a.fast[i].Match(r); ok {
			return a.serveFastRoute(&a.fast[i], w, r, db)
		}
	}
	return false
}

// serveFastRoute offers r, a request of fr's route naming database db,
// to its fast path once its access is checked (a refusal is answered
// here), counting it in the route's metrics if it was answered.
func (a *API) serveFastRoute(fr *fastRoute, w http.ResponseWriter, r *http.Request, db string) bool {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	ctx, ok := a.allow(sw, r, fr.need, db, fr.pattern)
	if ok {
		if ctx != nil {
			r = r.WithContext(ctx)
		}
		r.Pattern = fr.pattern
		if !fr.Serve(sw, r, db) {
			return false
		}
	}
	if fr.o != nil {
		fr.o.done(start, sw)
	}
	return true
}

// chunkRoute returns the database and address of a GET of one chunk
// (api.PatternChunk) when r's path is plain enough to match by hand: no
// escapes, no empty, "." or ".." segment, nothing after the address.
// Anything else (and a HEAD) is left to the mux, which routes it the same
// way or answers as it does.
func chunkRoute(r *http.Request) (db, address string, ok bool) {
	if r.Method != http.MethodGet || r.URL.RawPath != "" {
		return "", "", false
	}
	p, ok := strings.CutPrefix(r.URL.Path, api.DBsPrefix)
	if !ok {
		return "", "", false
	}
	db, rest, ok := strings.Cut(p, "/")
	if !ok {
		return "", "", false
	}
	address, ok = strings.CutPrefix(rest, "chunks/")
	if !ok || !plainSegment(db) || !plainSegment(address) || strings.Contains(address, "/") {
		return "", "", false
	}
	return db, address, true
}

func plainSegment(s string) bool { return s != "" && s != "." && s != ".." }

// mayOutrankChunk reports whether the mux could route some chunk read,
// GET /v1/dbs/DB/chunks/ADDRESS with plain segments, to pattern
// ("[METHOD ][HOST]/PATH") rather than to api.PatternChunk: a pattern for
// a host outranks any without; a path pattern can only if its segments
// can match a chunk path's (a literal where the chunk's pattern has a
// wildcard is more specific; {x...} or a trailing slash matches the rest).
// Every other route under /v1/dbs/ (the query API's, the page images')
// leaves the fast path on; before this looked at segments, any of them
// turned it off for every chunk read of chunkd serve (its CPU per
// request at 8 clients was 80-103 us against 46-55 with the fast path).
func mayOutrankChunk(pattern string) bool {
	method, path := "", pattern
	if m, p, ok := strings.Cut(pattern, " "); ok {
		method, path = m, strings.TrimLeft(p, " \t")
	}
	if method != "" && method != http.MethodGet {
		return false // a GET is routed to a GET pattern (or one with no method) only
	}
	if !strings.HasPrefix(path, "/") {
		return true // a host's pattern
	}
	chunk := []string{"v1", "dbs", "", "chunks", ""} // "": any plain segment
	segs := strings.Split(path[1:], "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		if last && seg == "" {
			return true // a trailing slash: the rest of any path below
		}
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}") {
			return true
		}
		if i >= len(chunk) || seg == "{$}" {
			return false
		}
		if strings.HasPrefix(seg, "{") || chunk[i] == "" {
			continue // a wildcard, or a literal where the chunk's has one
		}
		if seg != chunk[i] {
			return false
		}
	}
	return len(segs) == len(chunk)
}

// noRouteWriter replaces the mux's plain-text error body with an api.Error.
type noRouteWriter struct {
	http.ResponseWriter
	r       *http.Request
	replace bool
}

func (w *noRouteWriter) WriteHeader(code int) {
	if code < 400 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.replace = true
	msg := "no such endpoint " + w.r.Method + " " + w.r.URL.Path
	if code == http.StatusMethodNotAllowed {
		msg = "method " + w.r.Method + " not allowed on " + w.r.URL.Path + " (allowed: " + w.Header().Get("Allow") + ")"
	}
	api.WriteError(w.ResponseWriter, code, msg)
}

func (w *noRouteWriter) Write(b []byte) (int, error) {
	if w.replace {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
