package main

import (
	"strings"
	"testing"

	"github.com/mattn/go-runewidth"
)

// write runs rows through a row writer of format and returns its output.
func write(t *testing.T, format string, cols []string, rows ...[]any) string {
	t.Helper()
	var b strings.Builder
	rw := newRowWriter(format, &b, cols)
	for _, r := range rows {
		if err := rw.row(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRowWriter(t *testing.T) {
	cols := []string{"id", "id", "f", "t", "n"}
	rows := [][]any{{int64(1), int64(2), 1e6, []byte("a\"b"), nil}, {int64(3), int64(4), 0.5, []byte{0xff}, nil}}
	for format, want := range map[string]string{
		"json":  "[\n{\"id\":1,\"id\":2,\"f\":1000000.0,\"t\":{\"blob\":\"612262\"},\"n\":null},\n{\"id\":3,\"id\":4,\"f\":0.5,\"t\":{\"blob\":\"ff\"},\"n\":null}\n]\n",
		"csv":   "id,id,f,t,n\n1,2,1000000.0,\"a\"\"b\",\n3,4,0.5,\"x'ff'\",\n",
		"table": "id  id  f          t      n\n1   2   1000000.0  a\"b    NULL\n3   4   0.5        x'ff'  NULL\n",
	} {
		if got := write(t, format, cols, rows...); got != want {
			t.Errorf("%s:\n%s\nwant\n%s", format, got, want)
		}
	}
	for format, want := range map[string]string{"json": "[\n]\n", "csv": "a\n", "table": "a\n"} {
		if got := write(t, format, []string{"a"}); got != want {
			t.Errorf("%s, no rows: %q, want %q", format, got, want)
		}
	}
}

// TestTableDisplayWidth: columns line up on a terminal, where a CJK
// character or an emoji takes two cells and Å one, whatever their bytes.
func TestTableDisplayWidth(t *testing.T) {
	out := write(t, "table", []string{"name", "n"},
		[]any{"李雷", int64(3)}, []any{"😀 emoji", int64(5)}, []any{"Ålice", int64(12)}, []any{"bob", int64(7)})
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		name, n, _ := strings.Cut(l, "  ")
		n = strings.TrimLeft(n, " ")
		// The second column starts at the same cell on every line: the
		// widest name (8 cells) and two spaces.
		if col := runewidth.StringWidth(l) - runewidth.StringWidth(n); col != 10 {
			t.Errorf("line %q: second column %q at cell %d, want 10 (after %q)\n%s", l, n, col, name, out)
		}
	}
}

// TestTableStreams: the table format prints its first rows before the
// result ends, with the widths of the rows it has seen; it does not hold
// the whole result.
func TestTableStreams(t *testing.T) {
	var b strings.Builder
	rw := newRowWriter("table", &b, []string{"x", "y"})
	for i := range tableBatch {
		if err := rw.row([]any{int64(i), "a"}); err != nil {
			t.Fatal(err)
		}
	}
	got := b.String()
	if !strings.HasPrefix(got, "x   y\n0   a\n1   a\n") || strings.Count(got, "\n") != tableBatch+1 {
		t.Fatalf("after %d rows, before the result ends, the table printed %q", tableBatch, got)
	}
	// A wider value later widens its own batch, not the lines printed.
	rw.row([]any{"wide value", "b"})
	rw.close()
	if rest := b.String()[len(got):]; rest != "wide value  b\n" {
		t.Fatalf("the next batch: %q", rest)
	}
}
