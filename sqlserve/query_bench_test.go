package sqlserve

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkQueryHit is the service's work for a query answered by the
// result cache on the fast path (a title5 statement), without the
// network: routing by hand, parsing the request, the current root, the
// key, the lookup and the answer's headers and body.
func BenchmarkQueryHit(b *testing.B) {
	f := newQueryFixture(b, []int{300}, cache.Config{}, Config{})
	h := httpapi.New(httpapi.Config{Cache: f.Cache, Registry: prometheus.NewRegistry(), Routes: f.s.Routes()})
	// A statement as long as title5's, with a string parameter.
	v := url.Values{"sql": {"SELECT s.Text FROM sentences AS s JOIN translations AS t ON t.TranslationId = s.SentenceId WHERE s.Text = ? AND s.Lang = 'eng'"}, "params": {`["The Long Goodbye"]`}}
	target := api.QueryPath("db1") + "?" + v.Encode()
	f.get(b, v) // kept
	req := httptest.NewRequest("GET", target, nil)
	req.Header.Set("Accept", "*/*")
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		if !h.ServeFast(w, req) || w.Header().Get(api.HeaderResultCache) != "hit" {
			b.Fatalf("not a hit on the fast path: %v", w.Header())
		}
	}
}
