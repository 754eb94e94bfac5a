package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
)

// The API handlers under arbitrary requests, against a healthy store: no
// panic, no 5xx (nothing the client sends is the service's fault), and
// every chunk answered hashes to its address. The seed corpus runs with
// the test command; go test -fuzz=FuzzHTTPAPI ./httpapi explores further.

func FuzzHTTPAPI(f *testing.F) {
	a := addr.Of([]byte("seed"))
	for _, seed := range []struct {
		method, path string
		body         []byte
	}{
		{"GET", "/v1/dbs/db1", nil},
		{"GET", "/v1/dbs/db1/chunks/" + a.String(), nil},
		{"POST", "/v1/dbs/db1/chunks", a[:]},
		{"POST", "/v1/dbs/db1/chunks", bytes.Repeat(a[:], 3)},
		{"POST", "/v1/dbs/db1/chunks", []byte("short")},
		{"POST", "/v1/dbs/db1/chunks", make([]byte, api.MaxBatchBody+20)},
		{"GET", "/v1/dbs/..%2F..%2Fetc/chunks/" + a.String(), nil},
		{"GET", "/v1/dbs/db1/chunks/zzzz", nil},
		{"GET", "/v1/dbs/%00/chunks/" + a.String(), nil},
		{"DELETE", "/v1/dbs/db1", nil},
		{"GET", "/v1/dbs/nosuch/chunks/" + a.String(), nil},
		{"PUT", "/metrics", nil},
		{"GET", "/readyz", nil},
	} {
		f.Add(seed.method, seed.path, seed.body)
	}
	fx := newFixture(f, testdb.Options{Chunks: 20, Files: 2}, cache.Config{MemBytes: 1 << 20})
	h := newAPI(fx)
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#?") {
			return // not a request line a client can send
		}
		req, err := http.NewRequest(method, "http://chunkd"+path, bytes.NewReader(body))
		if err != nil {
			return // nor is this (a bad method, say)
		}
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil && p != http.ErrAbortHandler {
					t.Fatalf("%s %s: panic %v", method, path, p)
				}
			}()
			h.ServeHTTP(rec, req)
		}()
		if rec.Code >= 500 {
			t.Fatalf("%s %s (%d-byte body): %d %s", method, path, len(body), rec.Code, rec.Body.String())
		}
		if rec.Code == 200 && method == "GET" && strings.Contains(path, "/chunks/") {
			a, err := addr.Parse(path[strings.LastIndexByte(path, '/')+1:])
			if err != nil || addr.Of(rec.Body.Bytes()) != a {
				t.Fatalf("GET %s: 200 with bytes that do not hash to the address", path)
			}
		}
	})
}
