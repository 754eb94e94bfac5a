package sqlserve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/prometheus/client_golang/prometheus"
)

// A version's open set is computed once and kept (for the last
// keptOpenSets versions asked for).
func TestOpenSetsKept(t *testing.T) {
	var calls atomic.Int32
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, Config{OpenSet: func(ctx context.Context, src ChunkSource, root addr.Addr) (VersionSet, error) {
		calls.Add(1)
		data, err := src.Get(ctx, root)
		return VersionSet{Chunks: [][]byte{data, data}, PagesFrom: 1}, err // the root chunk "and a page"
	}})
	ctx := context.Background()
	addrs := f.db.All()
	open := func(i int) {
		t.Helper()
		for _, pages := range []bool{true, false} {
			want := map[bool]int{true: 2, false: 1}[pages]
			root, frames, _, err := f.cache.OpenSet(ctx, "db1", addrs[i], false, pages)
			set := decodeFrames(t, frames)
			if err != nil || root != addrs[i] || len(set) != want || addr.Of(set[0]) != addrs[i] {
				t.Fatalf("open set of %s (pages %v): root %s, %d chunks (want %d), %v", addrs[i], pages, root, len(set), want, err)
			}
		}
	}
	for i := 0; i <= keptOpenSets; i++ {
		open(i)
		open(i) // from what was kept
	}
	if got := calls.Load(); got != keptOpenSets+1 {
		t.Fatalf("%d open sets computed for %d versions asked twice each", got, keptOpenSets+1)
	}
	open(keptOpenSets) // still kept
	if got := calls.Load(); got != keptOpenSets+1 {
		t.Fatalf("the newest version's open set was computed again (%d)", got)
	}
	open(0) // the oldest was dropped to keep keptOpenSets
	if got := calls.Load(); got != keptOpenSets+2 {
		t.Fatalf("the oldest version's open set was not computed again (%d)", got)
	}
}

// GET …/sqlite/open: with its pages by default, without for pages=0, and
// a clear 400 for any other pages. The answer is the set's chunks as
// frames, in order, with a Content-Length; a set of no pages answers the
// same either way.
func TestOpenSetHTTP(t *testing.T) {
	var all []addr.Addr // the database's chunks, set below
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, Config{OpenSet: func(ctx context.Context, src ChunkSource, root addr.Addr) (VersionSet, error) {
		// The root chunk and three more, different sizes; the first
		// version's set has two "pages", the others none.
		set := VersionSet{PagesFrom: 2}
		for _, a := range []addr.Addr{root, all[0], all[1], all[2]} {
			data, err := src.Get(ctx, a)
			if err != nil {
				return VersionSet{}, err
			}
			set.Chunks = append(set.Chunks, data)
		}
		if root != all[3] {
			set.PagesFrom = len(set.Chunks)
		}
		return set, nil
	}})
	h := NewHandler(f.cache, prometheus.NewRegistry())
	all = f.db.All()
	ctx := context.Background()
	for _, root := range all[3:5] {
		_, frames, _, err := f.cache.OpenSet(ctx, "db1", root, false, true)
		if err != nil {
			t.Fatal(err)
		}
		want := decodeFrames(t, frames)
		for i, a := range []addr.Addr{root, all[0], all[1], all[2]} {
			if addr.Of(want[i]) != a {
				t.Fatalf("open set of %s: chunk %d is %s, want %s", root, i, addr.Of(want[i]), a)
			}
		}
		pagesFrom := map[bool]int{true: 2, false: 4}[root == all[3]]
		for _, tc := range []struct {
			query  string
			code   int
			frames int
		}{{"", 200, 4}, {"&pages=1", 200, 4}, {"&pages=0", 200, pagesFrom}, {"&pages=no", 400, 0}} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", api.OpenSetPath("db1", root, false, true)+tc.query, nil))
			if rec.Code != tc.code {
				t.Fatalf("%q: status %d, want %d: %s", tc.query, rec.Code, tc.code, rec.Body)
			}
			if tc.code != 200 {
				if !strings.Contains(rec.Body.String(), "bad pages") {
					t.Errorf("%q: %s", tc.query, rec.Body)
				}
				continue
			}
			if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(rec.Body.Len()); got != want {
				t.Errorf("%q: Content-Length %q for %s bytes", tc.query, got, want)
			}
			n := 0
			for f, err := range api.NewFrameReader(rec.Body).All() {
				if err != nil {
					t.Fatalf("%q: %v", tc.query, err)
				}
				if f.Index != uint32(n) || !f.Found || f.Tier != api.TierMemory || !bytes.Equal(f.Data, want[n]) {
					t.Fatalf("%q: frame %d: index %d, found %v, tier %v, chunk %s, want chunk %d of the set from memory", tc.query, n, f.Index, f.Found, f.Tier, addr.Of(f.Data), n)
				}
				n++
			}
			if n != tc.frames {
				t.Errorf("%q: %d frames, want %d", tc.query, n, tc.frames)
			}
		}
	}
}

