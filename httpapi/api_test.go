package httpapi

import (
	"testing"

	"github.com/chunkd/chunkd/api"
)

// TestMayOutrankChunk: only a route that the mux could pick for some
// chunk read turns the chunk fast path off; the service's own routes
// under /v1/dbs/ (root, query, images, host, ...) do not.
func TestMayOutrankChunk(t *testing.T) {
	for _, p := range []string{
		api.PatternRoot, api.PatternDB, api.PatternChunks, api.PatternOpenSet, api.PatternVersionImage,
		api.PatternImages, api.PatternImage, api.PatternImageFill, api.PatternQuery, api.PatternQueryPost,
		api.PatternVersions, api.PatternDBs, api.PatternCache, api.PatternDropCache, api.PatternHost,
		api.PatternCluster, api.PatternClusterFiles, api.PatternDoltFiles, "GET /{$}", "GET /console/",
		"GET /v1/dbs/{db}/chunks/{address}/more", "GET /v1/dbs/{db}/chunks/{$}", "POST /v1/dbs/{db}/chunks/{a}",
	} {
		if mayOutrankChunk(p) {
			t.Errorf("%q cannot take a chunk read, but turns the fast path off", p)
		}
	}
	for _, p := range []string{
		"GET /v1/dbs/special/chunks/{a}", "GET /v1/dbs/{db}/chunks/{a...}", "/v1/dbs/", "GET /v1/",
		"GET /{rest...}", "example.com/", "GET example.com/v1/dbs/{db}/chunks/{a}", "/v1/dbs/{db}/chunks/{a}",
		"GET /v1/dbs/{db}/{kind}/{a}",
	} {
		if !mayOutrankChunk(p) {
			t.Errorf("%q may take a chunk read, but leaves the fast path on", p)
		}
	}
}
