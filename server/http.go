package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewHandler returns the service's HTTP API, with /metrics (from gather),
// /healthz, /readyz and routes. A path it does not serve is a 404, a method a
// path does not take a 405 with an Allow header, both with an api.Error
// body. Auth.HTTP wraps it to require tokens.
func NewHandler(c *Cache, gather prometheus.Gatherer, routes ...Route) Router {
	h := &httpAPI{c: c}
	mux := ruledMux{http.NewServeMux()} // every route needs its access rule (auth.go)
	chunk := &chunkHandler{h: h, o: h.observer("http_get_chunk")}
	am := apiMux{ServeMux: mux.ServeMux, chunk: chunk}
	for _, r := range routes {
		mux.Handle(r.Pattern, r.Handler)
		if mayOutrankChunk(r.Pattern) {
			am.chunk = nil // leave every match to the mux
		}
	}
	for _, e := range []struct {
		pattern, name string
		fn            http.HandlerFunc
	}{
		{api.PatternChunks, "http_get_chunks", h.getChunks},
		{api.PatternDB, "http_db_info", h.dbInfo}, {api.PatternDBs, "http_list_dbs", h.listDBs},
		{api.PatternCache, "http_cache", h.cacheSummary}, {api.PatternDropCache, "http_drop_cache", h.dropCache},
		{api.PatternRoot, "http_root", h.root}, {api.PatternOpenSet, "http_open_set", h.openSet},
		{api.PatternVersionImage, "http_version_image", h.versionImage},
		{api.PatternImages, "http_register_image", h.registerImage}, {api.PatternImage, "http_get_image", h.getImage},
		{api.PatternImageFill, "http_fill_image", h.fillImage},
	} {
		mux.HandleFunc(e.pattern, h.observe(e.name, e.fn))
	}
	mux.Handle(api.PatternChunk, chunk)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, note := c.Ready()
		if !ok {
			api.WriteError(w, http.StatusServiceUnavailable, note)
			return
		}
		if note != "" {
			w.Write([]byte("ready, degraded: " + note + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	return am
}

// Route is one more route for NewHandler, served by another package (the
// Dolt remote's downloads). Like every route, it needs its rule in
// httpAccess.
type Route struct {
	Pattern string // a ServeMux pattern
	Handler http.Handler
}

// apiMux is a ServeMux whose own answers for requests that take no route
// (404, 405) carry an api.Error body like every other error. A read of one
// chunk, the service's most frequent request, is routed by hand
// (chunkRoute) where the mux would route it to api.PatternChunk: the fast
// path, Auth and the mux itself each ask for a request's route, and three
// or four mux lookups (each cleaning the path and allocating) cost about
// 2 µs of the 26 µs of CPU a memory hit costs the service at eight clients.
// A read routed by hand goes to its handler with its database and address
// as arguments: its request has no path values (setting them allocates).
type apiMux struct {
	*http.ServeMux
	chunk *chunkHandler // PatternChunk's handler; nil: the mux routes it
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

// mayOutrankChunk reports whether the mux could route some chunk read to
// pattern ("[METHOD ][HOST]/PATH") rather than to api.PatternChunk: a
// pattern for a host outranks any without, and one more specific than
// the chunk's begins with its literal segments, /v1/dbs/.
func mayOutrankChunk(pattern string) bool {
	if _, p, ok := strings.Cut(pattern, " "); ok {
		pattern = strings.TrimLeft(p, " \t")
	}
	return !strings.HasPrefix(pattern, "/") || strings.HasPrefix(pattern, api.DBsPrefix)
}

// Handler names r's route, as the mux does.
func (m apiMux) Handler(r *http.Request) (http.Handler, string) {
	if m.chunk != nil {
		if _, _, ok := chunkRoute(r); ok {
			return m.chunk, api.PatternChunk
		}
	}
	return m.ServeMux.Handler(r)
}

func (m apiMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.chunk != nil {
		if db, address, ok := chunkRoute(r); ok {
			r.Pattern = api.PatternChunk
			m.chunk.serve(w, r, db, address)
			return
		}
	}
	if _, pattern := m.ServeMux.Handler(r); pattern == "" {
		m.ServeMux.ServeHTTP(&noRouteWriter{ResponseWriter: w, r: r}, r)
		return
	}
	m.ServeMux.ServeHTTP(w, r)
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

type httpAPI struct{ c *Cache }

// statusWriter remembers the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// observer counts and times the answers of one route (name) in the
// service's metrics.
type observer struct {
	c    *Cache
	name string
	lat  prometheus.Observer
	ok   prometheus.Counter // most answers: looked up once
}

func (h *httpAPI) observer(name string) *observer {
	m := h.c.metrics
	return &observer{c: h.c, name: name, lat: m.latency.WithLabelValues(name), ok: m.requests.WithLabelValues(name, "200")}
}

// done ends an answer begun at start, deferred by its handler: a batch
// that fails mid-stream (a client cut off, a store error after the
// headers) ends by aborting the connection, which done counts as
// "aborted" before the abort goes on.
func (o *observer) done(start time.Time, sw *statusWriter) {
	p := recover()
	o.lat.Observe(time.Since(start).Seconds())
	switch {
	case p != nil:
		o.c.metrics.requests.WithLabelValues(o.name, "aborted").Inc()
	case sw.code == http.StatusOK:
		o.ok.Inc()
	default:
		o.c.metrics.requests.WithLabelValues(o.name, strconv.Itoa(sw.code)).Inc()
	}
	if p != nil {
		panic(p)
	}
}

func (h *httpAPI) observe(name string, fn http.HandlerFunc) http.HandlerFunc {
	o := h.observer(name)
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer o.done(time.Now(), sw)
		fn(sw, r)
	}
}

func writeErr(w http.ResponseWriter, err error) {
	api.WriteError(w, statusOf(err), err.Error())
}

// chunkHandler answers a GET of one chunk (api.PatternChunk), routed by
// the mux (ServeHTTP) or by hand (serve).
type chunkHandler struct {
	h *httpAPI
	o *observer
}

func (ch *chunkHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch.serve(w, r, r.PathValue("db"), r.PathValue("address"))
}

func (ch *chunkHandler) serve(w http.ResponseWriter, r *http.Request, db, address string) {
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	defer ch.o.done(time.Now(), sw)
	a, err := addr.Parse(address)
	if err != nil {
		writeErr(sw, errorf(KindBadRequest, err, "bad chunk address"))
		return
	}
	res, err := ch.h.c.GetChunk(r.Context(), db, a)
	if err != nil {
		writeErr(sw, err)
		return
	}
	if !res.Found {
		api.WriteError(sw, http.StatusNotFound, "chunk "+a.String()+" not found in database "+strconv.Quote(db))
		return
	}
	hd := sw.Header()
	hd["Content-Type"] = binaryType // shared: a header map's values are only read once set
	hd["Content-Length"] = []string{strconv.Itoa(len(res.Data))}
	hd[api.HeaderTier] = tierValue(res.Tier)
	sw.Write(res.Data)
}

// binaryType and tierValues are header values the answers share
// (allocated once, not per answer).
var (
	binaryType = []string{api.ContentTypeBinary}
	tierValues = func() (v [api.TierStore + 1][]string) {
		for t := range v {
			v[t] = []string{api.Tier(t).String()}
		}
		return v
	}()
)

func tierValue(t api.Tier) []string {
	if int(t) < len(tierValues) {
		return tierValues[t]
	}
	return []string{t.String()}
}

func (h *httpAPI) getChunks(w http.ResponseWriter, r *http.Request) {
	rc := h.readDeadline(w)
	addrs, err := api.ReadAddresses(r.Body)
	if err != nil {
		kind := KindBadRequest
		if errors.Is(err, api.ErrBatchTooLarge) {
			kind = KindTooLarge
		}
		writeErr(w, errorf(kind, err, "bad batch"))
		return
	}
	db := r.PathValue("db")
	h.stream(w, r, rc, db, func(emit func(uint32, Result) error, flush func()) error {
		return h.c.GetChunks(r.Context(), db, addrs, func(i int, res Result) error { return emit(uint32(i), res) }, flush)
	})
}

// readDeadline gives the client ClientTimeout to send its request body,
// and returns the controller that sets the answer's write deadlines.
func (h *httpAPI) readDeadline(w http.ResponseWriter) *http.ResponseController {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(h.c.cfg.ClientTimeout))
	return rc
}

// stream answers with a frame stream that run writes (emit a frame; flush
// what is written so far). The database is loaded first, so a bad name
// is a clean 4xx rather than an error in the middle of a stream. The
// client has ClientTimeout to take each part of the answer (a stalled
// reader is cut off; files were released before the answer was written).
func (h *httpAPI) stream(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, db string, run func(emit func(uint32, Result) error, flush func()) error) {
	if _, err := h.c.database(r.Context(), db); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	bw := bufio.NewWriterSize(deadlineWriter{w, rc, h.c.cfg.ClientTimeout}, 64<<10)
	fw := api.NewFrameWriter(bw)
	err := run(func(i uint32, res Result) error {
		return fw.WriteFrame(i, res.Found, res.Tier, res.Data)
	}, func() {
		if bw.Flush() == nil {
			rc.Flush()
		}
	})
	if err != nil {
		// Headers are gone; cut the stream short so the client sees a
		// truncated frame stream rather than a silent partial answer.
		h.c.log.Warn("batch failed mid-stream", "db", db, "err", err)
		panic(http.ErrAbortHandler)
	}
	if err := fw.Flush(); err == nil {
		bw.Flush()
	}
}

// root answers a database's current root (api.PatternRoot).
func (h *httpAPI) root(w http.ResponseWriter, r *http.Request) {
	info, err := h.c.Root(r.Context(), r.PathValue("db"), r.URL.Query().Get("fresh") == "1")
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, info)
}

// queryRoot reads the root a query names (root=ROOT; none: the zero
// root), answering a 400 for a bad one.
func queryRoot(w http.ResponseWriter, q url.Values) (root addr.Addr, ok bool) {
	if v := q.Get("root"); v != "" {
		var err error
		if root, err = addr.Parse(v); err != nil {
			writeErr(w, errorf(KindBadRequest, err, "bad root"))
			return addr.Addr{}, false
		}
	}
	return root, true
}

// versionImage answers a chunkd SQLite version's page image
// (api.PatternVersionImage).
func (h *httpAPI) versionImage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root, ok := queryRoot(w, q)
	if !ok {
		return
	}
	vi, err := h.c.VersionImage(r.Context(), r.PathValue("db"), root, q.Get("fresh") == "1")
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, vi)
}

