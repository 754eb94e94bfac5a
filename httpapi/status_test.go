package httpapi

import (
	"testing"

	"github.com/chunkd/chunkd/cache"
)

// TestEveryKindHasAStatus: the table covers every kind of the cache's
// errors (a kind left out would answer 500).
func TestEveryKindHasAStatus(t *testing.T) {
	for _, k := range cache.Kinds() {
		if _, ok := statuses[k]; !ok {
			t.Errorf("kind %q has no HTTP status", k)
		}
	}
}
