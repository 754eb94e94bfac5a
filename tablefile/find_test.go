package tablefile

import (
	"bytes"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// TestFind: Holding yields, in order, every file that holds an address,
// and Find the first of them; an address no file holds yields none.
func TestFind(t *testing.T) {
	build := func(chunks ...string) *Table {
		var b bytes.Buffer
		w := NewWriter(&b)
		for _, c := range chunks {
			if _, err := w.Add([]byte(c)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		tab, err := Open(bytes.NewReader(b.Bytes()), int64(b.Len()), nil)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	files := []*Table{build("a", "b"), build("b", "c"), build("c", "b")}
	self := func(t *Table) *Table { return t }
	var held []int
	for f, e := range Holding(files, self, addr.Of([]byte("b"))) {
		for i := range files {
			if files[i] == f {
				held = append(held, i)
			}
		}
		if e.Addr != addr.Of([]byte("b")) {
			t.Errorf("entry of %s", e.Addr)
		}
	}
	if len(held) != 3 || held[0] != 0 || held[1] != 1 || held[2] != 2 {
		t.Errorf("files holding b: %v, want 0 1 2", held)
	}
	if f, _, ok := Find(files, self, addr.Of([]byte("c"))); !ok || f != files[1] {
		t.Errorf("Find(c): file %v, %v; want the second", f, ok)
	}
	if _, _, ok := Find(files, self, addr.Of([]byte("z"))); ok {
		t.Error("Find(z) found a file")
	}
}
