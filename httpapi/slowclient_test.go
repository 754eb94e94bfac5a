package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A client that sends its batch too slowly, or stops reading the answer,
// is cut off after ClientTimeout, and holds no cached file meanwhile.

const slowTimeout = 300 * time.Millisecond

// slowFixture caches one file of large chunks (so an answer does not fit
// in socket buffers) and serves it over HTTP.
func slowFixture(t *testing.T) (*fixture, *httptest.Server) {
	f := newFixture(t, testdb.Options{Chunks: 300, ChunkSize: 64 << 10}, Config{MemBytes: 1, ClientTimeout: slowTimeout})
	f.get(f.db.Files[0].Addrs[0])
	f.waitDownloads(1)
	srv := httptest.NewServer(NewHandler(f.cache, prometheus.NewRegistry()))
	t.Cleanup(srv.Close)
	return f, srv
}

// pinned reports how many readers hold the fixture's cached file.
func pinned(f *fixture) int {
	cf := f.cache.disk.get(f.db.Files[0].Key)
	if cf == nil {
		return -1
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	return cf.refs
}

// TestSlowBatchBody: a batch whose body trickles in is refused once the
// client has taken ClientTimeout to send it.
func TestSlowBatchBody(t *testing.T) {
	_, srv := slowFixture(t)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n", api.ChunksPath("db1"))
	conn.Write(make([]byte, 20)) // one address of ten, then nothing
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if took := time.Since(start); err != nil || !strings.Contains(status, "400") || took > 5*time.Second {
		t.Fatalf("trickled body: %q, %v after %v; want a 400 after about %v", status, err, took, slowTimeout)
	}
}

// TestStalledBatchReader: a client that asks for a large batch and never
// reads the answer pins no file while the answer waits to be written, and
// is cut off after ClientTimeout.
func TestStalledBatchReader(t *testing.T) {
	f, srv := slowFixture(t)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var body []byte
	for _, a := range f.db.Files[0].Addrs {
		body = append(body, a[:]...)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", api.ChunksPath("db1"), len(body))
	conn.Write(body)
	// The answer (~19 MiB) is stuck in the socket; the file must be free.
	deadline := time.Now().Add(time.Minute)
	for pinned(f) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a stalled reader pins the cached file (%d readers)", pinned(f))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// And the request ends, cut off: the handler's metrics count it.
	for testutil.ToFloat64(f.cache.metrics.requests.WithLabelValues("http_get_chunks", "aborted")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled batch never ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if f.cache.disk.reserve(f.cache.disk.max) != nil { // everything is evictable
		t.Fatal("the cached file could not be evicted after the stalled batch")
	}
}

// TestStalledGRPCStream: a gRPC client that stops receiving a streamed
// batch is cut off after ClientTimeout (DeadlineExceeded), and pins
// nothing meanwhile.
func TestStalledGRPCStream(t *testing.T) {
	f, _ := slowFixture(t)
	conn := grpcFixture(t, f)
	var as [][]byte
	for _, a := range f.db.Files[0].Addrs {
		as = append(as, a[:])
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := chunkpb.NewChunkCacheClient(conn).GetChunks(ctx, &chunkpb.GetChunksRequest{Db: "db1", Addresses: as})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // one, then stop reading
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for testutil.ToFloat64(f.cache.metrics.requests.WithLabelValues("grpc_get_chunks", "DeadlineExceeded")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled stream was never cut off")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := pinned(f); n != 0 {
		t.Fatalf("%d readers hold the file after the stream was cut", n)
	}
}
