//go:build cgo

package sqlitevfs

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// listCounter is a rangeCounter that is a PageLister too, and records
// the pages it reads.
type listCounter struct {
	rangeCounter
	lists, listed atomic.Int64
	mu            sync.Mutex
	list, single  []int64 // the pages listed and read one at a time, in order
}

func (c *listCounter) ReadPage(ctx context.Context, n int64, p []byte) error {
	c.mu.Lock()
	c.single = append(c.single, n)
	c.mu.Unlock()
	return c.rangeCounter.ReadPage(ctx, n, p)
}

func (c *listCounter) ReadPageList(ctx context.Context, ns []int64, ps [][]byte) error {
	c.lists.Add(1)
	c.listed.Add(int64(len(ns)))
	c.mu.Lock()
	c.list = append(c.list, ns...)
	c.mu.Unlock()
	for i, n := range ns {
		if err := c.FilePages.ReadPage(ctx, n, ps[i]); err != nil {
			return err
		}
	}
	return nil
}

// listedOf returns how many of the pages listed after the first from are
// leaves of tr.
func (c *listCounter) listedOf(from int64, tr *scanTree) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return leavesAmong(c.list[from:], tr)
}

// singlesOf returns how many of the pages read one at a time after the
// first from are leaves of tr.
func (c *listCounter) singlesOf(from int, tr *scanTree) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return leavesAmong(c.single[from:], tr)
}

// leavesAmong returns how many of pages are leaves of tr.
func leavesAmong(pages []int64, tr *scanTree) int64 {
	leaves := map[int64]bool{}
	for _, l := range tr.leaves {
		leaves[l] = true
	}
	var n int64
	for _, p := range pages {
		if leaves[p] {
			n++
		}
	}
	return n
}

// scanDB writes a database whose table t(id, k, pad) has an index on a
// random k, so that a scan of the index reads the table's leaves in no
// order, a table u whose column tid names a random row of t (a join on
// it looks t's rows up in no order), and a WITHOUT ROWID table w with an
// index.
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
		`CREATE TABLE u(id INTEGER PRIMARY KEY, tid INT, pad TEXT)`,
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
		if _, err := db.Exec(`INSERT INTO u VALUES(?, ?, ?)`, i, 1+rng.IntN(rows), pad[:20]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`COMMIT`); err != nil {
		t.Fatal(err)
	}
	return path
}

// treeOf returns the B-tree read-ahead of the registration name.
func treeOf(t *testing.T, name string) *treeAhead {
	t.Helper()
	ra, ok := lookup(name).pages.(*readAhead)
	if !ok || ra.tree == nil {
		t.Fatal("no B-tree read-ahead")
	}
	return ra.tree
}

// waitReady runs q, which reads many leaves, until the read-ahead has
// found the B-trees (it does that in the background once a connection
// has read initLeaves leaves).
func (ta *treeAhead) waitReady(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ta.ready.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the read-ahead never found the B-trees")
		}
		result(t, db, q)
	}
}

