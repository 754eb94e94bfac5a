//go:build cgo

package btree_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/chunkd/chunkd/sqlitevfs/btree"
)

// indexedDB writes a database with a rowid table t(id, k, pad), an index
// on k (k random, so the index's order is not the table's), a WITHOUT
// ROWID table and a view; it returns its path and a handle on it.
func indexedDB(t *testing.T, rows int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ix.sqlite")
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	stmts := []string{
		`PRAGMA page_size=1024`,
		`CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, pad TEXT)`,
		`CREATE INDEX t_k ON t(k)`,
		`CREATE TABLE w(a TEXT, b INT, PRIMARY KEY(a, b)) WITHOUT ROWID`,
		`CREATE INDEX w_b ON w(b)`,
		`CREATE VIEW v AS SELECT id FROM t`,
		`BEGIN`,
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 1; i <= rows; i++ {
		if _, err := db.Exec(`INSERT INTO t VALUES(?, ?, ?)`, i*3, rng.Int64N(1<<40)-1<<39, strings.Repeat("x", rng.IntN(120))); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO w VALUES(?, ?)`, fmt.Sprint(rng.Int64()), i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`COMMIT`); err != nil {
		t.Fatal(err)
	}
	return path, db
}

func pageReader(t *testing.T, path string) (btree.ReadFunc, int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := int(data[16])<<8 | int(data[17])
	usable, err := btree.Usable(data[:ps])
	if err != nil {
		t.Fatal(err)
	}
	return func(n int64) ([]byte, error) {
		if n < 1 || int(n)*ps > len(data) {
			return nil, fmt.Errorf("page %d out of range", n)
		}
		return data[(int(n)-1)*ps : int(n)*ps], nil
	}, usable
}

// TestAgainstSQLite reads the schema, an index's leaves and the rowids
// they hold, and finds each rowid's table leaf, and checks each against
// what SQLite says.
func TestAgainstSQLite(t *testing.T) {
	path, db := indexedDB(t, 6000)
	read, usable := pageReader(t, path)

	objs, err := btree.Schema(read, usable)
	if err != nil {
		t.Fatal(err)
	}
	var want []btree.Object
	rows, err := db.Query(`SELECT type, name, tbl_name, rootpage FROM sqlite_schema`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var o btree.Object
		var root sql.NullInt64
		if err := rows.Scan(&o.Type, &o.Name, &o.Table, &root); err != nil {
			t.Fatal(err)
		}
		o.Root = root.Int64
		want = append(want, o)
	}
	rows.Close()
	if !slices.Equal(objs, want) {
		t.Fatalf("schema:\n got %v\nwant %v", objs, want)
	}
	root := func(name string) int64 {
		for _, o := range objs {
			if o.Name == name {
				return o.Root
			}
		}
		t.Fatalf("no %s in the schema", name)
		return 0
	}

	// The index's leaves, in key order, hold the rowids in the index's
	// order.
	leaves, err := btree.Leaves(read, root("t_k"), usable)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaves) < 10 {
		t.Fatalf("only %d index leaves", len(leaves))
	}
	var got []int64
	for _, l := range leaves {
		b, _ := read(l)
		p, err := btree.Parse(b, l, usable)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := p.IndexRowids()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids...)
	}
	var inOrder []int64
	rows, err = db.Query(`SELECT id FROM t INDEXED BY t_k ORDER BY k, id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		inOrder = append(inOrder, id)
	}
	rows.Close()
	// Interior cells of an index hold entries too: the leaves hold all
	// but those, in order.
	if len(got) >= len(inOrder) || len(got) < len(inOrder)*9/10 || !isSubsequence(got, inOrder) {
		t.Fatalf("index leaves hold %d rowids, not a large ordered part of the index's %d", len(got), len(inOrder))
	}

	// Each rowid is found in the table leaf the descent leads to.
	for _, id := range got[:500] {
		n := root("t")
		for {
			b, _ := read(n)
			p, err := btree.Parse(b, n, usable)
			if err != nil {
				t.Fatal(err)
			}
			if p.Kind() == btree.TableLeaf {
				break
			}
			keys, children, err := p.TableKeys()
			if err != nil {
				t.Fatal(err)
			}
			n = btree.Step(keys, children, id)
		}
		b, _ := read(n)
		p, _ := btree.Parse(b, n, usable)
		found := false
		var first, last int64
		p.TableRows(func(rowid int64, r btree.Record) error {
			if first == 0 {
				first = rowid
			}
			last = rowid
			if rowid == id {
				found = true
				if v, err := r.Column(0); err != nil || v != nil { // the INTEGER PRIMARY KEY is stored as NULL
					t.Errorf("rowid %d: column 0 is %v, %v", id, v, err)
				}
			}
			return nil
		})
		if !found {
			t.Fatalf("rowid %d not on leaf %d", id, n)
		}
		// Its span is its first and last rows' rowids.
		if lo, hi, err := p.RowidSpan(); err != nil || lo != first || hi != last {
			t.Fatalf("leaf %d: RowidSpan %d-%d, %v; its rows run %d-%d", n, lo, hi, err, first, last)
		}
	}
}

// TestRecordsAgainstSQLite reads a WITHOUT ROWID table's leaves as
// records and checks them against SQLite's rows.
func TestRecordsAgainstSQLite(t *testing.T) {
	path, db := indexedDB(t, 3000)
	read, usable := pageReader(t, path)
	var root int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = 'w'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	// A WITHOUT ROWID table's leaves hold its rows as records, in key
	// order.
	var gotRows []string
	wl, err := btree.Leaves(read, root, usable)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range wl {
		b, _ := read(l)
		p, err := btree.Parse(b, l, usable)
		if err != nil {
			t.Fatal(err)
		}
		err = p.IndexRecords(func(r btree.Record) error {
			if v, err := r.Column(2); err == nil {
				return fmt.Errorf("a third value %v in a record of 2", v)
			}
			a, err := r.Column(0)
			if err != nil {
				return err
			}
			b, err := r.Column(1)
			if err != nil {
				return err
			}
			gotRows = append(gotRows, fmt.Sprint(a, "|", b))
			var ints []int64
			if err := r.Ints(func(i, n int, v int64) {
				if i != 1 || n != 2 {
					t.Errorf("Ints: value %d of %d, want the second of 2", i, n)
				}
				ints = append(ints, v)
			}); err != nil || len(ints) != 1 || ints[0] != b {
				return fmt.Errorf("Ints: %v, %v; want [%v]", ints, err, b)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("leaf %d of w: %v", l, err)
		}
	}
	var wantRows []string
	rows, err := db.Query(`SELECT a, b FROM w ORDER BY a, b`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		var b int64
		rows.Scan(&a, &b)
		wantRows = append(wantRows, fmt.Sprint(a, "|", b))
	}
	rows.Close()
	if len(gotRows) < len(wantRows)*9/10 || !isSubsequence(gotRows, wantRows) {
		t.Fatalf("w's leaves hold %d rows, not a large ordered part of its %d", len(gotRows), len(wantRows))
	}

}

func isSubsequence[T comparable](sub, of []T) bool {
	i := 0
	for _, x := range of {
		if i < len(sub) && sub[i] == x {
			i++
		}
	}
	return i == len(sub)
}

// TestMalformed: every page of a real database, cut short or with bytes
// changed at random, parses or is an error; nothing panics.
func TestMalformed(t *testing.T) {
	path, _ := indexedDB(t, 2000)
	read, usable := pageReader(t, path)
	rng := rand.New(rand.NewPCG(3, 4))
	orig := map[int64][]byte{}
	for n := int64(1); ; n++ {
		b, err := read(n)
		if err != nil {
			break
		}
		orig[n] = b
	}
	broken := 0
	for round := 0; round < 3000; round++ {
		n := int64(1 + rng.IntN(len(orig)))
		b := slices.Clone(orig[n])
		for range 1 + rng.IntN(8) {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
		if rng.IntN(4) == 0 {
			b = b[:rng.IntN(len(b))]
		}
		p, err := btree.Parse(b, n, usable)
		if err != nil {
			if !errors.Is(err, btree.ErrMalformed) {
				t.Fatalf("page %d: %v, not ErrMalformed", n, err)
			}
			broken++
			continue
		}
		p.Children()
		p.TableKeys()
		p.IndexRowids()
		values := func(r btree.Record) error {
			for i := 0; i < 1<<10; i++ { // up to one past the last
				if _, err := r.Column(i); err != nil && !errors.Is(err, btree.ErrSpilled) {
					break
				}
			}
			r.Ints(func(int, int, int64) {})
			return nil
		}
		p.TableRows(func(_ int64, r btree.Record) error { return values(r) })
		p.IndexRecords(values)
		if _, _, err := p.RowidSpan(); err != nil && !errors.Is(err, btree.ErrMalformed) {
			t.Fatalf("page %d: RowidSpan: %v, not ErrMalformed", n, err)
		}
		mutated := func(m int64) ([]byte, error) {
			if m == n {
				return b, nil
			}
			return read(m)
		}
		btree.Schema(mutated, usable)
		btree.Leaves(mutated, n, usable)
	}
	if broken == 0 {
		t.Error("no mutated page was refused")
	}
}
