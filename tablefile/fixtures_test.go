package tablefile

import (
	"os"
	"testing"

	"github.com/chunkd/chunkd/internal/doltfixtures"
)

// The Dolt fixtures the repository carries (testdata/dolt).
var fixtureRoot = doltfixtures.Root()

// knownChunk is one row of a fixture's *.chunks.tsv known-answer list.
type knownChunk = doltfixtures.Chunk

// fixtureFiles returns every fixture table file or archive.
func fixtureFiles(t testing.TB) []string { return doltfixtures.Files(t) }

func knownChunks(t testing.TB, file string) []knownChunk { return doltfixtures.Chunks(t, file) }

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
