// Package gen writes deterministic SQLite test databases for chunkd.
//
// Sentences makes a Tatoeba-like corpus: a sentences table of short texts
// in many languages and scripts, with a long tail of longer texts (some
// larger than a page, so overflow pages exist), and a translations table
// that links pairs of sentences. The same options produce a byte-identical
// file with the same SQLite library, so a data set can be regenerated
// instead of stored.
//
// The translations table is WITHOUT ROWID, clustered on its primary key
// (SentenceId, TranslationId), as Dolt stores it. The seed query
//
//	SELECT Text FROM translations JOIN sentences
//	  ON translations.TranslationId = sentences.SentenceId
//	  WHERE translations.SentenceID % 5000 = 0;
//
// therefore scans the translations b-tree and looks each match up in the
// sentences table by its INTEGER PRIMARY KEY (the rowid).
//
// Files are written with github.com/mattn/go-sqlite3, so the package needs
// cgo. Byte-identical output assumes the same SQLite library: the header
// records the library version.
package gen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// PageSize is the SQLite page size of generated files.
const PageSize = 4096

// SeedQuery is the query the benchmarks run: a scan of translations plus
// point lookups into sentences.
const SeedQuery = `SELECT Text FROM translations JOIN sentences ON translations.TranslationId = sentences.SentenceId WHERE translations.SentenceID % 5000 = 0;`

// Schema is the DDL of a generated file.
const Schema = `CREATE TABLE sentences(SentenceId INTEGER PRIMARY KEY, Lang TEXT, Text TEXT);
CREATE TABLE translations(SentenceId INTEGER, TranslationId INTEGER, PRIMARY KEY(SentenceId, TranslationId)) WITHOUT ROWID;`

// SentencesOptions sizes and seeds a generated corpus.
type SentencesOptions struct {
	// Sentences is the number of rows in sentences, with ids 1..Sentences.
	// It must be at least 1.
	Sentences int
	// Translations is the number of rows in translations. Each row links
	// two different existing sentences; no pair repeats. It must be at
	// most Sentences*(Sentences-1).
	Translations int
	// Seed selects the data; the same seed gives the same file.
	Seed int64
	// Progress, if not nil, is called now and then with the number of rows
	// written so far and the total (Sentences+Translations), and once at
	// the end with done == total.
	Progress func(done, total int)
}

// Sentences writes a new SQLite database to path (replacing any file there)
// holding opts.Sentences sentences and opts.Translations translations,
// with 4096-byte pages. It is fast: one transaction, multi-row prepared
// INSERTs, no journal (about 70 MB/s on a 2-core machine). The file is
// written next to path under a temporary name and renamed into
// place when complete, so path never holds a partial database.
func Sentences(path string, opts SentencesOptions) error {
	if opts.Sentences < 1 {
		return fmt.Errorf("gen: Sentences must be at least 1, got %d", opts.Sentences)
	}
	n := int64(opts.Sentences)
	if opts.Translations < 0 || int64(opts.Translations) > n*(n-1) {
		return fmt.Errorf("gen: Translations must be in [0, %d], got %d", n*(n-1), opts.Translations)
	}
	p := &progress{fn: opts.Progress, total: opts.Sentences + opts.Translations}
	return build(path, Schema, "", p, func(ctx context.Context, tx *sql.Tx) error {
		if err := fillSentences(ctx, tx, opts.Sentences, newRNG(opts.Seed, 1), p); err != nil {
			return err
		}
		return fillTranslations(ctx, tx, opts.Sentences, opts.Translations, newRNG(opts.Seed, 2), p)
	})
}

// fillSentences inserts sentences 1..n, their language and text drawn
// from r.
func fillSentences(ctx context.Context, tx *sql.Tx, n int, r *rng, p *progress) error {
	ins := newBatcher(ctx, tx, "sentences", 3)
	langs := newLangPicker()
	var buf []byte
	for id := 1; id <= n; id++ {
		l := langs.pick(r)
		size := textLength(r)
		if id%9973 == 3 {
			// Guaranteed overflow rows, even in small data sets.
			size = r.between(5000, 20000)
		}
		buf = appendText(buf[:0], r, l, size)
		if err := ins.add(int64(id), l.code, string(buf)); err != nil {
			return err
		}
		p.tick()
	}
	return ins.flush()
}

// fillTranslations inserts translations links between the sentences
// 1..sentences, in primary-key order, drawn from r.
func fillTranslations(ctx context.Context, tx *sql.Tx, sentences, translations int, r *rng, p *progress) error {
	ins := newBatcher(ctx, tx, "translations", 2)
	var targets []int64
	remT := int64(translations)
	n := int64(sentences)
	for id := int64(1); id <= n; id++ {
		k := translationCount(r, remT, n-id+1, n)
		remT -= k
		targets = pickTargets(r, targets[:0], id, k, n)
		for _, t := range targets {
			if err := ins.add(id, t); err != nil {
				return err
			}
			p.tick()
		}
	}
	if err := ins.flush(); err != nil {
		return err
	}
	if remT != 0 {
		return errors.New("gen: internal error: translation budget not spent")
	}
	return nil
}

// translationCount draws how many translations the next sentence gets,
// given remT translations still to place over remN sentences (this one
// included) in a corpus of n sentences. Draws average out to remT/remN,
// every draw leaves the rest placeable, and the last draw takes all that
// is left, so the total comes out exact.
func translationCount(r *rng, remT, remN, n int64) int64 {
	maxPer := n - 1
	if remN == 1 {
		return remT
	}
	q := remT / remN
	var k int64
	if r.intn(100) == 0 {
		// A popular sentence, translated into many languages.
		k = int64(r.intn(int(20*q + 20)))
	} else {
		k = int64(r.intn(int(2*q + 2)))
	}
	k = min(k, maxPer, remT)
	// Leave no more than the other sentences can take.
	return max(k, remT-(remN-1)*maxPer)
}

// pickTargets appends k distinct sentence ids from [1, n], none equal to
// id, to dst in ascending order.
func pickTargets(r *rng, dst []int64, id, k, n int64) []int64 {
	switch {
	case k == 0:
		return dst
	case k <= 64 && k < (n-1)/2:
		// Rejection sampling; duplicates are rare and checked linearly.
		start := len(dst)
		for int64(len(dst)-start) < k {
			t := int64(r.intn(int(n))) + 1
			if t == id || slices.Contains(dst[start:], t) {
				continue
			}
			dst = append(dst, t)
		}
		slices.Sort(dst[start:])
		return dst
	default:
		// Selection sampling (each candidate kept with probability
		// needed/left) yields ids already sorted.
		need, left := k, n-1
		for t := int64(1); t <= n && need > 0; t++ {
			if t == id {
				continue
			}
			if int64(r.intn(int(left))) < need {
				dst = append(dst, t)
				need--
			}
			left--
		}
		return dst
	}
}