// tree returns the scanned B-tree of table or index name, whose root
// page db says.
func (ta *treeAhead) tree(t *testing.T, db *sql.DB, name string) *scanTree {
	t.Helper()
	var root int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = ?`, name).Scan(&root); err != nil {
		t.Fatal(err)
	}
	for _, tr := range ta.trees {
		if tr.root == root {
			return tr
		}
	}
	t.Fatalf("%s (root page %d): no such B-tree found", name, root)
	return nil
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
	ta.waitReady(t, db, `SELECT count(k) FROM t INDEXED BY t_k`)
	// t, t_k, u, w and w_b; only t and u have rowids to look up.
	if len(ta.trees) != 5 || len(ta.targets) != 2 {
		t.Fatalf("%d B-trees and %d rowid tables found, want 5 and 2", len(ta.trees), len(ta.targets))
	}

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
	ixLeaves := int64(len(ta.tree(t, plain, "t_k").leaves))
	t.Logf("scan: %d single reads, %d list reads of %d pages (index: %d leaves)", singles, lists, listed, ixLeaves)
	// Without it, a page read per row (10,000) bar SQLite's cache; with
	// it, the first index leaf's rows (watched) and little more.
	if lists < ixLeaves/4 || singles > 1000 {
		t.Errorf("scan: %d single reads and %d list reads: the table leaves were not fetched ahead", singles, lists)
	}

	table := ta.tree(t, plain, "t")
	for _, q := range []string{covering, filtered, noRowid} {
		n0 := c.listed.Load()
		singles, lists, listed := run(q)
		rows := c.listedOf(n0, table)
		t.Logf("%s: %d single reads, %d list reads of %d pages (%d of t's leaves)", q, singles, lists, listed, rows)
		// At most the two index leaves' worth of table leaves a scan may
		// fetch before it sees them go unread (the scan's own leaves,
		// fetched ahead in key order where they are not in page order,
		// are read).
		if rows > 2*maxBatchBytes/4096 {
			t.Errorf("%s: %d of t's leaves listed: fetched ahead what it does not read", q, rows)
		}
	}
}

// concurrentQueries runs qs on db from conns goroutines at once, each
// running rounds of them (goroutine g starts at query g), and fails t for
// a result other than want's.
func concurrentQueries(t *testing.T, db *sql.DB, qs, want []string, conns, rounds int) {
	t.Helper()
	errs := make(chan error, conns)
	for g := range conns {
		go func() {
			for i := range rounds {
				q := (g + i) % len(qs)
				if got, _ := result(t, db, qs[q]); got != want[q] {
					errs <- fmt.Errorf("%s: results differ", qs[q])
					return
				}
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Error(err)
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
			treeOf(t, name).waitReady(t, db, `SELECT count(k) FROM t INDEXED BY t_k`)
		}
		p0 := c.pages.Load()
		concurrentQueries(t, db, qs, want, 8, 3)
		t.Logf("read-ahead %d: %d single reads, %d list reads of %d pages", readAhead, c.pages.Load()-p0, c.lists.Load(), c.listed.Load())
		return c.pages.Load() - p0
	}
	without, with := run(-1), run(0)
	if 2*with > without {
		t.Errorf("%d reads one page at a time with read-ahead, %d without", with, without)
	}
}

// TestJoinAhead: a join that looks rows of t up by the rowid a column of
// u names, scanning u, fetches the t leaves a whole leaf of u names at
// once, returns what the file does, and goes on fetching on the
// connection's next such join; a scan of u that reads the column but
// looks nothing up fetches nothing.
func TestJoinAhead(t *testing.T) {
	path := scanDB(t, 20000)
	plain := openPlain(t, path)
	c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}
	// One connection throughout, whose page cache (200 KiB) is small
	// for the table: its next joins find few of their pages there.
	name, db := register(t, c, &Options{ReadAhead: 16, CacheKiB: 200})
	db.SetMaxOpenConns(1)
	ta := treeOf(t, name)
	ta.waitReady(t, db, `SELECT count(k) FROM t INDEXED BY t_k`)
	run := func(q string) (singles, lists, listed int64) {
		t.Helper()
		p0, l0, n0 := c.pages.Load(), c.lists.Load(), c.listed.Load()
		want, _ := result(t, plain, q)
		if got, _ := result(t, db, q); got != want {
			t.Fatalf("%s: results differ from the file's", q)
		}
		return c.pages.Load() - p0, c.lists.Load() - l0, c.listed.Load() - n0
	}
	for i, start := range []int{1000, 9000, 15000} {
		q := fmt.Sprintf(`SELECT u.id, t.id, t.k, length(t.pad) FROM u CROSS JOIN t ON t.id = u.tid WHERE u.id >= %d LIMIT 2000`, start)
		singles, lists, listed := run(q)
		t.Logf("join from %d: %d single reads, %d list reads of %d pages", start, singles, lists, listed)
		// Without it, about a read per row (2,000); with it, the rows of
		// u's first leaves (entered by a seek, then watched on the first
		// join of the connection) and little more. The later joins find
		// most of t's leaves held already (the whole table fits in what
		// is held).
		if i == 0 && lists < 20 || singles > 400 {
			t.Errorf("join %d: %d single reads and %d list reads: t's leaves were not fetched ahead", i, singles, lists)
		}
	}
	n0 := c.listed.Load()
	singles, lists, listed := run(`SELECT sum(tid), count(*) FROM u WHERE id > 10`)
	rows := c.listedOf(n0, ta.tree(t, plain, "t"))
	t.Logf("scan of u: %d single reads, %d list reads of %d pages (%d of t's leaves)", singles, lists, listed, rows)
	// The leaves of u's first step or three (what a fetching scan
	// fetches before it is judged), most of them held already.
	if rows > 300 {
		t.Errorf("scan of u: %d of t's leaves listed: fetched what it does not read", rows)
	}
}

// TestLeafAhead: a full scan of a B-tree whose leaves are not in page
// order (w, filled in random key order beside other tables) fetches its
// next leaves in key order, runs of them with one list each, where it
// read them one at a time; the results are the file's.
func TestLeafAhead(t *testing.T) {
	path := scanDB(t, 8000)
	plain := openPlain(t, path)
	c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}
	name, db := register(t, c, &Options{ReadAhead: 16})
	ta := treeOf(t, name)
	ta.waitReady(t, db, `SELECT count(k) FROM t INDEXED BY t_k`)
	w := ta.tree(t, plain, "w")
	inOrder := 0
	for i := 1; i < len(w.leaves); i++ {
		if w.leaves[i] == w.leaves[i-1]+1 {
			inOrder++
		}
	}
	const q = `SELECT a, b, length(c) FROM w`
	db.SetMaxIdleConns(0) // a fresh connection, its cache empty
	p0, l0, n0 := c.pages.Load(), c.lists.Load(), c.listed.Load()
	want, _ := result(t, plain, q)
	if got, _ := result(t, db, q); got != want {
		t.Fatalf("%s: results differ from the file's", q)
	}
	singles, lists, own := c.pages.Load()-p0, c.lists.Load()-l0, c.listedOf(n0, w)
	t.Logf("scan of w (%d leaves, %d of them the page after the one before): %d single reads, %d list reads of %d of its leaves", len(w.leaves), inOrder, singles, lists, own)
	if singles > int64(len(w.leaves))/4 || own < int64(len(w.leaves))/2 || lists > int64(len(w.leaves))/8 {
		t.Errorf("scan of w: %d single reads, %d list reads of %d of its %d leaves: not fetched ahead in runs", singles, lists, own, len(w.leaves))
	}
}

// execDB writes a database named name in a temporary directory with
// stmts and returns its path.
func execDB(t *testing.T, name string, stmts ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	db, err := sql.Open(DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	return path
}

// TestJoinAheadStops: a scan whose leaves each name only a few table
// leaves (a child table clustered by its parent's id), learned by a join,
// stops fetching on the connection's next scan of it that looks nothing
// up: the few leaves each names are added up until there are enough to
// judge.
func TestJoinAheadStops(t *testing.T) {
	path := execDB(t, "clustered.sqlite",
		`CREATE TABLE p(id INTEGER PRIMARY KEY, pad TEXT)`,
		`CREATE TABLE c(id INTEGER PRIMARY KEY, pid INT, pad TEXT)`,
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000) INSERT INTO p SELECT i, printf('%0150d', i) FROM n`,
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 40000) INSERT INTO c SELECT i, 1 + i / 2, printf('%030d', i) FROM n`,
	)
	plain := openPlain(t, path)
	c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}
	name, db := register(t, c, &Options{ReadAhead: 16, CacheKiB: 200})
	db.SetMaxOpenConns(1)
	treeOf(t, name).waitReady(t, db, `SELECT count(pad) FROM p`)
	run := func(q string) (lists, listed int64) {
		t.Helper()
		l0, n0 := c.lists.Load(), c.listed.Load()
		want, _ := result(t, plain, q)
		if got, _ := result(t, db, q); got != want {
			t.Fatalf("%s: results differ from the file's", q)
		}
		return c.lists.Load() - l0, c.listed.Load() - n0
	}
	lists, listed := run(`SELECT c.id, length(p.pad) FROM c CROSS JOIN p ON p.id = c.pid WHERE c.id >= 10000 LIMIT 8000`)
	t.Logf("join: %d list reads of %d pages", lists, listed)
	if lists < 10 {
		t.Fatalf("join: %d list reads: nothing fetched ahead, nothing to stop", lists)
	}
	lists, listed = run(`SELECT sum(pid) FROM c WHERE id >= 2000`)
	t.Logf("scan that looks nothing up: %d list reads of %d pages", lists, listed)
	// It scans about 380 leaves; fetching for each would be two list
	// reads a leaf.
	if lists > 40 {
		t.Errorf("scan that looks nothing up: %d list reads of %d pages: it did not stop", lists, listed)
	}
}

// TestTreeAheadIdle: a database with no rowid table of more than one
// leaf (here only WITHOUT ROWID tables) has no row a scan could look up:
// once its schema is read, every read is left to the sequential
// read-ahead.
func TestTreeAheadIdle(t *testing.T) {
	path := execDB(t, "norowid.sqlite",
		`CREATE TABLE w(a INTEGER PRIMARY KEY, b INT, c TEXT) WITHOUT ROWID`,
		`CREATE INDEX w_b ON w(b)`,
		`CREATE TABLE small(x INTEGER PRIMARY KEY, y INT)`, // one leaf
		`INSERT INTO small VALUES(1, 1)`,
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 5000) INSERT INTO w SELECT i, i % 97, printf('%0100d', i) FROM n`,
	)

	c := &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}
	name, vdb := register(t, c, nil)
	ta := treeOf(t, name)
	ta.waitReady(t, vdb, `SELECT count(c) FROM w WHERE a > 10`)
	if !ta.idle() {
		t.Fatalf("%d B-trees and %d rowid tables found: not idle", len(ta.trees), len(ta.targets))
	}
	result(t, vdb, `SELECT sum(w.b), count(small.y) FROM w JOIN small ON small.x = w.b WHERE w.a > 7`)
	if c.lists.Load() != 0 {
		t.Errorf("%d list reads", c.lists.Load())
	}
}

