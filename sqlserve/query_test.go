package sqlserve

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/internal/cachetest"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// queryFixture serves the query API over a store holding database db1,
// imported from files made by sqltest (with the edge table).
type queryFixture struct {
	*cachetest.Fixture
	s     *Server
	url   string   // the HTTP API's base URL
	files []string // the source file of each version, oldest first
	roots []addr.Addr
}

// newQueryFixture imports versions of db1 (sentences each, the edge
// table added) and serves them with cfg (Cache and CacheDir are the
// fixture's).
func newQueryFixture(t testing.TB, sentences []int, ccfg cache.Config, cfg Config) *queryFixture {
	t.Helper()
	f := &queryFixture{Fixture: cachetest.Empty(t)}
	for i, n := range sentences {
		f.publish(t, int64(i+1), n)
	}
	f.Open(ccfg)
	cfg.Cache, cfg.CacheDir, cfg.Registry = f.Cache, f.Dir, f.Registry
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f.s = s
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Cache: f.Cache, Registry: f.Registry, Routes: s.Routes()}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// publish imports a new version of db1, of n sentences made with seed.
func (f *queryFixture) publish(t testing.TB, seed int64, n int) addr.Addr {
	t.Helper()
	path := sqltest.GenDB(t, seed, n)
	sqltest.AddEdgeTable(t, path)
	res, err := sqlchunks.Import(context.Background(), f.Store, path, sqlchunks.ImportOptions{DB: "db1"})
	if err != nil {
		t.Fatal(err)
	}
	f.files = append(f.files, path)
	f.roots = append(f.roots, res.Root)
	return res.Root
}

// get sends GET …/query with v and the headers.
func (f *queryFixture) get(t testing.TB, v url.Values, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", f.url+api.QueryPath("db1")+"?"+v.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return send(t, req, hdr)
}

// send sends req with header pairs hdr; the body is closed when the test
// ends.
func send(t testing.TB, req *http.Request, hdr []string) *http.Response {
	t.Helper()
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// post sends POST …/query with body.
func (f *queryFixture) post(t testing.TB, body any, hdr ...string) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", f.url+api.QueryPath("db1"), bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return send(t, req, hdr)
}

// readResult reads a 200 JSON answer.
func readResult(t *testing.T, resp *http.Response) api.QueryResult {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	var res api.QueryResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return res
}

