package tablefile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// The archives among the fixtures, with the format each must open as.
var arcFixtures = []struct {
	path   string
	format Format
}{
	{"remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc", FormatArchiveV3},
	{"repo-testdata/archive-v1/noms/oldgen/29o8a3uevcpr15tilcemb3s438edmoog.darc", FormatArchiveV1},
	{"repo-testdata/archive-v1/noms/oldgen/dnu4lr5j8sstbj5usbld7alsnuj5nf23.darc", FormatArchiveV1},
	{"repo-testdata/archive-v2/noms/oldgen/27avtn2a3upddh52eu750m4709gfps7s.darc", FormatArchiveV2},
}

const arcBig = "remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc"

func arcPath(name string) string { return filepath.Join(fixtureRoot, name) }

func arcRead(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(arcPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func arcOpenBytes(b []byte) (*Table, error) {
	return Open(bytes.NewReader(b), int64(len(b)), nil)
}

// isFileErr reports whether err is one of the two errors a bad file may give.
func isFileErr(err error) bool {
	return errors.Is(err, ErrNotTableFile) || errors.Is(err, ErrCorrupt)
}

// TestArchiveFixtureList makes sure the list above covers every archive
// fixture.
func TestArchiveFixtureList(t *testing.T) {
	var found []string
	for _, p := range fixtureFiles(t) {
		if strings.HasSuffix(p, ".darc") {
			found = append(found, strings.TrimPrefix(p, fixtureRoot+"/"))
		}
	}
	var listed []string
	for _, f := range arcFixtures {
		listed = append(listed, f.path)
	}
	sort.Strings(found)
	sort.Strings(listed)
	if strings.Join(found, ",") != strings.Join(listed, ",") {
		t.Fatalf("archive fixtures on disk %v, listed %v", found, listed)
	}
}

func TestArchiveFixtures(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, fx := range arcFixtures {
		t.Run(fx.path, func(t *testing.T) {
			f, err := os.Open(arcPath(fx.path))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			tab, err := Open(f, st.Size(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tab.Format() != fx.format {
				t.Fatalf("Format = %s, want %s", tab.Format(), fx.format)
			}
			if tab.Name() != "" {
				t.Errorf("Name = %q for an archive", tab.Name())
			}
			var meta map[string]string
			if err := json.Unmarshal(tab.Metadata(), &meta); err != nil || meta["dolt_version"] == "" {
				t.Errorf("Metadata %q: %v", tab.Metadata(), err)
			}
			known := knownChunks(t, arcPath(fx.path))
			if tab.Count() != len(known) {
				t.Fatalf("Count = %d, want %d", tab.Count(), len(known))
			}
			var addrs []addr.Addr
			want := map[addr.Addr]knownChunk{}
			var dataEnd uint64
			for _, k := range known {
				e, ok := tab.Lookup(k.Addr)
				if !ok || !tab.Has(k.Addr) {
					t.Fatalf("Lookup(%s) not found", k.Addr)
				}
				if e.Offset != k.Offset || e.Length != k.Stored || e.Addr != k.Addr {
					t.Fatalf("Lookup(%s) = %+v, want offset %d length %d", k.Addr, e, k.Offset, k.Stored)
				}
				// The codec column is "snappy" or "zstd-dictN" with N the
				// dictionary span.
				wantDict := uint32(0)
				if d, ok := strings.CutPrefix(k.Codec, "zstd-dict"); ok {
					n, _ := parseUint32(d)
					wantDict = n
				}
				if e.Dict != wantDict {
					t.Fatalf("Lookup(%s).Dict = %d, codec %s", k.Addr, e.Dict, k.Codec)
				}
				data, err := tab.Get(k.Addr)
				if err != nil {
					t.Fatalf("Get(%s): %v", k.Addr, err)
				}
				if len(data) != k.Uncompressed {
					t.Fatalf("Get(%s) = %d bytes, want %d", k.Addr, len(data), k.Uncompressed)
				}
				if got := addr.Of(data); got != k.Addr {
					t.Fatalf("Get(%s) hashes to %s", k.Addr, got)
				}
				addrs = append(addrs, k.Addr)
				want[k.Addr] = k
				dataEnd = max(dataEnd, e.End())
			}
			if uint64(tab.DataEnd()) != dataEnd {
				t.Errorf("DataEnd = %d, last chunk ends at %d", tab.DataEnd(), dataEnd)
			}

			// Entries: every chunk once, in file order.
			es := tab.Entries()
			if len(es) != len(known) {
				t.Fatalf("Entries has %d, want %d", len(es), len(known))
			}
			for i, e := range es {
				k, ok := want[e.Addr]
				if !ok || k.Offset != e.Offset || k.Stored != e.Length {
					t.Fatalf("entry %d = %+v, known %+v", i, e, k)
				}
				if i > 0 && e.Offset < es[i-1].End() {
					t.Fatalf("entries %d and %d out of order or overlapping", i-1, i)
				}
			}

			// GetMany over everything, shuffled, with a duplicate and an
			// absent address.
			var missing addr.Addr
			rng.Read(missing[:])
			if tab.Has(missing) {
				t.Fatalf("random address %s found", missing)
			}
			if _, err := tab.Get(missing); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get(absent) = %v", err)
			}
			batch := append([]addr.Addr(nil), addrs...)
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			batch = append(batch, missing, batch[0])
			seen := make([]bool, len(batch))
			err = tab.GetMany(batch, BatchOptions{Gap: 64}, func(i int, data []byte) error {
				if seen[i] {
					t.Errorf("GetMany called twice for %d", i)
				}
				seen[i] = true
				if addr.Of(data) != batch[i] {
					t.Errorf("GetMany %d: data hashes to %s, want %s", i, addr.Of(data), batch[i])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range seen {
				if s != (batch[i] != missing) {
					t.Fatalf("GetMany: index %d (%s) seen=%v", i, batch[i], s)
				}
			}

			n, err := tab.Verify("", func(p Problem) { t.Errorf("Verify: %v", p) })
			if err != nil || n != len(known) {
				t.Fatalf("Verify checked %d, err %v", n, err)
			}

			// Dictionary span 1 is a zstd frame at offset 0 in every fixture.
			off, n32, ok := tab.idx.span(1)
			if !ok || off != 0 || n32 == 0 {
				t.Fatalf("span(1) = %d %d %v", off, n32, ok)
			}
			if _, _, ok := tab.idx.span(0); ok {
				t.Fatal("span(0) exists")
			}
			if _, _, ok := tab.idx.span(1 << 31); ok {
				t.Fatal("span(2^31) exists")
			}
		})
	}
}

func parseUint32(s string) (uint32, error) {
	var n uint32
	if s == "" {
		return 0, errors.New("empty")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a number")
		}
		n = n*10 + uint32(c-'0')
	}
	return n, nil
}

// TestArchiveMemSize checks the per-chunk memory goal on the big fixture.
func TestArchiveMemSize(t *testing.T) {
	tab, err := arcOpenBytes(arcRead(t, arcBig))
	if err != nil {
		t.Fatal(err)
	}
	per := float64(tab.MemSize()) / float64(tab.Count())
	idx := float64(tab.idx.memSize()) / float64(tab.Count())
	t.Logf("%d chunks: index %.1f B/chunk, with bloom %.1f B/chunk", tab.Count(), idx, per)
	if per > 40 {
		t.Errorf("index + bloom = %.1f bytes per chunk, goal is 40", per)
	}
}

// TestArchiveTailCoversIndex opens with a tail large enough to hold the
// index, which must then take exactly one read.
func TestArchiveTailCoversIndex(t *testing.T) {
	b := arcRead(t, arcBig)
	for _, tail := range []int{0, 1000, 64 << 10, len(b), 2 * len(b)} {
		r := &countingReader{r: bytes.NewReader(b)}
		tab, err := Open(r, int64(len(b)), &Options{Tail: tail})
		if err != nil {
			t.Fatalf("tail %d: %v", tail, err)
		}
		wantReads := int64(2)
		if int64(tail) >= int64(len(b))-tab.DataEnd() {
			wantReads = 1
		}
		if got := r.reads.Load(); got != wantReads {
			t.Errorf("tail %d: %d reads, want %d", tail, got, wantReads)
		}
	}
}

type countingReader struct {
	r     io.ReaderAt
	reads atomic.Int64
	mu    sync.Mutex
	at    map[int64]int // reads per offset
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	c.mu.Lock()
	if c.at == nil {
		c.at = map[int64]int{}
	}
	c.at[off]++
	c.mu.Unlock()
	return c.r.ReadAt(p, off)
}

// TestArchiveDictLoadedOnce reads every chunk from many goroutines at
// once on a fresh table: the dictionary span must be read exactly once.
func TestArchiveDictLoadedOnce(t *testing.T) {
	b := arcRead(t, arcBig)
	r := &countingReader{r: bytes.NewReader(b)}
	tab, err := Open(r, int64(len(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	es := tab.Entries()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			<-start
			for i := g; i < len(es); i += 3 {
				data, err := tab.Read(es[i])
				if err != nil || addr.Of(data) != es[i].Addr {
					t.Errorf("Read(%s): %v", es[i].Addr, err)
					return
				}
			}
		}(g)
	}
	close(start)
	wg.Wait()
	off, _, _ := tab.idx.span(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at[int64(off)] != 1 {
		t.Fatalf("dictionary span read %d times", r.at[int64(off)])
	}
}

// TestArchiveNoGoroutines: opening and reading archives (which creates
// zstd decoders) must leave no goroutines behind.
func TestArchiveNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		for _, fx := range arcFixtures {
			tab, err := arcOpenBytes(arcRead(t, fx.path))
			if err != nil {
				t.Fatal(err)
			}
			es := tab.Entries()
			if _, err := tab.Read(es[len(es)/2]); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.GC()
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines before, %d after", before, after)
	}
}

// TestArchiveTruncated cuts the big fixture at many points, from either
// end: every cut must be refused with a file error.
func TestArchiveTruncated(t *testing.T) {
	for _, fx := range arcFixtures {
		b := arcRead(t, fx.path)
		tab, err := arcOpenBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		idx := int(tab.DataEnd())
		cuts := []int{1, 7, 8, 100, 215, 216, 219, 220, 221, len(b) - idx - 1, len(b) - idx, len(b) - idx + 1, len(b) / 2, len(b) - 1}
		for _, c := range cuts {
			if c <= 0 || c >= len(b) {
				continue
			}
			if _, err := arcOpenBytes(b[:len(b)-c]); !isFileErr(err) {
				t.Errorf("%s minus its last %d bytes: %v", fx.path, c, err)
			}
			if _, err := arcOpenBytes(b[c:]); !isFileErr(err) {
				t.Errorf("%s minus its first %d bytes: %v", fx.path, c, err)
			}
		}
		// A file that is only the footer.
		if _, err := arcOpenBytes(b[len(b)-220:]); !isFileErr(err) {
			t.Errorf("%s footer alone: %v", fx.path, err)
		}
		if _, err := arcOpenBytes(b[len(b)-100:]); !isFileErr(err) {
			t.Errorf("%s last 100 bytes: %v", fx.path, err)
		}
	}
}

// TestArchiveFlippedBytes flips every bit of the footer and index in turn
// (and a sample of data bytes). Some flips leave a valid file (a flipped
// prefix that keeps the order, the ignored checksums); none may panic,
// every error must be a file error, and the footer's count fields, version
// and signature must always be caught.
func TestArchiveFlippedBytes(t *testing.T) {
	for _, fx := range arcFixtures[1:] { // the smaller ones: every bit
		b := arcRead(t, fx.path)
		orig, err := arcOpenBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		footer := 216
		if orig.Format() == FormatArchiveV3 {
			footer = 220
		}
		footStart := len(b) - footer
		mustFail := func(pos int) bool {
			fromEnd := len(b) - pos
			switch {
			case fromEnd > 212: // index length
				return true
			case fromEnd > 200: // span count, chunk count, metadata length
				return true
			case fromEnd <= 8: // version and signature
				return true
			}
			return false
		}
		mut := append([]byte(nil), b...)
		opened := 0
		spans := len(orig.idx.(*archiveIndex).ends)
		prefixStart := int(orig.DataEnd()) + 8*spans
		refStart := prefixStart + 8*orig.Count()
		suffixStart := refStart + 8*orig.Count()
		for pos := int(orig.DataEnd()); pos < len(b); pos++ {
			// Every bit of the footer's fields; one bit per byte elsewhere,
			// and only a sample of the prefixes and suffixes, whose flips
			// just change an address (or break the order).
			bits := []int{pos % 8}
			switch {
			case pos >= footStart:
				bits = []int{0, 1, 2, 3, 4, 5, 6, 7}
			case pos >= suffixStart && pos < suffixStart+12*orig.Count() && pos%5 != 0:
				continue
			case pos >= prefixStart && pos < refStart && pos%3 != 0:
				continue
			}
			for _, bit := range bits {
				mut[pos] ^= 1 << bit
				tab, err := arcOpenBytes(mut)
				switch {
				case err != nil && !isFileErr(err):
					t.Fatalf("flip byte %d bit %d: error %v is not a file error", pos, bit, err)
				case err == nil && pos >= footStart && mustFail(pos):
					// Changing the version from 1 to 2 (or back) is fine:
					// v1 and v2 share a footer.
					if !(len(b)-pos == 8 && tab.Format() != FormatArchiveV3) {
						t.Fatalf("flip byte %d (%d from end) bit %d: opened", pos, len(b)-pos, bit)
					}
				case err == nil:
					opened++
					arcReadChanged(t, orig, tab, opened)
				}
				mut[pos] ^= 1 << bit
			}
		}
		// Data bytes: reads fail or return data that Verify flags, never
		// a panic.
		rng := rand.New(rand.NewSource(2))
		for i := 0; i < 300; i++ {
			pos := rng.Intn(int(orig.DataEnd()))
			mut[pos] ^= byte(1 + rng.Intn(255))
			tab, err := arcOpenBytes(mut)
			if err != nil {
				t.Fatalf("data flip at %d: %v", pos, err)
			}
			arcReadAll(t, tab)
			copy(mut[pos:pos+1], b[pos:pos+1])
		}
	}
}

// arcReadChanged reads the chunks of tab whose entries differ from orig's
// (a flipped index byte moved them), and every chunk for one call in 256.
func arcReadChanged(t testing.TB, orig, tab *Table, n int) {
	t.Helper()
	if n%256 == 0 {
		arcReadAll(t, tab)
		return
	}
	for _, e := range tab.Entries() {
		if o, ok := orig.Lookup(e.Addr); ok && o == e {
			continue
		}
		if _, err := tab.Read(e); err != nil && !isFileErr(err) {
			t.Fatalf("Read(%+v): %v is not a file error", e, err)
		}
	}
}

// arcReadAll reads every chunk of tab; errors must be file errors.
func arcReadAll(t testing.TB, tab *Table) {
	t.Helper()
	n, err := tab.Verify("", func(p Problem) {
		if !isFileErr(p.Err) {
			t.Fatalf("Verify: %v is not a file error", p.Err)
		}
	})
	if err != nil || n != tab.Count() {
		t.Fatalf("Verify checked %d of %d: %v", n, tab.Count(), err)
	}
}

// arcFooter builds an archive footer.
func arcFooter(version byte, indexLen uint64, spans, chunks, metaLen uint32) []byte {
	var f []byte
	if version == 3 {
		f = binary.BigEndian.AppendUint64(f, indexLen)
	} else {
		f = binary.BigEndian.AppendUint32(f, uint32(indexLen))
	}
	f = binary.BigEndian.AppendUint32(f, spans)
	f = binary.BigEndian.AppendUint32(f, chunks)
	f = binary.BigEndian.AppendUint32(f, metaLen)
	f = append(f, make([]byte, archiveDigestsSize)...)
	f = append(f, version)
	return append(f, archiveSignature...)
}

// TestArchiveHugeFooter: footers claiming 2^32-1 chunks or spans in a
// small file are refused without a large allocation.
func TestArchiveHugeFooter(t *testing.T) {
	const max32 = 1<<32 - 1
	cases := []struct {
		name string
		file []byte
		want error
	}{
		{"v3 consistent", arcFooter(3, 8+28*max32, 1, max32, 0), ErrNotTableFile},
		{"v3 spans", arcFooter(3, 8*max32+28, max32, 1, 0), ErrNotTableFile},
		{"v3 both", arcFooter(3, 8*max32+28*max32, max32, max32, 0), ErrNotTableFile},
		{"v3 index length 2^64-1", arcFooter(3, 1<<64-1, 1, max32, 0), ErrCorrupt},
		{"v3 index length small", arcFooter(3, 36, 1, max32, 0), ErrCorrupt},
		{"v2 wrapped index length", arcFooter(2, 8+28*max32, 1, max32, 0), ErrCorrupt},
		{"v1 metadata 4 GiB", arcFooter(1, 0, 0, 0, max32), ErrNotTableFile},
		{"version 4", arcFooter(4, 0, 0, 0, 0), ErrNotTableFile},
		{"version 0", arcFooter(0, 0, 0, 0, 0), ErrNotTableFile},
		{"v3 in 216 bytes", arcFooter(3, 0, 0, 0, 0)[4:], ErrNotTableFile},
	}
	for i, c := range cases {
		file := c.file
		if i < len(cases)-1 {
			file = append(make([]byte, 1000), file...)
		}
		var err error
		allocs := arcAllocBytes(func() { _, err = arcOpenBytes(file) })
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
		if allocs > 64<<10 {
			t.Errorf("%s: allocated %d bytes", c.name, allocs)
		}
	}
	// The empty archive (no spans, no chunks) is valid.
	tab, err := arcOpenBytes(arcFooter(3, 0, 0, 0, 0))
	if err != nil || tab.Count() != 0 || tab.DataEnd() != 0 || len(tab.Entries()) != 0 {
		t.Fatalf("empty archive: %v", err)
	}
}

func arcAllocBytes(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// arcBuilder writes archives for tests: spans in order, then the index
// with the chunks sorted by address.
type arcBuilder struct {
	version byte
	data    []byte
	ends    []uint64
	chunks  []arcChunk
	meta    string
}

type arcChunk struct {
	a          addr.Addr
	dict, span uint32
}

func (w *arcBuilder) span(b []byte) uint32 {
	w.data = append(w.data, b...)
	w.ends = append(w.ends, uint64(len(w.data)))
	return uint32(len(w.ends))
}

func (w *arcBuilder) chunk(a addr.Addr, dict uint32, stored []byte) uint32 {
	sp := w.span(stored)
	w.chunks = append(w.chunks, arcChunk{a, dict, sp})
	return sp
}

func (w *arcBuilder) bytes() []byte {
	cs := append([]arcChunk(nil), w.chunks...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].a.Compare(cs[j].a) < 0 })
	out := append([]byte(nil), w.data...)
	for _, e := range w.ends {
		out = binary.BigEndian.AppendUint64(out, e)
	}
	for _, c := range cs {
		out = append(out, c.a[:prefixSize]...)
	}
	for _, c := range cs {
		out = binary.BigEndian.AppendUint32(out, c.dict)
		out = binary.BigEndian.AppendUint32(out, c.span)
	}
	for _, c := range cs {
		out = append(out, c.a[prefixSize:]...)
	}
	out = append(out, w.meta...)
	indexLen := uint64(8*len(w.ends) + 28*len(cs))
	return append(out, arcFooter(w.version, indexLen, uint32(len(w.ends)), uint32(len(cs)), uint32(len(w.meta)))...)
}

func snappyRecord(data []byte) []byte {
	rec := snappy.Encode(nil, data)
	return binary.BigEndian.AppendUint32(rec, crc32.Checksum(rec, castagnoli))
}

// fixtureDict returns the ZDICT dictionary in span 1 of the big fixture.
func fixtureDict(t testing.TB) []byte {
	t.Helper()
	b := arcRead(t, arcBig)
	tab, err := arcOpenBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	off, n, _ := tab.idx.span(1)
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	dict, err := dec.DecodeAll(b[off:off+uint64(n)], nil)
	if err != nil || string(dict[:4]) != zdictMagic {
		t.Fatalf("fixture dictionary: %v", err)
	}
	return dict
}

func zstdPlain(t testing.TB, data []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(data, nil)
}

func zstdWithDict(t testing.TB, dict, data []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDict(dict))
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(data, nil)
}

func zstdWithRawDict(t testing.TB, content, data []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(0, content))
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(data, nil)
}

// rawFrame makes a zstd frame by hand: dictionary id dictID (4-byte field),
// no content size, and the given blocks (each a 3-byte header plus body).
func rawFrame(dictID uint32, blocks ...[]byte) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x03, 0x58} // FHD: 4-byte dict id; window 4 MiB
	f = binary.LittleEndian.AppendUint32(f, dictID)
	for _, b := range blocks {
		f = append(f, b...)
	}
	return f
}

// rleBlock repeats c n times; rawBlock stores b.
func rleBlock(c byte, n int, last bool) []byte {
	h := uint32(n)<<3 | 1<<1
	if last {
		h |= 1
	}
	return []byte{byte(h), byte(h >> 8), byte(h >> 16), c}
}

func rawBlock(b []byte, last bool) []byte {
	h := uint32(len(b)) << 3
	if last {
		h |= 1
	}
	return append([]byte{byte(h), byte(h >> 8), byte(h >> 16)}, b...)
}

func arcChunkData(rng *rand.Rand, i int) []byte {
	words := []string{"sentence", "translation", "dolt", "chunk", "archive", "zstd", "snappy", "prolly"}
	var b []byte
	for j := 0; j < 20+rng.Intn(200); j++ {
		b = append(b, words[rng.Intn(len(words))]...)
		b = append(b, ' ')
	}
	return append(b, byte(i), byte(i>>8))
}

// TestArchiveSynthetic builds v2 and v3 archives mixing snappy spans, two
// ZDICT dictionaries and a raw-content dictionary, and reads them back.
func TestArchiveSynthetic(t *testing.T) {
	dict1 := fixtureDict(t)
	dict2 := append([]byte(nil), dict1...)
	binary.LittleEndian.PutUint32(dict2[4:], 0x12345678) // a second dictionary id
	rawDict := []byte(strings.Repeat("sentence translation dolt chunk ", 20))
	rng := rand.New(rand.NewSource(3))
	for _, version := range []byte{2, 3} {
		w := &arcBuilder{version: version, meta: `{"dolt_version":"test"}`}
		want := map[addr.Addr][]byte{}
		add := func(dict uint32, enc func([]byte) []byte) {
			data := arcChunkData(rng, len(want))
			a := addr.Of(data)
			want[a] = data
			w.chunk(a, dict, enc(data))
		}
		for i := 0; i < 30; i++ {
			add(0, snappyRecord)
		}
		d1 := w.span(zstdPlain(t, dict1))
		for i := 0; i < 30; i++ {
			add(d1, func(b []byte) []byte { return zstdWithDict(t, dict1, b) })
		}
		d2 := w.span(zstdPlain(t, dict2))
		d3 := w.span(zstdPlain(t, rawDict))
		for i := 0; i < 30; i++ {
			add(d2, func(b []byte) []byte { return zstdWithDict(t, dict2, b) })
			add(d3, func(b []byte) []byte { return zstdWithRawDict(t, rawDict, b) })
			add(0, snappyRecord)
		}
		// A chunk with no content size in its frame, and one that expands
		// 128 KiB per 4 bytes (a legitimate, if extreme, ratio).
		noFCS := []byte("stored raw, with no frame content size")
		want[addr.Of(noFCS)] = noFCS
		w.chunk(addr.Of(noFCS), d1, rawFrame(binary.LittleEndian.Uint32(dict1[4:]), rawBlock(noFCS, true)))
		var blocks [][]byte
		for i := 0; i < 40; i++ {
			blocks = append(blocks, rleBlock('z', zstdMaxBlock, i == 39))
		}
		bomb := bytes.Repeat([]byte{'z'}, 40*zstdMaxBlock)
		want[addr.Of(bomb)] = bomb
		w.chunk(addr.Of(bomb), d1, rawFrame(binary.LittleEndian.Uint32(dict1[4:]), blocks...))

		file := w.bytes()
		tab, err := arcOpenBytes(file)
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		if tab.Format() != FormatArchiveV1+Format(version-1) || tab.Count() != len(want) {
			t.Fatalf("v%d: format %s count %d", version, tab.Format(), tab.Count())
		}
		if string(tab.Metadata()) != w.meta {
			t.Fatalf("metadata %q", tab.Metadata())
		}
		for a, data := range want {
			got, err := tab.Get(a)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("v%d Get(%s): %v", version, a, err)
			}
		}
		n, err := tab.Verify("", func(p Problem) { t.Errorf("v%d Verify: %v", version, p) })
		if err != nil || n != len(want) {
			t.Fatalf("Verify: %d %v", n, err)
		}
	}
}

