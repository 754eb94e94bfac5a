package main

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
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

// gcHistory makes a store with n versions of a generated database "s"
// (the same rows changed again each time, and others): the store's
// folder, each version's root and a copy of its file.
func gcHistory(t *testing.T, n int) (string, []string, []string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "s.sqlite")
	mustChunkd(t, "gen", "sentences", "--out", file, "--sentences", "4000", "--translations", "4000", "--seed", "5")
	storeDir := filepath.Join(dir, "store")
	var roots, files []string
	for i := range n {
		if i > 0 {
			execSQL(t, file, fmt.Sprintf("UPDATE sentences SET Text = 'v%d' WHERE SentenceId %% 500 = 1", i),
				fmt.Sprintf("UPDATE sentences SET Text = 'w%d' WHERE SentenceId %% 997 = %d", i, i))
		}
		out := mustChunkd(t, "import", "--store", storeDir, "--db", "s", file)
		m := versionLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("import %d:\n%s", i, out)
		}
		copyTo := filepath.Join(dir, fmt.Sprint("v", i, ".sqlite"))
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(copyTo, data, 0o644); err != nil {
			t.Fatal(err)
		}
		roots, files = append(roots, m[1]), append(files, copyTo)
	}
	return storeDir, roots, files
}

// storeKeys lists the objects of a folder store by path and size, but
// the gc record (whose times differ from run to run).
func storeKeys(t *testing.T, dir string) string {
	t.Helper()
	var keys []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "chunkd.gc") || strings.Contains(d.Name(), ".tmp") {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, path)
		keys = append(keys, fmt.Sprintf("%s:%d", rel, fi.Size()))
		return nil
	})
	sort.Strings(keys)
	return strings.Join(keys, "\n")
}

// sameVersion checks that version root of "s" in the store reads as file.
func sameVersion(t *testing.T, storeDir, root, file string) {
	t.Helper()
	for _, q := range []string{"SELECT SentenceId, Text FROM sentences ORDER BY SentenceId", "PRAGMA integrity_check"} {
		want := mustChunkd(t, "sql", "--file", file, "-q", q, "--format", "csv")
		if got := mustChunkd(t, "sql", "--store", storeDir, "--db", "s", "--at", root, "-q", q, "--format", "csv"); got != want {
			t.Fatalf("version %s does not read as %s (%q)", root, file, q)
		}
	}
}

// TestGCCrash: gc of 20 versions keeping 3, killed with SIGKILL before
// each of its first 20 changes to the store and run again: every retained
// version reads as its file, and the store ends as an uninterrupted gc
// leaves it.
func TestGCCrash(t *testing.T) {
	base, roots, files := gcHistory(t, 20)
	gc := []string{"gc", "--store", "", "--db", "s", "--keep", "3", "--grace", "0"}
	run := func(storeDir string, env ...string) (string, string, error) {
		args := slices.Clone(gc)
		args[2] = storeDir
		return chunkdEnv(t, env, args...)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	copyDir(t, base, clean)
	if out, errOut, err := run(clean); err != nil || !strings.Contains(out, "3 versions retained, 17 collected") {
		t.Fatalf("gc: %v\n%s%s", err, out, errOut)
	}
	want := storeKeys(t, clean)
	if log := mustChunkd(t, "log", "--store", clean, "--db", "s"); strings.Count(log, "collected by gc") != 17 || strings.Count(log, "version ") != 20 {
		t.Fatalf("log after gc:\n%s", log)
	}
	for n := 1; n <= 20; n++ {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("crash", n))
		copyDir(t, base, dir)
		_, errOut, err := run(dir, fmt.Sprint("CHUNKD_FAILPOINT=gc:", n))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("gc with a crash before change %d: %v (want SIGKILL: gc makes fewer changes?)\n%s", n, err, errOut)
		}
		if out, errOut, err := run(dir); err != nil {
			t.Fatalf("gc after a crash before change %d: %v\n%s%s", n, err, out, errOut)
		}
		for i := 17; i < 20; i++ {
			sameVersion(t, dir, roots[i], files[i])
		}
		if got := storeKeys(t, dir); got != want {
			t.Errorf("crash before change %d: the store ends as\n%s\nwant\n%s", n, got, want)
		}
	}
}

// copyDir copies a folder tree.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}
