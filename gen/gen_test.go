//go:build cgo

package gen

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

func generate(t *testing.T, opts SentencesOptions) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	if err := Sentences(path, opts); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db *sql.DB, query string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestDeterministic checks that each generator gives the same file for the
// same options and another file for another seed, and pins the files of
// small data sets by their SHA-256: the benchmarks' past figures in docs/
// were measured on these bytes. The pinned sums hold for the SQLite
// library in go.mod (the file header records its version); a change of
// that library may change them, and then they are updated here on purpose.
func TestDeterministic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gen    func(path string, seed int64) error
		sha256 string // of the file with seed 42
	}{
		{"sentences", func(path string, seed int64) error {
			return Sentences(path, SentencesOptions{Sentences: 3000, Translations: 6000, Seed: seed})
		}, "1c894910d360bac9d8fc6d1eee9c1392347da1f5e5902917ebbc7a358f001727"},
		{"sysbench", func(path string, seed int64) error {
			return Sysbench(path, SysbenchOptions{Rows: 3000, TypesRows: 2000, Seed: seed})
		}, "1165681a29f2a1828326bf69390219744924046e2fa6aa6cab9254e92496f3e4"},
		{"imdb", func(path string, seed int64) error {
			return IMDb(path, IMDbOptions{Titles: 3000, Names: 2500, Seed: seed})
		}, "a43bf38a66f5381ae92d3b3f972e420e16ae8d6d0ce938e14b5ae141a9723eb4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			read := func(name string, seed int64) []byte {
				t.Helper()
				path := filepath.Join(dir, name)
				if err := tc.gen(path, seed); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			a, b, c := read("a.db", 42), read("b.db", 42), read("c.db", 43)
			if !bytes.Equal(a, b) {
				t.Fatal("same options gave different files")
			}
			if bytes.Equal(a, c) {
				t.Fatal("different seeds gave the same file")
			}
			if len(a)%PageSize != 0 {
				t.Fatalf("file size %d is not a multiple of the page size", len(a))
			}
			if sum := fmt.Sprintf("%x", sha256.Sum256(a)); sum != tc.sha256 {
				t.Errorf("seed 42 gave a file with SHA-256 %s, want %s (the data set changed; see the comment above)", sum, tc.sha256)
			}
		})
	}
}

func TestContents(t *testing.T) {
	const ns, nt = 12000, 30000
	var calls, last int
	path := generate(t, SentencesOptions{Sentences: ns, Translations: nt, Seed: 7,
		Progress: func(done, total int) {
			calls++
			if total != ns+nt || done < last || done > total {
				t.Errorf("Progress(%d, %d) after %d", done, total, last)
			}
			last = done
		}})
	if last != ns+nt || calls < 2 {
		t.Errorf("Progress: %d calls, last done %d", calls, last)
	}
	db := open(t, path)

	checks := []struct {
		query string
		want  int64
	}{
		{"SELECT count(*) FROM sentences", ns},
		{"SELECT min(SentenceId) FROM sentences", 1},
		{"SELECT max(SentenceId) FROM sentences", ns},
		{"SELECT count(*) FROM translations", nt},
		{"SELECT count(*) FROM translations WHERE SentenceId = TranslationId", 0},
		// Referential integrity, both ends of every link.
		{"SELECT count(*) FROM translations LEFT JOIN sentences s ON s.SentenceId = translations.SentenceId WHERE s.SentenceId IS NULL", 0},
		{"SELECT count(*) FROM translations LEFT JOIN sentences s ON s.SentenceId = translations.TranslationId WHERE s.SentenceId IS NULL", 0},
		{"SELECT count(*) FROM sentences WHERE typeof(Text) <> 'text' OR typeof(Lang) <> 'text'", 0},
		{"SELECT count(*) FROM pragma_page_size WHERE page_size = 4096", 1},
	}
	for _, c := range checks {
		if got := count(t, db, c.query); got != c.want {
			t.Errorf("%s = %d, want %d", c.query, got, c.want)
		}
	}
	var ok string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q %v", ok, err)
	}

	// The seed query scans translations and finds rows.
	rows := count(t, db, "SELECT count(*) FROM ("+SeedQuery[:len(SeedQuery)-1]+")")
	if rows == 0 {
		t.Error("seed query returned no rows")
	}
	plan, err := db.Query("EXPLAIN QUERY PLAN " + SeedQuery)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for plan.Next() {
		var id, parent, unused int
		var detail string
		if err := plan.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if len(steps) != 2 || steps[0] != "SCAN translations" || steps[1] != "SEARCH sentences USING INTEGER PRIMARY KEY (rowid=?)" {
		t.Errorf("seed query plan = %q", steps)
	}

	// Text: mostly short, some longer than a page, valid UTF-8, many
	// languages.
	if n := count(t, db, "SELECT count(*) FROM sentences WHERE length(CAST(Text AS BLOB)) BETWEEN 20 AND 160"); n < ns*8/10 {
		t.Errorf("only %d of %d texts are 20-160 bytes", n, ns)
	}
	if n := count(t, db, "SELECT count(*) FROM sentences WHERE length(CAST(Text AS BLOB)) > 4096"); n < 2 {
		t.Errorf("%d texts longer than a page, want at least 2", n)
	}
	if n := count(t, db, "SELECT count(DISTINCT Lang) FROM sentences"); n < 15 {
		t.Errorf("%d languages, want at least 15", n)
	}
	if top := count(t, db, "SELECT count(*) FROM sentences WHERE Lang = 'eng'"); top < ns/10 || top > ns/4 {
		t.Errorf("%d English sentences of %d", top, ns)
	}
	all, err := db.Query("SELECT SentenceId, CAST(Text AS BLOB) FROM sentences")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	scripts := map[string]bool{}
	for all.Next() {
		var id int64
		var text []byte
		if err := all.Scan(&id, &text); err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(text) {
			t.Fatalf("sentence %d is not valid UTF-8", id)
		}
		r, _ := utf8.DecodeRune(text)
		switch {
		case r < 0x250:
			scripts["latin"] = true
		case r >= 0x400 && r < 0x500:
			scripts["cyrillic"] = true
		case r >= 0x3040 && r < 0xA000:
			scripts["cjk"] = true
		case r >= 0x5D0 && r < 0x700:
			scripts["hebrew-arabic"] = true
		}
	}
	if err := all.Err(); err != nil {
		t.Fatal(err)
	}
	if len(scripts) < 4 {
		t.Errorf("scripts seen: %v", scripts)
	}
}

func TestEdgeSizes(t *testing.T) {
	for _, o := range []SentencesOptions{
		{Sentences: 1},
		{Sentences: 2, Translations: 2},
		{Sentences: 5, Translations: 20}, // every possible link
		{Sentences: 200, Translations: 5000},
	} {
		db := open(t, generate(t, o))
		if n := count(t, db, "SELECT count(*) FROM sentences"); n != int64(o.Sentences) {
			t.Errorf("%+v: %d sentences", o, n)
		}
		if n := count(t, db, "SELECT count(*) FROM translations"); n != int64(o.Translations) {
			t.Errorf("%+v: %d translations", o, n)
		}
	}
}

func TestBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []SentencesOptions{
		{},
		{Sentences: 3, Translations: 7},
		{Sentences: 3, Translations: -1},
	} {
		path := filepath.Join(dir, "bad.db")
		if err := Sentences(path, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%+v: file left behind", o)
		}
	}
}
