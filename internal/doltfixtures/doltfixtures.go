// Package doltfixtures finds the real Dolt files the repository carries
// under testdata/dolt (see its README) and parses their known answers:
// every table file or archive there has a *.chunks.tsv beside it listing
// each chunk's address, offset, stored and uncompressed length, and codec.
//
// It is for tests only; it reads nothing outside the repository.
package doltfixtures

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// Root returns the absolute path of the fixture tree, testdata/dolt at the
// repository's root.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("doltfixtures: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "dolt")
}

// Path returns the absolute path of rel (slash-separated) in the tree.
func Path(rel string) string {
	return filepath.Join(Root(), filepath.FromSlash(rel))
}

// Chunk is one row of a known-answer list.
type Chunk struct {
	Addr         addr.Addr
	Offset       uint64
	Stored       uint32 // the record's length in the file (CRC included)
	Uncompressed int
	Codec        string
}

// Files returns the path of every fixture table file and archive (each
// has a .chunks.tsv beside it), in lexical order.
func Files(t testing.TB) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(Root(), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".chunks.tsv") {
			files = append(files, strings.TrimSuffix(p, ".chunks.tsv"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("find fixtures: %v", err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d fixture files under %s, want at least 10", len(files), Root())
	}
	return files
}

// Chunks parses the known-answer list of the table file at path.
func Chunks(t testing.TB, path string) []Chunk {
	t.Helper()
	f, err := os.Open(path + ".chunks.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Chunk
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, "\t")
		if len(fs) != 6 {
			t.Fatalf("%s.chunks.tsv: bad line %q", path, line)
		}
		a, err := addr.Parse(fs[0])
		if err != nil {
			t.Fatalf("%s.chunks.tsv: %v", path, err)
		}
		off, err1 := strconv.ParseUint(fs[2], 10, 64)
		stored, err2 := strconv.ParseUint(fs[3], 10, 32)
		unc, err3 := strconv.Atoi(fs[4])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("%s.chunks.tsv: bad numbers in %q", path, line)
		}
		out = append(out, Chunk{a, off, uint32(stored), unc, fs[5]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// DirChunks merges the known-answer lists of every table file directly in
// dir (a database folder): address to uncompressed length.
func DirChunks(t testing.TB, dir string) map[addr.Addr]int {
	t.Helper()
	lists, _ := filepath.Glob(filepath.Join(dir, "*.chunks.tsv"))
	if len(lists) == 0 {
		t.Fatalf("no *.chunks.tsv in %s", dir)
	}
	out := map[addr.Addr]int{}
	for _, l := range lists {
		for _, c := range Chunks(t, strings.TrimSuffix(l, ".chunks.tsv")) {
			out[c.Addr] = c.Uncompressed
		}
	}
	return out
}

// Copy copies the fixture tree (or the sub-tree rel, "" for all of it)
// into a new temporary directory and returns its path, for tests that open
// it as a folder store (which may write beside the files) or change it.
func Copy(t testing.TB, rel string) string {
	t.Helper()
	src := Path(rel)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, r)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy fixtures: %v", err)
	}
	return dst
}
