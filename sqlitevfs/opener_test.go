//go:build cgo

package sqlitevfs

import (
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chunkd/chunkd/internal/sqltest"
)

// TestOpener: names no Register put there are opened by the Opener, once
// per name and parameters however many connections share them, and
// closed when the last one closes; an Opener's error fails reads, never
// looks like an empty database.
func TestOpener(t *testing.T) {
	path := testDB(t, 12, 2000)
	var opens, closes atomic.Int64
	var lastParams atomic.Pointer[url.Values]
	fail := errors.New("injected: no such database")
	err := SetOpener(func(name string, params url.Values) (*Image, error) {
		lastParams.Store(&params)
		if name == "missing" {
			return nil, fail
		}
		opens.Add(1)
		return &Image{Pages: &rangeCounter{FilePages: filePages(t, path)}, Options: &Options{CacheKiB: 64}, Value: name,
			Close: func() error { closes.Add(1); return nil }}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer SetOpener(nil)
	plain := sqltest.Plain(t, path)

	db, err := sql.Open(DriverName, "file:opened?vfs="+VFSName+"&where=here&n=1")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, q := range queries[:3] {
				want, wn := result(t, plain, q)
				if got, gn := result(t, db, q); got != want || gn != wn {
					t.Errorf("%s: results differ", q)
				}
			}
		})
	}
	wg.Wait()
	if p := lastParams.Load(); p == nil || p.Get("where") != "here" || p.Get("vfs") != VFSName {
		t.Errorf("opener's parameters: %v", p)
	}
	if st := db.Stats(); opens.Load() != 1 || st.OpenConnections < 2 {
		t.Errorf("%d opens for %d connections, want 1 for several", opens.Load(), st.OpenConnections)
	}
	db.Close()
	if closes.Load() != 1 {
		t.Errorf("%d closes after the last connection closed, want 1", closes.Load())
	}

	// An Opener's error: the database is no empty one, it fails.
	bad, err := sql.Open(DriverName, "file:missing?vfs="+VFSName)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var n int
	if err := bad.QueryRow(`SELECT count(*) FROM sqlite_schema`).Scan(&n); err == nil || !strings.Contains(err.Error(), "disk I/O error") {
		t.Errorf("query on a database whose Opener failed: %d, %v; want an I/O error", n, err)
	}
	if opens.Load() != 1 {
		t.Errorf("failed open counted as an open")
	}
}
