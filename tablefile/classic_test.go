package tablefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/klauspost/compress/snappy"
)

func isCorruptFixture(path string) bool { return strings.Contains(path, "aa3a08lf") }

// TestFixtures checks every fixture against its known-answer list.
func TestFixtures(t *testing.T) {
	for _, path := range fixtureFiles(t) {
		path := path
		t.Run(strings.TrimPrefix(path, fixtureRoot+"/"), func(t *testing.T) {
			tab := openFile(t, path)
			known := knownChunks(t, path)
			if tab.Count() != len(known) {
				t.Fatalf("Count = %d, known answers list %d", tab.Count(), len(known))
			}
			if strings.HasSuffix(path, ".darc") != tab.Format().IsArchive() {
				t.Fatalf("format %s for %s", tab.Format(), path)
			}
			if tab.Format() == FormatClassic && !isCorruptFixture(path) {
				if got, want := tab.Name(), filepath.Base(path); got != want {
					t.Errorf("Name = %s, want %s", got, want)
				}
			}
			var total uint64
			for _, k := range known {
				e, ok := tab.Lookup(k.Addr)
				if !ok {
					t.Fatalf("Lookup(%s) not found", k.Addr)
				}
				if e.Offset != k.Offset || e.Length != k.Stored {
					t.Fatalf("Lookup(%s) = offset %d length %d, want %d %d", k.Addr, e.Offset, e.Length, k.Offset, k.Stored)
				}
				data, err := tab.Get(k.Addr)
				if isCorruptFixture(path) && err != nil {
					continue
				}
				if err != nil {
					t.Fatalf("Get(%s): %v", k.Addr, err)
				}
				if len(data) != k.Uncompressed {
					t.Fatalf("Get(%s) = %d bytes, want %d", k.Addr, len(data), k.Uncompressed)
				}
				if got := addr.Of(data); got != k.Addr && !isCorruptFixture(path) {
					t.Fatalf("Get(%s) hashes to %s", k.Addr, got)
				}
				total += uint64(len(data))
			}
			if tab.Format() == FormatClassic && tab.UncompressedSize() != total {
				t.Errorf("footer says %d uncompressed bytes, chunks add up to %d", tab.UncompressedSize(), total)
			}
			// Entries come in file order and tile the data section.
			var next uint64
			for _, e := range tab.Entries() {
				if e.Offset < next {
					t.Fatalf("entries out of order at %d", e.Offset)
				}
				next = e.End()
			}
			// A batch of every address, plus one missing, finds each once.
			addrs := make([]addr.Addr, 0, len(known)+1)
			for _, k := range known {
				addrs = append(addrs, k.Addr)
			}
			addrs = append(addrs, addr.Of([]byte("not in any fixture")))
			seen := make([]bool, len(addrs))
			err := tab.GetMany(addrs, BatchOptions{Gap: 4096}, func(i int, data []byte) error {
				if seen[i] {
					t.Fatalf("GetMany returned %s twice", addrs[i])
				}
				seen[i] = true
				return nil
			})
			if err != nil && !isCorruptFixture(path) {
				t.Fatal(err)
			}
			if !isCorruptFixture(path) {
				for i, s := range seen[:len(known)] {
					if !s {
						t.Fatalf("GetMany missed %s", addrs[i])
					}
				}
				if seen[len(known)] {
					t.Fatal("GetMany returned a missing address")
				}
			}
			var problems []Problem
			n, err := tab.Verify(filepath.Base(path), func(p Problem) { problems = append(problems, p) })
			if err != nil {
				t.Fatal(err)
			}
			if n != len(known) {
				t.Errorf("Verify checked %d chunks, want %d", n, len(known))
			}
			if isCorruptFixture(path) {
				if len(problems) == 0 {
					t.Fatal("Verify found nothing wrong in the corrupt fixture")
				}
				for _, p := range problems {
					if p.Entry.Addr.IsEmpty() {
						continue // the name check
					}
					if !errors.Is(p.Err, ErrCorrupt) || !strings.Contains(p.Err.Error(), p.Entry.Addr.String()) {
						t.Errorf("problem %v does not name chunk %s", p.Err, p.Entry.Addr)
					}
				}
			} else if len(problems) > 0 {
				t.Fatalf("Verify: %v", problems)
			}
		})
	}
}

func TestCorruptFixtureNamesBadChunk(t *testing.T) {
	path := fixtureRoot + "/repo-testdata/corrupt-bad-commit/noms/oldgen/aa3a08lf6sbtq9cl58mledifrqvt3fid"
	tab := openFile(t, path)
	var bad []string
	if _, err := tab.Verify("", func(p Problem) { bad = append(bad, p.Entry.Addr.String()) }); err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 {
		t.Fatalf("want exactly one bad chunk, got %v", bad)
	}
	// The named chunk must really be the one that does not hash right.
	data, err := tab.Get(addr.MustParse(bad[0]))
	if err != nil {
		t.Fatal(err)
	}
	if addr.Of(data).String() == bad[0] {
		t.Fatalf("chunk %s named as bad hashes correctly", bad[0])
	}
}

