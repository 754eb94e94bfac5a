package sqlserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/sqlquery"
	"github.com/munnerz/goautoneg"
)

// The query API (api.PatternQuery, api.PatternQueryPost; docs/api.md):
// one read-only statement on a version, run where the pages are (on a
// connection of the version's pool, versions.go), its answer streamed in
// the format asked for, and kept in the result cache (results.go) when it
// depends on nothing but the version and the request.

// Limits of the query API (Config documents them).
type queryLimits struct {
	timeout  time.Duration
	maxRows  int
	maxBytes int64
}

// maxQueryBody bounds a POST's body.
const maxQueryBody = 1 << 20

// query is one request of the query API.
type query struct {
	db      string
	sql     string
	params  *api.Params
	at      addr.Addr // the zero root: the current version
	maxRows int       // the request's row limit, at most the service's
	fresh   bool
	f       format
	private bool // the request carries a token: shared caches must not keep the answer
}

// queryGet answers GET /v1/dbs/{db}/query?sql=….
func (s *Server) queryGet(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := &query{sql: v.Get("sql"), fresh: v.Get("fresh") == "1"}
	if !v.Has("sql") {
		writeQueryError(w, http.StatusBadRequest, api.KindBadQuery, "no sql= given: GET /v1/dbs/{db}/query?sql=SELECT…", nil)
		return
	}
	if p := v.Get("params"); p != "" {
		q.params = &api.Params{}
		if err := json.Unmarshal([]byte(p), q.params); err != nil {
			writeQueryError(w, http.StatusBadRequest, api.KindBadQuery, "bad params=: "+err.Error(), nil)
			return
		}
	}
	if !s.readQuery(w, r, q, v.Get("at"), v.Get("max_rows")) {
		return
	}
	s.serveQuery(w, r, q)
}

// queryRoute is httpapi.FastRoute.Match of GET /v1/dbs/{db}/query: a
// plain path (no escapes: the fast path takes no other) whose {db} is
// one segment.
func queryRoute(r *http.Request) (db string, ok bool) {
	if r.URL.RawPath != "" {
		return "", false
	}
	p, ok := strings.CutPrefix(r.URL.Path, api.DBsPrefix)
	if !ok {
		return "", false
	}
	db, ok = strings.CutSuffix(p, "/query")
	if !ok || db == "" || db == "." || db == ".." || strings.Contains(db, "/") {
		return "", false
	}
	return db, true
}

// maxFastAnswer is the largest answer the fast path sends: it writes
// with no deadline of its own, so a large one goes the way with the
// client's timeout (queryGet).
const maxFastAnswer = 256 << 10

// queryFast answers a GET from the result cache on the connection's own
// goroutine (httpapi.FastRoute): a hit of at most maxFastAnswer for a
// request that parses. Anything else (a miss, an error to explain) it
// leaves to queryGet, writing nothing.
func (s *Server) queryFast(w http.ResponseWriter, r *http.Request, db string) bool {
	if s.results == nil {
		return false
	}
	v := r.URL.Query()
	if !v.Has("sql") {
		return false
	}
	q := &query{db: db, sql: v.Get("sql"), fresh: v.Get("fresh") == "1", private: r.Header.Get("Authorization") != "", maxRows: s.limits.maxRows}
	if q.fresh {
		return false // the manifest is read first: not at once
	}
	if p := v.Get("params"); p != "" {
		q.params = &api.Params{}
		if json.Unmarshal([]byte(p), q.params) != nil {
			return false
		}
	}
	if at := v.Get("at"); at != "" && at != "current" {
		root, err := addr.Parse(at)
		if err != nil || root.IsEmpty() {
			return false
		}
		q.at = root
	}
	if m := v.Get("max_rows"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 {
			return false
		}
		q.maxRows = min(n, s.limits.maxRows)
	}
	var ok bool
	if f := v.Get("format"); f != "" {
		if q.f, ok = parseFormat(f); !ok {
			return false
		}
	} else {
		q.f = negotiate(r)
	}
	start := time.Now()
	root, current, err := s.queryVersion(r.Context(), q)
	if err != nil {
		return false
	}
	key := newResultKey(q.db, root, q.sql, q.params, q.f, q.maxRows, s.limits.maxBytes)
	res, ok := s.results.get(key)
	if !ok || len(res.body) > maxFastAnswer {
		return false
	}
	s.metrics.answered("hit")
	h := w.Header()
	h.Set(api.HeaderRoot, root.String())
	if current != nil {
		api.SetRootFreshness(h, *current)
	}
	h.Set("Vary", "Accept")
	s.writeResult(w, r, q, key, res, start)
	return true
}

