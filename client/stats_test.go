package client

import (
	"strings"
	"testing"
)

// TestStatsStringCounts: a count of one is written in the singular.
func TestStatsStringCounts(t *testing.T) {
	s := Stats{Memory: TierStats{Chunks: 1, Requests: 1}, Service: TierStats{Chunks: 2, Requests: 1}, Store: TierStats{Requests: 1}}
	got := s.String()
	for _, want := range []string{"memory 1 chunk 0 B of 1 lookup;", "service 2 chunks 0 B in 1 request,", "store 0 chunks 0 B in 1 read ("} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