// queryError reads an error answer.
func queryError(t *testing.T, resp *http.Response) *api.Error {
	t.Helper()
	if resp.StatusCode == 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("200: %s", body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != api.ContentTypeJSON {
		t.Errorf("error answer of type %q", ct)
	}
	return api.ReadError(resp)
}

// sameRows fails the test if got differs from want.
func sameRows(t *testing.T, what string, got, want [][]api.Value) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, sqlite3 gives %d", what, len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: row %d has %d values, sqlite3 gives %d", what, i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if !got[i][j].Equal(want[i][j]) {
				t.Fatalf("%s: row %d column %d is %s, sqlite3 gives %s", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestQueryAsSQLite: the seed's queries and the typed edge cases give the
// rows the sqlite3 shell gives on the source file, in all three formats,
// at the current version and at a pinned older one.
func TestQueryAsSQLite(t *testing.T) {
	f := newQueryFixture(t, []int{11_000, 10_500}, cache.Config{}, Config{})
	queries := append(append([]string{}, sqltest.Queries...), sqltest.EdgeCases...)
	for v, at := range []string{f.roots[0].String(), ""} {
		file := f.files[v]
		if at == "" {
			file = f.files[1]
		}
		for _, q := range queries {
			want := sqltest.Shell(t, file, q)
			what := fmt.Sprintf("%q at %q", q, at)
			res := readResult(t, f.get(t, url.Values{"sql": {q}, "at": {at}}))
			sameRows(t, what+" (json)", res.Rows, want)
			wantRoot := f.roots[1].String()
			if at != "" {
				wantRoot = at
			}
			if res.Root != wantRoot || res.RowCount != len(want) || res.Truncated {
				t.Fatalf("%s: root %s row_count %d truncated %v, want %s %d false", what, res.Root, res.RowCount, res.Truncated, wantRoot, len(want))
			}
			// NDJSON, by POST.
			resp := f.post(t, api.QueryRequest{SQL: q, At: at}, "Accept", api.ContentTypeNDJSON)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != api.ContentTypeNDJSON || resp.Header.Get(api.HeaderRoot) != wantRoot {
				t.Fatalf("%s (ndjson): %s, %q, root %q", what, resp.Status, resp.Header.Get("Content-Type"), resp.Header.Get(api.HeaderRoot))
			}
			st, err := api.NewQueryStream(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var rows [][]api.Value
			for {
				row, err := st.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%s (ndjson): %v", what, err)
				}
				rows = append(rows, row)
			}
			sameRows(t, what+" (ndjson)", rows, want)
			if st.Header.Root != wantRoot || len(st.Header.Columns) != len(res.Columns) {
				t.Fatalf("%s (ndjson): header %+v", what, st.Header)
			}
			// CSV: the same fields as the values written as CSV.
			resp = f.get(t, url.Values{"sql": {q}, "at": {at}, "format": {"csv"}})
			body, _ := io.ReadAll(resp.Body)
			recs, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
			if resp.StatusCode != 200 || err != nil || len(recs) != len(want)+1 {
				t.Fatalf("%s (csv): %s, %d records, %v:\n%s", what, resp.Status, len(recs), err, body)
			}
			for i, row := range want {
				for j, val := range row {
					field, _ := csv.NewReader(bytes.NewReader(api.AppendCSVValue(nil, val))).Read()
					if val.IsNull() || (val.Type == api.SQLText && len(val.Bytes) == 0) {
						field = []string{""}
					}
					if len(field) == 1 && recs[i+1][j] != field[0] {
						t.Fatalf("%s (csv): row %d column %d is %q, want %q", what, i, j, recs[i+1][j], field[0])
					}
				}
			}
		}
	}
}

// TestQueryColumns: names and declared types, and NULL apart from ” in
// CSV (an empty field against "").
func TestQueryColumns(t *testing.T) {
	f := newQueryFixture(t, []int{200}, cache.Config{}, Config{})
	res := readResult(t, f.get(t, url.Values{"sql": {`SELECT id, v AS "the v", d, id + 1 FROM edge WHERE id <= 2 ORDER BY id`}}))
	want := []api.QueryColumn{{Name: "id", Type: "INTEGER"}, {Name: "the v"}, {Name: "d", Type: "DATE"}, {Name: "id + 1"}}
	if fmt.Sprint(res.Columns) != fmt.Sprint(want) {
		t.Errorf("columns %+v, want %+v", res.Columns, want)
	}
	resp := f.get(t, url.Values{"sql": {`SELECT v, v FROM edge WHERE id <= 2 ORDER BY id`}, "format": {"csv"}})
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "v,v\r\n,\r\n\"\",\"\"\r\n" {
		t.Errorf("CSV of NULL and '': %q", body)
	}
}

// TestQueryRefused: writes, ATTACH, load_extension, pragmas that set,
// two statements, and a query that never ends each get a clear 4xx,
// within the time limit, and the service goes on answering.
func TestQueryRefused(t *testing.T) {
	f := newQueryFixture(t, []int{200}, cache.Config{}, Config{QueryTimeout: 300 * time.Millisecond})
	for _, tc := range []struct {
		sql    string
		status int
		kind   string
		sqlite string
		says   string
	}{
		{`INSERT INTO edge(id) VALUES (100)`, 403, api.KindReadOnly, "SQLITE_AUTH", "not authorized: INSERT edge"},
		{`DELETE FROM sentences`, 403, api.KindReadOnly, "SQLITE_AUTH", "DELETE sentences"},
		{`UPDATE edge SET v = 1`, 403, api.KindReadOnly, "SQLITE_AUTH", "UPDATE edge"},
		{`DROP TABLE edge`, 403, api.KindReadOnly, "SQLITE_AUTH", "the schema"},
		{`CREATE TEMP TABLE t AS SELECT 1`, 403, api.KindReadOnly, "SQLITE_AUTH", "sqlite_temp_master"},
		{`ATTACH DATABASE '/tmp/x.sqlite' AS x`, 403, api.KindReadOnly, "SQLITE_AUTH", "ATTACH"},
		{`SELECT load_extension('/tmp/evil.so')`, 403, api.KindReadOnly, "SQLITE_AUTH", "load_extension()"},
		{`PRAGMA user_version = 3`, 403, api.KindReadOnly, "SQLITE_AUTH", "PRAGMA user_version"},
		{`PRAGMA query_only = 0`, 403, api.KindReadOnly, "SQLITE_AUTH", "PRAGMA query_only"},
		{`VACUUM INTO '/tmp/copy.sqlite'`, 403, api.KindReadOnly, "SQLITE_AUTH", "would write"},
		{`SELECT 1; SELECT 2`, 400, api.KindBadQuery, "SQLITE_ERROR", "more than one statement"},
		{`SELECT 1; DROP TABLE edge`, 400, api.KindBadQuery, "SQLITE_ERROR", "more than one statement"},
		{`SELEKT 1`, 400, api.KindBadQuery, "SQLITE_ERROR", `near "SELEKT": syntax error`},
		{`SELECT * FROM nowhere`, 400, api.KindBadQuery, "SQLITE_ERROR", "no such table: nowhere"},
		{``, 400, api.KindBadQuery, "SQLITE_ERROR", "no SQL statement"},
		{`SELECT abs(-9223372036854775808)`, 400, api.KindBadQuery, "SQLITE_ERROR", "integer overflow"},
		{`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n`, 400, api.KindQueryTimeout, "SQLITE_INTERRUPT", "--query-timeout"},
	} {
		start := time.Now()
		e := queryError(t, f.get(t, url.Values{"sql": {tc.sql}}))
		took := time.Since(start)
		if e.Code != tc.status || e.Kind != tc.kind || e.SQLite == nil || e.SQLite.Name != tc.sqlite || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: %d %q %+v %q, want %d %q %s saying %q", tc.sql, e.Code, e.Kind, e.SQLite, e.Message, tc.status, tc.kind, tc.sqlite, tc.says)
		}
		if took > 5*time.Second {
			t.Errorf("%s: answered after %v", tc.sql, took)
		}
	}
	// An error says where: SQLite's offset.
	e := queryError(t, f.get(t, url.Values{"sql": {`SELECT nope FROM edge`}}))
	if e.SQLite == nil || e.SQLite.Offset == nil || *e.SQLite.Offset != 7 {
		t.Errorf("unknown column: %+v", e.SQLite)
	}
	// The never-ending query in NDJSON: the same 4xx (no row was sent).
	e = queryError(t, f.get(t, url.Values{"sql": {`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n`}, "format": {"ndjson"}}))
	if e.Code != 400 || e.Kind != api.KindQueryTimeout {
		t.Errorf("never-ending query in NDJSON: %v", e)
	}
	if res := readResult(t, f.get(t, url.Values{"sql": {`SELECT count(*) FROM edge`}})); res.Rows[0][0].Int != 12 {
		t.Errorf("after the refusals: %v", res.Rows)
	}
	// Bad requests.
	for _, v := range []url.Values{
		{"sql": {"SELECT 1"}, "at": {"zzz"}},
		{"sql": {"SELECT 1"}, "format": {"xml"}},
		{"sql": {"SELECT 1"}, "max_rows": {"0"}},
		{"sql": {"SELECT ?"}, "params": {"{bad"}},
		{"at": {""}},
	} {
		if resp := f.get(t, v); resp.StatusCode != 400 {
			t.Errorf("%v: %s", v, resp.Status)
		}
	}
	if resp := f.get(t, url.Values{"sql": {"SELECT 1"}, "at": {strings.Repeat("0", 32)}}); resp.StatusCode != 404 {
		t.Errorf("the all-zero root: %s", resp.Status)
	}
	if resp := f.get(t, url.Values{"sql": {"SELECT 1"}, "at": {addr.Of([]byte("no version")).String()}}); resp.StatusCode != 404 {
		t.Errorf("a root of no version: %s", resp.Status)
	}
}

func TestQueryParams(t *testing.T) {
	f := newQueryFixture(t, []int{200}, cache.Config{}, Config{})
	ids := func(res api.QueryResult) string {
		var s []string
		for _, r := range res.Rows {
			s = append(s, r[0].String())
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		sql, params, want string
	}{
		{`SELECT id FROM edge WHERE v = ? OR v = ? ORDER BY id`, `["", {"blob":"AP8Q"}]`, "2,7"},
		{`SELECT id FROM edge WHERE v = ?2 OR v IS ?1 ORDER BY id`, `[0.1, {"int":"9223372036854775807"}]`, "3,5"},
		{`SELECT id FROM edge WHERE id = :id OR v = $v ORDER BY id`, `{"id": 1, "$v": "héllo, 世界 🌍"}`, "1,9"},
		{`SELECT count(*) FROM edge WHERE v = ?`, `["' OR 1=1 --"]`, "0"},
		{`SELECT ? IS NULL, ?`, `[null, 9007199254740993.0]`, "1"},
	} {
		res := readResult(t, f.get(t, url.Values{"sql": {tc.sql}, "params": {tc.params}}))
		if got := ids(res); got != tc.want {
			t.Errorf("%s with %s: %s, want %s", tc.sql, tc.params, got, tc.want)
		}
	}
	var p api.Params
	json.Unmarshal([]byte(`{"id": 3}`), &p)
	if res := readResult(t, f.post(t, api.QueryRequest{SQL: `SELECT v FROM edge WHERE id = @id`, Params: &p})); res.Rows[0][0].Int != 9223372036854775807 {
		t.Errorf("POST with named params: %v", res.Rows)
	}
	for _, tc := range []struct{ sql, params, says string }{
		{`SELECT ?`, ``, "no params were given"},
		{`SELECT ?, ?`, `[1]`, "2 parameters, 1 given"},
		{`SELECT :a`, `{"b": 1}`, "no value for parameter :a"},
		{`SELECT :a`, `{"a": 1, "b": 2}`, "names the statement does not: b"},
		{`SELECT ?`, `{"a": 1}`, "positional"},
	} {
		e := queryError(t, f.get(t, url.Values{"sql": {tc.sql}, "params": {tc.params}}))
		if e.Code != 400 || e.Kind != api.KindBadQuery || !strings.Contains(e.Message, tc.says) || e.SQLite == nil || e.SQLite.Name != "SQLITE_RANGE" {
			t.Errorf("%s with %q: %v %+v, want 400 saying %q", tc.sql, tc.params, e, e.SQLite, tc.says)
		}
	}
}

// TestQueryResultCache: an answer at a pinned root is immutable, its
// ETag gets a 304; a repeat is a hit; the current version's has a short
// max-age; a statement that is not deterministic is never kept; the
// metrics give the hit ratio.
func TestQueryResultCache(t *testing.T) {
	f := newQueryFixture(t, []int{200}, cache.Config{}, Config{})
	at := url.Values{"sql": {`SELECT id, v FROM edge ORDER BY id`}, "at": {f.roots[0].String()}}
	first := f.get(t, at)
	body1, _ := io.ReadAll(first.Body)
	etag := first.Header.Get("ETag")
	if first.StatusCode != 200 || first.Header.Get(api.HeaderResultCache) != "miss" || etag == "" ||
		first.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || first.Header.Get(api.HeaderRows) != "12" {
		t.Fatalf("first: %s %v", first.Status, first.Header)
	}
	second := f.get(t, at)
	body2, _ := io.ReadAll(second.Body)
	if second.Header.Get(api.HeaderResultCache) != "hit" || second.Header.Get("ETag") != etag || !bytes.Equal(body1, body2) {
		t.Fatalf("second: %v, the same body %v", second.Header, bytes.Equal(body1, body2))
	}
	for _, inm := range []string{etag, `"other", ` + etag, "W/" + etag, "*"} {
		nm := f.get(t, at, "If-None-Match", inm)
		b, _ := io.ReadAll(nm.Body)
		if nm.StatusCode != 304 || len(b) != 0 || nm.Header.Get("ETag") != etag || !strings.Contains(nm.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("If-None-Match %s: %s %v", inm, nm.Status, nm.Header)
		}
	}
	if nm := f.get(t, at, "If-None-Match", `"other"`); nm.StatusCode != 200 {
		t.Errorf("another ETag: %s", nm.Status)
	}
	// With a token, the answer is private to its client.
	if p := f.get(t, at, "Authorization", "Bearer x"); p.Header.Get("Cache-Control") != "private, max-age=31536000, immutable" {
		t.Errorf("with a token: %q", p.Header.Get("Cache-Control"))
	}
	cur := f.get(t, url.Values{"sql": {`SELECT id, v FROM edge ORDER BY id`}})
	io.ReadAll(cur.Body)
	if cur.Header.Get("Cache-Control") != "public, max-age=1" || cur.Header.Get(api.HeaderResultCache) != "hit" || cur.Header.Get("ETag") != etag {
		t.Errorf("current (the same root, the same key): %v", cur.Header)
	}
	// Each format its own answer.
	if c := f.get(t, url.Values{"sql": at["sql"], "at": at["at"], "format": {"csv"}}); c.Header.Get(api.HeaderResultCache) != "miss" || c.Header.Get("ETag") == etag {
		t.Errorf("csv: %v", c.Header)
	}
	for range 2 {
		r := f.get(t, url.Values{"sql": {`SELECT random(), datetime('now')`}, "at": at["at"]})
		io.ReadAll(r.Body)
		if r.Header.Get(api.HeaderResultCache) != "off" || r.Header.Get("ETag") != "" || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("not deterministic: %v", r.Header)
		}
	}
	hits := testutil.ToFloat64(f.s.metrics.results.WithLabelValues("hit"))
	misses := testutil.ToFloat64(f.s.metrics.results.WithLabelValues("miss"))
	if hits < 6 || misses != 2 || testutil.ToFloat64(f.s.metrics.results.WithLabelValues("off")) != 2 {
		t.Errorf("hits %v misses %v", hits, misses)
	}
	if r := f.s.metrics.hitRatio(); r != hits/(hits+misses) {
		t.Errorf("hit ratio %v", r)
	}
}

// TestQueryCacheOff: with the cache off answers are never kept, but
// their ETags still get 304s (an ETag names its answer).
func TestQueryCacheOff(t *testing.T) {
	f := newQueryFixture(t, []int{200}, cache.Config{}, Config{ResultBytes: -1})
	v := url.Values{"sql": {`SELECT id FROM edge`}, "at": {f.roots[0].String()}}
	a, b := f.get(t, v), f.get(t, v)
	if a.Header.Get(api.HeaderResultCache) != "off" || b.Header.Get(api.HeaderResultCache) != "off" || a.Header.Get("ETag") == "" || a.Header.Get("ETag") != b.Header.Get("ETag") {
		t.Errorf("cache off: %v / %v", a.Header, b.Header)
	}
	if nm := f.get(t, v, "If-None-Match", a.Header.Get("ETag")); nm.StatusCode != 304 {
		t.Errorf("If-None-Match with the cache off: %s", nm.Status)
	}
	if n := testutil.ToFloat64(f.s.metrics.queries.WithLabelValues("ok")); n != 2 {
		t.Errorf("%v runs, want 2", n)
	}
}

// TestQueryNewVersion: a version published after the first query is
// what the next "current" query reads (fresh=1 at once; without it once
// the service has looked at the manifest again), with no invalidation:
// its key differs. The older version stays readable by its root.
func TestQueryNewVersion(t *testing.T) {
	f := newQueryFixture(t, []int{300}, cache.Config{ManifestTTL: 200 * time.Millisecond}, Config{})
	count := `SELECT count(*) FROM sentences`
	res := readResult(t, f.get(t, url.Values{"sql": {count}}))
	if res.Rows[0][0].Int != 300 || res.Root != f.roots[0].String() {
		t.Fatalf("first version: %v at %s", res.Rows, res.Root)
	}
	f.publish(t, 9, 400)
	res = readResult(t, f.get(t, url.Values{"sql": {count}, "fresh": {"1"}}))
	if res.Rows[0][0].Int != 400 || res.Root != f.roots[1].String() {
		t.Fatalf("fresh=1 after a publish: %v at %s", res.Rows, res.Root)
	}
	f.publish(t, 10, 500)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res = readResult(t, f.get(t, url.Values{"sql": {count}}))
		if res.Rows[0][0].Int == 500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the current version after a publish and 10 s: %v at %s", res.Rows, res.Root)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res := readResult(t, f.get(t, url.Values{"sql": {count}, "at": {f.roots[0].String()}})); res.Rows[0][0].Int != 300 {
		t.Errorf("the first version by its root: %v", res.Rows)
	}
	vs := f.versions(t)
	if len(vs) != 3 || vs[0].Root != f.roots[2].String() || !vs[0].Current || vs[1].Current || vs[2].Parent != "" || vs[0].Parent != vs[1].Root {
		t.Errorf("versions: %+v", vs)
	}
}

func (f *queryFixture) versions(t *testing.T) []api.VersionInfo {
	t.Helper()
	resp, err := http.Get(f.url + api.VersionsPath("db1"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var vs []api.VersionInfo
	if err := json.NewDecoder(resp.Body).Decode(&vs); err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestQuerySingleFlight: identical queries at once run once; the others
// answer from its result.
func TestQuerySingleFlight(t *testing.T) {
	f := newQueryFixture(t, []int{3000}, cache.Config{}, Config{})
	// Slow enough that the others arrive while it runs.
	q := url.Values{"sql": {`SELECT count(*) FROM sentences a, sentences b WHERE a.SentenceId % 7 = b.SentenceId % 11`}, "at": {f.roots[0].String()}}
	const n = 8
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(f.url + api.QueryPath("db1") + "?" + q.Encode())
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			bodies[i], _ = io.ReadAll(resp.Body)
		}()
	}
	wg.Wait()
	for i := range bodies {
		if !bytes.Equal(bodies[i], bodies[0]) || !bytes.Contains(bodies[0], []byte(`"row_count":1`)) {
			t.Fatalf("answer %d: %s, answer 0: %s", i, bodies[i], bodies[0])
		}
	}
	if runs := testutil.ToFloat64(f.s.metrics.queries.WithLabelValues("ok")); runs != 1 {
		t.Errorf("%v runs of %d identical queries at once, want 1", runs, n)
	}
}

// TestQueryLimits: the row and byte limits stop the rows and say so; a
// large answer streams (its status before its end, the counts as
// trailers) and is whole.
func TestQueryLimits(t *testing.T) {
	f := newQueryFixture(t, []int{3000}, cache.Config{}, Config{QueryMaxRows: 1000, QueryMaxBytes: 40_000})
	res := readResult(t, f.get(t, url.Values{"sql": {`SELECT SentenceId FROM sentences ORDER BY SentenceId`}}))
	if len(res.Rows) != 1000 || !res.Truncated || res.RowCount != 1000 {
		t.Errorf("row limit: %d rows, truncated %v", len(res.Rows), res.Truncated)
	}
	res = readResult(t, f.get(t, url.Values{"sql": {`SELECT SentenceId FROM sentences ORDER BY SentenceId LIMIT 1000`}}))
	if len(res.Rows) != 1000 || res.Truncated {
		t.Errorf("exactly the limit: %d rows, truncated %v", len(res.Rows), res.Truncated)
	}
	res = readResult(t, f.get(t, url.Values{"sql": {`SELECT SentenceId FROM sentences ORDER BY SentenceId`}, "max_rows": {"10"}}))
	if len(res.Rows) != 10 || !res.Truncated {
		t.Errorf("max_rows=10: %d rows, truncated %v", len(res.Rows), res.Truncated)
	}
	resp := f.get(t, url.Values{"sql": {`SELECT Text FROM sentences ORDER BY SentenceId`}})
	body, _ := io.ReadAll(resp.Body)
	json.Unmarshal(body, &res)
	if len(body) > 40_000+100 || !res.Truncated || len(res.Rows) == 0 || resp.Header.Get(api.HeaderTruncated) != "true" {
		t.Errorf("byte limit: %d bytes, %d rows, truncated %v", len(body), len(res.Rows), res.Truncated)
	}

	g := newQueryFixture(t, []int{3000}, cache.Config{}, Config{})
	for _, f := range []string{"json", "ndjson", "csv"} {
		resp := g.get(t, url.Values{"sql": {`SELECT a.SentenceId, a.Text FROM sentences a, (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) ORDER BY 1`}, "format": {f}})
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.ContentLength != -1 || len(body) < firstPart || resp.Trailer.Get(api.HeaderRows) != "9000" || resp.Trailer.Get(api.HeaderTruncated) != "false" {
			t.Errorf("%s: a streamed answer: %s, length %d, %d bytes, trailers %v", f, resp.Status, resp.ContentLength, len(body), resp.Trailer)
		}
		if f == "json" {
			var r api.QueryResult
			if err := json.Unmarshal(body, &r); err != nil || len(r.Rows) != 9000 {
				t.Errorf("streamed JSON: %d rows, %v", len(r.Rows), err)
			}
		}
	}
}

// TestQueryCutMidStream: a time limit met after rows went out ends a
// JSON or NDJSON answer with the error in its body, and cuts a CSV one
// off.
func TestQueryCutMidStream(t *testing.T) {
	f := newQueryFixture(t, []int{200}, cache.Config{}, Config{QueryTimeout: 500 * time.Millisecond, QueryMaxRows: 1 << 30, QueryMaxBytes: 1 << 40})
	never := `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i, (SELECT count(*) FROM sentences WHERE SentenceId > i % 100) FROM n`
	resp := f.get(t, url.Values{"sql": {never}, "format": {"ndjson"}})
	if resp.StatusCode != 200 {
		t.Fatalf("never-ending rows: %s", resp.Status)
	}
	st, err := api.NewQueryStream(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = st.Next(); err != nil {
			break
		}
	}
	if e, ok := err.(*api.Error); !ok || e.Kind != api.KindQueryTimeout || st.Trailer.RowCount == 0 {
		t.Errorf("never-ending rows in NDJSON: %v after %d rows", err, st.Trailer.RowCount)
	}
	resp = f.get(t, url.Values{"sql": {never}, "format": {"csv"}})
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("a CSV answer cut by the time limit read as whole")
	}
}

// TestQueryFastPath: a result kept in the cache is answered on the HTTP
// fast path (httpapi.HTTP1: the connection's own goroutine), as net/http
// answers it (the same status, headers and body; a 304 for its ETag);
// a miss, an error and a large answer are handed over to net/http.
func TestQueryFastPath(t *testing.T) {
	f := newQueryFixture(t, []int{3000}, cache.Config{}, Config{})
	h := httpapi.New(httpapi.Config{Cache: f.Cache, Registry: prometheus.NewRegistry(), Routes: f.s.Routes()})
	var taken atomic.Int64
	srv := &httpapi.HTTP1{Server: &http.Server{Handler: h}, Fast: func(w http.ResponseWriter, r *http.Request) bool {
		ok := h.ServeFast(w, r)
		if ok {
			taken.Add(1)
		}
		return ok
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	fast := "http://" + ln.Addr().String()
	ask := func(base string, v url.Values, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+api.QueryPath("db1")+"?"+v.Encode(), nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		// A new connection each time: a connection handed over stays with net/http.
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		resp.Header.Del("Date")
		resp.Header.Del("Server-Timing")
		resp.Header.Del(api.HeaderRootAge) // how old the root is: the two answers differ by when they were made
		return resp, b
	}
	v := url.Values{"sql": {`SELECT id, v FROM edge ORDER BY id`}, "at": {f.roots[0].String()}}
	if r, _ := ask(fast, v); r.Header.Get(api.HeaderResultCache) != "miss" || taken.Load() != 0 {
		t.Fatalf("a miss: %v, taken %d", r.Header, taken.Load())
	}
	for _, tc := range []struct {
		v   url.Values
		hdr []string
	}{
		{v, nil},
		{url.Values{"sql": v["sql"]}, nil}, // current: the same root
		{v, []string{"If-None-Match", `"x", ` + f.s.resultKeyOf(t, v)}},
		{v, []string{"Authorization", "Bearer t"}},
	} {
		before := taken.Load()
		got, gotBody := ask(fast, tc.v, tc.hdr...)
		if taken.Load() != before+1 {
			t.Errorf("%v %v: not answered on the fast path", tc.v, tc.hdr)
		}
		want, wantBody := ask(f.url, tc.v, tc.hdr...) // net/http
		if got.StatusCode != want.StatusCode || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) || !bytes.Equal(gotBody, wantBody) {
			t.Errorf("%v %v: the fast path answered %d %v %q, net/http %d %v %q", tc.v, tc.hdr, got.StatusCode, got.Header, gotBody, want.StatusCode, want.Header, wantBody)
		}
	}
	// Handed over: an error, a query not kept, an answer too large.
	big := url.Values{"sql": {`SELECT Text, Text, Text FROM sentences`}}
	ask(fast, big)
	for _, v := range []url.Values{{"sql": {"SELEKT"}}, {"sql": {"SELECT random()"}}, big, {"sql": {"SELECT 1"}, "fresh": {"1"}}} {
		before := taken.Load()
		if r, _ := ask(fast, v); taken.Load() != before {
			t.Errorf("%v: answered on the fast path (%s, %v)", v, r.Status, r.Header)
		}
	}
}

// resultKeyOf is the ETag of the JSON answer of v's query (at its at=).
func (s *Server) resultKeyOf(t *testing.T, v url.Values) string {
	t.Helper()
	root, err := addr.Parse(v.Get("at"))
	if err != nil {
		t.Fatal(err)
	}
	return newResultKey("db1", root, v.Get("sql"), nil, formatJSON, s.limits.maxRows, s.limits.maxBytes).etag()
}
