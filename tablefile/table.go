// Package tablefile reads and writes Dolt-compatible table files: classic
// NBS table files (snappy records with CRC-32C and a prefix-sorted index)
// and Dolt archives (.darc, versions 1 to 3: zstd with dictionaries and
// snappy spans).
//
// Open reads a file's footer in one read and its index in one more (or in
// the same read, when Options.Tail covers it), and keeps the index in
// memory in a compact form with a bloom filter beside it, so that Lookup and
// Has cost no IO, and reading a chunk costs exactly one read of its record.
// The reader works over any io.ReaderAt: a local file, or a ranged read of
// an object in a store.
//
// Writer produces classic table files byte-compatible with Dolt's.
package tablefile

import (
	"encoding/binary"
	"fmt"
	"io"
	"iter"
	"sort"
	"sync"

	"github.com/chunkd/chunkd/addr"
)

// Entry locates one chunk's stored bytes in a table file.
type Entry struct {
	Addr addr.Addr
	// Offset and Length are the file range of the chunk's record (classic)
	// or data span (archive). For snappy records Length includes the
	// 4-byte CRC.
	Offset uint64
	Length uint32
	// Dict is the archive dictionary span the chunk was compressed with;
	// 0 means the stored bytes are a snappy record with a CRC.
	Dict uint32
	// Span is the archive byte span holding the stored bytes (1-based);
	// 0 in classic files.
	Span uint32
}

// End is the offset just past the entry's stored bytes.
func (e Entry) End() uint64 { return e.Offset + uint64(e.Length) }

// index is the in-memory index of one format.
type index interface {
	count() int
	// lookup finds an address without IO.
	lookup(a addr.Addr) (Entry, bool)
	// each calls fn for every chunk, in no particular order.
	each(fn func(Entry))
	// dataEnd is the offset where chunk data ends and the index begins.
	dataEnd() int64
	// memSize is the bytes of memory the index holds.
	memSize() int
	// span returns the file range of archive byte span id (1-based).
	span(id uint32) (off uint64, length uint32, ok bool)
}

// Options tune Open.
type Options struct {
	// Tail is how many bytes to read from the end of the file in the first
	// read. The footer needs at most 220; a larger tail (say 64 KiB, for an
	// object store with a high first-byte latency) often holds the whole
	// index too, saving a round trip. Default 220.
	Tail int
	// BloomBitsPerKey sizes the bloom filter; 0 picks the default (12).
	// Negative disables it.
	BloomBitsPerKey int
	// IndexHash makes Open hash the index region (IndexHash), so that
	// sums computed from another copy of the file can be matched to this
	// index (View). It costs a SHA-256 of 28 bytes per chunk.
	IndexHash bool
	// Sums, from a verified copy of the same file (ComputeSums), make Open
	// check that the index region is the verified one, and every read
	// check its stored bytes against them (see Sums).
	Sums *Sums
}

// Table is an open table file: its in-memory index and a reader for its
// records. Safe for concurrent use.
type Table struct {
	r      io.ReaderAt
	size   int64
	format Format
	idx    index
	bloom  *Bloom

	uncompressed uint64   // classic footer; 0 for archives
	meta         []byte   // archive metadata JSON
	arch         *archive // archive-only state (dictionaries); nil for classic

	hashIndex   bool     // hash the index region at Open
	hashedIndex bool     // indexHash is set
	indexHash   [32]byte // SHA-256 of the index region
	sums        *Sums    // checks for every read, when set

	nameOnce sync.Once
	name     string

	unitsOnce sync.Once
	units     []Unit // the file's units in file order, built by Units' first call
}

// Open reads the footer and index of the table file r of the given size.
func Open(r io.ReaderAt, size int64, opts *Options) (*Table, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if size < footerSize {
		return nil, notTablef("file is %d bytes, shorter than any footer (%d)", size, footerSize)
	}
	tailLen := int64(o.Tail)
	if tailLen < maxTailRead {
		tailLen = maxTailRead
	}
	if tailLen > size {
		tailLen = size
	}
	tail := make([]byte, tailLen)
	if err := readFull(r, tail, size-tailLen); err != nil {
		return nil, fmt.Errorf("read footer: %w", err)
	}
	t := &Table{r: r, size: size, hashIndex: o.IndexHash || o.Sums != nil}
	var err error
	switch {
	case string(tail[len(tail)-len(archiveSignature):]) == archiveSignature:
		err = t.openArchive(tail)
	case string(tail[len(tail)-len(magic):]) == magic:
		err = t.openClassic(tail)
	default:
		last := tail[len(tail)-8:]
		return nil, notTablef("last 8 bytes are %x, neither the table-file magic %x nor %q (a chunk journal, or a truncated file?)", last, magic, archiveSignature)
	}
	if err != nil {
		return nil, err
	}
	if o.Sums != nil {
		if err := t.matchSums(o.Sums); err != nil {
			return nil, err
		}
		t.sums = o.Sums
	}
	bits := o.BloomBitsPerKey
	if bits == 0 {
		bits = DefaultBloomBitsPerKey
	}
	if bits > 0 {
		t.bloom = NewBloom(t.idx.count(), bits)
		t.idx.each(func(e Entry) { t.bloom.Add(e.Addr) })
	}
	return t, nil
}

