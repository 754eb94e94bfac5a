package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

func TestPaths(t *testing.T) {
	a := addr.MustParse("0123456789abcdefghijklmnopqrstuv")
	if got, want := ChunkPath("mydb", a), "/v1/dbs/mydb/chunks/0123456789abcdefghijklmnopqrstuv"; got != want {
		t.Fatalf("ChunkPath: got %q, want %q", got, want)
	}
	if got, want := ChunksPath("my db/x"), "/v1/dbs/my%20db%2Fx/chunks"; got != want {
		t.Fatalf("ChunksPath: got %q, want %q", got, want)
	}
	if got, want := DBPath("d"), "/v1/dbs/d"; got != want {
		t.Fatalf("DBPath: got %q, want %q", got, want)
	}
	for _, tc := range []struct {
		root         addr.Addr
		fresh, pages bool
		want         string
	}{
		{addr.Addr{}, false, true, "/v1/dbs/d/sqlite/open"},
		{addr.Addr{}, true, true, "/v1/dbs/d/sqlite/open?fresh=1"},
		{addr.Addr{}, true, false, "/v1/dbs/d/sqlite/open?fresh=1&pages=0"},
		{a, true, false, "/v1/dbs/d/sqlite/open?pages=0&root=" + a.String()}, // a root needs no freshness
	} {
		if got := OpenSetPath("d", tc.root, tc.fresh, tc.pages); got != tc.want {
			t.Errorf("OpenSetPath(%v, fresh %v, pages %v): got %q, want %q", tc.root, tc.fresh, tc.pages, got, tc.want)
		}
	}
}

// TestPatterns checks that the route patterns match the paths the helpers
// make, and give back the database name and address, whatever the name.
func TestPatterns(t *testing.T) {
	var route, db, address string
	mux := http.NewServeMux()
	for _, p := range []string{PatternChunk, PatternChunks, PatternDB} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			route, db, address = p, r.PathValue("db"), r.PathValue("address")
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	a := addr.Of([]byte("chunk"))
	for _, name := range []string{"mydb", "my db", "a/b", "ünï?#%", "..", ".", "x.y-z_1"} {
		for _, c := range []struct {
			method, path, route, address string
		}{
			{"GET", ChunkPath(name, a), PatternChunk, a.String()},
			{"POST", ChunksPath(name), PatternChunks, ""},
			{"GET", DBPath(name), PatternDB, ""},
		} {
			route, db, address = "", "", ""
			req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || route != c.route || db != name || address != c.address {
				t.Errorf("%s %s: status %d, route %q db %q address %q; want route %q db %q address %q",
					c.method, c.path, resp.StatusCode, route, db, address, c.route, name, c.address)
			}
		}
	}
}

func TestErrorRoundTrip(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set(HeaderTier, "memory") // set before the failure; must not leak
	WriteError(rec, http.StatusNotFound, `chunk "x" not found`)
	resp := rec.Result()
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != ContentTypeJSON || resp.Header.Get(HeaderTier) != "" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	body := rec.Body.String()
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil || len(raw) != 1 || raw["error"] != `chunk "x" not found` {
		t.Fatalf("body %q: %v", body, err)
	}
	resp.Body = io.NopCloser(strings.NewReader(body))
	e := ReadError(resp)
	if e.Code != 404 || e.Message != `chunk "x" not found` {
		t.Fatalf("ReadError: %+v", e)
	}
	var err error = e
	if got, want := err.Error(), `chunkd: 404 Not Found: chunk "x" not found`; got != want {
		t.Fatalf("Error(): got %q, want %q", got, want)
	}
	if got := (&Error{Message: "m"}).Error(); got != "chunkd: m" {
		t.Fatalf("Error() without code: %q", got)
	}
}

func TestReadErrorNotJSON(t *testing.T) {
	for _, c := range []struct {
		body, want string
	}{
		{"upstream connect error\nmore detail\n", "upstream connect error"},
		{"", "Bad Gateway"},
		{"   \n", "Bad Gateway"},
		{`{"error": ""}`, `{"error": ""}`},
		{strings.Repeat("x", 200), strings.Repeat("x", 64) + "…"},
	} {
		resp := &http.Response{StatusCode: 502, Body: io.NopCloser(strings.NewReader(c.body))}
		if e := ReadError(resp); e.Code != 502 || e.Message != c.want {
			t.Errorf("body %q: got %+v, want message %q", c.body, e, c.want)
		}
	}
	if e := ReadError(&http.Response{StatusCode: 500}); e.Message != "Internal Server Error" {
		t.Fatalf("nil body: %+v", e)
	}
}

func TestDBInfoJSON(t *testing.T) {
	info := DBInfo{
		Name: "mydb",
		Root: "0123456789abcdefghijklmnopqrstuv",
		Tables: []TableInfo{
			{Name: "t1", Size: 1000, Chunks: 12, State: StateCached, Downloaded: 1000},
			{Name: "t2", Size: 50, Chunks: 1, Appendix: true, State: StateDownloading, Downloaded: 10},
		},
	}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"mydb","root":"0123456789abcdefghijklmnopqrstuv","tables":[` +
		`{"name":"t1","size":1000,"chunks":12,"appendix":false,"state":"cached","downloaded":1000},` +
		`{"name":"t2","size":50,"chunks":1,"appendix":true,"state":"downloading","downloaded":10}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back DBInfo
	if err := json.Unmarshal(b, &back); err != nil || back.Tables[1] != info.Tables[1] || back.Name != info.Name {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}
