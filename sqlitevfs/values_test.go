//go:build cgo && !chunkd_ext

package sqlitevfs

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEachTypes: Each gives every value as SQLite holds it, whatever the
// column's declared type (database/sql turns a DATE column's text into a
// zero time and a BOOLEAN's 2 into true), binds parameters by type, and
// refuses a second statement.
func TestEachTypes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "types.sqlite")
	plain, err := sql.Open(DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE t(d DATE, b BOOLEAN, ts TIMESTAMP, i INTEGER, r REAL, x BLOB, s TEXT)`,
		`INSERT INTO t VALUES ('not a date', 2, 1700000000, 9007199254740993, 0.1, x'00ff', '')`,
		`INSERT INTO t VALUES (NULL, NULL, NULL, -1, 1e300, x'', 'é😀')`,
	} {
		if _, err := plain.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	plain.Close()
	db, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var cols []Column
	var rows [][]Value
	err = db.Each(context.Background(), `SELECT * FROM t WHERE i > ? OR s = ?`, []any{int64(-2), "x"}, func(c []Column) error {
		cols = c
		return nil
	}, func(vs []Value) error {
		row := make([]Value, len(vs))
		for i, v := range vs {
			row[i] = v
			row[i].Bytes = bytes.Clone(v.Bytes)
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 7 || cols[0].Name != "d" || cols[0].DeclType != "DATE" || cols[1].DeclType != "BOOLEAN" {
		t.Fatalf("columns %+v", cols)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	if r[0].Type != Text || string(r[0].Bytes) != "not a date" || r[1].Type != Integer || r[1].Int != 2 ||
		r[2].Type != Integer || r[2].Int != 1700000000 || r[3].Int != 9007199254740993 || r[4].Type != Float || r[4].Float != 0.1 ||
		r[5].Type != Blob || !bytes.Equal(r[5].Bytes, []byte{0, 0xff}) || r[6].Type != Text || len(r[6].Bytes) != 0 {
		t.Errorf("first row %+v", r)
	}
	r = rows[1]
	if r[0].Type != Null || r[1].Type != Null || r[5].Type != Blob || len(r[5].Bytes) != 0 || string(r[6].Bytes) != "é😀" {
		t.Errorf("second row %+v", r)
	}
	// Parameters by type: an empty blob is not NULL.
	var got []Value
	err = db.Each(context.Background(), `SELECT typeof(?), typeof(?), typeof(?), typeof(?), typeof(?)`, []any{nil, []byte{}, 1.5, true, "s"}, nil, func(vs []Value) error {
		got = append(got, vs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, v := range got {
		types = append(types, string(v.Bytes))
	}
	if strings.Join(types, " ") != "null blob real integer text" {
		t.Errorf("bound types: %v", types)
	}
	for _, q := range []string{`SELECT 1; SELECT 2`, `SELECT 1; DROP TABLE t`} {
		if err := db.Each(context.Background(), q, nil, nil, func([]Value) error { return nil }); err == nil || !strings.Contains(err.Error(), "more than one statement") {
			t.Errorf("%q: %v", q, err)
		}
	}
	if err := db.Each(context.Background(), `SELECT 1; -- a comment`, nil, nil, func([]Value) error { return nil }); err != nil {
		t.Errorf("a statement and a comment: %v", err)
	}
	var se *StatementError
	if err := db.Each(context.Background(), `SELECT nosuch FROM t`, nil, nil, nil); !errors.As(err, &se) || !strings.Contains(se.Msg, "no such column") {
		t.Errorf("a bad column: %v", err)
	}
	// A statement that never ends is interrupted when its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = db.Each(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c`, nil, nil, func([]Value) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a statement past its deadline: %v", err)
	}
}
