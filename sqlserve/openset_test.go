package sqlserve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/sqlchunks"
)

// A version's open set is computed once and kept (for the last
// keptOpenSets versions of a database asked for).
func TestOpenSetsKept(t *testing.T) {
	f, roots := newSQLFixture(t, keptOpenSets+1, cache.Config{})
	ctx := context.Background()
	open := func(i int) []byte {
		t.Helper()
		root, frames, _, err := f.s.OpenSet(ctx, "db1", roots[i], false, true)
		if set := decodeFrames(t, frames); err != nil || root != roots[i] || len(set) < 2 || addr.Of(set[0]) != roots[i] {
			t.Fatalf("open set of %s: root %s, %d chunks, %v", roots[i], root, len(set), err)
		}
		return frames
	}
	kept := func(i int) bool { return f.s.sets.get(setKey{"db1", roots[i]}) != nil }
	for i := range roots {
		first := open(i)
		if again := open(i); &again[0] != &first[0] { // the same answer, not computed again
			t.Fatalf("version %d: its open set was computed again", i)
		}
	}
	if kept(0) {
		t.Fatal("the oldest version's open set is kept beyond keptOpenSets")
	}
	for i := 1; i < len(roots); i++ {
		if !kept(i) {
			t.Fatalf("version %d's open set is not kept", i)
		}
	}
	open(0) // computed again, dropping the next oldest
	if !kept(0) || kept(1) {
		t.Fatalf("after asking for the oldest again: kept %v and %v", kept(0), kept(1))
	}
}

// GET …/sqlite/open: with its pages by default, without for pages=0, and
// a clear 400 for any other pages. The answer is the set's chunks as
// frames, in order, with a Content-Length, each proven against what
// sqlchunks.OpenSet reads of the version.
func TestOpenSetHTTP(t *testing.T) {
	f, roots := newSQLFixture(t, 1, cache.Config{})
	ctx := context.Background()
	root := roots[0]
	want, err := sqlchunks.OpenSet(ctx, cacheReader{f.Cache, "db1"}, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query  string
		code   int
		frames int
	}{{"", 200, len(want.Chunks)}, {"&pages=1", 200, len(want.Chunks)}, {"&pages=0", 200, want.PagesFrom}, {"&pages=no", 400, 0}} {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest("GET", api.OpenSetPath("db1", root, false, true)+tc.query, nil))
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
		if rec.Header().Get(api.HeaderRoot) != root.String() {
			t.Errorf("%q: root header %q", tc.query, rec.Header().Get(api.HeaderRoot))
		}
		n := 0
		for fr, err := range api.NewFrameReader(rec.Body).All() {
			if err != nil {
				t.Fatalf("%q: %v", tc.query, err)
			}
			if fr.Index != uint32(n) || !fr.Found || fr.Tier != api.TierMemory || !bytes.Equal(fr.Data, want.Chunks[n]) {
				t.Fatalf("%q: frame %d: index %d, found %v, tier %v, chunk %s, want chunk %d of the set from memory", tc.query, n, fr.Index, fr.Found, fr.Tier, addr.Of(fr.Data), n)
			}
			n++
		}
		if n != tc.frames {
			t.Errorf("%q: %d frames, want %d", tc.query, n, tc.frames)
		}
	}
}

