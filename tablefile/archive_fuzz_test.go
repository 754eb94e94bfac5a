package tablefile

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// arcFuzzSeeds returns small archives, one per fixture, rebuilt from the
// fixture's own bytes: its dictionary span and a few of its zstd chunks,
// verbatim, in the fixture's version, plus snappy spans where the version
// allows them. Small seeds keep the fuzzer fast (minimizing a 100 KiB
// input takes most of a minute).
func arcFuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, fx := range arcFixtures {
		b := arcRead(f, fx.path)
		tab, err := arcOpenBytes(b)
		if err != nil {
			f.Fatal(err)
		}
		w := &arcBuilder{version: byte(fx.format-FormatArchiveV1) + 1, meta: string(tab.Metadata())}
		off, n, _ := tab.idx.span(1)
		d := w.span(b[off : off+uint64(n)])
		for _, e := range tab.Entries()[:4] {
			if e.Dict != 1 {
				f.Fatalf("%s: chunk %s uses dictionary %d", fx.path, e.Addr, e.Dict)
			}
			w.chunk(e.Addr, d, b[e.Offset:e.End()])
		}
		if w.version >= 2 {
			for i := 0; i < 3; i++ {
				data := bytes.Repeat([]byte{'s', byte(i)}, 20+i)
				w.chunk(addr.Of(data), 0, snappyRecord(data))
			}
		}
		seeds = append(seeds, w.bytes())
	}
	return seeds
}

// FuzzOpenArchive feeds mutated archives to Open and, when it succeeds,
// looks up and reads every chunk. Nothing may panic; every error must be
// ErrNotTableFile or ErrCorrupt (the reader is in memory, so there are no
// IO errors); and memory stays proportional to the input: the index by
// construction (its size is checked against the file before anything is
// allocated), and each chunk read because a zstd frame's declared size is
// checked against what its blocks can hold before it is allocated.
func FuzzOpenArchive(f *testing.F) {
	// Whole fixture files are left out: TestArchiveTruncated and
	// TestArchiveFlippedBytes mutate those deterministically.
	for _, b := range arcFuzzSeeds(f) {
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(b[len(b)/2:])
		f.Add(b[len(b)-300:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := Open(bytes.NewReader(b), int64(len(b)), nil)
		if err != nil {
			if !isFileErr(err) {
				t.Fatalf("Open: %v is not a file error", err)
			}
			return
		}
		if tab.MemSize() > 64*len(b)+4096 {
			t.Fatalf("index of %d bytes for a %d-byte file", tab.MemSize(), len(b))
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, e := range tab.Entries() {
			if e.End() > uint64(tab.DataEnd()) || e.Length == 0 {
				t.Fatalf("entry %+v outside the data of a %d-byte file", e, len(b))
			}
			if _, ok := tab.Lookup(e.Addr); !ok {
				t.Fatalf("entry %s not found by Lookup", e.Addr)
			}
			if _, err := tab.Read(e); err != nil && !isFileErr(err) {
				t.Fatalf("Read(%+v): %v is not a file error", e, err)
			}
		}
		runtime.ReadMemStats(&after)
		// A zstd chunk decodes to at most 128 KiB per block (4 bytes at
		// least) and a snappy one to about 22 bytes per input byte; add a
		// dictionary load (~100 KiB) and the stored bytes themselves.
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64((len(b)/4+tab.Count())*zstdMaxBlock+1<<20); got > limit {
			t.Fatalf("reading %d chunks of a %d-byte file allocated %d bytes", tab.Count(), len(b), got)
		}
	})
}
