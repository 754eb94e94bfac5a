package grpcapi_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/grpcapi"
	"github.com/chunkd/chunkd/httpapi"
)

// TestErrorTableDocumented: every kind of the cache's errors has an HTTP
// status (httpapi) and a gRPC code (grpcapi), the pair is a row of
// docs/service.md's error table, and every row of that table with a gRPC
// code is some kind's, so the three cannot drift.
func TestErrorTableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/service.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([A-Z_]+)` \\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]+" "+m[2]] = true
	}
	upper := regexp.MustCompile("([a-z])([A-Z])")
	kinded := map[string]bool{}
	for _, k := range cache.Kinds() {
		err := cache.Errorf(k, nil, "an error of kind %v", k)
		status, code := httpapi.Status(err), grpcapi.Code(err)
		pair := fmt.Sprintf("%d %s", status, strings.ToUpper(upper.ReplaceAllString(code.String(), "${1}_${2}")))
		kinded[pair] = true
		if !documented[pair] {
			t.Errorf("kind %q (%s) has no row in docs/service.md's error table", k, pair)
		}
	}
	for pair := range documented {
		if !kinded[pair] && !strings.HasPrefix(pair, "401 ") && !strings.HasPrefix(pair, "403 ") { // the guard answers those (package auth)
			t.Errorf("docs/service.md's error table has %s, which no kind answers", pair)
		}
	}
}
