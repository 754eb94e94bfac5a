package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
)

// BenchmarkAuthHTTP measures what the token check adds to a GET of one
// chunk from memory, in process (no network): open is the handler alone,
// tokens-N the same behind the guard with N tokens in the file.
func BenchmarkAuthHTTP(b *testing.B) {
	s := newBenchService(b, 64<<20)
	h := New(Config{Cache: s.cache})
	path := api.ChunkPath("bench", s.db.Files[0].Addrs[7])
	run := func(b *testing.B, handler http.Handler, token string) {
		req := httptest.NewRequest("GET", path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	b.Run("open", func(b *testing.B) { run(b, h, "") })
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("tokens-%d", n), func(b *testing.B) {
			var lines strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&lines, "token-%06d-0123456789abcdef other-*\n", i)
			}
			lines.WriteString("the-right-token-0123456789abcdef bench\n")
			file := filepath.Join(b.TempDir(), "tokens")
			os.WriteFile(file, []byte(lines.String()), 0o600)
			tokens, err := auth.Load(file)
			if err != nil {
				b.Fatal(err)
			}
			g := &auth.Guard{Tokens: tokens, Logger: slog.New(slog.DiscardHandler)}
			run(b, New(Config{Cache: s.cache, Guard: g}), "the-right-token-0123456789abcdef")
		})
	}
}
