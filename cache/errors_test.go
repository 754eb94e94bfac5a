package cache

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestErrorTableDocumented: every kind's HTTP status and gRPC code (the
// kinds table) is a row of docs/service.md's error table, and every row
// of that table with a gRPC code is some kind's, so the two cannot drift.
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
	for k, v := range kinds {
		pair := fmt.Sprintf("%d %s", v.http, strings.ToUpper(upper.ReplaceAllString(v.grpc.String(), "${1}_${2}")))
		kinded[pair] = true
		if !documented[pair] {
			t.Errorf("kind %q (%s) has no row in docs/service.md's error table", k, pair)
		}
	}
	for pair := range documented {
		if !kinded[pair] && !strings.HasPrefix(pair, "401 ") && !strings.HasPrefix(pair, "403 ") { // the token checks answer those (auth.go)
			t.Errorf("docs/service.md's error table has %s, which no kind answers", pair)
		}
	}
}
