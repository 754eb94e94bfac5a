package tablefile

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

const fixtureRoot = "../../shared/fixtures/dolt"

// knownChunk is one row of a fixture's *.chunks.tsv known-answer list.
type knownChunk struct {
	Addr         addr.Addr
	Offset       uint64
	Stored       uint32
	Uncompressed int
	Codec        string
}

// fixtureFiles returns every fixture table file or archive (each has a
// .chunks.tsv beside it).
func fixtureFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	err := filepath.Walk(fixtureRoot, func(p string, info os.FileInfo, err error) error {
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
	if len(files) == 0 {
		t.Fatalf("no fixtures under %s", fixtureRoot)
	}
	return files
}

func knownChunks(t testing.TB, file string) []knownChunk {
	t.Helper()
	f, err := os.Open(file + ".chunks.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []knownChunk
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			t.Fatalf("%s: bad line %q", file, line)
		}
		off, err1 := strconv.ParseUint(f[2], 10, 64)
		stored, err2 := strconv.ParseUint(f[3], 10, 32)
		unc, err3 := strconv.Atoi(f[4])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("%s: bad numbers in %q", file, line)
		}
		out = append(out, knownChunk{addr.MustParse(f[0]), off, uint32(stored), unc, f[5]})
	}
	return out
}

func openFile(t testing.TB, path string) *Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Open(f, st.Size(), nil)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return tab
}
