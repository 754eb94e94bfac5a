package tablefile

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// sumsOf opens b, checks that Verify passes, and returns its sums after a
// round trip through their encoding.
func sumsOf(t *testing.T, b []byte) *Sums {
	t.Helper()
	tab, err := Open(bytes.NewReader(b), int64(len(b)), &Options{IndexHash: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := tab.ComputeSums()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Sums
	if err := got.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	if h, ok := tab.IndexHash(); !ok || h != got.Index || got.Size != int64(len(b)) || len(got.Spans) != len(s.Spans) {
		t.Fatalf("sums do not survive their encoding: %+v vs %+v", got, s)
	}
	return &got
}

// readAll decodes every chunk of tab and reports the first error, or a
// chunk that does not hash to its address.
func readAll(tab *Table) error {
	for _, e := range tab.Entries() {
		data, err := tab.Read(e)
		if err != nil {
			return err
		}
		if addr.Of(data) != e.Addr {
			return errors.New("wrong bytes for " + e.Addr.String())
		}
	}
	return nil
}

// Every fixture that Verify passes opens with its own sums and reads back
// whole through them.
func TestSumsFixtures(t *testing.T) {
	for _, path := range fixtureFiles(t) {
		if strings.Contains(path, "corrupt") {
			continue
		}
		name := strings.TrimPrefix(path, fixtureRoot+"/")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s := sumsOf(t, b)
			if strings.HasSuffix(path, ".darc") != (s.Spans != nil) {
				t.Fatalf("%d span sums for a %s file", len(s.Spans), path)
			}
			tab, err := Open(bytes.NewReader(b), int64(len(b)), &Options{Sums: s})
			if err != nil {
				t.Fatal(err)
			}
			if err := readAll(tab); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// flipAt returns a copy of b with bit 3 of byte off flipped.
func flipAt(b []byte, off int64) []byte {
	c := bytes.Clone(b)
	c[off] ^= 0x08
	return c
}

// One flipped bit anywhere in the index region makes a copy unopenable
// with the verified file's sums, whatever the flip does to the index.
func TestSumsIndexFlip(t *testing.T) {
	for _, name := range []string{"remote-classic/ksk59qv6p04kqje29kc59n1r1vnjt140", "remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc"} {
		b := arcRead(t, name)
		s := sumsOf(t, b)
		tab, _ := Open(bytes.NewReader(b), int64(len(b)), nil)
		region := int64(len(b)) - tab.DataEnd()
		for _, off := range []int64{tab.DataEnd(), tab.DataEnd() + region/3, tab.DataEnd() + region/2, int64(len(b)) - 30} {
			c := flipAt(b, off)
			_, err := Open(bytes.NewReader(c), int64(len(c)), &Options{Sums: s})
			if err == nil {
				t.Fatalf("%s: flip at %d (index region %d..%d) opens with the verified sums", name, off, tab.DataEnd(), len(b))
			}
		}
	}
}

// A flipped bit in an archive's data or dictionary span, which carry no
// CRC of their own, is caught by the span sums: never a wrong chunk.
func TestSumsArchiveSpanFlip(t *testing.T) {
	name := "remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc"
	b := arcRead(t, name)
	s := sumsOf(t, b)
	tab, err := Open(bytes.NewReader(b), int64(len(b)), &Options{IndexHash: true})
	if err != nil {
		t.Fatal(err)
	}
	var data, dict Entry
	for _, e := range tab.Entries() {
		if e.Dict != 0 && e.Length > 64 {
			data = e
			break
		}
	}
	if data.Dict == 0 {
		t.Fatal("no zstd chunk in the archive")
	}
	off, n, _ := tab.idx.span(data.Dict)
	dict = Entry{Offset: off, Length: n}
	for _, tc := range []struct {
		what string
		off  int64
	}{
		{"data span", int64(data.Offset) + int64(data.Length)/2},
		{"dictionary span", int64(dict.Offset) + int64(dict.Length)/2},
	} {
		c := flipAt(b, tc.off)
		view, err := tab.View(bytes.NewReader(c), s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = view.Read(data)
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "CRC-32C") {
			t.Errorf("%s flip: read %s = %v, want a span CRC error", tc.what, data.Addr, err)
		}
		// Without sums the same flip may decode to wrong bytes or fail;
		// either way the view with sums never returned a chunk.
	}
	// The view shares the index and reads the clean copy fine.
	view, err := tab.View(bytes.NewReader(b), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := readAll(view); err != nil {
		t.Fatal(err)
	}
}

// Sums of one file do not fit another, and damaged sums do not decode.
func TestSumsMismatch(t *testing.T) {
	a := arcRead(t, "remote-classic/ksk59qv6p04kqje29kc59n1r1vnjt140")
	b := arcRead(t, "remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc")
	sa := sumsOf(t, a)
	tb, err := Open(bytes.NewReader(b), int64(len(b)), &Options{IndexHash: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.View(bytes.NewReader(b), sa); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("View with another file's sums: %v", err)
	}
	noHash, _ := Open(bytes.NewReader(a), int64(len(a)), nil)
	if _, err := noHash.View(bytes.NewReader(a), sa); err == nil {
		t.Fatal("View with sums of a table opened without IndexHash succeeded")
	}
	enc, _ := sa.MarshalBinary()
	for _, off := range []int{0, len(enc) / 2, len(enc) - 1} {
		var s Sums
		c := bytes.Clone(enc)
		c[off] ^= 1
		if err := s.UnmarshalBinary(c); !errors.Is(err, ErrBadSums) {
			t.Errorf("damaged sums (byte %d) decode: %v", off, err)
		}
	}
	var s Sums
	if err := s.UnmarshalBinary(enc[:10]); !errors.Is(err, ErrBadSums) {
		t.Errorf("short sums decode: %v", err)
	}
}
