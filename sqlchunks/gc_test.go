//go:build cgo

package sqlchunks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/internal/s3test"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	_ "github.com/chunkd/chunkd/store/s3" // s3://
)

// tableBytes is the size of the table files in db's prefix (not the
// manifest, sidecar or gc record), named or not.
func tableBytes(t testing.TB, s store.Store, db string) (n int64, files int) {
	t.Helper()
	mdb, _ := manifest.Open(context.Background(), s, db)
	infos, err := s.List(context.Background(), db+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if _, ok := tableName(mdb, info.Key); ok {
			n += info.Size
			files++
		}
	}
	return n, files
}

// history imports n versions of a generated database into db, each
// changing the same few rows again and a few others, and returns their roots and a copy of each
// version's file, oldest first.
func history(t testing.TB, s store.Store, db string, n int, seed int64) ([]addr.Addr, []string) {
	t.Helper()
	path := genDB(t, seed)
	var roots []addr.Addr
	var files []string
	for i := range n {
		if i > 0 { // the same rows each time (hot rows), and a few others
			execAll(t, path, fmt.Sprintf(`UPDATE sentences SET Text = 'v%d' WHERE SentenceId %% 1000 = 1`, i))
			changePages(t, path, 1, i)
		}
		r := importFile(t, s, path, ImportOptions{DB: db, Appendix: true, Message: fmt.Sprint("v", i)})
		roots = append(roots, r.Root)
		files = append(files, copyFile(t, path, fmt.Sprint(strings.ReplaceAll(db, "/", "-"), "-", i, ".sqlite")))
	}
	return roots, files
}

