package cache

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testdb"
)

// BenchmarkRestart10k measures how long a service takes to find 10,000
// cached files again at startup (it trusts verified files: a directory
// walk and a stat each, no reads).
func BenchmarkRestart10k(b *testing.B) {
	dir := b.TempDir()
	st := testdb.NewStore(b)
	body := bytes.Repeat([]byte{1}, 4096)
	if err := os.WriteFile(filepath.Join(dir, api.CacheLayoutFile), []byte(api.CacheLayout), 0o644); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 10_000; i++ {
		p := filepath.Join(dir, tablesDir, "db"+strconv.Itoa(i%100), addrOfInt(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := New(Config{Store: st, CacheDir: dir, NoFsync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		if n := c.disk.fileCount(); n != 10_000 {
			b.Fatalf("found %d files", n)
		}
		c.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/restart")
}

func addrOfInt(i int) string {
	return addr.Of([]byte(strconv.Itoa(i))).String()
}