func TestRejectsJournalAndTruncated(t *testing.T) {
	journal := fixtureRoot + "/db-classic-noms/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
	b, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bytes.NewReader(b), int64(len(b)), nil); !errors.Is(err, ErrNotTableFile) {
		t.Fatalf("journal: err = %v, want ErrNotTableFile", err)
	}
	full, err := os.ReadFile(fixtureRoot + "/db-classic-noms/sk239e3qseqmo2fe2e3garrhm8vb36f8")
	if err != nil {
		t.Fatal(err)
	}
	for cut := 0; cut < len(full); cut++ {
		b := full[:cut]
		_, err := Open(bytes.NewReader(b), int64(len(b)), nil)
		if err == nil {
			t.Fatalf("truncated to %d bytes: opened", cut)
		}
	}
	// Cut from the front (the footer intact, records missing).
	b = full[100:]
	if _, err := Open(bytes.NewReader(b), int64(len(b)), nil); err == nil {
		t.Fatal("file missing its first 100 bytes opened")
	}
}

func TestHugeCountIsAnError(t *testing.T) {
	b := make([]byte, 100)
	copy(b[80:], []byte{0xff, 0xff, 0xff, 0xff})
	copy(b[92:], magic)
	_, err := Open(bytes.NewReader(b), int64(len(b)), nil)
	if !errors.Is(err, ErrNotTableFile) || !strings.Contains(err.Error(), "4294967295") {
		t.Fatalf("err = %v", err)
	}
}

func randomChunks(r *rand.Rand, n, maxLen int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		c := make([]byte, 1+r.Intn(maxLen))
		// Half random, half repetitive, so snappy has something to do.
		r.Read(c[:len(c)/2])
		out[i] = c
	}
	return out
}

