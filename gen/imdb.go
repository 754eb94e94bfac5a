package gen

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// IMDbSchema is an IMDb-shaped database in the normalized layout of the
// "title" benchmark of drop-in SQL caches: titles (movies, episodes,
// shorts, series, ...), their genres, their ratings, the people (names)
// principal to each title with their category, and the characters the
// actors play. Titles are looked up by their (non-unique) title text
// through idx_title_title, then joined by title_id.
const IMDbSchema = `CREATE TABLE title(
  title_id INTEGER PRIMARY KEY,
  tconst TEXT NOT NULL,
  type TEXT NOT NULL,
  title TEXT NOT NULL,
  original_title TEXT NOT NULL,
  is_adult INTEGER NOT NULL,
  start_year INTEGER,
  end_year INTEGER,
  run_time_mins INTEGER,
  updated TEXT NOT NULL);
CREATE TABLE title_genre(title_id INTEGER NOT NULL, genre TEXT NOT NULL, PRIMARY KEY(title_id, genre)) WITHOUT ROWID;
CREATE TABLE title_rating(title_id INTEGER PRIMARY KEY, average_rating REAL NOT NULL, num_votes INTEGER NOT NULL);
CREATE TABLE name(name_id INTEGER PRIMARY KEY, nconst TEXT NOT NULL, name TEXT NOT NULL, birth_year INTEGER, death_year INTEGER);
CREATE TABLE title_principal(title_id INTEGER NOT NULL, ordering INTEGER NOT NULL, name_id INTEGER NOT NULL, category TEXT NOT NULL, job TEXT, PRIMARY KEY(title_id, ordering)) WITHOUT ROWID;
CREATE TABLE title_name_character(title_id INTEGER NOT NULL, name_id INTEGER NOT NULL, character_name TEXT NOT NULL);`

// IMDbIndexes are the secondary indexes, built after the rows.
const IMDbIndexes = `CREATE INDEX idx_title_title ON title(title);
CREATE INDEX idx_title_principal_name ON title_principal(name_id);
CREATE INDEX idx_title_name_character_title ON title_name_character(title_id);
CREATE INDEX idx_title_name_character_name ON title_name_character(name_id);`

// IMDbOptions sizes and seeds an IMDb-shaped data set.
type IMDbOptions struct {
	// Titles is the number of titles (ids 1..Titles), about 30% of them
	// movies. It must be at least 1.
	Titles int
	// Names is the number of people (ids 1..Names); 0 means Titles.
	Names int
	// Seed selects the data; the same seed gives the same file.
	Seed int64
	// Progress, if not nil, is called now and then with the titles and
	// names written so far and their total, and once at the end.
	Progress func(done, total int)
}

// titleTypes are IMDb's title types with rough shares (in percent).
var titleTypes = []struct {
	name   string
	weight int
}{
	{"movie", 30}, {"tvEpisode", 40}, {"short", 10}, {"video", 6}, {"tvSeries", 5},
	{"tvMovie", 5}, {"videoGame", 2}, {"tvMiniSeries", 1}, {"tvSpecial", 1},
}

var genres = []string{"Action", "Adult", "Adventure", "Animation", "Biography", "Comedy", "Crime",
	"Documentary", "Drama", "Family", "Fantasy", "Film-Noir", "Game-Show", "History", "Horror",
	"Music", "Musical", "Mystery", "News", "Reality-TV", "Romance", "Sci-Fi", "Short", "Sport",
	"Talk-Show", "Thriller", "War", "Western"}

// crew are the principal categories other than the cast, in billing order.
var crew = []string{"director", "writer", "producer", "composer", "cinematographer", "editor",
	"production_designer", "casting_director"}

var roles = []string{"Doctor", "Nurse", "Officer", "Detective", "Narrator", "Waiter", "Reporter",
	"Soldier", "Mother", "Father", "Boy", "Girl", "Man", "Woman", "Driver", "Guard", "Teacher",
	"Captain", "Stranger", "Neighbor"}