// TestArchiveEqualPrefixes: chunks whose addresses share a prefix are
// told apart by their suffixes.
func TestArchiveEqualPrefixes(t *testing.T) {
	w := &arcBuilder{version: 2}
	var addrs []addr.Addr
	for i := 0; i < 50; i++ {
		data := []byte{byte(i), 'x'}
		a := addr.Of(data)
		if i%10 != 0 {
			copy(a[:prefixSize], addrs[len(addrs)-1][:prefixSize])
		}
		addrs = append(addrs, a)
		w.chunk(a, 0, snappyRecord(data))
	}
	tab, err := arcOpenBytes(w.bytes())
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		got, err := tab.Get(a)
		if err != nil || got[0] != byte(i) {
			t.Fatalf("Get(%d): %v %v", i, got, err)
		}
	}
	var a addr.Addr
	copy(a[:], addrs[1][:])
	a[19] ^= 1
	if tab.Has(a) {
		t.Fatal("found an address differing only in its suffix")
	}
}

// TestArchiveBadIndexes builds archives that break one index rule each.
func TestArchiveBadIndexes(t *testing.T) {
	good := func() *arcBuilder {
		w := &arcBuilder{version: 2}
		for i := 0; i < 5; i++ {
			data := []byte{byte(i), 1, 2, 3}
			w.chunk(addr.Of(data), 0, snappyRecord(data))
		}
		return w
	}
	if _, err := arcOpenBytes(good().bytes()); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(w *arcBuilder){
		"v1 with snappy":      func(w *arcBuilder) { w.version = 1 },
		"data span 0":         func(w *arcBuilder) { w.chunks[0].span = 0 },
		"data span past end":  func(w *arcBuilder) { w.chunks[0].span = 6 },
		"data span 2^32-1":    func(w *arcBuilder) { w.chunks[0].span = 1<<32 - 1 },
		"dict span past end":  func(w *arcBuilder) { w.chunks[1].dict = 9 },
		"dict is data":        func(w *arcBuilder) { w.chunks[1].dict = w.chunks[1].span },
		"span ends equal":     func(w *arcBuilder) { w.ends[2] = w.ends[1] },
		"span ends decrease":  func(w *arcBuilder) { w.ends[2] = w.ends[1] - 1 },
		"first span empty":    func(w *arcBuilder) { w.ends[0] = 0 },
		"last span short":     func(w *arcBuilder) { w.ends[4]-- },
		"data before spans":   func(w *arcBuilder) { w.data = append([]byte{0}, w.data...) },
		"spans overlap index": func(w *arcBuilder) { w.ends[4]++ },
	}
	for name, breakIt := range cases {
		w := good()
		breakIt(w)
		if _, err := arcOpenBytes(w.bytes()); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// Unsorted prefixes: swap two prefixes in the written index.
	file := good().bytes()
	tab, _ := arcOpenBytes(file)
	pre := int(tab.DataEnd()) + 8*5
	var tmp [8]byte
	copy(tmp[:], file[pre:])
	copy(file[pre:pre+8], file[pre+8:pre+16])
	copy(file[pre+8:], tmp[:])
	if _, err := arcOpenBytes(file); !errors.Is(err, ErrCorrupt) {
		t.Errorf("unsorted prefixes: %v", err)
	}
}

// TestArchiveHostileFrames: chunk frames that lie about their size, name
// the wrong dictionary, or are not zstd, give a corrupt error naming the
// chunk, without large allocations.
func TestArchiveHostileFrames(t *testing.T) {
	dict := fixtureDict(t)
	id := binary.LittleEndian.Uint32(dict[4:])
	good := zstdWithDict(t, dict, []byte("hello hello hello archive"))
	// FHD 0xe3: 8-byte content size, single segment, 4-byte dict id.
	huge := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe3}
	huge = binary.LittleEndian.AppendUint32(huge, id)
	huge = binary.LittleEndian.AppendUint64(huge, 1<<29)
	huge = append(huge, rawBlock([]byte("tiny"), true)...)
	var rles [][]byte
	for i := 0; i < 10; i++ {
		rles = append(rles, rleBlock(0, zstdMaxBlock, false))
	}
	frames := map[string][]byte{
		"content size 512 MiB":  huge,
		"wrong dictionary id":   rawFrame(id+1, rawBlock([]byte("x"), true)),
		"no dictionary id":      zstdPlain(t, []byte("plain frame, no dictionary")),
		"not zstd":              []byte("this is not a zstd frame at all"),
		"skippable":             append([]byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0}, "abcd"...),
		"truncated":             good[:len(good)-3],
		"no last block":         rawFrame(id, rles...),
		"trailing second frame": append(append([]byte(nil), good...), good...),
	}
	for name, frame := range frames {
		w := &arcBuilder{version: 3}
		d := w.span(zstdPlain(t, dict))
		a := addr.Of([]byte(name))
		w.chunk(a, d, frame)
		tab, err := arcOpenBytes(w.bytes())
		if err != nil {
			t.Fatalf("%s: open: %v", name, err)
		}
		allocs := arcAllocBytes(func() { _, err = tab.Get(a) })
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Addr != a.String() || ce.Offset < 0 {
			t.Errorf("%s: Get = %v, want a corrupt error naming the chunk", name, err)
		}
		if allocs > 4<<20 {
			t.Errorf("%s: allocated %d bytes", name, allocs)
		}
	}
}