// TestWriterLayout writes a file and checks it byte by byte against the
// layout in the fixtures README.
func TestWriterLayout(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	chunks := randomChunks(r, 300, 3000)
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var addrs []addr.Addr
	var unc uint64
	for _, c := range chunks {
		a, err := w.Add(c)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
		unc += uint64(len(c))
	}
	if _, err := w.Add(chunks[0]); err != nil || w.Count() != len(chunks) {
		t.Fatalf("duplicate add: err %v count %d", err, w.Count())
	}
	if _, err := w.Add(nil); !errors.Is(err, ErrEmptyChunk) {
		t.Fatalf("empty chunk: %v", err)
	}
	name, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := len(chunks)
	foot := b[len(b)-20:]
	if be32(foot) != uint32(n) || be64(foot[4:]) != unc || string(foot[12:]) != magic {
		t.Fatalf("footer %x", foot)
	}
	idx := b[len(b)-20-28*n : len(b)-20]
	lengths := idx[12*n : 16*n]
	suffixes := idx[16*n:]
	var off uint64
	for k := 0; k < n; k++ {
		l := be32(lengths[4*k:])
		e := Entry{Addr: addrs[k], Offset: off, Length: l}
		got, err := decodeRecord(e, b[off:off+uint64(l)], nil)
		if err != nil || !bytes.Equal(got, chunks[k]) {
			t.Fatalf("record %d: %v", k, err)
		}
		if !bytes.Equal(suffixes[12*k:12*k+12], addrs[k][8:]) {
			t.Fatalf("suffix %d wrong", k)
		}
		off += uint64(l)
	}
	if off != uint64(len(b)-20-28*n) {
		t.Fatalf("records end at %d, index at %d", off, len(b)-20-28*n)
	}
	var prev uint64
	for i := 0; i < n; i++ {
		p, ord := be64(idx[12*i:]), be32(idx[12*i+8:])
		if p < prev || p != addrs[ord].Prefix() {
			t.Fatalf("tuple %d: prefix %x ordinal %d", i, p, ord)
		}
		prev = p
	}
	tab, err := Open(bytes.NewReader(b), int64(len(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Name() != name {
		t.Fatalf("reader name %s, writer name %s", tab.Name(), name)
	}
	for i, a := range addrs {
		got, err := tab.Get(a)
		if err != nil || !bytes.Equal(got, chunks[i]) {
			t.Fatalf("Get %d: %v", i, err)
		}
	}
}

// TestRewriteFixtureKeepsName copies a Dolt file's chunks, in file order,
// through our writer: the name depends only on the addresses and their
// order, so it must come out the same.
func TestRewriteFixtureKeepsName(t *testing.T) {
	for _, path := range fixtureFiles(t) {
		if strings.HasSuffix(path, ".darc") || isCorruptFixture(path) {
			continue
		}
		tab := openFile(t, path)
		var buf bytes.Buffer
		w := NewWriter(&buf)
		err := tab.Walk(func(e Entry, stored []byte) error {
			data, err := tab.Decode(e, stored)
			if err != nil {
				return err
			}
			return w.AddWithAddr(e.Addr, data)
		})
		if err != nil {
			t.Fatal(err)
		}
		name, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if name != filepath.Base(path) {
			t.Errorf("%s rewritten is named %s", path, name)
		}
	}
}

// TestRewriteFixtureByteIdentical copies a Dolt file's records as they
// are stored (AddRecord), in file order, through our writer: records,
// index and footer must then come out byte for byte as Dolt wrote them.
func TestRewriteFixtureByteIdentical(t *testing.T) {
	n := 0
	for _, path := range fixtureFiles(t) {
		if strings.HasSuffix(path, ".darc") || isCorruptFixture(path) {
			continue
		}
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tab := openFile(t, path)
		var buf bytes.Buffer
		w := NewWriter(&buf)
		err = tab.Walk(func(e Entry, stored []byte) error {
			data, err := tab.Decode(e, stored)
			if err != nil {
				return err
			}
			return w.AddRecord(e.Addr, bytes.Clone(stored), uint64(len(data)))
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), orig) {
			i := 0
			for i < min(len(orig), buf.Len()) && orig[i] == buf.Bytes()[i] {
				i++
			}
			t.Errorf("%s rewritten differs from Dolt's at byte %d of %d (ours %d bytes)", path, i, len(orig), buf.Len())
		}
		n++
	}
	if n < 5 {
		t.Fatalf("only %d classic fixtures", n)
	}
}

func TestEqualPrefixes(t *testing.T) {
	// Hand-build addresses sharing a prefix, as conjoined tables may.
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var addrs []addr.Addr
	for i := 0; i < 50; i++ {
		data := []byte{byte(i), 1, 2, 3}
		a := addr.Of(data)
		if i%2 == 1 {
			copy(a[:8], addrs[0][:8]) // same prefix as the first
		}
		if err := w.AddWithAddr(a, data); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	tab, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		got, err := tab.Get(a)
		if err != nil || got[0] != byte(i) {
			t.Fatalf("address %d: %v %v", i, got, err)
		}
	}
	other := addrs[0]
	other[19] ^= 1
	if tab.Has(other) {
		t.Fatal("found an address differing only in its suffix")
	}
}

func TestMergeRanges(t *testing.T) {
	es := []Entry{{Offset: 100, Length: 10}, {Offset: 0, Length: 10}, {Offset: 10, Length: 10}, {Offset: 125, Length: 5}, {Offset: 1000, Length: 1}}
	rs := MergeRanges(es, 5, 0)
	var got []string
	for _, r := range rs {
		var offs []int
		for _, e := range r.Entries {
			offs = append(offs, int(e.Offset))
		}
		sort.Ints(offs)
		got = append(got, joinInts(offs))
	}
	want := []string{"0,10", "100", "125", "1000"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("ranges %v, want %v", got, want)
	}
	rs = MergeRanges(es, 20, 0)
	if len(rs) != 3 || rs[1].Offset != 100 || rs[1].Length != 30 {
		t.Fatalf("gap 20: %+v", rs)
	}
	rs = MergeRanges(es, 20, 15)
	if len(rs) != 5 {
		t.Fatalf("maxRead 15: %d ranges", len(rs))
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// TestSnappyClaimBounded: a record whose snappy header claims far more
// bytes than its block can hold is corrupt, refused before allocating.
func TestSnappyClaimBounded(t *testing.T) {
	body := []byte{0x80, 0x80, 0x80, 0x80, 0x02, 0x00} // claims 512 MiB in 6 bytes
	rec := binary.BigEndian.AppendUint32(append([]byte{}, body...), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := decodeRecord(Entry{Length: uint32(len(rec))}, rec, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode: %v", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("decoding a 10-byte record allocated %d bytes", n)
	}
	// The largest honest expansion still decodes: 64 KiB of one byte.
	data := bytes.Repeat([]byte{'a'}, 64<<10)
	enc := snappy.Encode(nil, data)
	rec = binary.BigEndian.AppendUint32(enc, crc32.Checksum(enc, crc32.MakeTable(crc32.Castagnoli)))
	if got, err := decodeRecord(Entry{Length: uint32(len(rec))}, rec, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("64 KiB of one byte (%d encoded): %v", len(enc), err)
	}
}