// openSet answers a chunkd SQLite version's open set (api.PatternOpenSet).
func (h *httpAPI) openSet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root, ok := queryRoot(w, q)
	if !ok {
		return
	}
	pages := q.Get("pages")
	if pages != "" && pages != "0" && pages != "1" {
		writeErr(w, errorf(KindBadRequest, nil, "bad pages %q: 0 (the root chunk and page map only) or 1 (with page 1 and the interior pages, the default)", pages))
		return
	}
	root, frames, current, err := h.c.OpenSet(r.Context(), r.PathValue("db"), root, q.Get("fresh") == "1", pages != "0")
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set(api.HeaderRoot, root.String())
	if current != nil {
		api.SetRootFreshness(w.Header(), *current)
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.Header().Set("Content-Length", strconv.Itoa(len(frames)))
	// Written whole (net/http passes a large write straight to the
	// connection), in parts that each get the client's timeout.
	dw := deadlineWriter{w, http.NewResponseController(w), h.c.cfg.ClientTimeout}
	for len(frames) > 0 {
		n := min(len(frames), 256<<10)
		if _, err := dw.Write(frames[:n]); err != nil {
			// Cut short, as a stream would be (counted as aborted).
			h.c.log.Warn("open set cut short", "db", r.PathValue("db"), "err", err)
			panic(http.ErrAbortHandler)
		}
		frames = frames[n:]
	}
}