// IMDb writes a new SQLite database to path (replacing any file there)
// holding an IMDb-shaped data set (see IMDbSchema), with 4096-byte pages.
// The same options give a byte-identical file with the same SQLite
// library.
func IMDb(path string, o IMDbOptions) error {
	if o.Titles < 1 {
		return fmt.Errorf("gen: Titles must be at least 1, got %d", o.Titles)
	}
	if o.Names < 0 {
		return fmt.Errorf("gen: Names must not be negative, got %d", o.Names)
	}
	if o.Names == 0 {
		o.Names = o.Titles
	}
	p := &progress{fn: o.Progress, total: o.Titles + o.Names}
	return build(path, IMDbSchema, IMDbIndexes, p, func(ctx context.Context, tx *sql.Tx) error {
		if err := fillNames(ctx, tx, o.Names, newRNG(o.Seed, 30), p); err != nil {
			return err
		}
		return fillTitles(ctx, tx, o.Titles, o.Names, newRNG(o.Seed, 31), p)
	})
}

// capitalized appends w with its first letter in upper case.
func capitalized(b, w []byte) []byte {
	c, size := utf8.DecodeRune(w)
	return append(utf8.AppendRune(b, unicode.ToUpper(c)), w[size:]...)
}

// personName appends a first and a last name drawn from the vocabulary of
// one of the Latin-script languages.
func personName(b []byte, r *rng) []byte {
	first := languages[[]int{0, 0, 0, 2, 4, 5, 6, 7, 8, 9}[r.intn(10)]].vocab
	last := languages[[]int{0, 0, 2, 5, 6, 7, 8, 9, 12, 13}[r.intn(10)]].vocab
	b = capitalized(b, first[r.intn(len(first))])
	b = append(b, ' ')
	return capitalized(b, last[r.intn(len(last))])
}

// titleText appends a title of one to four English-looking words.
func titleText(b []byte, r *rng) []byte {
	words := languages[0].vocab
	n := []int{1, 2, 2, 2, 3, 3, 3, 4, 4, 1}[r.intn(10)]
	if r.intn(5) == 0 {
		b = append(b, "The "...)
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ' ')
		}
		b = capitalized(b, words[r.intn(len(words))])
	}
	return b
}

func fillNames(ctx context.Context, tx *sql.Tx, names int, r *rng, p *progress) error {
	ins := newBatcher(ctx, tx, "name", 5)
	var b []byte
	for id := 1; id <= names; id++ {
		b = personName(b[:0], r)
		var birth, death any
		if r.intn(10) < 6 {
			y := r.between(1900, 2010)
			birth = int64(y)
			if r.intn(7) == 0 {
				death = int64(min(2025, y+r.between(20, 95)))
			}
		}
		if err := ins.add(int64(id), fmt.Sprintf("nm%07d", id), string(b), birth, death); err != nil {
			return err
		}
		p.tick()
	}
	return ins.flush()
}

