package manifest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/store"
)

func tname(s string) string { return addr.Of([]byte(s)).String() }

// newManifest returns a valid manifest over the named tables, locked.
func newManifest(t testing.TB, root string, tables ...string) *Manifest {
	t.Helper()
	m := &Manifest{Version: Version5, NBF: FormatDolt, Root: addr.Of([]byte(root))}
	for i, name := range tables {
		m.Specs = append(m.Specs, Spec{Name: tname(name), Chunks: uint32(i + 1)})
	}
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	return m
}

// withAppendix is newManifest with an appendix of one table, app, of
// chunks chunks.
func withAppendix(t testing.TB, root, app string, chunks uint32, tables ...string) *Manifest {
	t.Helper()
	m := newManifest(t, root, tables...)
	m.SetAppendix([]Spec{{Name: tname(app), Chunks: chunks}})
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	return m
}

// update writes m over version v of db and returns the new version.
func update(t testing.TB, db *DB, v string, m *Manifest) string {
	t.Helper()
	v, err := db.Update(context.Background(), v, m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// dbAtR0 opens database "db" in a new memory store and writes its first
// version, root r0 over table t0.
func dbAtR0(t testing.TB) (db *DB, s *memStore, v0 string) {
	t.Helper()
	s = newMemStore()
	db = openDB(t, s, "db")
	return db, s, update(t, db, "", newManifest(t, "r0", "t0"))
}

func openDB(t testing.TB, s store.Store, name string) *DB {
	t.Helper()
	db, err := Open(context.Background(), s, name)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// copyFixture puts every file of a fixture folder into s under prefix.
func copyFixture(t testing.TB, s store.Store, dir, prefix string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(fixtureRoot, dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(fixtureRoot, dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(context.Background(), prefix+e.Name(), data); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadFixtureRemote(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	copyFixture(t, s, "remote-archive", "")
	copyFixture(t, s, "remote-classic", "team/classic/")

	for _, tc := range []struct {
		db    string
		table string
		key   string
		size  int64
	}{
		{"", "afhahvjmm5umukvhmg2dvo3ctmsrkg0q", "afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc", 584342},
		{"", "ug6pcgl6jsjdq3pkerao2jgh2ida6fh7", "ug6pcgl6jsjdq3pkerao2jgh2ida6fh7", 321},
		{"team/classic", "ksk59qv6p04kqje29kc59n1r1vnjt140", "team/classic/ksk59qv6p04kqje29kc59n1r1vnjt140", 1502393},
	} {
		db := openDB(t, s, tc.db)
		m, version, err := db.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if version == "" || m.Appendix != nil || !m.HasSpec(tc.table) {
			t.Errorf("%q: version %q appendix %v specs %v", tc.db, version, m.Appendix, m.Specs)
		}
		key, size, err := db.ResolveTable(ctx, tc.table)
		if err != nil || key != tc.key || size != tc.size {
			t.Errorf("ResolveTable(%s) = %q, %d, %v; want %q, %d", tc.table, key, size, err, tc.key, tc.size)
		}
	}

	names, err := ListDBs(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"", "team/classic"}; !reflect.DeepEqual(names, want) {
		t.Errorf("ListDBs = %q, want %q", names, want)
	}
}

func TestLoadMissing(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	for _, name := range []string{"nope", ""} {
		_, _, err := openDB(t, s, name).Load(ctx)
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Load(%q) = %v, want ErrNotFound", name, err)
		}
		want := `no database "nope" in mem://test`
		if name == "" {
			want = "no database at the root of mem://test"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestLoadCorrupt(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	s.Put(ctx, "db/manifest", []byte("5:__DOLT__:x"))
	_, _, err := openDB(t, s, "db").Load(ctx)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "db/manifest") {
		t.Fatalf("Load = %v, want ErrCorrupt naming db/manifest", err)
	}
}

func TestResolveTableErrors(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, newMemStore(), "db")
	_, _, err := db.ResolveTable(ctx, tname("missing"))
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), ".darc") {
		t.Errorf("missing table: %v", err)
	}
	for _, bad := range []string{"../manifest", tname("x") + ".darc", "", strings.ToUpper(tname("x"))} {
		if _, err := db.TableKey(bad); err == nil {
			t.Errorf("TableKey(%q) accepted", bad)
		}
		if _, _, err := db.ResolveTable(ctx, bad); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("ResolveTable(%q) = %v, want a name error", bad, err)
		}
	}
	if k, err := db.TableKey(JournalName); err != nil || k != "db/"+JournalName {
		t.Errorf("TableKey(journal) = %q, %v", k, err)
	}
}

func TestUpdateCreateAndReplace(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	db := openDB(t, s, "a/b")
	m1 := newManifest(t, "r1", "t1")
	v1 := update(t, db, "", m1)
	if _, err := db.Update(ctx, "", m1); !errors.Is(err, store.ErrPrecondition) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second create = %v", err)
	}
	got, v, err := db.Load(ctx)
	if err != nil || v != v1 || !reflect.DeepEqual(got, m1) {
		t.Fatalf("Load = %+v, %q, %v; want %+v, %q", got, v, err, m1, v1)
	}
	raw, _ := s.Get(ctx, "a/b/manifest")
	if string(raw) != string(m1.Marshal()) {
		t.Errorf("stored %q", raw)
	}
	m2 := newManifest(t, "r2", "t1", "t2")
	v2, err := db.Update(ctx, v1, m2)
	if err != nil || v2 == v1 {
		t.Fatalf("Update = %q, %v", v2, err)
	}
	if _, err := db.Update(ctx, v1, newManifest(t, "r3")); !errors.Is(err, store.ErrPrecondition) {
		t.Errorf("stale update = %v", err)
	}
	bad := newManifest(t, "r4")
	bad.Lock = addr.Empty
	if _, err := db.Update(ctx, v2, bad); err == nil || !strings.Contains(err.Error(), "lock hash is empty") {
		t.Errorf("invalid update = %v", err)
	}
}

// Two updaters start from the same version: exactly one wins and the other
// gets ErrPrecondition; the manifest is the winner's, whole.
func TestUpdateConflict(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	db := openDB(t, s, "db")
	v0 := update(t, db, "", newManifest(t, "r0", "base"))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	ms := make([]*Manifest, n)
	for i := range n {
		ms[i] = newManifest(t, "r"+string(rune('a'+i)), "base", "new"+string(rune('a'+i)))
		ms[i].SetAppendix([]Spec{{Name: tname("app" + string(rune('a'+i))), Chunks: 9}})
		if err := ms[i].Relock(); err != nil {
			t.Fatal(err)
		}
		dbi := openDB(t, s, "db")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = dbi.Update(ctx, v0, ms[i])
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("updaters %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrPrecondition):
			t.Errorf("updater %d: %v, want ErrPrecondition", i, err)
		case !strings.Contains(err.Error(), "another writer won"):
			t.Errorf("updater %d: message %q", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("nobody won")
	}
	got, _, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The manifest is the winner's. Losers may have overwritten the
	// sidecar after the winner wrote it; then the appendix is lost, but
	// never wrong.
	want := *ms[winner]
	if len(got.Appendix) == 0 {
		want.Appendix = nil
	}
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("Load = %+v, want %+v", got, &want)
	}
}

func TestSidecar(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	db := openDB(t, s, "db")
	m := newManifest(t, "r1", "t1", "t2")
	m.SetAppendix([]Spec{{Name: tname("app1"), Chunks: 100}, {Name: tname("t2"), Chunks: 2}})
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	v1 := update(t, db, "", m)

	// The sidecar: small, versioned, bound to the manifest bytes.
	raw, err := s.Get(ctx, "db/manifest.chunkd")
	if err != nil {
		t.Fatal(err)
	}
	var sc map[string]any
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatal(err)
	}
	mbytes, _ := s.Get(ctx, "db/manifest")
	if sc["format"] != SidecarFormat || sc["manifest"] != addr.Of(mbytes).String() || len(sc) != 3 {
		t.Errorf("sidecar = %s", raw)
	}
	// Dolt sees every file: the appendix files are specs, first.
	if !strings.Contains(string(mbytes), ":"+tname("app1")+":100:"+tname("t2")+":2:"+tname("t1")+":1") {
		t.Errorf("manifest = %s", mbytes)
	}

	got, v, err := db.Load(ctx)
	if err != nil || v != v1 {
		t.Fatal(err)
	}
	if want := []string{tname("app1"), tname("t2")}; !reflect.DeepEqual(got.Appendix, want) {
		t.Errorf("Appendix = %v, want %v", got.Appendix, want)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("Load = %+v, want %+v", got, m)
	}

	// A sidecar that names a table the manifest lacks (hand-made): the
	// name is dropped.
	sc["appendix"] = []string{tname("ghost"), tname("t1")}
	raw2, _ := json.Marshal(sc)
	s.Put(ctx, "db/manifest.chunkd", raw2)
	got, _, err = db.Load(ctx)
	if err != nil || !reflect.DeepEqual(got.Appendix, []string{tname("t1")}) {
		t.Errorf("filtered appendix = %v, %v", got.Appendix, err)
	}
	s.Put(ctx, "db/manifest.chunkd", raw)

	// Dolt rewrites the manifest (a push): the sidecar is stale and ignored.
	dolt := *got
	dolt.Root = addr.Of([]byte("pushed"))
	dolt.Appendix = nil
	s.Put(ctx, "db/manifest", dolt.Marshal())
	got, _, err = db.Load(ctx)
	if err != nil || got.Appendix != nil {
		t.Errorf("stale sidecar: appendix %v, %v", got.Appendix, err)
	}

	// Unknown format and bad JSON are errors naming the sidecar.
	s.Put(ctx, "db/manifest.chunkd", []byte(`{"format":"chunkd.appendix.v9","manifest":"x","appendix":[]}`))
	if _, _, err := db.Load(ctx); err == nil || !strings.Contains(err.Error(), "chunkd.appendix.v9") || !strings.Contains(err.Error(), "db/manifest.chunkd") {
		t.Errorf("unknown format: %v", err)
	}
	s.Put(ctx, "db/manifest.chunkd", []byte(`{"format":`))
	if _, _, err := db.Load(ctx); err == nil || !strings.Contains(err.Error(), "not valid sidecar JSON") {
		t.Errorf("bad JSON: %v", err)
	}

	// An update without an appendix removes the sidecar, so an identical
	// manifest written again later cannot revive an old appendix.
	s.Put(ctx, "db/manifest.chunkd", raw)
	if _, v, err = db.Load(ctx); err != nil {
		t.Fatal(err)
	}
	plain := newManifest(t, "r2", "t1")
	update(t, db, v, plain)
	if _, err := s.Get(ctx, "db/manifest.chunkd"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("sidecar still there after an update without appendix: %v", err)
	}
}

// A crash (or failure) between the sidecar write and the manifest write
// leaves the old manifest with a sidecar that names the new one: readers
// then see no appendix, never the new appendix names.
func TestSidecarCrashBetweenWrites(t *testing.T) {
	ctx := context.Background()
	mem := newMemStore()
	hs := &hookStore{Store: mem}
	db := openDB(t, hs, "db")
	old := withAppendix(t, "r1", "oldapp", 5, "t1")
	v1 := update(t, db, "", old)
	next := withAppendix(t, "r2", "newapp", 7, "t1")
	crash := errors.New("crash")
	hs.beforePutIf = func(string) error { return crash }
	if _, err := db.Update(ctx, v1, next); !errors.Is(err, crash) {
		t.Fatalf("Update = %v", err)
	}
	hs.beforePutIf = nil
	got, v, err := db.Load(ctx)
	if err != nil || v != v1 {
		t.Fatalf("Load: %v", err)
	}
	if got.Root != old.Root || got.Appendix != nil {
		t.Errorf("after crash: root %s appendix %v; want old root, no appendix", got.Root, got.Appendix)
	}
	// The next successful update repairs the pair.
	update(t, db, v, next)
	got, _, err = db.Load(ctx)
	if err != nil || !reflect.DeepEqual(got, next) {
		t.Errorf("after repair: %+v, %v", got, err)
	}
}

// A loser that writes its sidecar after the winner's, then loses the
// manifest race, never leaves the loser's appendix on the winner's
// manifest; the winner, finding another sidecar after its commit, puts
// its own again. (A loser's sidecar that lands after that leaves the
// winner's manifest without an appendix: TestSidecarLateLoser.)
func TestSidecarLoserOverwrites(t *testing.T) {
	ctx := context.Background()
	db, mem, v0 := dbAtR0(t)
	win := withAppendix(t, "win", "winapp", 1, "t0")
	lose := withAppendix(t, "lose", "loseapp", 1, "t0")

	// The winner writes its sidecar; before it writes the manifest, the
	// loser writes its sidecar. Then the winner commits and the loser fails.
	winStore := &hookStore{Store: mem}
	winStore.beforePutIf = func(string) error {
		b, _ := json.Marshal(sidecar{Format: SidecarFormat, Manifest: addr.Of(lose.Marshal()).String(), Appendix: lose.Appendix})
		return mem.Put(ctx, "db/manifest.chunkd", b)
	}
	if _, err := openDB(t, winStore, "db").Update(ctx, v0, win); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Update(ctx, v0, lose); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("loser: %v", err)
	}
	got, _, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range got.Appendix {
		if !got.HasSpec(name) {
			t.Errorf("appendix %s not in manifest", name)
		}
	}
	if got.Root != win.Root || !reflect.DeepEqual(got.Appendix, win.Appendix) {
		t.Errorf("root %s appendix %v, want the winner's root and appendix %v", got.Root, got.Appendix, win.Appendix)
	}
}

// TestSidecarLateLoser: a loser's sidecar that lands after the winner
// has committed and checked its own leaves the winner's manifest without
// an appendix, never with the loser's.
func TestSidecarLateLoser(t *testing.T) {
	ctx := context.Background()
	db, mem, v0 := dbAtR0(t)
	win := withAppendix(t, "win", "winapp", 1, "t0")
	lose := withAppendix(t, "lose", "loseapp", 1, "t0")
	if _, err := db.Update(ctx, v0, win); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sidecar{Format: SidecarFormat, Manifest: addr.Of(lose.Marshal()).String(), Appendix: lose.Appendix})
	if err := mem.Put(ctx, "db/manifest.chunkd", b); err != nil {
		t.Fatal(err)
	}
	got, _, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Root != win.Root || got.Appendix != nil {
		t.Errorf("root %s appendix %v, want the winner's root and no appendix", got.Root, got.Appendix)
	}
}

