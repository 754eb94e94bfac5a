package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/sqlitevfs"
)

// execSQL runs statements on a local SQLite file, as an application would.
func execSQL(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open(sqlitevfs.DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestImportUnchangedAndCompact: importing an unchanged file publishes
// nothing and says so (exit 0); a changed one writes a plain file and
// says what the appendix lacks; compact rewrites the appendix, then finds
// nothing to do.
func TestImportUnchangedAndCompact(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.sqlite")
	mustChunkd(t, "gen", "sentences", "--out", file, "--sentences", "3000", "--translations", "3000", "--seed", "3")
	storeURL := filepath.Join(dir, "store")
	out := mustChunkd(t, "import", "--store", storeURL, "--db", "s", file)
	if !strings.Contains(out, "new appendix") || strings.Contains(out, "new table file") {
		t.Fatalf("first import:\n%s", out)
	}
	out = mustChunkd(t, "import", "--store", storeURL, "--db", "s", file)
	if !strings.Contains(out, "unchanged") || !strings.Contains(out, "nothing published") {
		t.Fatalf("unchanged import:\n%s", out)
	}
	if log := mustChunkd(t, "log", "--store", storeURL, "--db", "s"); strings.Count(log, "version ") != 1 {
		t.Fatalf("log after an unchanged import:\n%s", log)
	}
	execSQL(t, file, "UPDATE sentences SET Text = 'x' WHERE SentenceId = 7")
	out = mustChunkd(t, "import", "--store", storeURL, "--db", "s", file)
	if !strings.Contains(out, "new table file") || !strings.Contains(out, "the appendix lacks") {
		t.Fatalf("second import:\n%s", out)
	}
	if out := mustChunkd(t, "compact", "--store", storeURL, "--db", "s"); !strings.Contains(out, "new appendix") {
		t.Fatalf("compact:\n%s", out)
	}
	if out := mustChunkd(t, "compact", "--store", storeURL, "--db", "s"); !strings.Contains(out, "nothing written") {
		t.Fatalf("second compact:\n%s", out)
	}
	if _, errOut, err := chunkd(t, "import", "--store", storeURL, "--db", "s", "--appendix-threshold", "2", file); err == nil || !strings.Contains(errOut, "--appendix-threshold") {
		t.Fatalf("bad threshold: %v %s", err, errOut)
	}
}