func fillTitles(ctx context.Context, tx *sql.Tx, titles, names int, r *rng, p *progress) error {
	tIns := newBatcher(ctx, tx, "title", 10)
	gIns := newBatcher(ctx, tx, "title_genre", 2)
	rIns := newBatcher(ctx, tx, "title_rating", 3)
	pIns := newBatcher(ctx, tx, "title_principal", 5)
	cIns := newBatcher(ctx, tx, "title_name_character", 3)
	total := 0
	for _, t := range titleTypes {
		total += t.weight
	}
	var title, orig, char []byte
	picked := make([]int, 0, 3)
	for id := 1; id <= titles; id++ {
		x, typ := r.intn(total), ""
		for _, t := range titleTypes {
			if x < t.weight {
				typ = t.name
				break
			}
			x -= t.weight
		}
		movie := typ == "movie"
		title = titleText(title[:0], r)
		orig = append(orig[:0], title...)
		if r.intn(7) == 0 {
			orig = titleText(orig[:0], r)
		}
		start := max(r.between(1900, 2025), r.between(1900, 2025)) // more recent titles
		var end, runtime any
		if typ == "tvSeries" || typ == "tvMiniSeries" {
			if r.intn(2) == 0 {
				end = int64(min(2025, start+r.between(0, 12)))
			}
		}
		if r.intn(10) != 0 {
			switch typ {
			case "movie", "tvMovie":
				runtime = int64(r.between(60, 180))
			case "short":
				runtime = int64(r.between(1, 40))
			default:
				runtime = int64(r.between(15, 90))
			}
		}
		updated := fmt.Sprintf("2025-%02d-%02d %02d:%02d:%02d", r.between(1, 12), r.between(1, 28), r.intn(24), r.intn(60), r.intn(60))
		adult := 0
		if r.intn(50) == 0 {
			adult = 1
		}
		if err := tIns.add(int64(id), fmt.Sprintf("tt%07d", id), typ, string(title), string(orig), adult, int64(start), end, runtime, updated); err != nil {
			return err
		}

		// Genres: one to three, distinct, in the order of the list (the
		// primary key's order).
		picked = picked[:0]
		for n := r.between(1, 3); len(picked) < n; {
			g := r.intn(len(genres))
			dup := false
			for _, q := range picked {
				dup = dup || q == g
			}
			if !dup {
				picked = append(picked, g)
			}
		}
		for i := 0; i < len(genres); i++ {
			for _, q := range picked {
				if q == i {
					if err := gIns.add(int64(id), genres[i]); err != nil {
						return err
					}
				}
			}
		}

		if (movie && r.intn(20) != 0) || r.intn(5) < 2 {
			u := r.intn(1000)
			votes := 5 + int64(u)*int64(u)*int64(u)/400 // 5 to about 2.5 million, most few
			if err := rIns.add(int64(id), float64(r.between(10, 100))/10, votes); err != nil {
				return err
			}
		}

		// Principals: the cast first, then the crew; each actor plays one
		// character (sometimes two).
		var n int
		switch typ {
		case "movie":
			n = r.between(4, 14)
		case "tvEpisode":
			n = r.between(2, 6)
		default:
			n = r.between(2, 9)
		}
		cast := (n*3 + 4) / 5
		for ord := 1; ord <= n; ord++ {
			person := r.intn(names) + 1
			if r.intn(2) == 0 { // popular people appear in many titles
				person = r.intn(names)*r.intn(names)/names + 1
			}
			var cat string
			var job any
			if ord <= cast {
				cat = []string{"actor", "actress", "actor", "actress", "self"}[r.intn(5)]
				if typ == "movie" && r.intn(40) == 0 {
					cat = "archive_footage"
				}
			} else {
				cat = crew[min(len(crew)-1, (ord-cast-1)*len(crew)/max(1, n-cast))]
				switch cat {
				case "writer":
					job = []string{"screenplay", "novel", "story", "written by"}[r.intn(4)]
				case "producer":
					job = []string{"producer", "executive producer"}[r.intn(2)]
				}
			}
			if err := pIns.add(int64(id), int64(ord), int64(person), cat, job); err != nil {
				return err
			}
			if ord > cast {
				continue
			}
			for k := 1 + r.intn(10)/9; k > 0; k-- {
				if r.intn(3) == 0 {
					char = append(char[:0], roles[r.intn(len(roles))]...)
				} else {
					char = personName(char[:0], r)
					if i := bytes.IndexByte(char, ' '); i > 0 {
						char = char[:i] // a first name only
					}
				}
				if err := cIns.add(int64(id), int64(person), string(char)); err != nil {
					return err
				}
			}
		}
		p.tick()
	}
	for _, b := range []*batcher{tIns, gIns, rIns, pIns, cIns} {
		if err := b.flush(); err != nil {
			return err
		}
	}
	return nil
}