// TestArchiveBadDictionaries: dictionary spans that are not a zstd frame,
// or whose contents are unusable, fail every chunk that needs them, with
// the chunk named, and are reported the same way each time.
func TestArchiveBadDictionaries(t *testing.T) {
	dict := fixtureDict(t)
	broken := append([]byte(nil), dict...)
	binary.LittleEndian.PutUint32(broken[4:], 0) // ZDICT with id 0
	spans := map[string][]byte{
		"not zstd":          []byte("definitely not a zstd frame"),
		"zdict with id 0":   zstdPlain(t, broken),
		"truncated zdict":   zstdPlain(t, dict[:12]),
		"frame with dictid": rawFrame(7, rawBlock(dict, true)),
	}
	for name, span := range spans {
		w := &arcBuilder{version: 3}
		d := w.span(span)
		a := addr.Of([]byte("chunk"))
		w.chunk(a, d, zstdWithDict(t, dict, []byte("chunk")))
		tab, err := arcOpenBytes(w.bytes())
		if err != nil {
			t.Fatalf("%s: open: %v", name, err)
		}
		for i := 0; i < 2; i++ {
			_, err := tab.Get(a)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Addr != a.String() {
				t.Errorf("%s: Get = %v, want a corrupt error naming the chunk", name, err)
			}
		}
	}
}

