package tablefile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnits: the units of every fixture tile the file, chunks sit where
// the known answers say, every zstd chunk's dictionary is a dictionary
// unit, and ranges give the units they overlap.
func TestUnits(t *testing.T) {
	for _, path := range fixtureFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			tab := openFile(t, path)
			all := tab.Units(0, uint64(tab.Size()))
			var next uint64
			byOffset := map[uint64]Unit{}
			for i, u := range all {
				if u.Offset != next || u.Length == 0 {
					t.Fatalf("unit %d at [%d +%d), want it to start at %d and not be empty", i, u.Offset, u.Length, next)
				}
				next = u.End()
				byOffset[u.Offset] = u
			}
			if next != uint64(tab.Size()) || all[len(all)-1].Kind != UnitIndex || all[len(all)-1].Offset != uint64(tab.DataEnd()) {
				t.Fatalf("units end at %d, last %+v; want the index region ending at %d", next, all[len(all)-1], tab.Size())
			}
			for _, c := range knownChunks(t, path) {
				u, ok := byOffset[c.Offset]
				if !ok || u.Kind != UnitChunk || u.Length != uint64(c.Stored) {
					t.Fatalf("chunk %s at %d: unit %+v", c.Addr, c.Offset, u)
				}
				e, _ := tab.Lookup(c.Addr)
				off, n, ok := tab.DictSpan(e)
				if dict := strings.HasPrefix(c.Codec, "zstd-dict"); ok != dict {
					t.Fatalf("chunk %s (%s): DictSpan ok = %v", c.Addr, c.Codec, ok)
				}
				if ok {
					if d := byOffset[off]; d.Kind != UnitDict || d.Length != uint64(n) || d.Entry.Dict != d.Span {
						t.Fatalf("chunk %s: dictionary unit %+v, want a dictionary of %d bytes", c.Addr, d, n)
					}
				}
			}
			// A range gets exactly the units it overlaps.
			for _, rg := range [][2]uint64{{0, 1}, {1, 2}, {0, uint64(tab.Size())}, {uint64(tab.DataEnd()) - 1, uint64(tab.DataEnd()) + 1}, {uint64(tab.Size()) / 2, uint64(tab.Size())/2 + 5000}} {
				want := 0
				for _, u := range all {
					if u.Offset < rg[1] && u.End() > rg[0] {
						want++
					}
				}
				if got := tab.Units(rg[0], rg[1]); len(got) != want {
					t.Errorf("Units(%d, %d): %d units, want %d", rg[0], rg[1], len(got), want)
				}
			}
		})
	}
}

// TestCheckUnit: with its index hashed and (archives) sums, every unit of
// a fixture checks, and a flipped byte in any kind of unit fails.
func TestCheckUnit(t *testing.T) {
	for _, path := range fixtureFiles(t) {
		if strings.Contains(path, "corrupt") {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tab, err := Open(bytes.NewReader(b), int64(len(b)), &Options{IndexHash: true})
			if err != nil {
				t.Fatal(err)
			}
			sums, err := tab.ComputeSums()
			if err != nil {
				t.Fatal(err)
			}
			view, err := tab.View(bytes.NewReader(b), sums)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[UnitKind]bool{}
			for _, u := range view.Units(0, uint64(len(b))) {
				stored := append([]byte(nil), b[u.Offset:u.End()]...)
				checked, err := view.CheckUnit(u, stored)
				if !checked || err != nil {
					t.Fatalf("unit %+v: checked %v, %v", u, checked, err)
				}
				if seen[u.Kind] {
					continue
				}
				seen[u.Kind] = true
				stored[len(stored)/2] ^= 0x10
				if _, err := view.CheckUnit(u, stored); !errors.Is(err, ErrCorrupt) {
					t.Errorf("unit %+v with a flipped byte: %v, want ErrCorrupt", u, err)
				}
			}
			// Without sums an archive's zstd spans cannot be checked by
			// checksum; a classic record always can.
			plain := openFile(t, path)
			for _, u := range plain.Units(0, uint64(len(b))) {
				checked, err := plain.CheckUnit(u, b[u.Offset:u.End()])
				if err != nil {
					t.Fatalf("unit %+v: %v", u, err)
				}
				want := u.Kind == UnitChunk && u.Entry.Dict == 0
				if checked != want {
					t.Errorf("unit %+v without sums or index hash: checked %v, want %v", u, checked, want)
				}
			}
		})
	}
}
