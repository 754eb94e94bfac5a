package bench

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

func TestParseByteRange(t *testing.T) {
	for _, c := range []struct {
		spec        string
		first, last int64
		bad         bool
	}{
		{spec: "bytes=0-9", first: 0, last: 9},
		{spec: "bytes=90-99", first: 90, last: 99},
		{spec: "bytes=95-200", first: 95, last: 99}, // cut at the end
		{spec: "bytes=0-1048575", first: 0, last: 99},
		{spec: "bytes=100-109", bad: true}, // starts past the end
		{spec: "bytes=5-", bad: true},
		{spec: "bytes=-5", bad: true},
		{spec: "bytes=9-5", bad: true},
		{spec: "bytes=0-1,5-6", bad: true},
		{spec: "items=0-9", bad: true},
		{spec: "bytes=a-9", bad: true},
	} {
		first, last, err := parseByteRange(c.spec, 100)
		if c.bad {
			if err == nil {
				t.Errorf("%q: accepted as %d-%d", c.spec, first, last)
			}
			continue
		}
		if err != nil || first != c.first || last != c.last {
			t.Errorf("%q = %d-%d, %v; want %d-%d", c.spec, first, last, err, c.first, c.last)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"1.22.1", true}, {"1.19.5", true}, {"1.19.4", false}, {"1.18.0", false}, {"2.0", true}, {"1.19", false}, {"x", false}} {
		if got := versionAtLeast(c.v, 1, 19, 5); got != c.want {
			t.Errorf("versionAtLeast(%q, 1.19.5) = %v", c.v, got)
		}
	}
}

// TestRangeOrigin checks the origin nginx reads from answers ranges with
// the store's bytes, as an object store would.
func TestRangeOrigin(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	data := make([]byte, 1000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := st.Put(ctx, "db/obj", data); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rangeOrigin{st, "db/obj", int64(len(data))})
	defer srv.Close()
	get := func(path, rng string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	resp, body := get("/db/obj", "bytes=100-199")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[100:200]) || resp.Header.Get("Content-Range") != "bytes 100-199/1000" {
		t.Errorf("range 100-199: %s, %d bytes, Content-Range %q", resp.Status, len(body), resp.Header.Get("Content-Range"))
	}
	resp, body = get("/db/obj", "bytes=900-1999")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[900:]) || resp.Header.Get("Content-Range") != "bytes 900-999/1000" {
		t.Errorf("range 900-1999: %s, %d bytes, Content-Range %q", resp.Status, len(body), resp.Header.Get("Content-Range"))
	}
	if resp, body = get("/db/obj", ""); resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
		t.Errorf("whole object: %s, %d bytes", resp.Status, len(body))
	}
	if resp, _ = get("/db/obj", "bytes=1000-1001"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || resp.Header.Get("Content-Range") != "bytes */1000" {
		t.Errorf("range past the end: %s, Content-Range %q", resp.Status, resp.Header.Get("Content-Range"))
	}
	if resp, _ = get("/db/other", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another key: %s", resp.Status)
	}
}

// TestNginxPeer runs the nginx peer over a table file: every chunk's
// record read through it is the store's bytes and decodes to a chunk with
// its address; the second read of each is a cache hit; stopping it ends
// its processes.
func TestNginxPeer(t *testing.T) {
	ctx := context.Background()
	bin, version, err := nginxBinary(ctx)
	if err != nil {
		t.Skipf("the nginx peer needs nginx with the slice module: %v", err)
	}
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := testdb.Make(ctx, st, "db", testdb.Options{Chunks: 300, ChunkSize: 4096, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	f := db.Files[0]
	tf, err := tablefile.Open(store.ReaderAt(ctx, st, f.Key), f.Size, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := startNginx(ctx, bin, version, dir, st, f.Key, f.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if pids := p.pids(); len(pids) < 1+p.workers {
		t.Errorf("nginx's processes: %v, want a master and %d workers", pids, p.workers)
	}
	cc := newChunkClient(1, 4096)
	for pass := range 2 {
		for _, a := range f.Addrs {
			e, ok := tf.Lookup(a)
			if !ok {
				t.Fatalf("chunk %s not in the index", a)
			}
			status, err := cc.getRange(ctx, 0, p.url, newByteRange(e.Offset, e.Length))
			if err != nil {
				t.Fatalf("pass %d, chunk %s: %v", pass, a, err)
			}
			if pass == 1 && status != "HIT" {
				t.Fatalf("pass %d, chunk %s: cache status %q, want HIT", pass, a, status)
			}
			got := cc.bufs[0][:e.Length]
			stored := make([]byte, e.Length)
			if _, err := st.ReadAt(ctx, f.Key, stored, int64(e.Offset)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, stored) {
				t.Fatalf("pass %d, chunk %s: nginx's bytes differ from the store's", pass, a)
			}
			data, err := tf.Decode(e, got)
			if err != nil {
				t.Fatalf("chunk %s: %v", a, err)
			}
			if addr.Of(data) != a {
				t.Fatalf("chunk %s: nginx's record decodes to %s", a, addr.Of(data))
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cache")); err != nil {
		t.Errorf("no cache dir under the peer's dir: %v", err)
	}
	pids := p.pids()
	p.close()
	for _, pid := range pids {
		if st, err := procStat(pid); err == nil && st[0] != "Z" {
			t.Errorf("nginx's process %s still runs after close", pid)
		}
	}
}
