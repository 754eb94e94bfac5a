package cache

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKnowsNoTransport: the core imports no transport (packages httpapi
// and grpcapi serve it) and no feature that plugs into them.
func TestKnowsNoTransport(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"net/http", "google.golang.org/grpc", "github.com/chunkd/chunkd/httpapi", "github.com/chunkd/chunkd/grpcapi",
		"github.com/chunkd/chunkd/sqlserve", "github.com/chunkd/chunkd/doltremote", "github.com/chunkd/chunkd/sqlchunks"}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pf.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
	}
}