// queryPost answers POST /v1/dbs/{db}/query with an api.QueryRequest.
func (s *Server) queryPost(w http.ResponseWriter, r *http.Request) {
	var req api.QueryRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxQueryBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeQueryError(w, http.StatusRequestEntityTooLarge, "too large", fmt.Sprintf("a query's body is at most %d bytes", maxQueryBody), nil)
			return
		}
		httpapi.WriteError(w, cache.Errorf(cache.KindCanceled, err, "reading the query"))
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeQueryError(w, http.StatusBadRequest, api.KindBadQuery, `bad query body (want {"sql": "…", "params": […], "at": "ROOT"}): `+err.Error(), nil)
		return
	}
	q := &query{sql: req.SQL, params: req.Params, fresh: req.Fresh}
	maxRows := ""
	if req.MaxRows != 0 {
		maxRows = strconv.Itoa(req.MaxRows)
	}
	if !s.readQuery(w, r, q, req.At, maxRows) {
		return
	}
	s.serveQuery(w, r, q)
}

// readQuery fills in what GET and POST give alike, answering a 400 for
// what does not parse.
func (s *Server) readQuery(w http.ResponseWriter, r *http.Request, q *query, at, maxRows string) bool {
	q.db = r.PathValue("db")
	q.private = r.Header.Get("Authorization") != ""
	if at != "" && at != "current" {
		root, err := addr.Parse(at)
		if err != nil {
			httpapi.WriteError(w, cache.Errorf(cache.KindBadRequest, err, "bad at="))
			return false
		}
		if root.IsEmpty() {
			httpapi.WriteError(w, cache.Errorf(cache.KindNoSuchVersion, nil, "no such version %s: the all-zero root names no version (leave at= out for the current one)", root))
			return false
		}
		q.at = root
	}
	q.maxRows = s.limits.maxRows
	if maxRows != "" {
		n, err := strconv.Atoi(maxRows)
		if err != nil || n < 1 {
			writeQueryError(w, http.StatusBadRequest, api.KindBadQuery, fmt.Sprintf("bad max_rows %q: a positive number (at most the service's %d)", maxRows, s.limits.maxRows), nil)
			return false
		}
		q.maxRows = min(n, s.limits.maxRows)
	}
	var ok bool
	if f := r.URL.Query().Get("format"); f != "" {
		if q.f, ok = parseFormat(f); !ok {
			writeQueryError(w, http.StatusBadRequest, api.KindBadQuery, fmt.Sprintf("bad format %q: json, ndjson or csv", f), nil)
			return false
		}
		return true
	}
	q.f = negotiate(r)
	return true
}

// negotiate is the format r's Accept asks for (JSON by default).
func negotiate(r *http.Request) format {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return formatJSON
	}
	switch goautoneg.Negotiate(accept, []string{api.ContentTypeJSON, api.ContentTypeNDJSON, "text/csv"}) {
	case api.ContentTypeNDJSON:
		return formatNDJSON
	case "text/csv":
		return formatCSV
	}
	return formatJSON
}

