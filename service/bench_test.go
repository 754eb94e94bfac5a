package service_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/spin"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/service"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchService is an in-process service on loopback TCP with one
// database of 16 KiB chunks whose file is already on disk.
type benchService struct {
	db     *testdb.DB
	svc    *service.Service
	url    string
	gconn  *grpc.ClientConn
	client *http.Client
}

func newBenchService(b *testing.B, memBytes int64) *benchService {
	b.Helper()
	ctx := context.Background()
	st := testdb.NewStore(b)
	db := testdb.MustMake(b, st, "bench", testdb.Options{Files: 1, Chunks: 2000, ChunkSize: 16 << 10})
	svc := start(b, service.Config{Cache: cache.Config{Store: st, CacheDir: b.TempDir(), MemBytes: memBytes, NoFsync: true},
		HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0", Spin: spin.DefaultMax})
	s := &benchService{db: db, svc: svc, url: svc.URL(), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	var err error
	s.gconn, err = grpc.NewClient(svc.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.gconn.Close() })
	// Download the file, then warm the memory tier if it is big enough.
	c := svc.Cache
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
	return s
}

// latencies runs op b.N times and reports p50 and p99 in microseconds.
func latencies(b *testing.B, op func(i int) error) {
	b.Helper()
	d := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		d[i] = time.Since(start)
	}
	b.StopTimer()
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

func httpGet(c *http.Client, url string, want api.Tier) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || n != 16<<10 {
		return fmt.Errorf("unexpected response: %d, %d bytes", resp.StatusCode, n)
	}
	if want != 0 && resp.Header.Get(api.HeaderTier) != want.String() {
		return fmt.Errorf("served from %s, want %s", resp.Header.Get(api.HeaderTier), want)
	}
	return nil
}

// readSyscalls returns this process's read syscall count.
func readSyscalls(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skip("no /proc/self/io")
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no syscr in /proc/self/io")
	return 0
}

// BenchmarkGetChunk compares GetChunk over HTTP and gRPC, for memory and
// disk hits of 16 KiB chunks on loopback, with a bare Go HTTP server
// returning 16 KiB as the floor. Run side by side in one invocation:
//
//	go test -run '^$' -bench GetChunk -benchtime 5000x ./service/
func BenchmarkGetChunk(b *testing.B) {
	payload := bytes.Repeat([]byte{7}, 16<<10)
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeBinary)
		w.Write(payload)
	}))
	defer bare.Close()
	bareClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Run("bare-http", func(b *testing.B) {
		latencies(b, func(int) error { return httpGet(bareClient, bare.URL+"/chunk", 0) })
	})
	for _, tc := range []struct {
		name string
		mem  int64
		tier api.Tier
	}{{"memory", 256 << 20, api.TierMemory}, {"disk", 1, api.TierDisk}} {
		s := newBenchService(b, tc.mem)
		addrs := s.db.Files[0].Addrs
		urls := make([]string, len(addrs))
		for i, a := range addrs {
			urls[i] = s.url + api.ChunkPath("bench", a)
		}
		b.Run("http-"+tc.name, func(b *testing.B) {
			before := readSyscalls(b)
			latencies(b, func(i int) error { return httpGet(s.client, urls[i%len(urls)], tc.tier) })
			b.ReportMetric(float64(readSyscalls(b)-before)/float64(b.N), "read-syscalls/op")
		})
		gc := chunkpb.NewChunkCacheClient(s.gconn)
		b.Run("grpc-"+tc.name, func(b *testing.B) {
			latencies(b, func(i int) error {
				a := addrs[i%len(addrs)]
				r, err := gc.GetChunk(context.Background(), &chunkpb.GetChunkRequest{Db: "bench", Address: a[:]})
				if err != nil {
					return err
				}
				if !r.Found || api.Tier(r.Tier) != tc.tier {
					return fmt.Errorf("wrong tier %s", api.Tier(r.Tier))
				}
				return nil
			})
		})
	}
}

// BenchmarkDiskReadsPerChunk measures the read syscalls a disk-served
// chunk costs: the same HTTP requests served from memory and from disk,
// and the difference per request is what serving from disk adds.
func BenchmarkDiskReadsPerChunk(b *testing.B) {
	mem := newBenchService(b, 256<<20)
	disk := newBenchService(b, 1)
	run := func(s *benchService, tier api.Tier) int64 {
		addrs := s.db.Files[0].Addrs
		before := readSyscalls(b)
		for i := 0; i < b.N; i++ {
			if err := httpGet(s.client, s.url+api.ChunkPath("bench", addrs[i%len(addrs)]), tier); err != nil {
				b.Fatal(err)
			}
		}
		return readSyscalls(b) - before
	}
	b.ResetTimer()
	m := run(mem, api.TierMemory)
	d := run(disk, api.TierDisk)
	b.ReportMetric(float64(d-m)/float64(b.N), "disk-reads/chunk")
}