// GET …/sqlite/image: the service registers the image of the version's
// pages from the set it computed, names it as a client registering the
// same addresses would, and answers the root chunk with it; a bad root,
// or a root that is no chunkd SQLite version, is a clear 400.
func TestVersionImageHTTP(t *testing.T) {
	f, roots := newSQLFixture(t, 1, cache.Config{})
	root := roots[0]
	set, err := sqlchunks.OpenSet(context.Background(), cacheReader{f.Cache, "db1"}, root)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
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
	want := api.ImageName(set.PageSize, set.Pages)
	if vi.Root != root.String() || addr.Of(vi.RootChunk) != root || vi.Image.Name != want || vi.Image.Slots != len(set.Pages) || vi.Image.SlotSize != set.PageSize {
		t.Fatalf("answer %+v, want root %s and image %s of %d slots", vi, root, want, len(set.Pages))
	}
	if info, err := f.s.Image(context.Background(), "db1", want); err != nil || info != vi.Image {
		t.Fatalf("the image by name: %+v, %v; want %+v", info, err, vi.Image)
	}
	page := set.Pages[len(set.Pages)-1] // a chunk of db1, but no version's root
	for path, wantErr := range map[string]string{
		api.DBPath("db1") + "/sqlite/image?root=nope": "bad root",
		api.VersionImagePath("db1", page, false):      "not a chunkd SQLite version",
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
	f, roots := newSQLFixture(t, 1, cache.Config{ManifestTTL: time.Hour})
	head := roots[0]
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	for _, fresh := range []bool{false, true} {
		rec := get(api.OpenSetPath("db1", addr.Addr{}, fresh, true))
		age, stale, ok := api.RootFreshness(rec.Header())
		if rec.Code != 200 || rec.Header().Get(api.HeaderRoot) != head.String() || !ok || stale || age < 0 || age > time.Hour.Milliseconds() {
			t.Fatalf("open set of the current root (fresh %v): %d, root %q, age %d, stale %v, ok %v: %s", fresh, rec.Code, rec.Header().Get(api.HeaderRoot), age, stale, ok, rec.Body)
		}
	}
	f.Store.Down.Store(true)
	for _, path := range []string{api.OpenSetPath("db1", addr.Addr{}, true, true), api.VersionImagePath("db1", addr.Addr{}, true)} {
		rec := get(path)
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "a fresh root was asked for") || !strings.Contains(rec.Body.String(), head.String()) {
			t.Fatalf("%s with the store down: %d %s, want a 503 naming the last root", path, rec.Code, rec.Body)
		}
	}
	// A store that denies access: the store's own kind, a 502.
	f.Store.Down.Store(false)
	f.Store.Deny.Store(true)
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
	if err := json.Unmarshal(rec.Body.Bytes(), &vi); rec.Code != 200 || err != nil || vi.Current == nil || vi.Current.Stale || vi.Current.Root != head.String() {
		t.Fatalf("page image of the current root within the TTL: %d %s (%v)", rec.Code, rec.Body, err)
	}
	// By name: no freshness to tell.
	rec = get(api.OpenSetPath("db1", head, false, true))
	if _, _, ok := api.RootFreshness(rec.Header()); rec.Code != 200 || ok {
		t.Fatalf("open set of a root by name: %d, freshness headers %v", rec.Code, ok)
	}
}

// A version published after the service read the manifest (its TTL an
// hour) opens at once by its root; the all-zero root and a root no
// version has are "no such version", a 404 saying so, not the current
// version.
func TestOpenSetNewVersion(t *testing.T) {
	f, roots := newSQLFixture(t, 1, cache.Config{ManifestTTL: time.Hour})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	if rec := get(api.OpenSetPath("db1", roots[0], false, false)); rec.Code != 200 {
		t.Fatalf("the first version: %d %s", rec.Code, rec.Body)
	}
	for i := range 3 {
		res, err := sqlchunks.Import(context.Background(), f.Store, sqltest.GenDB(t, int64(10+i), 100), sqlchunks.ImportOptions{DB: "db1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{api.OpenSetPath("db1", res.Root, false, false), api.VersionImagePath("db1", res.Root, false)} {
			if rec := get(path); rec.Code != 200 {
				t.Fatalf("version %d, published a moment ago: %s: %d %s", i, path, rec.Code, rec.Body)
			}
		}
	}
	for _, path := range []string{
		api.DBPath("db1") + "/sqlite/open?root=" + addr.Addr{}.String(),
		api.DBPath("db1") + "/sqlite/image?root=" + addr.Addr{}.String(),
		api.OpenSetPath("db1", addr.Of([]byte("no version")), false, false),
	} {
		rec := get(path)
		var e api.Error
		json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != 404 || e.Kind != api.KindNoSuchVersion || !strings.Contains(e.Message, "no such version") {
			t.Errorf("%s: %d %s, want a 404 of kind %q", path, rec.Code, rec.Body, api.KindNoSuchVersion)
		}
	}
}

// A version chunkd gc collected is "version collected" (410, its own
// kind), read from gc's record even while its root chunk survives in a
// file kept for later versions; the versions kept still open.
func TestOpenSetCollected(t *testing.T) {
	f, roots := newSQLFixture(t, 4, cache.Config{ManifestTTL: time.Hour})
	get := func(root addr.Addr) (int, api.Error) {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest("GET", api.OpenSetPath("db1", root, false, false), nil))
		var e api.Error
		json.Unmarshal(rec.Body.Bytes(), &e)
		return rec.Code, e
	}
	for _, r := range roots {
		if code, e := get(r); code != 200 {
			t.Fatalf("before gc: %d %+v", code, e)
		}
	}
	res, err := sqlchunks.Collect(context.Background(), f.Store, sqlchunks.CollectOptions{DB: "db1", Keep: 2, Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Collected) != 2 {
		t.Fatalf("gc collected %d versions, want 2", len(res.Collected))
	}
	if _, err := f.Cache.FreshRoot(context.Background(), "db1"); err != nil { // the service reads the new manifest
		t.Fatal(err)
	}
	for i, r := range roots {
		code, e := get(r)
		if i < 2 && (code != 410 || e.Kind != api.KindVersionCollected || !strings.Contains(e.Message, "was collected")) {
			t.Errorf("collected version %d: %d %+v, want 410 of kind %q", i, code, e, api.KindVersionCollected)
		}
		if i >= 2 && code != 200 {
			t.Errorf("kept version %d: %d %+v", i, code, e)
		}
	}
}