// Load reads the manifest, then the sidecar. If a writer slips in between
// (new sidecar, new manifest), Load notices the sidecar names another
// manifest, sees the manifest changed and reads again.
func TestLoadRetriesAfterConcurrentUpdate(t *testing.T) {
	ctx := context.Background()
	db, mem, v0 := dbAtR0(t)
	next := withAppendix(t, "r1", "app", 3, "t0")
	rs := &raceStore{Store: mem, onSidecarGet: func() {
		if _, err := db.Update(ctx, v0, next); err != nil {
			t.Error(err)
		}
	}}
	got, _, err := openDB(t, rs, "db").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, next) {
		t.Errorf("Load = %+v, want %+v", got, next)
	}
}

// raceStore runs a hook once, before the first Get of a sidecar.
type raceStore struct {
	store.Store
	once         sync.Once
	onSidecarGet func()
}

func (r *raceStore) Get(ctx context.Context, key string) ([]byte, error) {
	if strings.HasSuffix(key, SidecarName) {
		r.once.Do(r.onSidecarGet)
	}
	return r.Store.Get(ctx, key)
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "db", "team/db-1", "x.y_z", ".dolt/noms", "A/B/C", strings.Repeat("a", 128)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"", "empty"},
		{"..", `".."`},
		{"a/../b", `".."`},
		{"a..b", `".."`},
		{"/a", "segment 1 is empty"},
		{"a/", "segment 2 is empty"},
		{"a//b", "segment 2 is empty"},
		{"./a", `segment 1 is "."`},
		{"a b", "' ' at position 1"},
		{`a\b`, `'\\' at position 1`},
		{"ä", "position 0"},
		{"a:b", "':'"},
		{strings.Repeat("a", 129), "129 bytes long"},
	} {
		err := ValidateName(tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateName(%q) = %v, want mention of %q", tc.name, err, tc.want)
		}
	}
	if _, err := Open(context.Background(), newMemStore(), "../x"); err == nil {
		t.Error("Open accepted ../x")
	}
	if db, err := Open(context.Background(), newMemStore(), ""); err != nil || db.ManifestKey() != "manifest" || db.SidecarKey() != "manifest.chunkd" {
		t.Errorf("root db: %v", err)
	}
}

