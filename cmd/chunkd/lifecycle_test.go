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
	if log := mustChunkd(t, "log", "--store", storeURL, "--db", "s"); strings.Count(log, "version ") != 1 || !strings.Contains(log, "  size    ") || !strings.Contains(log, "  new     ") {
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

// TestSQLAt: --at takes a time (the newest version at or before it); the
// all-zero root and a time before every version are "no such version",
// naming what was given, never the latest.
func TestSQLAt(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.sqlite")
	mustChunkd(t, "gen", "sentences", "--out", file, "--sentences", "2000", "--translations", "2000", "--seed", "4")
	storeURL := filepath.Join(dir, "store")
	mustChunkd(t, "import", "--store", storeURL, "--db", "s", file)
	q := []string{"sql", "--store", storeURL, "--db", "s", "-q", "SELECT count(*) FROM sentences", "--format", "csv"}
	if out := mustChunkd(t, append(q, "--at", "2999-01-01T00:00:00Z")...); !strings.Contains(out, "2000") {
		t.Fatalf("--at a time after the version:\n%s", out)
	}
	for _, tc := range []struct{ at, want string }{
		{"00000000000000000000000000000000", `no such version 00000000000000000000000000000000 of database "s"`},
		{"2001-01-01T00:00:00Z", `no such version at or before 2001-01-01T00:00:00Z in database "s"`},
	} {
		out, errOut, err := chunkd(t, append(q, "--at", tc.at)...)
		if err == nil || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("--at %s: %v, stdout %q, stderr %s; want %q", tc.at, err, out, errOut, tc.want)
		}
	}
	if _, errOut, err := chunkd(t, append(q, "--at", "soon")...); err == nil || !strings.Contains(errOut, `"soon" is neither a version's root`) {
		t.Errorf("--at soon: %v %s", err, errOut)
	}
}