// readTailOrAt returns the n bytes ending at end, from tail (which ends at
// size) if it covers them, else with one read.
func (t *Table) readTailOrAt(tail []byte, off, n int64) ([]byte, error) {
	tailStart := t.size - int64(len(tail))
	if off >= tailStart {
		return tail[off-tailStart : off-tailStart+n], nil
	}
	buf := make([]byte, n)
	if err := readFull(t.r, buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %d bytes at offset %d: %w", len(p), off, err)
}

// Format returns the file's format.
func (t *Table) Format() Format { return t.format }

// Size returns the file's size in bytes.
func (t *Table) Size() int64 { return t.size }

// Count returns the number of chunks in the file.
func (t *Table) Count() int { return t.idx.count() }

// DataEnd returns the offset where chunk data ends and the index begins.
func (t *Table) DataEnd() int64 { return t.idx.dataEnd() }

// UncompressedSize returns the footer's total of uncompressed chunk bytes
// (classic files only; 0 for archives, which do not record it).
func (t *Table) UncompressedSize() uint64 { return t.uncompressed }

// Metadata returns an archive's metadata JSON (nil for classic files).
func (t *Table) Metadata() []byte { return t.meta }

// Bloom returns the file's bloom filter, or nil if disabled.
func (t *Table) Bloom() *Bloom { return t.bloom }

// MemSize returns the bytes of memory held for the index and bloom filter.
func (t *Table) MemSize() int {
	n := t.idx.memSize()
	if t.bloom != nil {
		n += t.bloom.MemSize()
	}
	return n
}

// MayContain consults only the bloom filter: false means the file
// certainly does not hold a. Use it to pick, among many files, the few
// worth a Lookup.
func (t *Table) MayContain(a addr.Addr) bool {
	return t.bloom == nil || t.bloom.MayContain(a)
}

// Has reports whether the file holds address a, without IO: the bloom
// filter first, then the index.
func (t *Table) Has(a addr.Addr) bool {
	if !t.MayContain(a) {
		return false
	}
	_, ok := t.idx.lookup(a)
	return ok
}

// Lookup finds address a in the index, without IO. It skips the bloom
// filter, which only pays for addresses that are likely absent: call
// MayContain first for those.
func (t *Table) Lookup(a addr.Addr) (Entry, bool) {
	return t.idx.lookup(a)
}

// Entries returns every chunk in file order.
func (t *Table) Entries() []Entry {
	es := make([]Entry, 0, t.idx.count())
	t.idx.each(func(e Entry) { es = append(es, e) })
	sort.Slice(es, func(i, j int) bool { return es[i].Offset < es[j].Offset })
	return es
}

// Get returns the chunk with address a, reading its record once. It
// returns an error wrapping ErrNotFound if the file does not hold it.
func (t *Table) Get(a addr.Addr) ([]byte, error) {
	e, ok := t.Lookup(a)
	if !ok {
		return nil, fmt.Errorf("get %s: %w", a, ErrNotFound)
	}
	return t.Read(e)
}

// Read reads and decodes the chunk at e with one read of its stored bytes.
func (t *Table) Read(e Entry) ([]byte, error) {
	stored := make([]byte, e.Length)
	if err := readFull(t.r, stored, int64(e.Offset)); err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", e.Addr, err)
	}
	return t.Decode(e, stored)
}

// Decode turns the stored bytes of e (as read from the file at e.Offset)
// into the chunk. It checks the CRC of snappy records, and, with sums
// (Options.Sums, View), the CRC of archive spans; zstd frames alone are
// checked only as far as zstd checks them. It does not hash the result:
// use Verify or addr.Of for that.
func (t *Table) Decode(e Entry, stored []byte) ([]byte, error) {
	return t.DecodeTo(nil, e, stored)
}

