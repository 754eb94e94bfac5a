package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
)

// benchService is a cache with one database, "bench", of 2,000 chunks of
// 16 KiB, its file on disk and, if memBytes holds them, every chunk in
// memory.
type benchService struct {
	db    *testdb.DB
	cache *cache.Cache
}

func newBenchService(b *testing.B, memBytes int64) *benchService {
	b.Helper()
	ctx := context.Background()
	st := testdb.NewStore(b)
	db := testdb.MustMake(b, st, "bench", testdb.Options{Files: 1, Chunks: 2000, ChunkSize: 16 << 10})
	c, err := cache.New(cache.Config{Store: st, CacheDir: b.TempDir(), MemBytes: memBytes, NoFsync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.GetChunk(ctx, "bench", db.Files[0].Addrs[0]); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitCached(ctx, "bench", time.Minute, nil); err != nil {
		b.Fatal(err)
	}
	for _, a := range db.Files[0].Addrs {
		if _, err := c.GetChunk(ctx, "bench", a); err != nil {
			b.Fatal(err)
		}
	}
	return &benchService{db: db, cache: c}
}

// BenchmarkHTTP1ChunkRead measures what a memory hit costs the service on
// its fast path (HTTP1, the API's handler, as chunkd serve runs them): one
// client on a raw loopback connection writes net/http's request for a
// chunk and reads the answer; allocs/op are the service's (the client
// reuses its buffers). Profile the service's side with -cpuprofile:
//
//	go test -run '^$' -bench HTTP1ChunkRead -benchtime 20000x -cpuprofile cpu.out ./httpapi/
func BenchmarkHTTP1ChunkRead(b *testing.B) {
	s := newBenchService(b, 256<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	router := New(Config{Cache: s.cache})
	h1 := &HTTP1{Server: &http.Server{Handler: router}, Fast: router.ServeFast}
	go h1.Serve(ln) //nolint:errcheck // ends with Close
	b.Cleanup(func() { h1.Close() })
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	addrs := s.db.Files[0].Addrs
	reqs := make([][]byte, len(addrs))
	for i, a := range addrs {
		reqs[i] = []byte("GET " + api.ChunkPath("bench", a) + " HTTP/1.1\r\nHost: " + ln.Addr().String() + "\r\nUser-Agent: Go-http-client/1.1\r\n\r\n")
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	body := make([]byte, 16<<10)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := nc.Write(reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		n := -1
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(line) == 2 {
				break
			}
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
			}
		}
		if n != len(body) {
			b.Fatalf("answer of %d bytes, want %d", n, len(body))
		}
		if _, err := io.ReadFull(br, body); err != nil {
			b.Fatal(err)
		}
	}
}
