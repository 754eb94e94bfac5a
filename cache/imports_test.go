package cache

import (
	"testing"

	"github.com/chunkd/chunkd/internal/imports"
)

// TestKnowsNoTransport: the core imports no transport (packages httpapi
// and grpcapi serve it) and no feature that plugs into them.
func TestKnowsNoTransport(t *testing.T) {
	imports.Refuse(t, "the cache core knows no transport and no feature",
		"net/http", "google.golang.org/grpc", "github.com/chunkd/chunkd/httpapi", "github.com/chunkd/chunkd/grpcapi",
		"github.com/chunkd/chunkd/sqlserve", "github.com/chunkd/chunkd/doltremote", "github.com/chunkd/chunkd/sqlchunks")
}