// DecodeTo is Decode into buf when buf is large enough: the chunk returned
// then shares buf's memory. For callers that check a chunk and drop it (a
// download hashing each chunk it proves), it saves an allocation a chunk.
func (t *Table) DecodeTo(buf []byte, e Entry, stored []byte) ([]byte, error) {
	if len(stored) != int(e.Length) {
		return nil, fmt.Errorf("decode chunk %s: got %d stored bytes, index says %d", e.Addr, len(stored), e.Length)
	}
	if err := t.checkSpan(e.Span, e.Offset, stored, e.Addr.String()); err != nil {
		return nil, err
	}
	if e.Dict == 0 {
		return decodeRecord(e, stored, buf)
	}
	if t.arch == nil {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "dictionary %d named in a %s file", e.Dict, t.format)
	}
	return t.arch.decode(t, e, stored, buf)
}

// Range is one read that covers several nearby records.
type Range struct {
	Offset  uint64
	Length  uint64
	Entries []Entry // sorted by offset, all inside the range
}

// MergeRanges sorts entries by offset and groups them into reads: two
// records go into one read when the gap between them is at most gap bytes
// and the read stays within maxRead bytes (0 = no limit). Object stores
// charge a round trip per read, so reading a few unneeded bytes is cheaper
// than another request.
func MergeRanges(entries []Entry, gap, maxRead uint64) []Range {
	es := append([]Entry(nil), entries...)
	sort.Slice(es, func(i, j int) bool { return es[i].Offset < es[j].Offset })
	var out []Range
	for _, e := range es {
		if n := len(out); n > 0 {
			r := &out[n-1]
			end := r.Offset + r.Length
			if e.Offset <= end+gap && (maxRead == 0 || e.End()-r.Offset <= maxRead) {
				if e.End() > end {
					r.Length = e.End() - r.Offset
				}
				r.Entries = append(r.Entries, e)
				continue
			}
		}
		out = append(out, Range{Offset: e.Offset, Length: uint64(e.Length), Entries: []Entry{e}})
	}
	return out
}

// BatchOptions tune GetMany.
type BatchOptions struct {
	Gap     uint64 // merge records at most this many bytes apart (default 0: only adjacent)
	MaxRead uint64 // cap on one read (default 1 MiB)
}

// GetMany reads the chunks with the given addresses, merging nearby
// records into single reads, and calls fn for each one found (in file
// order, with i its position in addrs). Missing addresses are skipped;
// fn sees only chunks the file holds. An error from fn stops the batch.
func (t *Table) GetMany(addrs []addr.Addr, opts BatchOptions, fn func(i int, data []byte) error) error {
	if opts.MaxRead == 0 {
		opts.MaxRead = 1 << 20
	}
	var entries []Entry
	pos := make(map[addr.Addr][]int, len(addrs))
	for i, a := range addrs {
		if ps, dup := pos[a]; dup {
			pos[a] = append(ps, i)
			continue
		}
		if e, ok := t.Lookup(a); ok {
			entries = append(entries, e)
			pos[a] = []int{i}
		}
	}
	return t.readRanges(MergeRanges(entries, opts.Gap, opts.MaxRead), "read chunks", func(e Entry, stored []byte) error {
		data, err := t.Decode(e, stored)
		if err != nil {
			return err
		}
		for _, i := range pos[e.Addr] {
			if err := fn(i, data); err != nil {
				return err
			}
		}
		return nil
	})
}

// readRanges reads each range with one read and calls fn with each of
// its entries and the entry's stored bytes (valid only during the call).
// A failed read is an error that starts with what.
func (t *Table) readRanges(ranges []Range, what string, fn func(e Entry, stored []byte) error) error {
	var buf []byte
	for _, r := range ranges {
		if uint64(cap(buf)) < r.Length {
			buf = make([]byte, r.Length)
		}
		b := buf[:r.Length]
		if err := readFull(t.r, b, int64(r.Offset)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, e := range r.Entries {
			if err := fn(e, b[e.Offset-r.Offset:e.End()-r.Offset]); err != nil {
				return err
			}
		}
	}
	return nil
}

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// Holding yields, in order, each of files whose table holds a, with a's
// entry in it: the bloom filter first, then the index; no IO. A database
// searches its table files this way (appendix files first), trying the
// next when a read from one fails.
func Holding[F any](files []F, table func(F) *Table, a addr.Addr) iter.Seq2[F, Entry] {
	return func(yield func(F, Entry) bool) {
		for _, f := range files {
			t := table(f)
			if !t.MayContain(a) {
				continue
			}
			if e, ok := t.Lookup(a); ok && !yield(f, e) {
				return
			}
		}
	}
}

// Find returns the first of files whose table holds a, with a's entry
// (Holding's first).
func Find[F any](files []F, table func(F) *Table, a addr.Addr) (f F, e Entry, ok bool) {
	for f, e := range Holding(files, table, a) {
		return f, e, true
	}
	return f, e, false
}