// registerImage answers an image registration (api.PatternImages).
func (h *httpAPI) registerImage(w http.ResponseWriter, r *http.Request) {
	h.readDeadline(w)
	slotSize, addrs, err := api.ReadImageRequest(r.Body)
	if err != nil {
		writeErr(w, errorf(KindBadRequest, err, "bad image"))
		return
	}
	info, err := h.c.RegisterImage(r.Context(), r.PathValue("db"), slotSize, addrs)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, info)
}

// getImage answers the ImageInfo of a registered image
// (api.PatternImage).
func (h *httpAPI) getImage(w http.ResponseWriter, r *http.Request) {
	info, err := h.c.Image(r.Context(), r.PathValue("db"), r.PathValue("image"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, info)
}

// fillImage answers a fill (api.PatternImageFill) with the slots' bytes.
func (h *httpAPI) fillImage(w http.ResponseWriter, r *http.Request) {
	rc := h.readDeadline(w)
	db, name := r.PathValue("db"), r.PathValue("image")
	n, ok := h.c.imageSlots(name)
	if !ok {
		writeErr(w, errorf(KindUnknownImage, nil, "no image %s (never registered, or evicted: register it again)", name))
		return
	}
	slots, err := api.ReadSlots(r.Body, n)
	if err != nil {
		writeErr(w, errorf(KindBadRequest, err, "bad fill"))
		return
	}
	h.stream(w, r, rc, db, func(emit func(uint32, Result) error, _ func()) error {
		return h.c.FillImage(r.Context(), db, name, slots, func(slot uint32, data []byte) error {
			return emit(slot, Result{Data: data, Found: true})
		})
	})
}

// deadlineWriter gives each write to the client its own deadline.
type deadlineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.w.Write(p)
}

func (h *httpAPI) dbInfo(w http.ResponseWriter, r *http.Request) {
	info, err := h.c.DBInfo(r.Context(), r.PathValue("db"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, info)
}

// writeJSON answers with v as indented JSON (the answers are small, and
// people read them with curl).
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // nothing to do if the client left
}