func TestListDBs(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	for _, k := range []string{
		"manifest", "a/manifest", "a/b/manifest", "a-b/manifest", "a/manifest.chunkd",
		"c/notmanifest", "d/x", "bad name/manifest", "e/oldgen/manifest",
	} {
		s.Put(ctx, k, []byte("x"))
	}
	got, err := ListDBs(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "a", "a-b", "a/b", "e/oldgen"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListDBs = %q, want %q", got, want)
	}
}

// An updater that is already out of date fails before it writes anything,
// so the current manifest keeps its appendix.
func TestStaleUpdateWritesNothing(t *testing.T) {
	ctx := context.Background()
	db, s, v0 := dbAtR0(t)
	cur := withAppendix(t, "r1", "app", 1, "t0")
	update(t, db, v0, cur)
	for _, stale := range []*Manifest{newManifest(t, "r2", "t0"), withAppendix(t, "r3", "other", 1, "t0")} {
		if _, err := db.Update(ctx, v0, stale); !errors.Is(err, store.ErrPrecondition) || !strings.Contains(err.Error(), "another writer won") {
			t.Fatalf("stale update = %v", err)
		}
		got, _, err := db.Load(ctx)
		if err != nil || !reflect.DeepEqual(got, cur) {
			t.Errorf("after stale update: %+v, %v; want %+v", got, err, cur)
		}
	}
	// The manifest removed behind an updater's back.
	s.Delete(ctx, "db/manifest")
	if _, err := db.Update(ctx, v0, cur); !errors.Is(err, store.ErrPrecondition) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("update of a deleted manifest = %v", err)
	}
}
