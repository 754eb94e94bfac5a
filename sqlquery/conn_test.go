package sqlquery_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/sqlquery"
)

// edgeDB writes a database of typed edge cases with SQLite itself and
// returns its path.
func edgeDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.sqlite")
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE v(id INTEGER PRIMARY KEY, x, d DATE, b BOOLEAN)`,
		`CREATE INDEX vd ON v(d)`,
		`INSERT INTO v VALUES (1, NULL, '2024-01-02', 1)`,
		`INSERT INTO v VALUES (2, '', '2024-01-02 03:04:05', 0)`,
		`INSERT INTO v VALUES (3, 9223372036854775807, 20240102, 'yes')`,
		`INSERT INTO v VALUES (4, -9223372036854775808, NULL, NULL)`,
		`INSERT INTO v VALUES (5, 0.1, NULL, NULL)`,
		`INSERT INTO v VALUES (6, 1e308 * 10, NULL, NULL)`,
		`INSERT INTO v VALUES (7, x'00ff10', NULL, NULL)`,
		`INSERT INTO v VALUES (8, x'', NULL, NULL)`,
		`INSERT INTO v VALUES (9, 'héllo, 世界 🌍', NULL, NULL)`,
		`INSERT INTO v VALUES (10, CAST(x'ff41' AS TEXT), NULL, NULL)`,
		`INSERT INTO v VALUES (11, 1.0, NULL, NULL)`,
		`PRAGMA user_version = 7`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path
}

// open opens path through the chunkd VFS and a Conn on it.
func open(t *testing.T, path string) *sqlquery.Conn {
	t.Helper()
	img, err := sqlitevfs.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	c, err := sqlquery.Open(sqlitevfs.DSN(img.Name()), sqlquery.Options{MaxLength: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// all runs q with args and returns its rows, the bytes copied.
func all(t *testing.T, c *sqlquery.Conn, q string, args ...sqlitevfs.Value) [][]sqlitevfs.Value {
	t.Helper()
	rows, err := run(context.Background(), c, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return rows
}

func run(ctx context.Context, c *sqlquery.Conn, q string, args ...sqlitevfs.Value) ([][]sqlitevfs.Value, error) {
	s, err := c.Prepare(q)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for i, a := range args {
		if err := s.Bind(i+1, a); err != nil {
			return nil, err
		}
	}
	stop := c.InterruptOn(ctx)
	defer stop()
	var out [][]sqlitevfs.Value
	for {
		ok, err := s.Step()
		if err != nil {
			return out, err
		}
		if !ok {
			return out, nil
		}
		row := make([]sqlitevfs.Value, len(s.Row()))
		for i, v := range s.Row() {
			row[i] = v
			row[i].Bytes = bytes.Clone(v.Bytes)
		}
		out = append(out, row)
	}
}

func TestValuesKeepTheirStorageClass(t *testing.T) {
	c := open(t, edgeDB(t))
	rows := all(t, c, `SELECT x, d, b FROM v ORDER BY id`)
	text := func(s string) sqlitevfs.Value { return sqlitevfs.Value{Type: sqlitevfs.Text, Bytes: []byte(s)} }
	null := sqlitevfs.Value{Type: sqlitevfs.Null}
	want := [][]sqlitevfs.Value{
		{null, text("2024-01-02"), {Type: sqlitevfs.Integer, Int: 1}},
		{text(""), text("2024-01-02 03:04:05"), {Type: sqlitevfs.Integer, Int: 0}},
		{{Type: sqlitevfs.Integer, Int: math.MaxInt64}, {Type: sqlitevfs.Integer, Int: 20240102}, text("yes")},
		{{Type: sqlitevfs.Integer, Int: math.MinInt64}, null, null},
		{{Type: sqlitevfs.Float, Float: 0.1}, null, null},
		{{Type: sqlitevfs.Float, Float: math.Inf(1)}, null, null},
		{{Type: sqlitevfs.Blob, Bytes: []byte{0, 0xff, 0x10}}, null, null},
		{{Type: sqlitevfs.Blob, Bytes: []byte{}}, null, null},
		{text("héllo, 世界 🌍"), null, null},
		{text("\xffA"), null, null},
		{{Type: sqlitevfs.Float, Float: 1}, null, null},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		for j := range want[i] {
			g, w := rows[i][j], want[i][j]
			if g.Type != w.Type || g.Int != w.Int || g.Float != w.Float || !bytes.Equal(g.Bytes, w.Bytes) {
				t.Errorf("row %d column %d: %+v, want %+v", i+1, j, g, w)
			}
		}
	}
}

func TestColumnsAndParams(t *testing.T) {
	c := open(t, edgeDB(t))
	s, err := c.Prepare(`SELECT id, x AS "the x", d, id + 1 FROM v WHERE id = :id OR id = ?5`)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cols := s.Columns()
	want := []sqlitevfs.Column{{Name: "id", DeclType: "INTEGER"}, {Name: "the x"}, {Name: "d", DeclType: "DATE"}, {Name: "id + 1"}}
	if len(cols) != len(want) {
		t.Fatalf("columns %v, want %v", cols, want)
	}
	for i := range want {
		if cols[i] != want[i] {
			t.Errorf("column %d: %+v, want %+v", i, cols[i], want[i])
		}
	}
	if p := strings.Join(s.Params(), ","); p != ":id,,,,?5" {
		t.Errorf("params %q, want :id,,,,?5", p)
	}
	rows := all(t, c, `SELECT id FROM v WHERE x = ? OR x = ? OR x = ? OR x IS ? ORDER BY id`,
		sqlitevfs.Value{Type: sqlitevfs.Text, Bytes: []byte("")}, sqlitevfs.Value{Type: sqlitevfs.Blob, Bytes: []byte{0, 0xff, 0x10}},
		sqlitevfs.Value{Type: sqlitevfs.Integer, Int: math.MaxInt64}, sqlitevfs.Value{Type: sqlitevfs.Float, Float: 0.1})
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r[0].Int)
	}
	if len(ids) != 4 || ids[0] != 2 || ids[1] != 3 || ids[2] != 5 || ids[3] != 7 {
		t.Errorf("bound lookups found ids %v, want [2 3 5 7]", ids)
	}
	// A parameter is a value, never SQL.
	if rows := all(t, c, `SELECT count(*) FROM v WHERE x = ?`, sqlitevfs.Value{Type: sqlitevfs.Text, Bytes: []byte("'' OR 1=1")}); rows[0][0].Int != 0 {
		t.Errorf("a bound string matched %d rows", rows[0][0].Int)
	}
}

// TestRefused: everything but reading fails at prepare, saying what was
// refused; the connection goes on serving.
func TestRefused(t *testing.T) {
	path := edgeDB(t)
	c := open(t, path)
	for _, tc := range []struct{ sql, says string }{
		{`INSERT INTO v(id) VALUES (100)`, "INSERT v"},
		{`UPDATE v SET x = 1`, "UPDATE v"},
		{`DELETE FROM v`, "DELETE v"},
		{`REPLACE INTO v(id) VALUES (1)`, "INSERT v"},
		{`CREATE TABLE w(a)`, "a change to the schema"},
		{`CREATE TEMP TABLE w(a)`, "write to sqlite_temp_master"},
		{`CREATE TEMP VIEW w AS SELECT 1`, "write to sqlite_temp_master"},
		{`DROP TABLE v`, "a change to the schema"},
		{`ALTER TABLE v ADD COLUMN y`, "ALTER TABLE"},
		{`CREATE INDEX i ON v(x)`, "a change to the schema"},
		{`ATTACH DATABASE '` + path + `' AS other`, "ATTACH"},
		{`ATTACH ':memory:' AS m`, "ATTACH"},
		{`DETACH other`, "DETACH"},
		{`SELECT load_extension('/nonexistent.so')`, "load_extension()"},
		{`PRAGMA user_version = 3`, "PRAGMA user_version = 3"},
		{`PRAGMA cache_size = 1`, "PRAGMA cache_size"},
		{`PRAGMA query_only = 0`, "PRAGMA query_only"},
		{`PRAGMA writable_schema = 1`, "PRAGMA writable_schema"},
		{`PRAGMA journal_mode = WAL`, "PRAGMA journal_mode"},
		{`PRAGMA temp_store_directory = '/tmp'`, "PRAGMA temp_store_directory"},
		{`BEGIN`, "transaction"},
		{`SAVEPOINT a`, "SAVEPOINT"},
		{`ANALYZE`, "ANALYZE v"},
		{`REINDEX`, "REINDEX vd"},
		{`VACUUM`, "would write"},
		{`VACUUM INTO '/tmp/x.sqlite'`, "would write"},
		{`WITH t AS (SELECT 1) INSERT INTO v(id) SELECT * FROM t`, "INSERT v"},
	} {
		_, err := c.Prepare(tc.sql)
		var e *sqlquery.Error
		if !errors.As(err, &e) || !e.Refused() || e.Name() != "SQLITE_AUTH" || !strings.Contains(e.Msg, tc.says) {
			t.Errorf("%s: %v, want SQLITE_AUTH saying %q", tc.sql, err, tc.says)
		}
	}
	if rows := all(t, c, `SELECT count(*) FROM v`); rows[0][0].Int != 11 {
		t.Errorf("after the refusals: %d rows, want 11", rows[0][0].Int)
	}
}

func TestReadingPragmas(t *testing.T) {
	c := open(t, edgeDB(t))
	if rows := all(t, c, `PRAGMA user_version`); rows[0][0].Int != 7 {
		t.Errorf("user_version %v", rows[0][0])
	}
	if rows := all(t, c, `PRAGMA table_info(v)`); len(rows) != 4 {
		t.Errorf("table_info: %d rows", len(rows))
	}
	if rows := all(t, c, `SELECT name FROM pragma_table_info('v') ORDER BY cid`); len(rows) != 4 || string(rows[1][0].Bytes) != "x" {
		t.Errorf("pragma_table_info: %v", rows)
	}
	if rows := all(t, c, `PRAGMA integrity_check`); string(rows[0][0].Bytes) != "ok" {
		t.Errorf("integrity_check: %v", rows)
	}
}

func TestOneStatement(t *testing.T) {
	c := open(t, edgeDB(t))
	for _, q := range []string{`SELECT 1; SELECT 2`, `SELECT 1; DROP TABLE v`, `SELECT 1; nonsense`} {
		_, err := c.Prepare(q)
		var e *sqlquery.Error
		if !errors.As(err, &e) || e.Code != 1 || !strings.Contains(e.Msg, "more than one statement") || e.Offset != 9 {
			t.Errorf("%q: %v, want more than one statement at offset 9", q, err)
		}
	}
	for _, q := range []string{``, `  `, `-- nothing`, `;;`} {
		if _, err := c.Prepare(q); err == nil || !strings.Contains(err.Error(), "no SQL statement") {
			t.Errorf("%q: %v, want no SQL statement", q, err)
		}
	}
	// Trailing semicolons and comments are one statement.
	for _, q := range []string{`SELECT 1;`, `SELECT 1; -- done`, "SELECT 1 /* a */ ;\n;  "} {
		if rows := all(t, c, q); len(rows) != 1 || rows[0][0].Int != 1 {
			t.Errorf("%q: %v", q, rows)
		}
	}
	if _, err := c.Prepare("SELECT 1\x00; DELETE FROM v"); err == nil || !strings.Contains(err.Error(), "NUL byte") {
		t.Errorf("SQL with a NUL byte: %v", err)
	}
	_, err := c.Prepare(`SELEC 1`)
	var e *sqlquery.Error
	if !errors.As(err, &e) || e.Name() != "SQLITE_ERROR" || !strings.Contains(e.Msg, `near "SELEC": syntax error`) || e.Offset != 0 {
		t.Errorf("syntax error: %#v", err)
	}
	_, err = c.Prepare(`SELECT nope FROM v`)
	if !errors.As(err, &e) || e.Msg != "no such column: nope" || e.Offset != 7 {
		t.Errorf("unknown column: %#v", err)
	}
}

func TestDeterministic(t *testing.T) {
	c := open(t, edgeDB(t))
	for q, want := range map[string]bool{
		`SELECT x FROM v`:                         true,
		`SELECT abs(id), upper(x) FROM v`:         true,
		`SELECT random()`:                         false,
		`SELECT datetime('now')`:                  false,
		`SELECT CURRENT_TIMESTAMP`:                false,
		`SELECT id FROM v ORDER BY randomblob(4)`: false,
	} {
		s, err := c.Prepare(q)
		if err != nil {
			t.Fatal(err)
		}
		if s.Deterministic() != want {
			t.Errorf("%s: deterministic %v, want %v", q, s.Deterministic(), want)
		}
		s.Close()
	}
}

// TestInterrupt: a statement that never ends stops when its context
// does, and the connection runs the next one.
func TestInterrupt(t *testing.T) {
	c := open(t, edgeDB(t))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := run(ctx, c, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n`)
	var e *sqlquery.Error
	if !errors.As(err, &e) || !e.Interrupted() || e.Name() != "SQLITE_INTERRUPT" {
		t.Fatalf("never-ending query: %v, want SQLITE_INTERRUPT", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("interrupted after %v", took)
	}
	if rows := all(t, c, `SELECT count(*) FROM v`); rows[0][0].Int != 11 {
		t.Errorf("after the interrupt: %v", rows)
	}
	// An interrupt after its statement's end reaches no other.
	ctx2, cancel2 := context.WithCancel(context.Background())
	s, err := c.Prepare(`SELECT 1`)
	if err != nil {
		t.Fatal(err)
	}
	stop := c.InterruptOn(ctx2)
	s.Step()
	s.Close()
	stop()
	cancel2()
	if rows := all(t, c, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) SELECT count(*) FROM n`); rows[0][0].Int != 100000 {
		t.Errorf("after a late interrupt: %v", rows)
	}
}

// TestMaxLength: a value past Options.MaxLength is an error, not memory.
func TestMaxLength(t *testing.T) {
	c := open(t, edgeDB(t))
	for _, q := range []string{`SELECT zeroblob(2000000)`, `SELECT randomblob(1e9)`, `SELECT length(printf('%.*c', 3000000, 'x'))`} {
		_, err := run(context.Background(), c, q)
		var e *sqlquery.Error
		if !errors.As(err, &e) || e.Name() != "SQLITE_TOOBIG" {
			t.Errorf("%s: %v, want SQLITE_TOOBIG", q, err)
		}
	}
	if rows := all(t, c, `SELECT length(zeroblob(1000000))`); rows[0][0].Int != 1000000 {
		t.Errorf("under the limit: %v", rows)
	}
}

// TestStatementsKept: a statement closed is kept for the next Prepare of
// its text, reset (its rows from the start) and its parameters cleared;
// the last 32 texts are kept, and what was refused is never.
func TestStatementsKept(t *testing.T) {
	c := open(t, edgeDB(t))
	q := `SELECT id FROM v WHERE id > ? ORDER BY id`
	s1, err := c.Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	s1.Bind(1, sqlitevfs.Value{Type: sqlitevfs.Integer, Int: 9})
	s1.Step() // one row of two read, then closed mid-way
	s1.Close()
	s2, err := c.Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	if s2 != s1 {
		t.Fatal("the statement closed was not kept for its text")
	}
	if ok, err := s2.Step(); ok || err != nil { // id > NULL: no row
		t.Errorf("a kept statement kept its parameter or its place: %v, %+v", err, s2.Row())
	}
	s2.Close()
	if rows := all(t, c, q, sqlitevfs.Value{Type: sqlitevfs.Integer, Int: 9}); len(rows) != 2 || rows[0][0].Int != 10 {
		t.Errorf("a kept statement run again: %v", rows)
	}
	for i := range 40 {
		all(t, c, fmt.Sprintf("SELECT %d", i))
	}
	if s3, _ := c.Prepare(q); s3 == s1 {
		t.Error("a statement kept past 32 others")
	}
	if _, err := c.Prepare(`DELETE FROM v`); err == nil {
		t.Fatal("a write prepared")
	}
	if _, err := c.Prepare(`DELETE FROM v`); err == nil || !strings.Contains(err.Error(), "not authorized") {
		t.Errorf("a refused statement, again: %v", err)
	}
}