// serveQuery answers q: from the result cache, from an identical query
// running (single flight), or by running it.
func (s *Server) serveQuery(w http.ResponseWriter, r *http.Request, q *query) {
	start := time.Now()
	root, current, err := s.queryVersion(r.Context(), q)
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	key := newResultKey(q.db, root, q.sql, q.params, q.f, q.maxRows, s.limits.maxBytes)
	h := w.Header()
	h.Set(api.HeaderRoot, root.String())
	if current != nil {
		api.SetRootFreshness(h, *current)
	}
	h.Set("Vary", "Accept")
	if s.results == nil {
		s.runQuery(w, r, q, root, key, nil, start).abortIfCut()
		return
	}
	if res, ok := s.results.get(key); ok {
		s.metrics.answered("hit")
		s.writeResult(w, r, q, key, res, start)
		return
	}
	// One execution for identical queries at once: the first runs it,
	// answering its own client as it goes; the others wait (at most the
	// time limit and the time its client takes the answer) and answer
	// theirs from its result, or run it themselves when it kept none (not
	// deterministic, too large, cut short).
	var mine *outcome // set when this request's run is the one (on this goroutine)
	v, _, _ := s.results.flight.Do(string(key[:]), func() (any, error) {
		mine = s.runQuery(w, r, q, root, key, s.results, start)
		return mine, nil
	})
	shared := v.(*outcome)
	if shared == mine {
		mine.abortIfCut()
		return
	}
	switch {
	case shared.kept != nil:
		s.metrics.answered("hit")
		s.writeResult(w, r, q, key, shared.kept, start)
	case shared.fail != nil && shared.status < 500:
		writeQueryError(w, shared.status, shared.fail.Kind, shared.fail.Message, shared.fail.SQLite)
	default:
		s.runQuery(w, r, q, root, key, nil, start).abortIfCut()
	}
}

// queryVersion returns the root q reads: its at=, checked to be a
// version of the database, or the current one (with how fresh it is).
func (s *Server) queryVersion(ctx context.Context, q *query) (addr.Addr, *api.RootInfo, error) {
	if err := s.c.LoadDB(ctx, q.db); err != nil {
		return addr.Addr{}, nil, err
	}
	if !q.at.IsEmpty() {
		return q.at, nil, s.c.CheckVersion(ctx, q.db, q.at)
	}
	var info api.RootInfo
	var err error
	if q.fresh {
		info, err = s.c.FreshRoot(ctx, q.db)
	} else {
		info, err = s.c.Root(ctx, q.db, false)
	}
	if err != nil {
		return addr.Addr{}, nil, err
	}
	root, err := addr.Parse(info.Root)
	if err != nil {
		return addr.Addr{}, nil, fmt.Errorf("database %q: root: %w", q.db, err)
	}
	if root.IsEmpty() {
		return addr.Addr{}, nil, cache.Errorf(cache.KindNoSuchVersion, nil, "database %q has no version (an empty root)", q.db)
	}
	return root, &info, nil
}

// outcome is how a run ended, for the identical queries that waited on it.
type outcome struct {
	kept   *result    // the whole answer, kept in the cache
	fail   *api.Error // the query's error, answered before any row
	status int
	cut    bool // the answer was cut off mid-stream: abort the connection
}

// abortIfCut ends a handler whose answer was cut off after it began, so
// that the client sees it was (a CSV answer has no place for an error).
func (o *outcome) abortIfCut() {
	if o.cut {
		panic(http.ErrAbortHandler)
	}
}

// cacheControl is the answer's Cache-Control: immutable for a version
// asked for by root, a short max-age for the current one (a version
// published since is seen by the next query: its key differs).
func cacheControl(q *query) string {
	scope := "public"
	if q.private {
		scope = "private"
	}
	if !q.at.IsEmpty() {
		return scope + ", max-age=31536000, immutable"
	}
	return scope + ", max-age=1"
}

