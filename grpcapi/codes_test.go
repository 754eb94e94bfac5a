package grpcapi

import (
	"testing"

	"github.com/chunkd/chunkd/cache"
)

// TestEveryKindHasACode: the table covers every kind of the cache's
// errors (a kind left out would answer Internal).
func TestEveryKindHasACode(t *testing.T) {
	for _, k := range cache.Kinds() {
		if _, ok := kindCodes[k]; !ok {
			t.Errorf("kind %q has no gRPC code", k)
		}
	}
}