// pageSharer is a listCounter that hands its pages over (a PageSharer),
// each in a buffer of its own, which it keeps, to check that the VFS
// never writes one.
type pageSharer struct {
	*listCounter
	shares atomic.Int64
	mu     sync.Mutex
	given  map[int64][][]byte
}

func (s *pageSharer) SharePageList(ctx context.Context, ns []int64) ([][]byte, error) {
	pages := pageBufs(make([]byte, len(ns)*s.PageSize()), s.PageSize())
	if err := s.listCounter.ReadPageList(ctx, ns, pages); err != nil {
		return nil, err
	}
	s.shares.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range ns {
		s.given[n] = append(s.given[n], pages[i])
	}
	return pages, nil
}

// TestSharedPages: from a source that hands its pages over, sequential
// read-ahead and the B-tree read-ahead (index scans, joins, scans whose
// leaves are out of page order) hold the source's bytes: the results on
// several connections at once are the file's, no batch is copied
// (ReadPages is never called), and no page handed over was written.
func TestSharedPages(t *testing.T) {
	path := scanDB(t, 8000)
	plain := openPlain(t, path)
	qs := []string{
		`SELECT id, k, length(pad) FROM t INDEXED BY t_k WHERE k > 300000`,
		`SELECT u.id, t.id, t.k, length(t.pad) FROM u CROSS JOIN t ON t.id = u.tid WHERE u.id >= 1000 LIMIT 3000`,
		`SELECT a, b, length(c) FROM w`,
		`SELECT count(*), sum(length(pad)) FROM t`,
	}
	want := make([]string, len(qs))
	for i, q := range qs {
		want[i], _ = result(t, plain, q)
	}
	s := &pageSharer{listCounter: &listCounter{rangeCounter: rangeCounter{FilePages: filePages(t, path)}}, given: map[int64][][]byte{}}
	name, db := register(t, s, &Options{CacheKiB: 100, ReadAhead: 16})
	treeOf(t, name).waitReady(t, db, `SELECT count(k) FROM t INDEXED BY t_k`)
	concurrentQueries(t, db, qs, want, 4, 2*len(qs))
	if s.shares.Load() == 0 || s.ranges.Load() != 0 {
		t.Errorf("%d lists shared, %d batches copied (ReadPages): want shared lists and no copies", s.shares.Load(), s.ranges.Load())
	}
	file := make([]byte, s.PageSize())
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, pages := range s.given {
		if err := s.FilePages.ReadPage(context.Background(), n, file); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			if !bytes.Equal(p, file) {
				t.Fatalf("page %d, handed over, was written", n)
			}
		}
	}
	t.Logf("%d lists shared, %d pages", s.shares.Load(), len(s.given))
}
