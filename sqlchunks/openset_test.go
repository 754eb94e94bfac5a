package sqlchunks

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
)

// TestOpenSet: a fresh client of a cache service opens the head version
// from its open set, one request: after it, a point lookup reads only
// its leaf; results are the local file's. The import lists the interior
// pages in the root.
func TestOpenSet(t *testing.T) {
	path := genDB(t, 11)
	res, url, c := serveVersion(t, path, ImportOptions{DB: "os", Message: "first"})
	plain := plainDB(t, path)
	ctx := context.Background()

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

	// A set with a wrong chunk (a lying service) gives the right results:
	// here page 1, which is read through the client instead
	// (TestOpenSetChecks tries every chunk of a set).
	lying := &lyingSet{ChunkReader: newServiceOnlyClient(t, "os", url), at: 2}
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

// TestOpenSetChecks: a version opened from its open set checks the root
// chunk and the map levels above the leaves at open, and each leaf and
// page the set gave the first time it is used, so a first read hashes the
// one leaf it needs. Whichever chunk of the set is wrong, no wrong byte is
// read: a wrong root or upper level makes the open read the version as
// usual; a wrong leaf or page is read through the reader instead.
func TestOpenSetChecks(t *testing.T) {
	res, _, c := serveVersion(t, genDB(t, 12), ImportOptions{DB: "os", PageSize: 512})
	ctx := context.Background()

	ref, err := OpenPages(ctx, c, res.Root)
	if err != nil {
		t.Fatal(err)
	}
	want := readAll(t, ref)
	_, chunks, err := c.ReadOpenSet(ctx, res.Root, true)
	if err != nil {
		t.Fatal(err)
	}
	p, ok, err := openFromSet(ctx, c, res.Root)
	if err != nil || !ok {
		t.Fatalf("open from the set: %v, %v", ok, err)
	}
	leaves := len(p.m.leafAt)
	if leaves < 3 || p.m.r.depth != 2 {
		t.Fatalf("%d pages make %d leaves at depth %d; the test wants 3 or more under one inner chunk", p.v.Pages, leaves, p.m.r.depth)
	}
	if n := decodedLeaves(p); n != 0 {
		t.Fatalf("%d leaves decoded at open, want none", n)
	}
	buf := make([]byte, p.PageSize())
	if err := p.ReadPage(ctx, p.v.Pages, buf); err != nil {
		t.Fatal(err)
	}
	if n := decodedLeaves(p); n != 1 {
		t.Fatalf("%d leaves decoded for one page, want 1", n)
	}
	if !bytes.Equal(buf, want[p.v.Pages-1]) {
		t.Fatal("the last page differs")
	}

	// Connections and read-ahead read a freshly opened version at once.
	p, _, err = openFromSet(ctx, c, res.Root)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			b := make([]byte, p.PageSize())
			bs := [][]byte{make([]byte, p.PageSize()), make([]byte, p.PageSize())}
			for i := range 200 {
				n := 1 + int64((g*7919+i*104729)%int(p.v.Pages-1))
				if err := p.ReadPage(ctx, n, b); err != nil || !bytes.Equal(b, want[n-1]) {
					t.Errorf("page %d read at once with others: %v", n, err)
					return
				}
				if err := p.ReadPages(ctx, n, bs); err != nil || !bytes.Equal(bs[0], want[n-1]) || !bytes.Equal(bs[1], want[n]) {
					t.Errorf("pages %d-%d read at once with others: %v", n, n+1, err)
					return
				}
			}
		})
	}
	wg.Wait()

	upper := 2 // the root chunk and the inner map chunk
	for i := range chunks {
		lying := &lyingSet{ChunkReader: c, at: i}
		p, ok, err := openFromSet(ctx, lying, res.Root)
		if err != nil {
			t.Fatalf("chunk %d of the set wrong: %v", i, err)
		}
		if i < upper {
			if ok {
				t.Fatalf("chunk %d of the set wrong: opened from the set", i)
			}
			continue
		}
		if !ok {
			t.Fatalf("chunk %d of the set wrong (a leaf or a page): not opened from the set", i)
		}
		for n := range p.preloaded {
			if err := p.ReadPage(ctx, n, buf); err != nil || !bytes.Equal(buf, want[n-1]) {
				t.Fatalf("chunk %d of the set wrong: page %d held from the open differs (%v)", i, n, err)
			}
		}
		got := readAll(t, p)
		for n := range got {
			if !bytes.Equal(got[n], want[n]) {
				t.Fatalf("chunk %d of the set wrong: page %d differs", i, n+1)
			}
		}
	}
}

// readAll reads every page of p, in runs of up to 999 pages.
func readAll(t *testing.T, p *Pages) [][]byte {
	t.Helper()
	out := make([][]byte, p.PageCount())
	for i := range out {
		out[i] = make([]byte, p.PageSize())
	}
	for first := int64(1); first <= p.PageCount(); first += 999 { // runs that cross the map's leaves (MapFanout 1000)
		n := min(999, p.PageCount()-first+1)
		if err := p.ReadPages(context.Background(), first, out[first-1:first-1+n]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func decodedLeaves(p *Pages) int {
	n := 0
	if all := p.m.leaves.Load(); all != nil {
		for i := range *all {
			if (*all)[i].Load() != nil {
				n++
			}
		}
	}
	return n
}

// serveVersion imports the database at path into a new folder store,
// starts a service over it and returns the version, the service's URL and
// a client of the service alone.
func serveVersion(t *testing.T, path string, o ImportOptions) (*ImportResult, string, *client.Client) {
	s := newFolder(t)
	res := importFile(t, s, path, o)
	_, url := startService(t, s, 0)
	return res, url, newServiceOnlyClient(t, o.DB, url)
}

// newServiceOnlyClient is a client of the service at url alone.
func newServiceOnlyClient(t *testing.T, db, url string) *client.Client {
	c, err := client.Open(context.Background(), client.Options{DB: db, Service: url, LocalDir: client.NoLocalDir, MemBytes: -1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lyingSet gives an open set with one chunk's bytes changed: chunk at.
type lyingSet struct {
	ChunkReader
	at    int
	asked bool
}

func (l *lyingSet) ReadOpenSet(ctx context.Context, root addr.Addr, pages bool) (addr.Addr, [][]byte, error) {
	l.asked = true
	head, chunks, err := l.ChunkReader.(SetReader).ReadOpenSet(ctx, root, pages)
	i := l.at
	if err == nil && len(chunks) > i {
		chunks[i] = append([]byte(nil), chunks[i]...)
		chunks[i][len(chunks[i])/2] ^= 1
	}
	return head, chunks, err
}
