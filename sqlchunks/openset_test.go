package sqlchunks

import (
	"context"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
)

// TestOpenSet: a fresh client of a cache service opens the head version
// from its open set, one request: after it, a point lookup reads only
// its leaf; results are the local file's. The import lists the interior
// pages in the root.
func TestOpenSet(t *testing.T) {
	s := newFolder(t)
	path := genDB(t, 11)
	res := importFile(t, s, path, ImportOptions{DB: "os", Message: "first"})
	plain := plainDB(t, path)
	_, url := startService(t, s, 0)
	ctx := context.Background()

	c := newServiceOnlyClient(t, "os", url)
	r, err := readRoot(ctx, c, res.Root)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.interior) == 0 {
		t.Fatal("the import listed no interior pages")
	}
	before := c.Stats()
	d, err := OpenVersion(ctx, c, addr.Addr{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if st := c.Stats().Sub(before); st.Service.Requests != 1 {
		t.Fatalf("open: %d requests, want 1 (the open set): %v", st.Service.Requests, st)
	}
	before = c.Stats()
	var n int
	if err := d.QueryRow(`SELECT count(*) FROM translations WHERE SentenceId = 4242`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	st := c.Stats().Sub(before)
	t.Logf("first point lookup after the open: %d requests (%d pages of interior and page 1 preloaded)", st.Service.Requests, len(r.interior)+1)
	if st.Service.Requests > 1 { // with the open's: at most 2, one after the other
		t.Fatalf("first point lookup after the open: %d requests: %v", st.Service.Requests, st)
	}
	sameResults(t, "opened from the open set", plain, d.DB, queries)

	// A set that is not the version's (a lying service) is not used.
	lying := &lyingSet{ChunkReader: newServiceOnlyClient(t, "os", url)}
	d2, err := OpenVersion(ctx, lying, addr.Addr{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	sameResults(t, "a lying open set", plain, d2.DB, queries[:2])
	if !lying.asked {
		t.Fatal("the open set was not asked for")
	}
}

// newServiceOnlyClient is a client of the service at url alone.
func newServiceOnlyClient(t *testing.T, db, url string) *client.Client {
	c, err := client.Open(context.Background(), client.Options{DB: db, Service: url, MemBytes: -1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lyingSet gives an open set with one chunk's bytes changed.
type lyingSet struct {
	ChunkReader
	asked bool
}

func (l *lyingSet) ReadOpenSet(ctx context.Context, root addr.Addr, pages bool) (addr.Addr, [][]byte, error) {
	l.asked = true
	head, chunks, err := l.ChunkReader.(SetReader).ReadOpenSet(ctx, root, pages)
	if err == nil && len(chunks) > 2 {
		chunks[2] = append([]byte(nil), chunks[2]...)
		chunks[2][0] ^= 1
	}
	return head, chunks, err
}