// failingReader fails reads at or past from until healed.
type failingReader struct {
	r      io.ReaderAt
	from   int64
	healed atomic.Bool
}

var errInjected = errors.New("injected read failure")

func (f *failingReader) ReadAt(p []byte, off int64) (int, error) {
	if !f.healed.Load() && off < f.from+1 && off+int64(len(p)) > f.from {
		return 0, errInjected
	}
	return f.r.ReadAt(p, off)
}

// TestArchiveDictReadErrorRetried: an IO error loading a dictionary is
// returned as such (not as corruption) and the next read tries again.
func TestArchiveDictReadErrorRetried(t *testing.T) {
	b := arcRead(t, arcBig)
	fr := &failingReader{r: bytes.NewReader(b), from: 0}
	tab, err := Open(fr, int64(len(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := tab.Entries()[100]
	stored := b[e.Offset:e.End()]
	if _, err := tab.Decode(e, stored); !errors.Is(err, errInjected) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode with a failing dictionary read: %v", err)
	}
	fr.healed.Store(true)
	data, err := tab.Decode(e, stored)
	if err != nil || addr.Of(data) != e.Addr {
		t.Fatalf("Decode after the reader healed: %v", err)
	}
}

// TestArchiveDecodeForeignEntry: an entry naming a dictionary span no
// chunk uses is refused.
func TestArchiveDecodeForeignEntry(t *testing.T) {
	tab, err := arcOpenBytes(arcRead(t, arcBig))
	if err != nil {
		t.Fatal(err)
	}
	e := tab.Entries()[10]
	e.Dict = 7
	if _, err := tab.Read(e); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read with dictionary 7: %v", err)
	}
}

// BenchmarkArchiveFirstGet opens the big fixture and reads one zstd
// chunk: the cost of loading a dictionary.
func BenchmarkArchiveFirstGet(b *testing.B) {
	data := arcRead(b, arcBig)
	tab, err := arcOpenBytes(data)
	if err != nil {
		b.Fatal(err)
	}
	e := tab.Entries()[100]
	b.ReportAllocs()
	for b.Loop() {
		tab.arch = newArchive(tab.idx.(*archiveIndex).dicts.ids)
		if _, err := tab.Read(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArchiveGet decodes one zstd-with-dictionary chunk of the big
// fixture per op, from memory.
func BenchmarkArchiveGet(b *testing.B) {
	data := arcRead(b, arcBig)
	tab, err := arcOpenBytes(data)
	if err != nil {
		b.Fatal(err)
	}
	var es []Entry
	for _, e := range tab.Entries() {
		if e.Dict != 0 {
			es = append(es, e)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := tab.Get(es[i%len(es)].Addr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1)
				if _, err := tab.Get(es[int(i)%len(es)].Addr); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestDecodeTo: DecodeTo gives Decode's chunk, zstd (with dictionaries)
// and snappy, and decodes into the buffer it is given when it is large
// enough.
func TestDecodeTo(t *testing.T) {
	for _, fx := range arcFixtures {
		t.Run(fx.path, func(t *testing.T) {
			b := arcRead(t, fx.path)
			tab, err := arcOpenBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			for _, e := range tab.Entries() {
				stored := b[e.Offset:e.End()]
				want, err := tab.Decode(e, stored)
				if err != nil {
					t.Fatalf("Decode(%s): %v", e.Addr, err)
				}
				got, err := tab.DecodeTo(buf, e, stored)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("DecodeTo(%s): %d bytes, %v; want Decode's %d", e.Addr, len(got), err, len(want))
				}
				if len(got) > 0 && &got[0] != &buf[0] {
					t.Fatalf("DecodeTo(%s) did not decode into the buffer it was given", e.Addr)
				}
			}
		})
	}
}
