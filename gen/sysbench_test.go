//go:build cgo

package gen

import (
	"path/filepath"
	"testing"
)

func TestSysbench(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sb.db")
	var last int
	opts := SysbenchOptions{Rows: 3000, TypesRows: 2000, Seed: 7, Progress: func(done, total int) { last = done }}
	if err := Sysbench(path, opts); err != nil {
		t.Fatal(err)
	}
	if last != 2*3000+2000 {
		t.Errorf("last progress %d, want %d", last, 8000)
	}
	db := open(t, path)
	for _, tbl := range []string{"sbtest1", "sbtest2"} {
		if n := count(t, db, "SELECT count(*) FROM "+tbl); n != 3000 {
			t.Errorf("%s has %d rows", tbl, n)
		}
		if n := count(t, db, "SELECT count(*) FROM "+tbl+" WHERE k < 1 OR k > 3000 OR length(c) != 119 OR length(pad) != 59 OR c NOT GLOB '[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-*'"); n != 0 {
			t.Errorf("%s: %d rows out of shape", tbl, n)
		}
		if n := count(t, db, "SELECT max(id) - min(id) + 1 FROM "+tbl); n != 3000 {
			t.Errorf("%s ids span %d", tbl, n)
		}
	}
	if n := count(t, db, "SELECT count(*) FROM sbtypes"); n != 2000 {
		t.Errorf("sbtypes has %d rows", n)
	}
	// About half the rows have a positive big_int_col (the scans' filter).
	if n := count(t, db, "SELECT count(*) FROM sbtypes WHERE big_int_col > 0"); n < 800 || n > 1200 {
		t.Errorf("%d of 2000 positive big_int_col", n)
	}
	if n := count(t, db, "SELECT count(*) FROM sbtypes WHERE year_col NOT BETWEEN 1901 AND 2155 OR json_valid(json_col) = 0 OR length(blob_col) != 16 OR typeof(float_col) != 'real'"); n != 0 {
		t.Errorf("sbtypes: %d rows out of shape", n)
	}
	for _, idx := range []string{"k_1", "k_2", "sbtypes_big_int"} {
		if n := count(t, db, "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = '"+idx+"'"); n != 1 {
			t.Errorf("no index %s", idx)
		}
	}

	if err := Sysbench(filepath.Join(dir, "bad.db"), SysbenchOptions{}); err == nil {
		t.Error("Rows 0 accepted")
	}
}
