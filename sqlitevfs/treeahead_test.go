//go:build cgo

package sqlitevfs

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listCounter is a rangeCounter that is a PageLister too.
type listCounter struct {
	rangeCounter
	lists, listed atomic.Int64
}

func (c *listCounter) ReadPageList(ctx context.Context, ns []int64, ps [][]byte) error {
	c.lists.Add(1)
	c.listed.Add(int64(len(ns)))
	for i, n := range ns {
		if err := c.FilePages.ReadPage(ctx, n, ps[i]); err != nil {
			return err
		}
	}
	return nil
}

// scanDB writes a database whose table t(id, k, pad) has an index on a
// random k, so that a scan of the index reads the table's leaves in no
// order, and a WITHOUT ROWID table w with an index.
func scanDB(t *testing.T, rows int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scan.sqlite")
	db, err := sql.Open(DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, s := range []string{
		`CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, pad TEXT)`,
		`CREATE INDEX t_k ON t(k)`,
		`CREATE TABLE w(a TEXT, b INT, c TEXT, PRIMARY KEY(a)) WITHOUT ROWID`,
		`CREATE INDEX w_b ON w(b)`,
		`BEGIN`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 1; i <= rows; i++ {
		pad := strings.Repeat("p", 100+rng.IntN(100))
		if _, err := db.Exec(`INSERT INTO t VALUES(?, ?, ?)`, i, rng.IntN(1_000_000), pad); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO w VALUES(?, ?, ?)`, fmt.Sprint(rng.Int64()), rng.IntN(1_000_000), pad); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`COMMIT`); err != nil {
		t.Fatal(err)
	}
	return path
}

// treeOf returns the index-scan read-ahead of the registration name.
func treeOf(t *testing.T, name string) *treeAhead {
	t.Helper()
	ra, ok := lookup(name).pages.(*readAhead)
	if !ok || ra.tree == nil {
		t.Fatal("no index-scan read-ahead")
	}
	return ra.tree
}

// ready runs q until the index-scan read-ahead has found the indexes
// (it does that in the background at the first index leaf read).
func (ta *treeAhead) waitReady(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ta.ready.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the index-scan read-ahead never found the indexes")
		}
		result(t, db, q)
	}
	if len(ta.indexes) != 1 {
		t.Fatalf("%d indexes found, want 1 (t_k; w_b belongs to a WITHOUT ROWID table)", len(ta.indexes))
	}
}

// TestIndexScanAhead: a scan through an index that looks up every row
// fetches the table leaves a whole index leaf names at once, and returns
// what the file does; a covering scan, a filtered scan and the index of a
// WITHOUT ROWID table fetch (almost) nothing ahead.
func TestIndexScanAhead(t *testing.T) {
	path := scanDB(t, 20000)
	plain := openPlain(t, path)

	const (
		scan     = `SELECT id, k, length(pad) FROM t INDEXED BY t_k WHERE k > 500000`
		covering = `SELECT count(id) FROM t INDEXED BY t_k WHERE k > 500000`
		filtered = `SELECT id, length(pad) FROM t INDEXED BY t_k WHERE k > 0 AND k % 1000 = 7`
		noRowid  = `SELECT a, length(c) FROM w INDEXED BY w_b WHERE b > 500000`
	)
	c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}
	name, db := register(t, c, &Options{ReadAhead: 16})
	ta := treeOf(t, name)
	ta.waitReady(t, db, `SELECT id FROM t INDEXED BY t_k WHERE k > 999000 LIMIT 1`)

	// Each query on a fresh connection, so that SQLite's cache holds none
	// of the pages.
	run := func(q string) (singles, lists, listed int64) {
		t.Helper()
		db.SetMaxIdleConns(0)
		p0, l0, n0 := c.pages.Load(), c.lists.Load(), c.listed.Load()
		want, _ := result(t, plain, q)
		if got, _ := result(t, db, q); got != want {
			t.Fatalf("%s: results differ from the file's", q)
		}
		return c.pages.Load() - p0, c.lists.Load() - l0, c.listed.Load() - n0
	}

	singles, lists, listed := run(scan)
	ixLeaves := int64(len(ta.indexes[0].leaves))
	t.Logf("scan: %d single reads, %d list reads of %d pages (index: %d leaves)", singles, lists, listed, ixLeaves)
	// Without it, a page read per row (10,000) bar SQLite's cache; with
	// it, the first index leaf's rows (watched) and little more.
	if lists < ixLeaves/4 || singles > 1000 {
		t.Errorf("scan: %d single reads and %d list reads: the table leaves were not fetched ahead", singles, lists)
	}

	for _, q := range []string{covering, filtered, noRowid} {
		singles, lists, listed := run(q)
		t.Logf("%s: %d single reads, %d list reads of %d pages", q, singles, lists, listed)
		// At most the two index leaves' worth a scan may fetch before it
		// sees them go unread.
		if listed > 2*maxBatchBytes/4096 || lists > 3 {
			t.Errorf("%s: %d list reads of %d pages: fetched ahead what it does not read", q, lists, listed)
		}
	}
}

// TestIndexScanAheadConcurrent: scans of one index on several connections
// at once, with page caches smaller than the table, return the file's results (run with -race), and each connection's scan
// is fetched ahead: far fewer reads one page at a time than without
// read-ahead.
func TestIndexScanAheadConcurrent(t *testing.T) {
	path := scanDB(t, 8000)
	plain := openPlain(t, path)
	qs := []string{
		`SELECT id, k, length(pad) FROM t INDEXED BY t_k WHERE k > 300000`,
		`SELECT id, k, length(pad) FROM t INDEXED BY t_k WHERE k < 600000`,
		`SELECT count(id) FROM t INDEXED BY t_k WHERE k > 100000`,
	}
	want := make([]string, len(qs))
	for i, q := range qs {
		want[i], _ = result(t, plain, q)
	}
	run := func(readAhead int) int64 {
		c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}
		// A small page cache: each connection's scans miss most table
		// leaves.
		name, db := register(t, c, &Options{CacheKiB: 100, ReadAhead: readAhead})
		if readAhead >= 0 {
			treeOf(t, name).waitReady(t, db, `SELECT id FROM t INDEXED BY t_k WHERE k > 999000 LIMIT 1`)
		}
		p0 := c.pages.Load()
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			go func() {
				for i := range 3 {
					q := (g + i) % len(qs)
					if got, _ := result(t, db, qs[q]); got != want[q] {
						errs <- fmt.Errorf("%s: results differ", qs[q])
						return
					}
				}
				errs <- nil
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		t.Logf("read-ahead %d: %d single reads, %d list reads of %d pages", readAhead, c.pages.Load()-p0, c.lists.Load(), c.listed.Load())
		return c.pages.Load() - p0
	}
	without, with := run(-1), run(0)
	if 2*with > without {
		t.Errorf("%d reads one page at a time with read-ahead, %d without", with, without)
	}
}

// TestIndexScanAheadIdle: a database with no index of a rowid table (the
// generated corpus: translations is WITHOUT ROWID) leaves every read to
// the sequential read-ahead once its schema is read.
func TestIndexScanAheadIdle(t *testing.T) {
	c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, testDB(t, 2, 3000))}}
	name, db := register(t, c, nil)
	ta := treeOf(t, name)
	for deadline := time.Now().Add(10 * time.Second); !ta.ready.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the schema was never read")
		}
		result(t, db, `SELECT count(*) FROM translations WHERE TranslationId > 5`) // index leaves: the schema is read
	}
	if !ta.idle() {
		t.Fatalf("%d indexes found in a database without an index of a rowid table", len(ta.indexes))
	}
	result(t, db, `SELECT count(*) FROM translations WHERE TranslationId > 7`)
	if c.lists.Load() != 0 {
		t.Errorf("%d list reads", c.lists.Load())
	}
}
