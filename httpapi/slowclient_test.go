package httpapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/cachetest"
	"github.com/chunkd/chunkd/internal/testdb"
)

// A client that sends its batch too slowly, or stops reading the answer,
// is cut off after ClientTimeout, and holds no cached file meanwhile.

const slowTimeout = 300 * time.Millisecond

// slowFixture caches one file of large chunks (so an answer does not fit
// in socket buffers) and serves it over HTTP.
func slowFixture(t *testing.T) (*cachetest.Fixture, *httptest.Server) {
	f := newFixture(t, testdb.Options{Chunks: 300, ChunkSize: 64 << 10}, cache.Config{MemBytes: 1})
	f.Get(f.DB.Files[0].Addrs[0])
	f.WaitCached()
	srv := httptest.NewServer(New(Config{Cache: f.Cache, Registry: f.Registry, ClientTimeout: slowTimeout}))
	t.Cleanup(srv.Close)
	return f, srv
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
	for _, a := range f.DB.Files[0].Addrs {
		body = append(body, a[:]...)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", api.ChunksPath("db1"), len(body))
	conn.Write(body)
	// The answer (~19 MiB) is stuck in the socket; the file must be free.
	deadline := time.Now().Add(time.Minute)
	for f.Cache.FilesInUse() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a stalled reader pins the cached file (%d readers)", f.Cache.FilesInUse())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// And the request ends, cut off: the handler's metrics count it.
	for f.Requests("http_get_chunks", "aborted") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled batch never ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
