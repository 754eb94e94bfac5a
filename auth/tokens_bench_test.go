package auth

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkLookup measures one token lookup in a file of n tokens.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("tokens-%d", n), func(b *testing.B) {
			var lines strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&lines, "token-%06d-0123456789abcdef db-*\n", i)
			}
			s, err := Parse(strings.NewReader(lines.String()), "tokens")
			if err != nil {
				b.Fatal(err)
			}
			want := fmt.Sprintf("token-%06d-0123456789abcdef", n/2)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok := s.Lookup(want); !ok {
					b.Fatal("not found")
				}
			}
		})
	}
}
