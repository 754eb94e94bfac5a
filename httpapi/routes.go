package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
)

// coreRoutes are the routes of the cache itself.
func (a *API) coreRoutes() []Route {
	return []Route{
		{Pattern: api.PatternChunk, Handler: a.chunk, Need: auth.DBToken}, // observed by the handler (routed by hand too)
		{Pattern: api.PatternChunks, Handler: http.HandlerFunc(a.getChunks), Need: auth.DBToken, Metric: "http_get_chunks"},
		{Pattern: api.PatternDB, Handler: http.HandlerFunc(a.dbInfo), Need: auth.DBToken, Metric: "http_db_info"},
		{Pattern: api.PatternRoot, Handler: http.HandlerFunc(a.root), Need: auth.DBToken, Metric: "http_root"},
		// The lists show only the databases the token grants.
		{Pattern: api.PatternDBs, Handler: http.HandlerFunc(a.listDBs), Need: auth.AnyToken, Metric: "http_list_dbs"},
		{Pattern: api.PatternCache, Handler: http.HandlerFunc(a.cacheSummary), Need: auth.AnyToken, Metric: "http_cache"},
		{Pattern: api.PatternDropCache, Handler: http.HandlerFunc(a.dropCache), Need: auth.DBToken, Metric: "http_drop_cache"},
		{Pattern: api.PatternHost, Handler: http.HandlerFunc(a.host), Need: auth.DBToken, Metric: "http_host"},
	}
}

// chunkHandler answers a GET of one chunk (api.PatternChunk), routed by
// the mux (ServeHTTP, after the route's guard) or by hand (serve, which
// checks the guard itself with the database it was given).
type chunkHandler struct {
	a *API
	o *observer
}

func (ch *chunkHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch.answer(w, r, r.PathValue("db"), r.PathValue("address"))
}

// serve answers a read routed by hand: its access is checked here.
func (ch *chunkHandler) serve(w http.ResponseWriter, r *http.Request, db, address string) {
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	defer ch.o.done(time.Now(), sw)
	ctx, ok := ch.a.allow(sw, r, auth.DBToken, db, api.PatternChunk)
	if !ok {
		return
	}
	if ctx != nil {
		r = r.WithContext(ctx)
	}
	ch.write(sw, r, db, address)
}

// answer answers a read routed by the mux (its access checked by wrap).
func (ch *chunkHandler) answer(w http.ResponseWriter, r *http.Request, db, address string) {
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	defer ch.o.done(time.Now(), sw)
	ch.write(sw, r, db, address)
}

func (ch *chunkHandler) write(w http.ResponseWriter, r *http.Request, db, address string) {
	a, err := addr.Parse(address)
	if err != nil {
		WriteError(w, cache.Errorf(cache.KindBadRequest, err, "bad chunk address"))
		return
	}
	res, err := ch.a.c.GetChunk(r.Context(), db, a)
	if err != nil {
		WriteError(w, err)
		return
	}
	if !res.Found {
		api.WriteError(w, http.StatusNotFound, "chunk "+a.String()+" not found in database "+strconv.Quote(db))
		return
	}
	hd := w.Header()
	hd["Content-Type"] = binaryType // shared: a header map's values are only read once set
	hd["Content-Length"] = []string{strconv.Itoa(len(res.Data))}
	hd[api.HeaderTier] = tierValue(res.Tier)
	w.Write(res.Data)
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

// getChunks answers a batch (api.PatternChunks) with a frame stream. The
// database is loaded first, so a bad name is a clean 4xx rather than an
// error in the middle of a stream.
func (a *API) getChunks(w http.ResponseWriter, r *http.Request) {
	addrs, err := api.ReadAddresses(r.Body)
	if err != nil {
		kind := cache.KindBadRequest
		if errors.Is(err, api.ErrBatchTooLarge) {
			kind = cache.KindTooLarge
		}
		WriteError(w, cache.Errorf(kind, err, "bad batch"))
		return
	}
	db := r.PathValue("db")
	if err := a.c.LoadDB(r.Context(), db); err != nil {
		WriteError(w, err)
		return
	}
	err = WriteFrames(w, func(fw *api.FrameWriter, flush func()) error {
		return a.c.GetChunks(r.Context(), db, addrs, func(i int, res cache.Result) error {
			return fw.WriteFrame(uint32(i), res.Found, res.Tier, res.Data)
		}, flush)
	})
	if err != nil {
		a.c.Logger().Warn("batch failed mid-stream", "db", db, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// root answers a database's current root (api.PatternRoot).
func (a *API) root(w http.ResponseWriter, r *http.Request) {
	info, err := a.c.Root(r.Context(), r.PathValue("db"), r.URL.Query().Get("fresh") == "1")
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, info)
}

func (a *API) dbInfo(w http.ResponseWriter, r *http.Request) {
	info, err := a.c.DBInfo(r.Context(), r.PathValue("db"))
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, info)
}

func dbName(d api.DBSummary) string { return d.Name }

func (a *API) listDBs(w http.ResponseWriter, r *http.Request) {
	dbs := auth.Granted(r.Context(), a.c.Databases(), dbName)
	if dbs == nil {
		dbs = []api.DBSummary{}
	}
	WriteJSON(w, dbs)
}

func (a *API) cacheSummary(w http.ResponseWriter, r *http.Request) {
	s := a.c.Summary()
	s.Databases = len(auth.Granted(r.Context(), a.c.Databases(), dbName))
	WriteJSON(w, s)
}

func (a *API) dropCache(w http.ResponseWriter, r *http.Request) {
	res, err := a.c.DropCached(r.Context(), r.PathValue("db"))
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, res)
}

// host answers where the cache directory is (api.PatternHost).
func (a *API) host(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, a.c.Host()) }