// notModified reports whether the request's If-None-Match names etag.
func notModified(r *http.Request, etag string) bool {
	inm := r.Header.Get("If-None-Match")
	if inm == "" {
		return false
	}
	for _, t := range strings.Split(inm, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// writeResult answers with a kept result (or 304 when the client has it).
func (s *Server) writeResult(w http.ResponseWriter, r *http.Request, q *query, key resultKey, res *result, start time.Time) {
	h := w.Header()
	etag := key.etag()
	h.Set("ETag", etag)
	h.Set("Cache-Control", cacheControl(q))
	h.Set(api.HeaderResultCache, "hit")
	if notModified(r, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", res.f.contentType())
	h.Set("Content-Length", strconv.Itoa(len(res.body)))
	h.Set(api.HeaderRows, strconv.Itoa(res.rows))
	h.Set(api.HeaderTruncated, strconv.FormatBool(res.truncated))
	h.Set("Server-Timing", serverTiming("cache", time.Since(start)))
	httpapi.WriteWhole(w, res.body) //nolint:errcheck // a client that left
}

func serverTiming(what string, d time.Duration) string {
	return what + ";dur=" + strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64)
}

// runQuery runs q on version root and answers w as the rows come,
// keeping the answer in rs (nil: none) if it is deterministic and fits.
func (s *Server) runQuery(w http.ResponseWriter, r *http.Request, q *query, root addr.Addr, key resultKey, rs *results, start time.Time) *outcome {
	ctx := r.Context()
	fail := func(status int, e *api.Error) *outcome {
		s.metrics.queries.WithLabelValues(e.Kind).Inc()
		writeQueryError(w, status, e.Kind, e.Message, e.SQLite)
		return &outcome{fail: e, status: status}
	}
	l, err := s.versions.conn(ctx, q.db, root)
	if err != nil {
		e := &api.Error{Message: err.Error(), Kind: cache.KindOf(err).String()}
		return fail(httpapi.Status(err), e)
	}
	defer l.release()
	st, err := l.Conn.Prepare(q.sql)
	if err != nil {
		status, e := s.queryError(ctx, nil, l, err)
		return fail(status, e)
	}
	defer st.Close()
	if e := bindParams(st, q.params); e != nil {
		return fail(http.StatusBadRequest, e)
	}
	h := w.Header()
	h.Set("Content-Type", q.f.contentType())
	keep := rs != nil && st.Deterministic()
	switch {
	case st.Deterministic():
		etag := key.etag()
		h.Set("ETag", etag)
		h.Set("Cache-Control", cacheControl(q))
		if notModified(r, etag) { // the same key, the same answer
			h.Del("Content-Type")
			h.Set(api.HeaderResultCache, "miss") // not kept here: the client's copy answers
			w.WriteHeader(http.StatusNotModified)
			return &outcome{}
		}
	default:
		h.Set("Cache-Control", "no-store") // random(), datetime('now'): every run differs
	}
	cacheState := "off"
	if s.results != nil && st.Deterministic() {
		cacheState = "miss"
	}
	h.Set(api.HeaderResultCache, cacheState)
	s.metrics.answered(cacheState)

	qctx, cancel := context.WithTimeout(ctx, s.limits.timeout)
	defer cancel()
	stop := l.Conn.InterruptOn(qctx)
	a := &answer{w: w, f: q.f, whole: keep, keepMax: keepMax(rs)}
	a.buf = appendHead(a.buf, q.f, root.String(), st.Columns())
	var stepErr error
	for {
		more, err := st.Step()
		if err != nil {
			stepErr = err
			break
		}
		if !more {
			break
		}
		if a.rows == q.maxRows {
			a.truncated = true
			break
		}
		mark := len(a.buf)
		a.buf = appendRow(a.buf, q.f, a.rows, st.Row())
		if a.size() > s.limits.maxBytes {
			a.buf, a.truncated = a.buf[:mark], true
			break
		}
		a.rows++
		if err := a.sendSome(); err != nil {
			stepErr = err // the client went away
			break
		}
	}
	stop()
	took := time.Since(start)
	s.metrics.queryTime.Observe(took.Seconds())
	if stepErr != nil {
		status, e := s.queryError(ctx, qctx, l, stepErr)
		s.metrics.queries.WithLabelValues(e.Kind).Inc()
		if !a.started {
			writeQueryError(w, status, e.Kind, e.Message, e.SQLite)
			return &outcome{fail: e, status: status}
		}
		if q.f == formatCSV || ctx.Err() != nil {
			return &outcome{cut: true}
		}
		a.buf = appendEnd(a.buf, q.f, a.rows, a.truncated, e) // in the body: the status went out
		a.finish(took)
		return &outcome{}
	}
	outcomeKind := "ok"
	if a.truncated {
		outcomeKind = "truncated"
	}
	s.metrics.queries.WithLabelValues(outcomeKind).Inc()
	a.buf = appendEnd(a.buf, q.f, a.rows, a.truncated, nil)
	if err := a.finish(took); err != nil {
		return &outcome{cut: true}
	}
	if !a.whole {
		return &outcome{}
	}
	res := &result{body: a.buf, f: q.f, rows: a.rows, truncated: a.truncated}
	rs.put(key, res)
	return &outcome{kept: res}
}

// keepMax is the largest answer rs keeps (0 without a cache).
func keepMax(rs *results) int {
	if rs == nil {
		return 0
	}
	return rs.maxEntry
}

// bindParams binds p to the statement's parameters: a list to ?, ?NNN
// (as many as the highest number), an object to :name, @name and $name
// (its keys with or without the prefix), each name once.
func bindParams(st *sqlquery.Stmt, p *api.Params) *api.Error {
	names := st.Params()
	bad := func(format string, args ...any) *api.Error {
		msg := fmt.Sprintf(format, args...)
		return &api.Error{Message: msg, Kind: api.KindBadQuery, SQLite: &api.SQLiteError{Code: 25, ExtendedCode: 25, Name: "SQLITE_RANGE", Message: msg}}
	}
	if p == nil || (p.List == nil && p.Named == nil) {
		if len(names) > 0 {
			return bad("the statement has %d parameters and no params were given", len(names))
		}
		return nil
	}
	bind := func(i int, v api.Value) *api.Error {
		if err := st.Bind(i, localValue(v)); err != nil {
			return bad("parameter %d: %v", i, err)
		}
		return nil
	}
	if p.Named == nil {
		if len(p.List) != len(names) {
			return bad("the statement has %d parameters, %d given", len(names), len(p.List))
		}
		for i, v := range p.List {
			if e := bind(i+1, v); e != nil {
				return e
			}
		}
		return nil
	}
	used := 0
	for i, n := range names {
		if n == "" || n[0] == '?' {
			return bad("parameter %d is positional (?): give params as a JSON array", i+1)
		}
		v, ok := p.Named[n[1:]]
		if ok {
			if _, dup := p.Named[n]; dup {
				return bad("params names %s twice (%q and %q)", n, n[1:], n)
			}
		} else if v, ok = p.Named[n]; !ok {
			return bad("no value for parameter %s in params", n)
		}
		used++
		if e := bind(i+1, v); e != nil {
			return e
		}
	}
	if len(p.Named) > used {
		var extra []string
		for k := range p.Named {
			found := false
			for _, n := range names {
				if k == n || k == n[1:] {
					found = true
				}
			}
			if !found {
				extra = append(extra, k)
			}
		}
		return bad("params has names the statement does not: %s", strings.Join(extra, ", "))
	}
	return nil
}

// queryError classifies an error of a statement: the query's fault (a
// 4xx with SQLite's code), a time limit (qctx's), the client leaving, or
// a page read that failed (the cache's kind of the cause).
func (s *Server) queryError(ctx, qctx context.Context, l *lease, err error) (int, *api.Error) {
	var se *sqlquery.Error
	if !errors.As(err, &se) {
		if ctx.Err() != nil {
			return httpapi.Status(ctx.Err()), &api.Error{Message: "the client went away", Kind: cache.KindCanceled.String()}
		}
		return httpapi.Status(err), &api.Error{Message: err.Error(), Kind: cache.KindOf(err).String()}
	}
	detail := &api.SQLiteError{Code: se.Code, ExtendedCode: se.ExtendedCode, Name: se.Name(), Message: se.Msg}
	if se.Offset >= 0 {
		off := se.Offset
		detail.Offset = &off
	}
	e := &api.Error{Message: se.Error(), SQLite: detail}
	switch {
	case se.Refused():
		e.Kind = api.KindReadOnly
		return http.StatusForbidden, e
	case se.Interrupted() && ctx.Err() != nil:
		e.Kind, e.Message = cache.KindCanceled.String(), "the client went away; the query was interrupted"
		return httpapi.Status(ctx.Err()), e
	case se.Interrupted() && qctx != nil && qctx.Err() != nil:
		e.Kind = api.KindQueryTimeout
		e.Message = fmt.Sprintf("the query ran longer than the service's limit of %v (--query-timeout) and was interrupted", s.limits.timeout)
		return http.StatusBadRequest, e
	case se.ReadFailed():
		cause := sqlitevfs.LastReadError(l.name())
		if cause == nil {
			cause = err
		}
		e.Kind = cache.KindOf(cause).String()
		e.Message = fmt.Sprintf("%v: %v", se, cause)
		return httpapi.Status(cause), e
	}
	switch se.Code {
	case 2, 7, 11, 13, 14, 26: // SQLITE_INTERNAL, NOMEM, CORRUPT, FULL, CANTOPEN, NOTADB: the service's
		e.Kind = cache.KindInternal.String()
		return http.StatusInternalServerError, e
	}
	e.Kind = api.KindBadQuery
	return http.StatusBadRequest, e
}

// writeQueryError answers an error of the query API.
func writeQueryError(w http.ResponseWriter, status int, kind, msg string, detail *api.SQLiteError) {
	h := w.Header()
	h.Del("ETag")
	h.Del("Cache-Control")
	h.Del(api.HeaderResultCache)
	api.WriteErrorBody(w, status, &api.Error{Message: msg, Kind: kind, SQLite: detail})
}

// answer is one query's answer as it is written: its status waits until
// the body passes firstPart (so that an error before then, the usual
// time limit included, is a clean 4xx), then it goes out in parts; while
// whole, it is also kept in full for the result cache.
type answer struct {
	w         http.ResponseWriter
	f         format
	buf       []byte // the body not sent yet (while whole: all of it, sent from sentTo on)
	sentTo    int    // while whole: how much of buf has been sent
	sent      int64  // bytes sent
	whole     bool   // buf holds the whole body
	keepMax   int
	started   bool // the status is out
	rows      int
	truncated bool
}

// firstPart is how much of a body is held before its status is sent.
const firstPart = 64 << 10

// size is the body's size so far.
func (a *answer) size() int64 { return a.sent + int64(len(a.buf)-a.sentTo) }

// sendSome sends what is held once it passes firstPart.
func (a *answer) sendSome() error {
	if len(a.buf)-a.sentTo < firstPart {
		return nil
	}
	if !a.started {
		a.started = true
		h := a.w.Header()
		h.Set("Trailer", api.HeaderRows+", "+api.HeaderTruncated)
		a.w.WriteHeader(http.StatusOK)
	}
	n, err := a.w.Write(a.buf[a.sentTo:])
	a.sent += int64(n)
	if err != nil {
		return err
	}
	if a.whole && len(a.buf) > a.keepMax {
		a.whole = false
	}
	if a.whole {
		a.sentTo = len(a.buf)
	} else {
		a.buf, a.sentTo = a.buf[:0], 0
	}
	http.NewResponseController(a.w).Flush() //nolint:errcheck // a writer that cannot flush sends on its own
	return nil
}

// finish sends the rest of the body: with a Content-Length and the rows
// and truncation as headers if the status is not out yet, else with
// them as trailers.
func (a *answer) finish(took time.Duration) error {
	h := a.w.Header()
	rows, truncated := strconv.Itoa(a.rows), strconv.FormatBool(a.truncated)
	if !a.started {
		h.Set(api.HeaderRows, rows)
		h.Set(api.HeaderTruncated, truncated)
		h.Set("Server-Timing", serverTiming("query", took))
		if a.whole && len(a.buf) > a.keepMax {
			a.whole = false
		}
		return httpapi.WriteWhole(a.w, a.buf)
	}
	n, err := a.w.Write(a.buf[a.sentTo:])
	a.sent += int64(n)
	h.Set(api.HeaderRows, rows)
	h.Set(api.HeaderTruncated, truncated)
	if a.whole && len(a.buf) > a.keepMax {
		a.whole = false
	}
	return err
}