// GET …/sqlite/image: the service registers the image of the version's
// pages from the set it computed, names it as a client registering the
// same addresses would, and answers the root chunk with it; a bad root,
// or a version with no pages, is a clear 400.
func TestVersionImageHTTP(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, Config{OpenSet: func(ctx context.Context, src ChunkSource, root addr.Addr) (VersionSet, error) {
		data, err := src.Get(ctx, root)
		set := VersionSet{Chunks: [][]byte{data}, PagesFrom: 1, PageSize: 4096, Pages: []addr.Addr{root, root, root}}
		if data[0]%2 == 0 {
			set.Pages = nil // "a version with no pages"
		}
		return set, err
	}})
	h := NewHandler(f.cache, prometheus.NewRegistry())
	var root, empty addr.Addr
	for _, a := range f.db.All() {
		if f.db.Chunks[a][0]%2 == 0 {
			empty = a
		} else {
			root = a
		}
	}
	if root.IsEmpty() || empty.IsEmpty() {
		t.Fatal("the fixture has no chunk of each kind")
	}
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	rec := get(api.VersionImagePath("db1", root, false))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var vi api.VersionImage
	if err := json.Unmarshal(rec.Body.Bytes(), &vi); err != nil {
		t.Fatal(err)
	}
	want := api.ImageName(4096, []addr.Addr{root, root, root})
	if vi.Root != root.String() || addr.Of(vi.RootChunk) != root || vi.Image.Name != want || vi.Image.Slots != 3 || vi.Image.SlotSize != 4096 {
		t.Fatalf("answer %+v, want root %s and image %s of 3 slots", vi, root, want)
	}
	if info, err := f.cache.Image(context.Background(), "db1", want); err != nil || info != vi.Image {
		t.Fatalf("the image by name: %+v, %v; want %+v", info, err, vi.Image)
	}
	for path, wantErr := range map[string]string{
		api.DBPath("db1") + "/sqlite/image?root=nope": "bad root",
		api.VersionImagePath("db1", empty, false):     "no page image",
	} {
		rec := get(path)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), wantErr) {
			t.Errorf("%s: status %d, %s; want 400 naming %q", path, rec.Code, rec.Body, wantErr)
		}
	}
}

// decodeFrames reads an open set's frames: their chunks, in order.
func decodeFrames(t *testing.T, frames []byte) [][]byte {
	t.Helper()
	var chunks [][]byte
	for f, err := range api.NewFrameReader(bytes.NewReader(frames)).All() {
		if err != nil {
			t.Fatal(err)
		}
		if f.Index != uint32(len(chunks)) || !f.Found {
			t.Fatalf("frame %d: index %d, found %v", len(chunks), f.Index, f.Found)
		}
		chunks = append(chunks, f.Data)
	}
	return chunks
}

// An open set or page image of the current root says how fresh that root
// is; asked for fresh while the store cannot be read, it is a 503 naming
// why, not the last root known (a client that asks for fresh gets one or
// an error); asked for by name, it needs no store and says nothing of
// freshness.
func TestOpenSetCurrentRoot(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, Config{ManifestTTL: time.Hour, OpenSet: func(ctx context.Context, src ChunkSource, root addr.Addr) (VersionSet, error) {
		data, err := src.Get(ctx, root)
		return VersionSet{Chunks: [][]byte{data, data}, PagesFrom: 1, PageSize: 4096, Pages: []addr.Addr{root}}, err
	}})
	h := NewHandler(f.cache, prometheus.NewRegistry())
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	for _, fresh := range []bool{false, true} {
		rec := get(api.OpenSetPath("db1", addr.Addr{}, fresh, true))
		age, stale, ok := api.RootFreshness(rec.Header())
		if rec.Code != 200 || rec.Header().Get(api.HeaderRoot) != f.db.Root.String() || !ok || stale || age < 0 || age > time.Hour.Milliseconds() {
			t.Fatalf("open set of the current root (fresh %v): %d, root %q, age %d, stale %v, ok %v: %s", fresh, rec.Code, rec.Header().Get(api.HeaderRoot), age, stale, ok, rec.Body)
		}
	}
	f.fs.down.Store(true)
	for _, path := range []string{api.OpenSetPath("db1", addr.Addr{}, true, true), api.VersionImagePath("db1", addr.Addr{}, true)} {
		rec := get(path)
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "a fresh root was asked for") || !strings.Contains(rec.Body.String(), f.db.Root.String()) {
			t.Fatalf("%s with the store down: %d %s, want a 503 naming the last root", path, rec.Code, rec.Body)
		}
	}
	// A store that denies access: the store's own kind, a 502.
	f.fs.down.Store(false)
	f.fs.deny.Store(true)
	if rec := get(api.OpenSetPath("db1", addr.Addr{}, true, true)); rec.Code != 502 || !strings.Contains(rec.Body.String(), "a fresh root was asked for") {
		t.Fatalf("fresh open set with the store denying access: %d %s, want a 502", rec.Code, rec.Body)
	}
	// Not fresh: the root within its TTL, from what the service holds.
	rec := get(api.OpenSetPath("db1", addr.Addr{}, false, true))
	if _, stale, ok := api.RootFreshness(rec.Header()); rec.Code != 200 || !ok || stale {
		t.Fatalf("open set within the TTL with the store down: %d, stale %v, ok %v: %s", rec.Code, stale, ok, rec.Body)
	}
	var vi api.VersionImage
	rec = get(api.VersionImagePath("db1", addr.Addr{}, false))
	if err := json.Unmarshal(rec.Body.Bytes(), &vi); rec.Code != 200 || err != nil || vi.Current == nil || vi.Current.Stale || vi.Current.Root != f.db.Root.String() {
		t.Fatalf("page image of the current root within the TTL: %d %s (%v)", rec.Code, rec.Body, err)
	}
	// By name: no freshness to tell.
	rec = get(api.OpenSetPath("db1", f.db.Root, false, true))
	if _, _, ok := api.RootFreshness(rec.Header()); rec.Code != 200 || ok {
		t.Fatalf("open set of a root by name: %d, freshness headers %v", rec.Code, ok)
	}
}
