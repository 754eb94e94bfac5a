//go:build cgo

package sqlitevfs

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/internal/killedwriter"
)

func TestMain(m *testing.M) {
	killedwriter.Main()
	os.Exit(m.Run())
}

// TestOpenFileRefusesUnfinishedWrites: a file whose writer died with an
// uncheckpointed write-ahead log, or in the middle of a transaction in
// rollback mode, is not what its readers would see; OpenFile refuses it,
// naming the file, where reading the file alone would give wrong answers.
func TestOpenFileRefusesUnfinishedWrites(t *testing.T) {
	for _, c := range []struct {
		kind, side, want string
	}{
		{killedwriter.WAL, "-wal", "a write-ahead log"},
		{killedwriter.HotJournal, "-journal", "a hot rollback journal"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "left.db")
			killedwriter.Leave(t, path, c.kind)
			d, err := OpenFile(path, nil)
			if err == nil {
				d.Close()
				t.Fatal("OpenFile accepted the file")
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, c.want) || !strings.Contains(msg, "left.db"+c.side) {
				t.Fatalf("OpenFile: %v; want it to name %s and its %s", err, path, c.side)
			}
			// The file alone is not the database: read as it is, it lacks
			// the table (WAL) or holds the dead transaction's changes.
			_, raw := register(t, filePages(t, path), nil)
			var rawN, rawChanged int
			err = raw.QueryRow(`SELECT count(*), count(*) FILTER (WHERE v LIKE 'changed%') FROM t`).Scan(&rawN, &rawChanged)
			if err == nil && rawChanged == 0 {
				t.Fatalf("the file alone reads right (%d rows): the test made no unfinished write", rawN)
			}
			t.Logf("the file alone: %d rows, %d changed, %v", rawN, rawChanged, err)
			// SQLite itself, through the log or journal, sees the committed rows.
			db, err := sql.Open(DriverName, "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var n int
			var changed int
			if err := db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE v LIKE 'changed%') FROM t`).Scan(&n, &changed); err != nil || n != killedwriter.Rows || changed != 0 {
				t.Fatalf("sqlite on the file: %d rows, %d changed, %v; want %d, 0", n, changed, err, killedwriter.Rows)
			}
		})
	}
}

// TestPersistJournal: journal_mode=PERSIST leaves a -journal file whose
// header is zeroed after every commit; the database is whole, and
// OpenFile reads it. A journal with the magic (hot) is refused.
func TestPersistJournal(t *testing.T) {
	path := testDB(t, 9, 200)
	db, err := sql.Open(DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`PRAGMA journal_mode = PERSIST`, `UPDATE sentences SET Text = 'persist' WHERE SentenceId = 1`} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	fi, err := os.Stat(path + "-journal")
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no persisted journal: %v", err)
	}
	d, err := OpenFile(path, nil)
	if err != nil {
		t.Fatalf("OpenFile with a persisted (cold) journal: %v", err)
	}
	var text string
	if err := d.QueryRow(`SELECT Text FROM sentences WHERE SentenceId = 1`).Scan(&text); err != nil || text != "persist" {
		t.Fatalf("read through a cold journal: %q, %v", text, err)
	}
	if d.PageReads() == 0 {
		t.Error("PageReads counted nothing")
	}
	d.Close()
	b, _ := os.ReadFile(path + "-journal")
	copy(b, []byte{0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7})
	if err := os.WriteFile(path+"-journal", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := OpenFile(path, nil); err == nil || !strings.Contains(err.Error(), "hot rollback journal") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("OpenFile with a hot journal: %v", err)
	}
}
