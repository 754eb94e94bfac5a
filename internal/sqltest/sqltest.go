// Package sqltest holds what the SQLite tests of several packages share:
// a generated test database, the queries run on it, and a digest of a
// query's result to compare two databases by.
package sqltest

import (
	"crypto/sha256"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the reference SQLite

	"github.com/chunkd/chunkd/gen"
)

// Queries read much of a GenDB database in different ways: the seed's
// join, aggregates, sorts that spill, blobs over a page, an integrity
// check.
var Queries = []string{
	gen.SeedQuery,
	`SELECT Lang, count(*), sum(length(Text)), max(length(Text)) FROM sentences GROUP BY Lang ORDER BY Lang`,
	`SELECT s.SentenceId, s.Lang, t.TranslationId FROM sentences s JOIN translations t ON t.SentenceId = s.SentenceId WHERE s.SentenceId % 97 = 1 ORDER BY s.SentenceId DESC, t.TranslationId`,
	`SELECT SentenceId, Text FROM sentences ORDER BY length(Text) DESC, SentenceId LIMIT 25`,
	`SELECT SentenceId FROM sentences ORDER BY Text || Text, SentenceId`,
	`SELECT id, length(b), b FROM blobs ORDER BY id`,
	`SELECT count(*) FROM translations t JOIN sentences s ON s.SentenceId = t.TranslationId WHERE s.Lang = 'eng'`,
	`PRAGMA integrity_check`,
}

// GenDB generates a small corpus (gen.Sentences), adds a table of blobs
// (one larger than several pages), and returns its path.
func GenDB(t testing.TB, seed int64, sentences int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("db%d.sqlite", seed))
	if err := gen.Sentences(path, gen.SentencesOptions{Sentences: sentences, Translations: 2 * sentences, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	for i, n := range []int{10, 3000, 70000} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if _, err := db.Exec(`INSERT INTO blobs VALUES (?, ?)`, i+1, b); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// BenchCorpus writes the benchmarks' data set into a temporary directory
// of b and returns its path: gen.Sentences with CHUNKD_BENCH_SENTENCES
// sentences (def if it is not set), twice as many translations, seed 1.
func BenchCorpus(b testing.TB, def int) string {
	b.Helper()
	n := def
	if v := os.Getenv("CHUNKD_BENCH_SENTENCES"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatalf("CHUNKD_BENCH_SENTENCES=%q: %v", v, err)
		}
	}
	path := filepath.Join(b.TempDir(), "bench.sqlite")
	if err := gen.Sentences(path, gen.SentencesOptions{Sentences: n, Translations: 2 * n, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	return path
}

// Plain opens a database file read-only with SQLite's own file access,
// the reference a read path is compared with; closed at the end of the
// test.
func Plain(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Result runs query and returns a digest of all rows, and the row count.
func Result(t testing.TB, db *sql.DB, query string) (string, int) {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	h := sha256.New()
	n := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			fmt.Fprintf(h, "%T:%v|", v, v)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), n
}

// ScanAll runs q, whose rows have one column, and returns the bytes and
// rows it read.
func ScanAll(db *sql.DB, q string) (bytes, rows int, err error) {
	r, err := db.Query(q)
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	for r.Next() {
		var s sql.RawBytes
		if err := r.Scan(&s); err != nil {
			return 0, 0, err
		}
		bytes += len(s)
		rows++
	}
	return bytes, rows, r.Err()
}
