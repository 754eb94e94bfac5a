//go:build cgo

package gen

import (
	"bytes"
	"path/filepath"
	"testing"
)

func TestIMDb(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "imdb.db")
	opts := IMDbOptions{Titles: 3000, Names: 2500, Seed: 3}
	if err := IMDb(path, opts); err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	if n := count(t, db, "SELECT count(*) FROM title"); n != 3000 {
		t.Errorf("%d titles", n)
	}
	if n := count(t, db, "SELECT count(*) FROM name"); n != 2500 {
		t.Errorf("%d names", n)
	}
	movies := count(t, db, "SELECT count(*) FROM title WHERE type = 'movie'")
	if movies < 700 || movies > 1100 {
		t.Errorf("%d movies of 3000 titles, want about 30%%", movies)
	}
	// Every title has genres and principals, every movie's cast plays
	// characters, and every reference resolves.
	for q, want := range map[string]int64{
		"SELECT count(*) FROM title WHERE title_id NOT IN (SELECT title_id FROM title_genre)":                             0,
		"SELECT count(*) FROM title WHERE title_id NOT IN (SELECT title_id FROM title_principal)":                         0,
		"SELECT count(*) FROM title WHERE type = 'movie' AND title_id NOT IN (SELECT title_id FROM title_name_character)": 0,
		"SELECT count(*) FROM title_principal WHERE name_id NOT IN (SELECT name_id FROM name)":                            0,
		"SELECT count(*) FROM title_name_character WHERE name_id NOT IN (SELECT name_id FROM name)":                       0,
		"SELECT count(*) FROM title_rating WHERE average_rating NOT BETWEEN 1 AND 10":                                     0,
	} {
		if n := count(t, db, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
	// The transaction's lookups go through idx_title_title.
	var plan string
	var id, parent, notused int
	if err := db.QueryRow("EXPLAIN QUERY PLAN SELECT * FROM title WHERE title = 'x' AND type = 'movie'").Scan(&id, &parent, &notused, &plan); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains([]byte(plan), []byte("idx_title_title")) {
		t.Errorf("plan %q does not use idx_title_title", plan)
	}

	if err := IMDb(filepath.Join(dir, "bad.db"), IMDbOptions{}); err == nil {
		t.Error("Titles 0 accepted")
	}
}