// TestCollect: 20 versions, keep 3: the store shrinks to about what a
// database of those 3 versions alone holds, the 3 read as their files,
// the other 17 show as collected in the history, a second run changes
// nothing, and a database nested in the collected one's prefix is left
// alone.
func TestCollect(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	roots, files := history(t, s, "c", 20, 31)
	history(t, s, "c/sub", 2, 32)
	subBytes, _ := tableBytes(t, s, "c/sub")
	before, _ := tableBytes(t, s, "c")

	res, err := Collect(ctx, s, CollectOptions{DB: "c", Keep: 3, Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	after, nfiles := tableBytes(t, s, "c")
	t.Logf("before %d bytes, after %d in %d files; %d dropped, %d repacked into %d bytes", before, after, nfiles, len(res.Dropped), len(res.Repacked), res.NewFileBytes)
	if len(res.Retained) != 3 || res.Retained[0].Root != roots[19] || res.Retained[2].Root != roots[17] || len(res.Collected) != 17 {
		t.Fatalf("retained %d, collected %d", len(res.Retained), len(res.Collected))
	}
	if len(res.Deleted) == 0 || res.DeletedBytes != before-after+res.NewFileBytes {
		t.Fatalf("deleted %d files, %d bytes; before %d, after %d", len(res.Deleted), res.DeletedBytes, before, after)
	}
	// What the 3 versions need: a database made of them alone.
	for i := 17; i < 20; i++ {
		importFile(t, s, files[i], ImportOptions{DB: "ref", Appendix: true})
	}
	need, _ := tableBytes(t, s, "ref")
	if float64(after) > 1.3*float64(need) {
		t.Errorf("after gc the database holds %d bytes of table files; the 3 versions alone take %d", after, need)
	}
	c := newClient(t, s, "c", "")
	for i := 17; i < 20; i++ {
		_, db, _ := openVersion(t, c, roots[i], nil)
		sameResults(t, fmt.Sprint("retained version ", i), plainDB(t, files[i]), db, queries)
	}
	collected, err := Collected(ctx, s, "c")
	if err != nil {
		t.Fatal(err)
	}
	hist, err := History(ctx, c, collected, addr.Addr{}, 0)
	if err != nil || len(hist) != 20 {
		t.Fatalf("history: %d versions, %v", len(hist), err)
	}
	for i, v := range hist {
		if v.Root != roots[19-i] || v.Collected.IsZero() != (i < 3) || v.Message != fmt.Sprint("v", 19-i) {
			t.Errorf("history %d: %s collected %v %q", i, v.Root, v.Collected, v.Message)
		}
	}
	again, err := Collect(ctx, s, CollectOptions{DB: "c", Keep: 3, Grace: -1})
	if err != nil || len(again.Dropped)+len(again.Repacked)+len(again.Deleted)+len(again.Collected) != 0 {
		t.Fatalf("second gc: %+v, %v", again, err)
	}
	if n, _ := tableBytes(t, s, "c/sub"); n != subBytes {
		t.Errorf("the nested database's table files went from %d to %d bytes", subBytes, n)
	}
	_, sub, _ := openHead(t, newClient(t, s, "c/sub", ""))
	var count int
	if err := sub.QueryRow(`SELECT count(*) FROM sentences`).Scan(&count); err != nil || count == 0 {
		t.Errorf("nested database: %d rows, %v", count, err)
	}
}

// TestCollectGrace: a file dropped from the manifest, or never named, is
// deleted only once it was written, and found unnamed, longer than the
// grace period ago; a dry run changes nothing.
func TestCollectGrace(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	history(t, s, "g", 4, 33)
	now := time.Now()
	o := CollectOptions{DB: "g", Keep: 1, Grace: time.Hour, now: func() time.Time { return now }}
	before, files := tableBytes(t, s, "g")

	dry := o
	dry.DryRun = true
	res, err := Collect(ctx, s, dry)
	if err != nil || len(res.Dropped)+len(res.Repacked) == 0 || len(res.Deleted) != 0 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if _, m := loadManifest(t, s, "g"); len(m.Specs) != files {
		t.Fatalf("a dry run changed the manifest: %v", m.Specs)
	}
	res, err = Collect(ctx, s, o)
	if err != nil || len(res.Dropped)+len(res.Repacked) == 0 || len(res.Deleted) != 0 || res.Waiting != len(res.Dropped)+len(res.Repacked) {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	if n, _ := tableBytes(t, s, "g"); n != before+res.NewFileBytes {
		t.Fatalf("the first run deleted within the grace period: %d bytes, %d before", n, before)
	}
	// A file written now, named by no manifest (an import in flight).
	mdb, _ := loadManifest(t, s, "g")
	orphan := "0123456789abcdefghijklmnopqrstuv"
	if err := putTable(ctx, mdb, orphan, []byte("not yet named")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour) // past the grace of the dropped files; the orphan is new to gc
	res, err = Collect(ctx, s, o)
	if err != nil || len(res.Deleted) == 0 || res.Waiting != 1 {
		t.Fatalf("second run: %+v, %v", res, err)
	}
	for _, k := range res.Deleted {
		if strings.HasSuffix(k, orphan) {
			t.Fatal("the orphan found unnamed just now was deleted")
		}
	}
	now = now.Add(2 * time.Hour)
	if res, err = Collect(ctx, s, o); err != nil || len(res.Deleted) != 1 || !strings.HasSuffix(res.Deleted[0], orphan) {
		t.Fatalf("third run: %+v, %v", res, err)
	}
}

// TestCollectKeepFor: --keep-for retains the versions made within it
// beside the newest --keep.
func TestCollectKeepFor(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 34)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 6 {
		changePages(t, path, 3, i)
		importFile(t, s, path, ImportOptions{DB: "kf", Appendix: true, now: func() time.Time { return t0.Add(time.Duration(i) * time.Hour) }})
	}
	now := t0.Add(5*time.Hour + 30*time.Minute)
	res, err := Collect(ctx, s, CollectOptions{DB: "kf", Keep: 1, KeepFor: 150 * time.Minute, Grace: -1, now: func() time.Time { return now }})
	if err != nil || len(res.Retained) != 3 || len(res.Collected) != 3 {
		t.Fatalf("keep 1 and 150m: %d retained, %d collected, %v", len(res.Retained), len(res.Collected), err)
	}
}

// TestCollectRefusesDolt: gc leaves a Dolt database alone and says why.
func TestCollectRefusesDolt(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	mdb, _ := manifest.Open(ctx, s, "dolt")
	m := &manifest.Manifest{Version: manifest.Version5, NBF: manifest.FormatDolt, Root: addr.Of([]byte("r"))}
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.Update(ctx, "", m); err != nil {
		t.Fatal(err)
	}
	_, err := Collect(ctx, s, CollectOptions{DB: "dolt", Keep: 1, Grace: -1})
	if !errors.Is(err, ErrDolt) || !strings.Contains(err.Error(), "Dolt collects its own garbage") {
		t.Fatalf("gc of a Dolt database: %v", err)
	}
}

// TestCollectS3: gc against S3 (a real MinIO server): the store's list
// times and deletes, the versions it retains read as their files.
func TestCollectS3(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	s, err := store.Open(ctx, srv.Bucket(t, "gc"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	roots, files := history(t, s, "s3", 6, 35)
	before, _ := tableBytes(t, s, "s3")
	o := CollectOptions{DB: "s3", Keep: 2, Grace: time.Hour}
	res, err := Collect(ctx, s, o)
	if err != nil || res.Waiting == 0 || len(res.Deleted) != 0 {
		t.Fatalf("first run, within the grace period: %+v, %v", res, err)
	}
	later := time.Now().Add(2 * time.Hour)
	o.now = func() time.Time { return later }
	if res, err = Collect(ctx, s, o); err != nil || len(res.Deleted) == 0 || res.Waiting != 0 {
		t.Fatalf("second run, past the grace period: %+v, %v", res, err)
	}
	if after, _ := tableBytes(t, s, "s3"); after >= before {
		t.Errorf("table files: %d bytes before, %d after", before, after)
	}
	c := newClient(t, s, "s3", "")
	for i := 4; i < 6; i++ {
		_, db, _ := openVersion(t, c, roots[i], nil)
		sameResults(t, fmt.Sprint("retained version ", i), plainDB(t, files[i]), db, queries[:3])
	}
}
