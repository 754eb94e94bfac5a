package sqlserve

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/sqlchunks"
)

// Routes are the server's routes on the HTTP API, each reading the
// database its path names.
func (s *Server) Routes() []httpapi.Route {
	return []httpapi.Route{
		{Pattern: api.PatternOpenSet, Handler: http.HandlerFunc(s.openSet), Need: auth.DBToken, Metric: "http_open_set"},
		{Pattern: api.PatternVersionImage, Handler: http.HandlerFunc(s.versionImage), Need: auth.DBToken, Metric: "http_version_image"},
		{Pattern: api.PatternImages, Handler: http.HandlerFunc(s.registerImageRoute), Need: auth.DBToken, Metric: "http_register_image"},
		{Pattern: api.PatternImage, Handler: http.HandlerFunc(s.getImage), Need: auth.DBToken, Metric: "http_get_image"},
		{Pattern: api.PatternImageFill, Handler: http.HandlerFunc(s.fillImageRoute), Need: auth.DBToken, Metric: "http_fill_image"},
		{Pattern: api.PatternQuery, Handler: http.HandlerFunc(s.queryGet), Need: auth.DBToken, Metric: "http_query",
			Fast: &httpapi.FastRoute{Match: queryRoute, Serve: s.queryFast}},
		{Pattern: api.PatternQueryPost, Handler: http.HandlerFunc(s.queryPost), Need: auth.DBToken, Metric: "http_query"},
		{Pattern: api.PatternVersions, Handler: http.HandlerFunc(s.versionsRoute), Need: auth.DBToken, Metric: "http_versions"},
	}
}

// versionsRoute answers a database's versions, newest first
// (api.PatternVersions).
func (s *Server) versionsRoute(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			httpapi.WriteError(w, cache.Errorf(cache.KindBadRequest, nil, "bad limit %q: a positive number", v))
			return
		}
		limit = n
	}
	vs, err := s.Versions(r.Context(), r.PathValue("db"), limit)
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	httpapi.WriteJSON(w, vs)
}

// Versions lists the versions of database db from the current one back,
// at most limit of them.
func (s *Server) Versions(ctx context.Context, db string, limit int) ([]api.VersionInfo, error) {
	if err := s.c.LoadDB(ctx, db); err != nil {
		return nil, err
	}
	info, err := s.c.Root(ctx, db, false)
	if err != nil {
		return nil, err
	}
	head, err := addr.Parse(info.Root)
	if err != nil {
		return nil, fmt.Errorf("database %q: root: %w", db, err)
	}
	if head.IsEmpty() {
		return []api.VersionInfo{}, nil
	}
	log, err := sqlchunks.Log(ctx, cacheReader{s.c, db}, head, limit)
	if err != nil && len(log) == 0 {
		if cache.KindOf(err) == cache.KindInternal {
			err = cache.Errorf(cache.KindBadRequest, err, "database %q: not a chunkd SQLite database", db)
		}
		return nil, err
	}
	out := make([]api.VersionInfo, len(log))
	for i, v := range log {
		out[i] = api.VersionInfo{Root: v.Root.String(), Time: v.Time.UTC().Format(time.RFC3339), Message: v.Message, PageSize: v.PageSize, Pages: v.Pages, Current: i == 0}
		if !v.Parent.IsEmpty() {
			out[i].Parent = v.Parent.String()
		}
	}
	return out, nil
}

// queryRoot reads the root a query names (root=ROOT; none: the zero
// root, the current version), answering a 400 for a bad one and a 404
// for the all-zero root given.
func queryRoot(w http.ResponseWriter, q url.Values) (root addr.Addr, ok bool) {
	if v := q.Get("root"); v != "" {
		var err error
		if root, err = addr.Parse(v); err != nil {
			httpapi.WriteError(w, cache.Errorf(cache.KindBadRequest, err, "bad root"))
			return addr.Addr{}, false
		}
		if root.IsEmpty() { // given, it names a version: not the current one
			httpapi.WriteError(w, cache.Errorf(cache.KindNoSuchVersion, nil, "no such version %s: the all-zero root names no version (leave root= out for the current one)", root))
			return addr.Addr{}, false
		}
	}
	return root, true
}

// versionImage answers a version's page image (api.PatternVersionImage).
func (s *Server) versionImage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root, ok := queryRoot(w, q)
	if !ok {
		return
	}
	vi, err := s.VersionImage(r.Context(), r.PathValue("db"), root, q.Get("fresh") == "1")
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	httpapi.WriteJSON(w, vi)
}

// openSet answers a version's open set (api.PatternOpenSet).
func (s *Server) openSet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root, ok := queryRoot(w, q)
	if !ok {
		return
	}
	pages := q.Get("pages")
	if pages != "" && pages != "0" && pages != "1" {
		httpapi.WriteError(w, cache.Errorf(cache.KindBadRequest, nil, "bad pages %q: 0 (the root chunk and page map only) or 1 (with page 1 and the interior pages, the default)", pages))
		return
	}
	root, frames, current, err := s.OpenSet(r.Context(), r.PathValue("db"), root, q.Get("fresh") == "1", pages != "0")
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	w.Header().Set(api.HeaderRoot, root.String())
	if current != nil {
		api.SetRootFreshness(w.Header(), *current)
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	if err := httpapi.WriteWhole(w, frames); err != nil {
		s.log.Warn("open set cut short", "db", r.PathValue("db"), "err", err)
		panic(http.ErrAbortHandler)
	}
}

// registerImageRoute answers an image registration (api.PatternImages).
func (s *Server) registerImageRoute(w http.ResponseWriter, r *http.Request) {
	slotSize, addrs, err := api.ReadImageRequest(r.Body)
	if err != nil {
		httpapi.WriteError(w, cache.Errorf(cache.KindBadRequest, err, "bad image"))
		return
	}
	info, err := s.RegisterImage(r.Context(), r.PathValue("db"), slotSize, addrs)
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	httpapi.WriteJSON(w, info)
}

// getImage answers the ImageInfo of a registered image (api.PatternImage).
func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	info, err := s.Image(r.Context(), r.PathValue("db"), r.PathValue("image"))
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	httpapi.WriteJSON(w, info)
}

// fillImageRoute answers a fill (api.PatternImageFill) with the slots'
// bytes as a frame stream.
func (s *Server) fillImageRoute(w http.ResponseWriter, r *http.Request) {
	db, name := r.PathValue("db"), r.PathValue("image")
	n, ok := s.imageSlots(name)
	if !ok {
		httpapi.WriteError(w, cache.Errorf(cache.KindUnknownImage, nil, "no image %s (never registered, or evicted: register it again)", name))
		return
	}
	slots, err := api.ReadSlots(r.Body, n)
	if err != nil {
		httpapi.WriteError(w, cache.Errorf(cache.KindBadRequest, err, "bad fill"))
		return
	}
	if err := s.c.LoadDB(r.Context(), db); err != nil {
		httpapi.WriteError(w, err)
		return
	}
	err = httpapi.WriteFrames(w, func(fw *api.FrameWriter, _ func()) error {
		return s.FillImage(r.Context(), db, name, slots, func(slot uint32, data []byte) error {
			return fw.WriteFrame(slot, true, api.TierUnspecified, data) // the tier is not the point of a fill
		})
	})
	if err != nil {
		s.log.Warn("image fill cut short", "db", db, "image", name, "err", err)
		panic(http.ErrAbortHandler)
	}
}
