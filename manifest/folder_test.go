package manifest

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/folder"
)

// The fixture tree, opened as a folder store (a copy: the store may record
// versions beside the files), holds several databases in the layouts Dolt
// leaves on disk.
func TestFolderFixtureTree(t *testing.T) {
	ctx := context.Background()
	s, err := folder.New(doltfixtures.Copy(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	names, err := ListDBs(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"db-classic-noms", "db-classic-noms/oldgen", "remote-archive", "remote-classic",
		"repo-testdata/archive-v1/noms", "repo-testdata/archive-v1/noms/oldgen",
		"repo-testdata/archive-v2/noms", "repo-testdata/archive-v2/noms/oldgen",
		"repo-testdata/corrupt-bad-commit/noms", "repo-testdata/corrupt-bad-commit/noms/oldgen",
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("ListDBs = %q\nwant %q", names, want)
	}
	for _, name := range names {
		db := openDB(t, s, name)
		m, version, err := db.Load(ctx)
		if err != nil || version == "" {
			t.Fatalf("%s: Load: %v", name, err)
		}
		for _, spec := range m.Specs {
			key, size, err := db.ResolveTable(ctx, spec.Name)
			if err != nil || size == 0 {
				t.Errorf("%s: ResolveTable(%s) = %q, %d, %v", name, spec.Name, key, size, err)
			}
		}
	}
}

// Update against the real folder backend: create, conflict, sidecar.
func TestFolderUpdate(t *testing.T) {
	ctx := context.Background()
	s, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	copyFixture(t, s, "remote-archive", "")
	db := openDB(t, s, "")
	m, v0, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Mark the archive as the appendix; Dolt's spec list is unchanged in
	// content, the archive already being first.
	next := *m
	next.SetAppendix([]Spec{m.Specs[0]})
	if err := next.Relock(); err != nil {
		t.Fatal(err)
	}
	other := *m
	other.Specs = m.Specs[:1]
	if err := other.Relock(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, mm := range []*Manifest{&next, &other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = db.Update(ctx, v0, mm)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("want exactly one winner: %v, %v", errs[0], errs[1])
	}
	winner := &next
	loser := errs[1]
	if errs[0] != nil {
		winner, loser = &other, errs[0]
	}
	if !errors.Is(loser, store.ErrPrecondition) {
		t.Errorf("loser: %v", loser)
	}
	got, _, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := *winner
	if len(got.Appendix) == 0 {
		want.Appendix = nil
	}
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("Load = %+v\nwant %+v", got, &want)
	}
}
