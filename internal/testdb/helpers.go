package testdb

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/folder"
	"github.com/chunkd/chunkd/tablefile"
)

// NewStore returns an empty folder store in a temporary directory of t,
// closed when the test ends.
func NewStore(t testing.TB) *folder.Store {
	t.Helper()
	s, err := folder.New(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// OpenTable opens b, the bytes of a table file or archive, failing the
// test if it is not one.
func OpenTable(t testing.TB, b []byte) *tablefile.Table {
	t.Helper()
	tab, err := tablefile.Open(bytes.NewReader(b), int64(len(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// ReadTable reads the table file at path and opens it. It returns the
// bytes too, for a test that changes them and writes them back.
func ReadTable(t testing.TB, path string) ([]byte, *tablefile.Table) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, OpenTable(t, b)
}

// MustMake writes a database called name into s, as Make does, failing
// the test if it cannot.
func MustMake(t testing.TB, s store.Store, name string, o Options) *DB {
	t.Helper()
	db, err := Make(context.Background(), s, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}
