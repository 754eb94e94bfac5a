// Package killedwriter leaves SQLite databases as a writer that died
// mid-transaction leaves them, for tests of readers that must refuse them:
// a real writer process (the test binary, run again) commits, starts
// another transaction, and is killed with SIGKILL.
//
// A test package that uses Leave calls Main first thing in its TestMain.
package killedwriter

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the writer's SQLite
)

// Kinds of wreck Leave makes.
const (
	// WAL: a write-ahead-log database whose committed table t lives only
	// in its -wal (never checkpointed; the file itself has only a table
	// "first"), with a transaction in progress.
	WAL = "wal"
	// HotJournal: a rollback-journal database whose transaction had
	// already written changed pages into the file (the page cache
	// spilled), so the file is inconsistent until its -journal is rolled
	// back.
	HotJournal = "journal"
)

// env carries the writer's job to the child process: kind:path.
const env = "CHUNKD_KILLED_WRITER"

// Rows is how many rows the committed table t(id, v) holds.
const Rows = 2000

// Main runs the writer if this process is one (and never returns then).
func Main() {
	job := os.Getenv(env)
	if job == "" {
		return
	}
	kind, path, _ := strings.Cut(job, ":")
	if err := write(kind, path); err != nil {
		fmt.Fprintln(os.Stderr, "killedwriter:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour) // until killed
	os.Exit(3)
}

func write(kind, path string) error {
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	mode := "WAL"
	if kind == HotJournal {
		mode = "DELETE"
	}
	stmts := []string{
		// The file itself holds an older schema; then the writer
		// switches to its journal mode.
		"CREATE TABLE first(x)",
		"PRAGMA journal_mode = " + mode,
		"PRAGMA wal_autocheckpoint = 0",
		"CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)",
		fmt.Sprintf("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < %d) INSERT INTO t SELECT i, printf('%%0500d', i) FROM c", Rows),
		// A page cache of a few pages makes the next transaction spill
		// changed pages into the file before it commits.
		"PRAGMA cache_size = 4",
		"BEGIN",
		"UPDATE t SET v = 'changed' || v",
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// Leave makes path (which must not exist) a database left by a writer
// killed in the middle of a transaction, of the given kind. The table
// t(id, v) has Rows committed rows; the killed transaction had changed
// every v.
func Leave(t testing.TB, path, kind string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+kind+":"+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("writer: %q, %v: %s", line, err, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup at all
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	cmd.Wait()
	side := "-wal"
	if kind == HotJournal {
		side = "-journal"
	}
	if fi, err := os.Stat(path + side); err != nil || fi.Size() == 0 {
		t.Fatalf("the killed writer left no %s: %v", side, err)
	}
}
